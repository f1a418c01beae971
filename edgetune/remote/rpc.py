"""TVM RPC servers on boards and the tracker on the host.

A board's server is started over SSH in its own session (so stopping its process group also
stops its popen workers), listens on the board's loopback only, and is reached through an SSH
tunnel. With a tracker, the board reaches the host's tracker through a reverse tunnel and
reports ``127.0.0.1:PORT``, which the host forwards to the board: a farm needs nothing but SSH.
Servers are always stopped on exit, Ctrl-C included; servers orphaned by a lost connection are
found by their pid files and stopped at the next start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _tvm
from ..errors import RemoteError, RpcError
from ..util import cache_dir, write_atomic
from . import forward
from .board import RemoteBoard

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BoardServer:
    """A running RPC server on a board, and the local port that reaches it."""

    board: str
    pid: int
    board_port: int
    local_port: int
    log_path: str
    key: str = ""  # the session key a client presents (direct servers: random, known to this process only)


def _listening(host: str, port: int, attempts: int = 1, timeout: float = 1.0) -> bool:
    """A plain TCP probe. TVM's tracker listens with a backlog of 1, so concurrent clients can
    see a dropped SYN (a 1 s retransmit): callers that need an answer ask for a few attempts."""
    for _ in range(attempts):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            continue
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rpc_dir(rb: RemoteBoard) -> str:
    return f"{rb.root}/rpc"


# A pid file holds "<server pgid> <owner pid> <owner start time>": the owner is the sshd process
# of the connection that started the server (the starting shell's parent), which lives exactly
# as long as that connection. A server whose owner is gone (or was replaced by another process
# with the same pid) is an orphan; one whose owner lives belongs to a live session — of this
# host or another — and is left alone.
_STALE_SCRIPT = r"""
n=0
for f in {dir}/*.pid; do
  [ -f "$f" ] || continue
  set -- $(cat "$f")
  pgid=$1; owner=${{2:-}}; started=${{3:-}}
  if [ -n "$owner" ] && [ -r /proc/$owner/stat ] && [ "$(cut -d' ' -f22 /proc/$owner/stat)" = "$started" ]; then
    continue
  fi
  if kill -0 -"$pgid" 2>/dev/null; then kill -KILL -"$pgid" 2>/dev/null; n=$((n+1)); fi
  rm -f "$f" "${{f%.pid}}.log" "${{f%.pid}}.key"
done
find {dir} -maxdepth 1 -name '*.log' -mtime +1 -delete 2>/dev/null
echo $n
"""


def stop_stale_servers(rb: RemoteBoard) -> int:
    """Stop servers orphaned by lost connections (see the pid-file note above); servers of live
    sessions — a ``tune`` or ``tracker attach`` running beside this one — are left running."""
    out = rb.conn.run(_STALE_SCRIPT.format(dir=shlex.quote(_rpc_dir(rb))), check=False).stdout.strip()
    count = int(out.splitlines()[-1]) if out and out.splitlines()[-1].isdigit() else 0
    if count:
        log.warning("stopped %d orphaned RPC server(s) on %s", count, rb.board.name)
    return count


def _start(rb: RemoteBoard, port: int, extra: list[str], key: str = "") -> tuple[int, str]:
    """Start the server in its own session; record its owner; a watchdog stops it (within 5 s)
    if the connection that started it goes away without stopping it. A session ``key`` reaches
    the server through a file only the board's user can read (never a command line)."""
    rpc_dir = _rpc_dir(rb)
    log_path = f"{rpc_dir}/{port}.log"
    pid_file = f"{rpc_dir}/{port}.pid"
    q = shlex.quote
    rb.conn.run(f"mkdir -p {q(rpc_dir)} && chmod 700 {q(rpc_dir)}")
    if key:
        key_file = f"{rpc_dir}/{port}.key"
        _write_private(rb, key_file, key)
        extra = [*extra, "--key-file", key_file]
    args = ["-m", "edgetune_runtime.rpc_serve", "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1), *extra]
    # the watchdog says in the server's log why it stopped the server (read by `_log_tail`)
    watchdog = (f"while kill -0 $owner 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 5; done; "
                f"kill -0 $owner 2>/dev/null || echo \"edgetune watchdog: the SSH connection that started this server "
                f"(sshd pid $owner) is gone; stopping the server\" >> {q(log_path)}; "
                f"kill -TERM -$pid 2>/dev/null; sleep 3; kill -KILL -$pid 2>/dev/null; rm -f {q(pid_file)}")
    cmd = (f"cd {q(rpc_dir)} && "
           f"PYTHONPATH={q(rb.runtime_dir())} TVM_USE_RUNTIME_LIB=1 setsid python3 {shlex.join(args)} "
           f"> {q(log_path)} 2>&1 < /dev/null & pid=$!; owner=$PPID; "
           f"echo \"$pid $owner $(cut -d' ' -f22 /proc/$owner/stat 2>/dev/null)\" > {q(pid_file)}; "
           f"pid=$pid owner=$owner setsid sh -c {q(watchdog)} > /dev/null 2>&1 < /dev/null & echo $pid")
    pid = _pid(rb.conn.run(cmd).stdout, rb.board.name)
    return pid, log_path


def _write_private(rb: RemoteBoard, path: str, text: str) -> None:
    """A file on the board that only its user can read, written over SFTP (no command line)."""
    with rb.conn.sftp().open(path, "w") as fh:
        fh.chmod(0o600)
        fh.write(text)


def _pid(output: str, board: str) -> int:
    """The pid a start command printed last; RpcError when it printed none."""
    lines = output.strip().splitlines()
    if not lines or not lines[-1].strip().isdigit():
        raise RpcError(f"starting the RPC server on {board} printed no process id ({(lines or ['nothing'])[-1][:200]})")
    return int(lines[-1].strip())


def _alive(rb: RemoteBoard, pid: int) -> bool:
    return rb.conn.run(f"kill -0 -{pid}", check=False).returncode == 0


def _log_tail(rb: RemoteBoard, log_path: str) -> str:
    lines = rb.conn.run(["tail", "-n", "5", log_path], check=False).stdout.strip().splitlines()
    return lines[-1][:300] if lines else "no output"


def stop_server(rb: RemoteBoard, pid: int, port: int, grace: float = 3.0) -> None:
    """SIGTERM the server's process group, SIGKILL what is left, remove its pid file and log."""
    q = shlex.quote
    rb.conn.run(
        f"kill -TERM -{pid} 2>/dev/null; for i in $(seq {int(grace * 10)}); do kill -0 -{pid} 2>/dev/null || break; sleep 0.1; done; "
        f"kill -KILL -{pid} 2>/dev/null; rm -f {q(_rpc_dir(rb))}/{port}.pid {q(_rpc_dir(rb))}/{port}.log {q(_rpc_dir(rb))}/{port}.key; true",
        check=False, timeout=60)


def _wait_ready(rb: RemoteBoard, pid: int, log_path: str, probe: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not _alive(rb, pid):
            raise RpcError(f"the RPC server on {rb.board.name} exited: {_log_tail(rb, log_path)}")
        try:
            if probe():
                return
        except Exception as err:  # noqa: BLE001 — not up yet; keep the reason for the timeout message
            last = str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
        time.sleep(0.5)
    raise RpcError(f"the RPC server on {rb.board.name} did not come up within {timeout:.0f}s ({last or _log_tail(rb, log_path)})")


@contextlib.contextmanager
def board_server(rb: RemoteBoard, start_timeout: float = 180.0) -> Iterator[BoardServer]:
    """Start an RPC server on the board, tunnel to it, health-check it; always stop it."""
    stop_stale_servers(rb)
    port = random.randrange(20000, 40000)
    key = secrets.token_hex(16)  # who holds it may run code on the board: this process only
    pid, log_path = _start(rb, port, [], key)
    try:
        with forward.tunnel(rb.conn, port) as local:
            _wait_ready(rb, pid, log_path, lambda: _tvm.rpc_connect("127.0.0.1", local, key, session_timeout=30) is not None,
                        start_timeout)
            yield BoardServer(rb.board.name, pid, port, local, log_path, key)
    finally:
        with contextlib.suppress(RemoteError):
            stop_server(rb, pid, port)


@contextlib.contextmanager
def tracker_server(rb: RemoteBoard, tracker: tuple[str, int], key: str, start_timeout: float = 180.0) -> Iterator[BoardServer]:
    """Register a board's RPC server with the tracker at ``tracker`` under ``key``, over SSH only."""
    stop_stale_servers(rb)
    port = _free_port()  # the same number on both ends: the tracker hands out 127.0.0.1:PORT
    with forward.reverse_tunnel(rb.conn, tracker[1], tracker[0]) as board_tracker_port, \
            forward.tunnel(rb.conn, port, local_port=port):
        extra = ["--tracker", f"127.0.0.1:{board_tracker_port}", "--key", key, "--custom-addr", "127.0.0.1"]
        pid, log_path = _start(rb, port, extra)
        try:
            _wait_ready(rb, pid, log_path, lambda: _registered(tracker, key, port), start_timeout)
            yield BoardServer(rb.board.name, pid, port, port, log_path)
        finally:
            with contextlib.suppress(RemoteError):
                stop_server(rb, pid, port)


def _registered(tracker: tuple[str, int], key: str, port: int) -> bool:
    """True once the tracker lists ``server:KEY`` at our forwarded port."""
    servers = _tvm.rpc_tracker_summary(*tracker).get("server_info", [])
    return any(s.get("key") == f"server:{key}" and list(s.get("addr", []))[1:] == [port] for s in servers)


# ---------------------------------------------------------------- tracker on the host


def _tracker_files() -> tuple[Path, Path]:
    base = cache_dir("tracker")
    return base / "tracker.json", base / "tracker.log"


@dataclass(frozen=True)
class TrackerInfo:
    host: str
    port: int
    pid: int
    started: float = 0.0  # the process's start time: the pid alone may be reused after a reboot


def start_tracker(host: str = "127.0.0.1", port: int = 0, timeout: float = 60.0, allow_network: bool = False) -> TrackerInfo:
    """Start a TVM RPC tracker as a background process (its own session); records it for
    status/stop. A tracker takes no credentials: whoever reaches it can register a board under
    a key (and feed timings into the records of whoever tunes on that key) or take a board's
    session, so a non-loopback ``host`` needs ``allow_network`` (UsageError otherwise), and is
    logged as a warning."""
    import ipaddress
    import json

    from ..errors import UsageError

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        if not allow_network:
            raise UsageError(f"a tracker on {host} can be reached from the network: anyone who reaches it can register "
                             "boards and feed timings into your records, or take your boards' sessions",
                             "keep the default 127.0.0.1 (boards attach over SSH), or pass --yes on a network you trust")
        log.warning("the tracker listens on %s: every machine that reaches it is trusted with your boards and records", host)

    state, log_file = _tracker_files()
    current = tracker_state()
    if current:
        raise RpcError(f"a tracker is already running at {current.host}:{current.port} (pid {current.pid})", "stop it with `edgetune tracker stop`")
    port = port or _free_port()
    with open(log_file, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", host, "--port", str(port), "--port-end", str(port + 1), "--silent"],
                                stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=dict(os.environ, TVM_USE_RUNTIME_LIB="1"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RpcError(f"the tracker exited: {log_file.read_text().strip()[-300:]}")
        if _listening(host, port):  # TVM's own connect retries for 60 s: probe with a plain socket
            break
        time.sleep(0.2)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        raise RpcError(f"the tracker did not start within {timeout:.0f}s")
    info = TrackerInfo(host, port, proc.pid, _start_time(proc.pid))
    write_atomic(state, json.dumps(info.__dict__))
    return info


def _start_time(pid: int) -> float:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return 0.0


def _is_our_tracker(info: "TrackerInfo") -> bool:
    """Whether ``info.pid`` is still the tracker edgetune started: after a reboot the pid may
    belong to an unrelated process, whose process group must not be signalled."""
    import psutil

    try:
        proc = psutil.Process(info.pid)
        cmdline = " ".join(proc.cmdline())
        started = proc.create_time()
    except psutil.Error:
        return False
    same_start = not info.started or abs(started - info.started) < 0.5
    return same_start and "tvm.exec.rpc_tracker" in cmdline


def tracker_state() -> TrackerInfo | None:
    """The tracker edgetune started, if it is still running."""
    import json

    state, _ = _tracker_files()
    if not state.is_file():
        return None
    try:
        info = TrackerInfo(**json.loads(state.read_text()))
    except (OSError, ValueError, TypeError):
        state.unlink(missing_ok=True)
        return None
    if not _is_our_tracker(info):
        state.unlink(missing_ok=True)  # gone, or the pid now belongs to someone else
        return None
    return info


def stop_tracker() -> TrackerInfo | None:
    """Stop the tracker edgetune started (its whole process group)."""
    info = tracker_state()
    if info is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(info.pid, signal.SIGTERM)
        for _ in range(30):
            os.killpg(info.pid, 0)
            time.sleep(0.1)
        os.killpg(info.pid, signal.SIGKILL)
    _tracker_files()[0].unlink(missing_ok=True)
    return info


def tracker_status(host: str, port: int) -> dict[str, Any]:
    """Servers registered per key and queue lengths."""
    if not _listening(host, port, attempts=3, timeout=5.0):
        raise RpcError(f"no tracker answers at {host}:{port}", "start one with `edgetune tracker start`")
    try:
        summary = _tvm.rpc_tracker_summary(host, port)
    except Exception as err:
        raise RpcError(f"the tracker at {host}:{port} did not answer: {err}") from err
    keys: dict[str, int] = {}
    for server in summary.get("server_info", []):
        key = str(server.get("key", "")).split(":")[1] if ":" in str(server.get("key", "")) else str(server.get("key"))
        keys[key] = keys.get(key, 0) + 1
    return {"host": host, "port": port, "servers": keys, "queue": summary.get("queue_info", {}), "raw": summary}


def request_session(tracker: tuple[str, int], key: str, timeout: float = 120.0) -> Any:
    """A session from the tracker under ``key``; RpcError instead of TVM's endless wait."""
    status = tracker_status(*tracker)
    if not status["servers"].get(key):
        raise RpcError(f"no server is registered under key '{key}' at {tracker[0]}:{tracker[1]} (keys: {', '.join(status['servers']) or 'none'})",
                       "attach boards with `edgetune tracker attach BOARD`")
    try:
        session = _tvm.rpc_tracker_request(tracker[0], tracker[1], key, timeout)
    except Exception as err:  # noqa: BLE001 — TVM's RPC errors have many types
        raise RpcError(f"tracker request for '{key}' failed: {err}") from err
    if session is not None:
        return session
    raise RpcError(f"no board under key '{key}' became free within {timeout:.0f}s", "all boards are busy or dead; `edgetune tracker status` shows them")
