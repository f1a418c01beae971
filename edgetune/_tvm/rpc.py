"""TVM RPC: sessions to a board's server, a tracker's summary and requests, remote timing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .core import plain, tvm


def rpc_connect(host: str, port: int, key: str = "", session_timeout: float = 0) -> Any:
    """An RPC session to a server (raises TVM's error on failure)."""
    tvm()
    from tvm import rpc

    return rpc.connect(host, port, key=key, session_timeout=session_timeout)


def rpc_tracker_summary(host: str, port: int) -> dict[str, Any]:
    """The tracker's summary: servers by key and queue state."""
    tvm()
    from tvm import rpc

    return plain(rpc.connect_tracker(host, port).summary())


def rpc_tracker_request(host: str, port: int, key: str, wait: float, session_timeout: float = 0) -> Any:
    """A session from the tracker under ``key``, or None when no server became free within
    ``wait`` seconds. TVM's ``TrackerSession.request`` waits forever and cannot be withdrawn; this
    speaks the same request (``tvm.rpc.base``'s framing) on a socket of its own, with a deadline,
    and closes it on giving up — which withdraws the request: the tracker hands a freed board
    only to a requester whose connection is still open."""
    import socket
    import struct

    tvm()
    from tvm import rpc
    from tvm.rpc import base

    with socket.create_connection((host, port), timeout=min(wait, 30)) as sock:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
            raise RuntimeError(f"{host}:{port} is not an RPC tracker")
        base.sendjson(sock, [base.TrackerCode.REQUEST, key, "", 1])
        sock.settimeout(wait)
        try:
            value = base.recvjson(sock)
        except TimeoutError:
            return None
    if value[0] != base.TrackerCode.SUCCESS:
        raise RuntimeError(f"the tracker answered {value!s}")
    url, server_port, matchkey = value[1]
    return rpc.connect(url, server_port, matchkey, session_timeout)


def remote_bench(session: Any, library: Path, arrays: list[Any], kind: str, number: int, repeat: int) -> tuple[list[float], list[Any]]:
    """Upload a package library through ``session``, run it once and time it with TVM's remote
    time evaluator. Returns (per-repeat mean seconds, outputs of the first run as numpy)."""
    tvm()
    from tvm.runtime.vm import VirtualMachine

    session.upload(str(library))
    lib = session.load_module(library.name)
    dev = session.cuda(0) if kind == "cuda" else session.cpu(0)
    vm = VirtualMachine(lib, [dev, session.cpu(0)] if kind == "cuda" else dev)
    tensors = [tvm().runtime.tensor(a, dev) for a in arrays]
    result = vm["main"](*tensors)
    outputs = [result.numpy()] if hasattr(result, "numpy") else [r.numpy() for r in result]
    timer = vm.time_evaluator("main", dev, number=number, repeat=repeat)
    return [float(s) for s in timer(*tensors).results], outputs
