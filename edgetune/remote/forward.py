"""Port forwarding over SSH in a process of its own: ``python -m edgetune.remote.forward``.

Why a separate process: TVM frees remote RPC objects (a network round trip) while holding the
GIL, so a tunnel pumped by threads of the same Python process can deadlock against it (seen:
the main thread blocked in recv inside TVMFFIObjectDecRef, the pump threads unable to run).

Protocol: the parent writes one JSON line (the SSH target and the forwards), the child answers
one JSON line (``{"port": N}`` or ``{"error": ..., "kind": ...}``) and forwards until its stdin
closes, so it never outlives its parent.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from .. import errors
from ..errors import RemoteError


def _serve(spec: dict[str, Any]) -> None:
    from .ssh import SSHConnection, SSHTarget

    conn = SSHConnection(SSHTarget(**spec["target"]), spec.get("connect_timeout", 10.0), spec.get("retries", 3))
    try:
        if spec["mode"] == "local":
            ctx = conn.tunnel_inprocess(spec["remote_port"], spec.get("remote_host", "127.0.0.1"), spec.get("local_port", 0))
        else:
            ctx = conn.reverse_tunnel_inprocess(spec["local_port"], spec.get("local_host", "127.0.0.1"))
        with ctx as port:
            print(json.dumps({"port": port}), flush=True)
            while sys.stdin.read(1):  # until the parent closes our stdin (or dies)
                pass
    except errors.EdgetuneError as err:
        print(json.dumps({"error": err.message, "hint": err.hint, "kind": type(err).__name__}), flush=True)
    except Exception as err:  # noqa: BLE001 — a port in use, a socket error: the parent needs the reason
        print(json.dumps({"error": f"the SSH forwarder failed: {type(err).__name__}: {err}", "kind": "RemoteError"}),
              flush=True)
    finally:
        conn.close()


@contextlib.contextmanager
def forward(target: Any, mode: str, timeout: float = 60.0, **spec: Any) -> Iterator[int]:
    """Run a forwarder child for ``target`` (an SSHTarget); yields the forwarded port. The
    child's stderr goes to a temporary file, whose last line is the reason when it dies
    without answering."""
    stderr = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "edgetune.remote.forward"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)
    try:
        assert proc.stdin and proc.stdout
        proc.stdin.write(json.dumps({"target": asdict(target), "mode": mode, **spec}) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not select.select([proc.stdout], [], [], 0.2)[0]:
            if proc.poll() is not None:
                break
        line = proc.stdout.readline() if select.select([proc.stdout], [], [], 0)[0] else ""
        answer = json.loads(line) if line.strip() else {"error": f"the SSH forwarder did not start{_why(stderr)}",
                                                         "kind": "RemoteError"}
        if "error" in answer:
            cls = getattr(errors, answer.get("kind", ""), RemoteError)
            raise cls(answer["error"], answer.get("hint")) if issubclass(cls, errors.EdgetuneError) else RemoteError(answer["error"])
        yield int(answer["port"])
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
        stderr.close()


def _why(stderr: Any) -> str:
    """": LAST LINE" of what the child wrote to stderr, or "" when it wrote nothing."""
    stderr.seek(0)
    lines = [ln.strip() for ln in stderr.read().decode(errors="replace").splitlines() if ln.strip()]
    return f": {lines[-1][:300]}" if lines else ""


def _limits(conn: Any) -> dict[str, Any]:
    return {"timeout": conn.connect_timeout * conn.retries + 30, "connect_timeout": conn.connect_timeout,
            "retries": conn.retries}


@contextlib.contextmanager
def tunnel(conn: Any, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0) -> Iterator[int]:
    """Forward 127.0.0.1:LOCAL here (OS-chosen unless given) to REMOTE_HOST:REMOTE_PORT on the
    board of ``conn`` (an SSHConnection), from a child process; yields LOCAL."""
    with forward(conn.target, "local", remote_port=remote_port, remote_host=remote_host, local_port=local_port,
                 **_limits(conn)) as port:
        yield port


@contextlib.contextmanager
def reverse_tunnel(conn: Any, local_port: int, local_host: str = "127.0.0.1") -> Iterator[int]:
    """Let the board of ``conn`` reach LOCAL_HOST:LOCAL_PORT here as its own 127.0.0.1:PORT (yielded)."""
    with forward(conn.target, "reverse", local_port=local_port, local_host=local_host, **_limits(conn)) as port:
        yield port


def main() -> None:
    """Child entry point."""
    _serve(json.loads(sys.stdin.readline()))


if __name__ == "__main__":
    main()
