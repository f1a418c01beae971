"""SSH transport on paramiko: lazy connect with bounded retries, commands with exit codes,
SFTP with checksums, and tunnels as context managers.

Host keys are checked against ``~/.ssh/known_hosts`` (or ``$EDGETUNE_KNOWN_HOSTS``): an unknown
key is accepted and recorded only under the ``accept-new`` policy (with a notice), a changed key
is always refused. Secrets (key passphrases, key material) never reach logs or messages.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AuthError, BoardUnreachableError, HostKeyError, RemoteCommandError, RemoteError
from ..util import sha256_file
from .inventory import Board

log = logging.getLogger(__name__)
# paramiko logs channel failures (e.g. probing a server that is still starting) at ERROR; keep
# them out of the user's terminal unless the CLI's --verbose turns logging on.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def known_hosts_path() -> Path:
    """The known_hosts file edgetune reads and (accept-new) appends to."""
    return Path(os.environ.get("EDGETUNE_KNOWN_HOSTS", Path.home() / ".ssh" / "known_hosts")).expanduser()


@dataclass(frozen=True)
class SSHTarget:
    """Resolved connection parameters (board fields > ~/.ssh/config > defaults)."""

    host: str
    port: int
    user: str
    key_filename: str | None
    policy: str = "accept-new"
    label: str = ""
    identities_only: bool = False  # OpenSSH's IdentitiesOnly: no agent keys, no default keys
    proxy_jump: str | None = None  # ProxyJump: [user@]host[:port][,...]
    proxy_command: str | None = None  # ProxyCommand, tokens already expanded

    @property
    def known_hosts_name(self) -> str:
        """How known_hosts spells this host (``[host]:port`` for non-22 ports)."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


def ssh_config_path() -> Path:
    return Path(os.environ.get("EDGETUNE_SSH_CONFIG", Path.home() / ".ssh" / "config")).expanduser()


def resolve_target(board: Board) -> SSHTarget:
    """Apply ``~/.ssh/config`` (HostName, User, Port, IdentityFile, IdentitiesOnly, ProxyJump,
    ProxyCommand) under the board's own fields, as OpenSSH would."""
    import getpass

    import paramiko

    cfg: dict[str, Any] = {}
    path = ssh_config_path()
    if path.is_file():
        cfg = paramiko.SSHConfig.from_path(str(path)).lookup(board.host)
    identity = board.key or (cfg.get("identityfile") or [None])[0]
    jump = cfg.get("proxyjump")
    command = cfg.get("proxycommand")
    return SSHTarget(
        host=cfg.get("hostname", board.host),
        port=int(board.port or cfg.get("port", 22)),
        user=board.user or cfg.get("user") or getpass.getuser(),
        key_filename=str(Path(identity).expanduser()) if identity else None,
        policy=board.host_key_policy,
        label=board.name,
        identities_only=str(cfg.get("identitiesonly", "no")).lower() == "yes",
        proxy_jump=jump if jump and jump.lower() != "none" else None,
        proxy_command=command if command and command.lower() != "none" else None,
    )


def _jump_target(spec: str, policy: str) -> SSHTarget:
    """A ProxyJump hop ``[user@]host[:port]``, completed from ``~/.ssh/config`` like a board."""
    user, _, hostport = spec.rpartition("@")
    host, port = _host_port(hostport)
    return resolve_target(Board(f"jump host {host}", "", host, user or None, int(port) if port else None,
                                host_key_policy=policy))


