"""Where candidates are timed: this machine, one board over an SSH tunnel and TVM RPC, or every
board of a farm behind a tracker. Each runner has a hard per-candidate timeout, so a dead
board becomes failed candidates (then a lost board), never a hang."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EdgetuneError, RemoteError, UsageError
from ..profiles import Profile, host_arch
from ..toolchain import local_gpu
from .options import TuneOptions


@dataclass
class RunnerHandle:
    """A runner plus what the loop needs to know about it."""

    impl: Any
    label: str
    device_type: str
    alive: Callable[[], int]  # how many boards still answer (local: 1)
    workers: int = 1
    # what would make the measurements lie now (throttled, hot, busy): edgetune_runtime.measure
    conditions: Callable[[], list[dict[str, str]]] = lambda: []
    load_s: float = 15.0  # what a candidate costs before its first run: upload and load (local: load only)


@contextlib.contextmanager
def open_runner(opts: TuneOptions, profile: Profile, notice: Callable[[str], None]) -> Iterator[RunnerHandle]:
    """Local runs for the host profile; one board over an SSH tunnel; or a tracker farm."""
    from .._tvm import metaschedule as ms

    evaluator = ms.Evaluator()
    device_type = "cuda" if profile.runtime == "cuda" else "cpu"
    if opts.tracker:
        yield from _tracker_runner(opts, profile, evaluator, device_type, notice)
        return
    board = _board(opts.device)
    if board is None:
        gpu = local_gpu(profile)
        if not profile.is_native and gpu is None:
            here = (f" (no GPU of {profile.target.get('arch')} with its driver here)" if profile.runtime == "cuda"
                    and profile.arch == host_arch() else "")
            raise UsageError(f"profile '{profile.name}' ({profile.arch}) cannot be measured on this host{here}",
                             "tune on a board: `edgetune devices add NAME ...` then --device NAME, or --tracker HOST:PORT")
        from edgetune_runtime.loader import default_threads

        default_threads()  # the workers that time candidates inherit the threads a package gets
        with _cudart_on_library_path(gpu.cudart) if gpu else contextlib.nullcontext():
            if gpu:
                notice(f"timing candidates on this machine's {gpu.name}")
            runner = ms.local_runner(evaluator, opts.timeout)
            try:
                yield RunnerHandle(runner, "local", device_type, lambda: 1, conditions=_local_conditions, load_s=3.0)
            finally:
                runner.close()
        return
    yield from _board_runner(opts, board, evaluator, device_type, notice)


@contextlib.contextmanager
def _cudart_on_library_path(cudart: Path) -> Iterator[None]:
    """The workers that time candidates import TVM afresh: its CUDA runtime loads only where the
    dynamic loader finds the profile's libcudart, which a pip-installed CUDA keeps off its path."""
    saved = os.environ.get("LD_LIBRARY_PATH")
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(cudart.parent), saved]))
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("LD_LIBRARY_PATH", None)
        else:
            os.environ["LD_LIBRARY_PATH"] = saved


def _local_conditions() -> list[dict[str, str]]:
    """Throttling, heat and capped clocks here; not load: our own builders are the load."""
    from edgetune_runtime import measure

    return measure.warnings(measure.system_state(busy=False))


def _board(device: str) -> Any:
    from ..remote.inventory import load_inventory

    return load_inventory().get(device)


def _board_runner(opts: TuneOptions, board: Any, evaluator: Any, device_type: str,
                  notice: Callable[[str], None]) -> Iterator[RunnerHandle]:
    from .._tvm import metaschedule as ms
    from ..remote.board import RemoteBoard
    from ..remote.rpc import board_server

    with RemoteBoard(board) as rb:
        notice(f"starting the RPC server on {board.name}")
        with board_server(rb) as server:
            endpoint = ms.RpcEndpoint("127.0.0.1", server.local_port, server.key)
            runner = ms.rpc_runner(endpoint, evaluator, 1, opts.timeout)

            def alive() -> int:
                return 1 if ms.probe(endpoint, 15.0) else 0

            def conditions() -> list[dict[str, str]]:
                from ..remote.board import board_timing

                item, data = board_timing(rb)
                if not data:
                    raise RemoteError(item.detail)
                return data["warnings"]

            try:
                yield RunnerHandle(runner, f"board {board.name}", device_type, alive, conditions=conditions)
            finally:
                runner.close()


def _tracker_runner(opts: TuneOptions, profile: Profile, evaluator: Any, device_type: str,
                    notice: Callable[[str], None]) -> Iterator[RunnerHandle]:
    from .._tvm import metaschedule as ms
    from ..remote.rpc import tracker_status

    host, port = opts.tracker  # type: ignore[misc]
    key = opts.key or profile.name

    def servers() -> int:
        try:
            return int(tracker_status(host, port).get("servers", {}).get(key, 0))
        except EdgetuneError:
            return 0

    count = servers()
    known = [count]

    def alive() -> int:
        """Servers under the key now; a busy one re-registers a moment after its session ends."""
        seen = servers()
        for wait in (2.0, 4.0):
            if seen >= known[0]:
                break
            time.sleep(wait)
            seen = max(seen, servers())
        known[0] = seen
        return seen

    if count == 0:
        raise RemoteError(f"no board is registered under key '{key}' at {host}:{port}",
                          "register boards with `edgetune tracker attach BOARD...`, or give --key")
    notice(f"{count} board(s) under '{key}' at {host}:{port}")
    runner = ms.rpc_runner(ms.RpcEndpoint(host, port, key, tracker=True), evaluator, count, opts.timeout)
    try:
        yield RunnerHandle(runner, f"tracker {host}:{port} key {key}", device_type, alive, count)
    finally:
        runner.close()
