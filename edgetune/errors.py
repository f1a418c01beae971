"""One exception tree for everything edgetune reports to a user.

Every error carries a one-line ``message`` and a ``hint`` naming the next step. The CLI prints
both and exits with ``exit_code``; library users catch :class:`EdgetuneError`.
"""

from __future__ import annotations

from typing import Any


class EdgetuneError(Exception):
    """Base class: a problem the user can act on."""

    exit_code = 1
    default_hint = "run with EDGETUNE_DEBUG=1 for the full traceback"

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint or self.default_hint

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # (an isolated stage's error crosses a process boundary: subclasses' own __init__ signatures
        # cannot be replayed from ``args``, so the instance is rebuilt from its attributes)
        return _rebuilt, (type(self), self.message, dict(self.__dict__))


def _rebuilt(cls: type, message: str, state: dict[str, Any]) -> EdgetuneError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class UsageError(EdgetuneError):
    """A bad argument: malformed option, unknown name."""

    exit_code = 2
    default_hint = "see `edgetune --help`"


class ModelError(EdgetuneError):
    """The model file cannot be read or converted."""

    exit_code = 3
    default_hint = "check the file with `edgetune inspect MODEL`"


class ModelFormatError(ModelError):
    """Unknown extension, truncated or corrupt file."""


class UnsupportedOpsError(ModelError):
    """The model uses operators TVM's frontend cannot convert; ``ops`` lists all of them."""

    def __init__(self, ops: list[str], fmt: str, hint: str | None = None):
        self.ops = sorted(set(ops))
        super().__init__(
            f"{fmt} model uses {len(self.ops)} operator(s) TVM 0.27 cannot convert: "
            + ", ".join(self.ops),
            hint
            or "replace or decompose these operators before export, or run "
            "`edgetune inspect MODEL` for the full operator table",
        )


class InputShapeError(ModelError):
    """Input shapes are missing, dynamic or do not match the model."""

    default_hint = "fix dimensions with --input-shape NAME=1,3,224,224 (see `edgetune inspect MODEL`)"


class ProfileError(EdgetuneError):
    """A device profile is unknown or invalid."""

    exit_code = 2
    default_hint = "list profiles with `edgetune targets`"


class ToolchainError(EdgetuneError):
    """A compiler, emulator or toolkit edgetune needs is missing."""

    exit_code = 4
    default_hint = "install the system tools with `sudo scripts/install-system-deps.sh`"


class BuildError(EdgetuneError):
    """TVM failed to compile or export the model."""

    exit_code = 5


class VerificationError(EdgetuneError):
    """The package disagrees with the reference runtime beyond tolerance."""

    exit_code = 6
    default_hint = (
        "inspect the per-output errors above; loosen with --rtol/--atol if they are expected, "
        "or skip the check with --no-verify"
    )


class PackageError(EdgetuneError):
    """The output location or a package on disk is unusable."""

    exit_code = 7


class RemoteError(EdgetuneError):
    """A board could not be reached or did not do what was asked."""

    exit_code = 8
    default_hint = "check the board with `edgetune devices check NAME`"


class BoardUnreachableError(RemoteError):
    """No TCP connection / SSH handshake within the timeout."""

    default_hint = "is the board on and on the network? check host, port and firewall (`ssh` to it by hand)"


class AuthError(RemoteError):
    """The board refused our credentials."""

    default_hint = "check the user and key (`edgetune devices add NAME --user U --key PATH`), and that the key is in the board's ~/.ssh/authorized_keys"


class HostKeyError(RemoteError):
    """The board's host key is unknown (strict policy) or changed."""


class RemoteCommandError(RemoteError):
    """A command on the board failed."""


class RpcError(RemoteError):
    """The TVM RPC server on a board, or the tracker, failed."""

    default_hint = "run `edgetune devices check NAME`; the server log is kept on the board under ~/.edgetune/rpc/"


class CrashError(EdgetuneError):
    """TVM (or another native library) crashed while a stage ran: a signal, not an exception."""

    exit_code = 9
