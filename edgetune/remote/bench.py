"""``edgetune bench``: latency of a package on a board, with TVM's remote time evaluator."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import _tvm
from ..errors import RemoteError, RpcError
from .board import RemoteBoard, read_manifest
from .inventory import Board
from .rpc import board_server, request_session


@dataclass(frozen=True)
class BenchResult:
    """Latency statistics (ms) over ``repeat`` samples of ``number`` runs, and the output check."""

    device: str
    mean_ms: float
    p50_ms: float
    p90_ms: float
    std_ms: float
    min_ms: float
    number: int
    repeat: int
    check: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _inputs_and_reference(package: Path) -> tuple[dict[str, Any], list[np.ndarray], dict[str, np.ndarray]]:
    manifest = read_manifest(package)
    ref = package / "reference.npz"
    if not ref.is_file():
        raise RemoteError(f"{package} has no reference data (built with --no-verify)", "package it again without --no-verify")
    with np.load(ref) as data:
        inputs = [data[f"input:{s['name']}"] for s in manifest["inputs"]]
        expected = {s["original_name"]: data[f"output:{s['name']}"] for s in manifest["outputs"]}
    return manifest, inputs, expected


def _measure(session: Any, package: Path, device: str, number: int, repeat: int) -> BenchResult:
    from edgetune_runtime.loader import DEFAULT_TOLERANCE, compare

    manifest, inputs, expected = _inputs_and_reference(package)
    try:
        samples, outputs = _tvm.remote_bench(session, package / manifest["library"], inputs,
                                             manifest["runtime"]["kind"], number, repeat)
    except Exception as err:  # TVM raises TVMError on a dead server / dropped session
        raise RpcError(f"benchmark on {device} failed: {(str(err).strip().splitlines() or [type(err).__name__])[-1][:300]}") from err
    got = {s["original_name"]: o for s, o in zip(manifest["outputs"], outputs)}
    tolerance = dict(DEFAULT_TOLERANCE, **manifest.get("verification", {}).get("tolerance", {}))
    ms = np.array(samples) * 1e3
    return BenchResult(device, float(ms.mean()), float(np.percentile(ms, 50)), float(np.percentile(ms, 90)),
                       float(ms.std()), float(ms.min()), number, repeat, compare(expected, got, **tolerance))


def bench_on_board(package: Path, board: Board, number: int = 10, repeat: int = 10) -> BenchResult:
    """Start an RPC server on ``board``, tunnel to it, time the package, stop the server."""
    manifest = read_manifest(package)
    _inputs_and_reference(package)  # a package without reference data fails before any connection
    with RemoteBoard(board) as rb:
        if manifest["arch"] != rb.facts().arch:
            raise RemoteError(f"package is for {manifest['arch']}, board {board.name} is {rb.facts().arch}")
        with board_server(rb) as server:
            session = _tvm.rpc_connect("127.0.0.1", server.local_port)
            return _measure(session, package, board.name, number, repeat)


def bench_on_tracker(package: Path, tracker: tuple[str, int], key: str, number: int = 10, repeat: int = 10, timeout: float = 120) -> BenchResult:
    """Time the package on whichever board under ``key`` the tracker hands out."""
    _inputs_and_reference(package)
    session = request_session(tracker, key, timeout)
    return _measure(session, package, f"{key}@{tracker[0]}:{tracker[1]}", number, repeat)