def _host_port(text: str) -> tuple[str, str]:
    """``host``, ``host:port``, ``[v6addr]`` or ``[v6addr]:port`` as (host, port or ""); a bare
    IPv6 address (more than one colon) is a host without a port."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    if text.count(":") > 1:
        return text, ""
    host, _, port = text.partition(":")
    return host, port


class _AcceptNew:
    """paramiko policy: record an unknown host key (OpenSSH's StrictHostKeyChecking=accept-new)."""

    def __init__(self, path: Path):
        self.path = path

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path, "a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)
        log.warning("added the host key of %s (%s %s) to %s", hostname, key.get_name(), _fingerprint(key), self.path)


class _Reject:
    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        raise HostKeyError(
            f"host key of {hostname} is unknown ({key.get_name()} {_fingerprint(key)}) and the policy is strict",
            f"verify the fingerprint, then connect once with `ssh {hostname}` or set host-key-policy = \"accept-new\"",
        )


def _fingerprint(key: Any) -> str:
    import base64

    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


@dataclass
class Result:
    """Outcome of a remote command."""

    returncode: int
    stdout: str
    stderr: str


class SSHConnection:
    """A lazily opened, reusable SSH connection to one board. Use as a context manager."""

    def __init__(self, target: SSHTarget, connect_timeout: float = 10.0, retries: int = 3,
                 via: "SSHConnection | None" = None, channel_timeout: float = 30.0):
        self.target, self.connect_timeout, self.retries = target, connect_timeout, retries
        # how long the board may take to answer a request for a new channel (a command, SFTP):
        # milliseconds on a live connection, so a connection silent this long is replaced
        self.channel_timeout = channel_timeout
        self.via = via  # a ProxyJump hop this connection is tunnelled through
        self._client: Any = None
        self._sftp: Any = None
        self._jumps: list[SSHConnection] = []  # ProxyJump hops this connection goes through

    def __enter__(self) -> "SSHConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def name(self) -> str:
        return self.target.label or self.target.host

    def close(self) -> None:
        """Close SFTP and SSH, and the hops it went through (idempotent)."""
        for obj in (self._sftp, self._client, *reversed(self._jumps)):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
        self._client = self._sftp = None
        self._jumps = []

    # -------------------------------------------------------------- connect

    def client(self) -> Any:
        """The connected paramiko client (connects on first use)."""
        if self._client is not None and self._client.get_transport() and self._client.get_transport().is_active():
            return self._client
        self.close()
        last: Exception | None = None
        for attempt in range(self.retries):
            try:
                self._client = self._connect_once()
                return self._client
            except (BoardUnreachableError, TimeoutError) as err:
                last = err
                delay = min(8.0, 0.5 * 2**attempt) * (0.5 + random.random())
                log.info("connect to %s failed (%s); retry %d/%d in %.1fs", self.name, err, attempt + 1, self.retries, delay)
                if attempt + 1 < self.retries:
                    time.sleep(delay)
        assert last is not None
        if isinstance(last, BoardUnreachableError):
            raise last
        raise BoardUnreachableError(f"board {self.name} ({self.target.host}:{self.target.port}) did not answer within {self.connect_timeout:.0f}s") from last

    def _connect_once(self) -> Any:
        import paramiko

        t = self.target
        client = paramiko.SSHClient()
        path = known_hosts_path()
        if path.is_file():
            client.load_host_keys(str(path))
        client.set_missing_host_key_policy(_AcceptNew(path) if t.policy == "accept-new" else _Reject())
        try:
            # as OpenSSH: the given key first, then the agent's and the default keys (unless
            # IdentitiesOnly) — a --key that turned the agent off locked users out
            client.connect(t.host, port=t.port, username=t.user, key_filename=t.key_filename,
                           timeout=self.connect_timeout, banner_timeout=self.connect_timeout,
                           auth_timeout=self.connect_timeout, allow_agent=not t.identities_only,
                           look_for_keys=not t.identities_only, sock=self._proxy_socket())
        except (HostKeyError, BoardUnreachableError):
            client.close()
            raise
        except paramiko.PasswordRequiredException:
            client.close()
            raise AuthError(f"the SSH key {t.key_filename or ''} for board {self.name} is encrypted and no agent holds it",
                            f"load it into the agent once: ssh-add {t.key_filename or '~/.ssh/id_ed25519'}") from None
        except paramiko.BadHostKeyException as err:
            client.close()
            raise HostKeyError(
                f"host key of {t.known_hosts_name} CHANGED (now {err.key.get_name()} {_fingerprint(err.key)}); refusing to connect",
                f"if the board was reinstalled, remove the old key: ssh-keygen -R '{t.known_hosts_name}' -f {path}",
            ) from None
        except paramiko.AuthenticationException:
            client.close()
            raise AuthError(f"board {self.name} refused authentication for user '{t.user}'") from None
        except (paramiko.SSHException, OSError, EOFError) as err:
            client.close()
            if isinstance(err, paramiko.SSHException) and "private key" in str(err).lower():
                raise AuthError(f"cannot use the SSH key for board {self.name}: {type(err).__name__}", "check the key file and its passphrase") from None
            raise BoardUnreachableError(f"cannot reach board {self.name} at {t.host}:{t.port}: {_reason(err)}") from err
        transport = client.get_transport()
        transport.set_keepalive(15)
        transport.channel_timeout = self.channel_timeout  # paramiko waits an hour by default (SFTP opens)
        return client

    def _open(self, what: str, open_on: Callable[[Any], Any]) -> Any:
        """``open_on(client)`` (a new session or SFTP channel), on a fresh connection if the
        current one does not answer the channel request: nothing has run on the board yet, so
        trying again cannot run anything twice. A connection can be wedged while its transport
        still reads as active (seen once in CI: a command's channel open went unanswered for
        its whole 300 s timeout, between two commands that ran)."""
        for fresh in (False, True):
            if fresh:
                self.close()
            try:
                return open_on(self.client())
            except _TRANSPORT_ERRORS() as err:
                if fresh:
                    raise BoardUnreachableError(f"lost the connection to {self.name}: {what}: {_reason(err)}",
                                                "check that the board is up (`edgetune devices check`), then run the command again") from err
                log.warning("%s: %s did not open (%s); reconnecting", self.name, what, _reason(err))
        raise AssertionError("unreachable")

    def _proxy_socket(self) -> Any:
        """A socket-like channel to the board through ProxyJump hops or a ProxyCommand (None:
        connect directly)."""
        import paramiko

        t = self.target
        if self.via is not None:
            return self.via.channel_to(t.host, t.port)
        if t.proxy_jump:
            previous: SSHConnection | None = None
            for spec in t.proxy_jump.split(","):
                previous = SSHConnection(_jump_target(spec.strip(), t.policy), self.connect_timeout, self.retries, previous)
                self._jumps.append(previous)
            assert previous is not None
            return previous.channel_to(t.host, t.port)
        if t.proxy_command:
            return paramiko.ProxyCommand(t.proxy_command)
        return None

    def channel_to(self, host: str, port: int) -> Any:
        """A direct-tcpip channel from this host to HOST:PORT (a ProxyJump hop's job)."""
        try:
            return self.client().get_transport().open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0),
                                                              timeout=self.connect_timeout)
        except Exception as err:  # noqa: BLE001 — paramiko raises several types for a refused channel
            raise BoardUnreachableError(f"jump host {self.name} cannot reach {host}:{port}: {_reason(err)}") from err

    # -------------------------------------------------------------- commands

    def run(self, command: str | list[str], timeout: float = 120.0, check: bool = True, env: dict[str, str] | None = None) -> Result:
        """Run a command (a list is quoted with shlex) and collect its output and exit code."""
        if isinstance(command, list):
            command = shlex.join(command)
        if env:
            command = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + command
        chan = self._open("a command channel", lambda c: c.get_transport().open_session(timeout=self.channel_timeout))
        try:
            chan.settimeout(timeout)
            chan.exec_command(command)
            stdout, stderr = chan.makefile("rb"), chan.makefile_stderr("rb")
            out, err = _read_both(stdout, stderr, timeout)
            code = stdout.channel.recv_exit_status()
        except TimeoutError as exc:
            raise RemoteCommandError(f"command on {self.name} timed out after {timeout:.0f}s: {command[:120]}") from exc
        except _TRANSPORT_ERRORS() as exc:
            raise BoardUnreachableError(f"lost the connection to {self.name}: {_reason(exc)}") from exc
        finally:
            chan.close()
        result = Result(code, out, err)
        if check and code != 0:
            tail = (err or out).strip().splitlines()[-1:] or [f"exit code {code}"]
            raise RemoteCommandError(f"command on {self.name} failed ({code}): {tail[0][:300]}")
        return result

    # -------------------------------------------------------------- files

    def sftp(self) -> Any:
        """The SFTP session (opened on first use)."""
        if self._sftp is None or not self._sftp.get_channel().get_transport().is_active():
            self._sftp = self._open("the SFTP channel", lambda c: c.open_sftp())  # reconnects when the connection died
        return self._sftp

    def put(self, local: Path, remote: str, verify: bool = True) -> None:
        """Upload ``local`` to ``remote`` via a temporary name, check its sha256, then rename."""
        partial = f"{remote}.partial"
        try:
            self.sftp().put(str(local), partial)
        except _TRANSPORT_ERRORS() as err:
            hint = ("the partial file was removed; run the command again" if self._remove_partial(partial)
                    else f"a partial file may be left at {partial} (the next upload replaces it); run the command again")
            raise RemoteError(f"upload of {local.name} to {self.name} failed: {_reason(err)}", hint) from err
        if verify:
            want = sha256_file(local)
            got = self.run(["sha256sum", partial]).stdout.split()[0]
            if got != want:
                self.run(["rm", "-f", partial], check=False)
                raise RemoteError(f"upload of {local.name} to {self.name} arrived damaged (sha256 mismatch)", "run the command again")
        self.run(["mv", "-f", partial, remote])

    def _remove_partial(self, partial: str) -> bool:
        """Remove what a failed upload left: over the same connection, else over a new one (the old
        one may be dead without its transport knowing yet)."""
        for fresh in (False, True):
            if fresh:
                self.close()
            try:
                self.sftp().remove(partial)
                return True
            except FileNotFoundError:
                return True
            except Exception as err:  # noqa: BLE001 — the board may be gone: then the file stays, and the caller says so
                log.debug("could not remove %s on %s (%s connection): %s", partial, self.name, "new" if fresh else "same", err)
        return False

    def get(self, remote: str, local: Path) -> None:
        """Download ``remote`` to ``local``."""
        try:
            self.sftp().get(remote, str(local))
        except _TRANSPORT_ERRORS() as err:
            raise RemoteError(f"download of {remote} from {self.name} failed: {_reason(err)}") from err

    # -------------------------------------------------------------- tunnels

    @contextlib.contextmanager
    def tunnel_inprocess(self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0) -> Iterator[int]:
        """The forwarding itself, pumped by threads of this process (used by the forwarder child)."""
        transport = self.client().get_transport()
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", local_port))
        server.listen(16)
        port = server.getsockname()[1]
        stop = threading.Event()
        errors: list[str] = []

        def accept() -> None:
            while not stop.is_set():
                try:
                    ready, _, _ = select.select([server], [], [], 0.2)
                    if not ready:
                        continue
                    sock, peer = server.accept()
                except OSError:
                    return
                try:
                    chan = transport.open_channel("direct-tcpip", (remote_host, remote_port), peer, timeout=10)
                except Exception as err:  # noqa: BLE001 — reported when the tunnel closes
                    errors.append(f"{remote_host}:{remote_port} on {self.name}: {_reason(err)}")
                    sock.close()
                    continue
                threading.Thread(target=_pump, args=(sock, chan, stop), daemon=True).start()

        thread = threading.Thread(target=accept, daemon=True, name=f"tunnel-{port}")
        thread.start()
        try:
            yield port
        finally:
            stop.set()
            server.close()
            thread.join(timeout=2)
        if errors:
            log.debug("tunnel to %s had channel errors: %s", self.name, "; ".join(errors))

    @contextlib.contextmanager
    def reverse_tunnel_inprocess(self, local_port: int, local_host: str = "127.0.0.1") -> Iterator[int]:
        """Remote forwarding pumped by threads of this process (used by the forwarder child)."""
        transport = self.client().get_transport()
        stop = threading.Event()

        def handler(chan: Any, _origin: Any, _server: Any) -> None:
            try:
                sock = socket.create_connection((local_host, local_port), timeout=10)
            except OSError:
                chan.close()
                return
            threading.Thread(target=_pump, args=(sock, chan, stop), daemon=True).start()

        port = transport.request_port_forward("127.0.0.1", 0, handler)
        try:
            yield port
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                transport.cancel_port_forward("127.0.0.1", port)


