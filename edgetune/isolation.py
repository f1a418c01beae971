"""A crash inside TVM as an error, not the end of the command.

TVM's frontends, passes and code generators are C++: a bug there (a segmentation fault, an abort
from a failed internal check) kills the process that called them, and a user sees a C++ stack and
exit code 139. :func:`isolated` runs such a stage in a forked child process instead. The child's
standard error (TVM's C++ messages, its stack on a crash) goes to a log file; its progress messages
and log records come back to the caller as they happen; its result or its exception comes back when
it ends. If the child dies of a signal, the caller gets a :class:`~edgetune.errors.CrashError`
naming the stage, the model, the signal and the log — and whatever the stage wrote stays in its
staging directory, which the caller removes.

The cost is one ``fork`` per stage (the child inherits every module already imported, TVM
included): measured in ``tests/test_hardening.py`` and ``benchmarks/compile_time.py``. Set
``EDGETUNE_ISOLATE=0`` to run stages in the calling process (a debugger, a profiler); inside an
isolated stage, nested stages run in place.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .errors import CrashError, EdgetuneError
from .util import cache_dir

T = TypeVar("T")
_INSIDE = False  # set in an isolated child: nested stages run in place
KEPT_LOGS = 20  # crash logs kept in the cache (the oldest go)


def inside() -> bool:
    """Whether this process is an isolated stage's child."""
    return _INSIDE


def enabled() -> bool:
    """Whether stages run isolated (``EDGETUNE_ISOLATE=0`` turns it off; a child runs in place)."""
    return not _INSIDE and os.environ.get("EDGETUNE_ISOLATE", "1") not in ("0", "false", "no")


class _Forward(logging.Handler):
    """The child's log records, sent to the parent to be handled there."""

    def __init__(self, conn: Any):
        super().__init__()
        self.conn = conn

    def emit(self, record: logging.LogRecord) -> None:
        try:
            record.msg, record.args = record.getMessage(), ()
            record.exc_info = record.exc_text = None
            self.conn.send(("log", record))
        except Exception:  # noqa: BLE001 — a record that cannot travel is dropped, never the stage
            pass


def _child(conn: Any, log_path: Path, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    global _INSIDE
    _INSIDE = True
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: the parent ends the stage
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)  # TVM's C++ messages (and its stack on a crash) into the log
    os.close(fd)
    root = logging.getLogger("edgetune")
    root.handlers[:] = [_Forward(conn)]
    if "progress" in kwargs:
        kwargs["progress"] = lambda message: conn.send(("progress", message))
    try:
        result = fn(*args, **kwargs)
    except BaseException as err:  # noqa: BLE001 — everything goes back to the parent, which raises it
        _send_error(conn, err)
        conn.close()
        os._exit(0)
    try:
        conn.send(("result", result))
    except Exception as err:  # noqa: BLE001 — an unpicklable result is a bug, reported as one
        _send_error(conn, err)
    conn.close()
    os._exit(0)


def _send_error(conn: Any, err: BaseException) -> None:
    try:
        conn.send(("error", err))
    except Exception:  # noqa: BLE001 — an exception that does not pickle travels as its text
        conn.send(("bug", f"{type(err).__name__}: {err}", traceback.format_exc()))


def isolated(stage: str, subject: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` run in a forked child (see the module docstring): its result, or
    its exception raised here; CrashError if it dies of a signal. A ``progress`` keyword is
    forwarded to the caller's callback. ``stage`` ("compiling", "importing") and ``subject`` (the
    model) name what crashed."""
    if not enabled():
        return fn(*args, **kwargs)
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    log_path = _log_path(stage)
    report = kwargs.get("progress")
    proc = ctx.Process(target=_child, args=(child, log_path, fn, args, kwargs), daemon=True)
    with _reaped(proc):
        # The parent's objects frozen across the fork: the child's collector never frees them. An
        # onnxruntime session of the caller's, freed in the child, waits forever for its thread
        # pool's threads, which a fork does not copy (seen as a hung test run).
        gc.freeze()
        try:
            proc.start()
        finally:
            gc.unfreeze()
        child.close()
        outcome = _receive(parent, proc, report)
        proc.join()
    if outcome is not None:
        with contextlib.suppress(OSError):
            log_path.unlink()
        return _unpack(outcome)
    code = proc.exitcode
    raise CrashError(*_crash_message(stage, subject, code, log_path))


def _receive(conn: Any, proc: Any, report: Callable[[str], None] | None) -> tuple[Any, ...] | None:
    """Messages from the child until its result or exception (None: it died without one)."""
    while True:
        try:
            if not conn.poll(0.2):
                if not proc.is_alive() and not conn.poll(0):
                    return None
                continue
            message = conn.recv()
        except (EOFError, OSError):
            return None
        if message[0] == "progress" and report is not None:
            report(message[1])
        elif message[0] == "log":
            logging.getLogger(message[1].name).handle(message[1])
        elif message[0] in ("result", "error", "bug"):
            return message


def _unpack(outcome: tuple[Any, ...]) -> Any:
    kind = outcome[0]
    if kind == "result":
        return outcome[1]
    if kind == "error":
        raise outcome[1]
    raise RuntimeError(f"{outcome[1]} (in an isolated stage; its traceback:\n{outcome[2]})")


@contextlib.contextmanager
def _reaped(proc: Any) -> Iterator[None]:
    """The child ended whatever happens here (Ctrl-C, an error): terminated, then killed."""
    try:
        yield
    finally:
        if proc.pid is not None and proc.is_alive():
            proc.terminate()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _log_path(stage: str) -> Path:
    folder = cache_dir("logs")
    logs = sorted(folder.glob("*.log"), key=lambda p: p.stat().st_mtime)
    for old in logs[:-KEPT_LOGS]:
        with contextlib.suppress(OSError):
            old.unlink()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return folder / f"{stamp}-{os.getpid()}-{stage.split()[0]}.log"


def _crash_message(stage: str, subject: str, code: int | None, log_path: Path) -> tuple[str, str]:
    if code is not None and code < 0:
        try:
            how = f"{signal.Signals(-code).name} ({signal.strsignal(-code)})"
        except ValueError:
            how = f"signal {-code}"
    else:
        how = f"exit code {code} without a result"
    last = _last_line(log_path)
    return (f"TVM crashed while {stage} {subject}: {how}" + (f" — {last}" if last else ""),
            f"nothing was written; TVM's messages and stack are in {log_path} (a TVM bug: report it with that "
            "log). Another --input-shape, --bind or --layout may avoid the crashing path")


def _last_line(log_path: Path) -> str:
    """TVM's last error-looking line in the log (a failed check's message), if any."""
    try:
        lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if any(key in line for key in ("Check failed", "Error", "error:", "Segmentation", "Aborted")):
            return line[:200]
    return ""


__all__ = ["CrashError", "EdgetuneError", "enabled", "inside", "isolated"]