def _read_both(stdout: Any, stderr: Any, timeout: float) -> tuple[str, str]:
    """Both streams of a remote command, read at once: reading stdout to its end first stalls a
    command that fills the channel's window with stderr (it blocks until the timeout)."""
    box: dict[str, Any] = {}

    def drain() -> None:
        try:
            box["err"] = stderr.read()
        except Exception as err:  # noqa: BLE001 — re-raised in the caller's thread
            box["error"] = err

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    out = stdout.read()
    reader.join(timeout)
    if "error" in box:
        raise box["error"]
    if reader.is_alive():
        raise TimeoutError("stderr did not close")
    return out.decode(errors="replace"), box.get("err", b"").decode(errors="replace")


def _pump(sock: socket.socket, chan: Any, stop: threading.Event) -> None:
    """Copy bytes both ways between a local socket and an SSH channel until either side closes.

    One thread per direction: a single loop deadlocks when both peers write at once and each
    waits for the other to read (seen with TVM RPC through the tunnel).
    """

    def copy(read: Any, write: Any) -> None:
        try:
            while not stop.is_set():
                data = read(65536)
                if not data:
                    break
                write(data)
        except (OSError, EOFError):
            pass
        finally:
            with contextlib.suppress(Exception):
                chan.close()
            with contextlib.suppress(Exception):
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    back = threading.Thread(target=copy, args=(chan.recv, sock.sendall), daemon=True)
    back.start()
    copy(sock.recv, chan.sendall)
    back.join()


def _TRANSPORT_ERRORS() -> tuple[type[BaseException], ...]:  # noqa: N802 — used like a constant
    """What a dropped connection raises: socket errors, EOF, and paramiko's own SSHException."""
    import paramiko

    return (OSError, EOFError, paramiko.SSHException)


def _reason(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def connect(board: Board, connect_timeout: float = 10.0, retries: int = 3) -> SSHConnection:
    """An SSHConnection for ``board`` (nothing is opened until first use)."""
    return SSHConnection(resolve_target(board), connect_timeout, retries)
