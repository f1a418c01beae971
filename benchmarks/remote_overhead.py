"""Remote overhead on a board: connect, setup (cold and warm), RPC server start, upload, first run.

    sudo .venv/bin/python benchmarks/remote_overhead.py            # a stand-in board (needs root)
    .venv/bin/python benchmarks/remote_overhead.py --board mypi    # a board from the inventory

Prints a table and writes benchmarks/results/remote_overhead.json. On the stand-in, Python runs
under qemu-user emulation, so every step that runs Python on the board is 5-20x slower than on a
real Pi; SSH and file transfer are native.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from _stamp import stamp  # noqa: E402


@contextmanager
def _standin():
    import standin

    from edgetune.emulation import sysroot
    from edgetune.remote.inventory import Board

    reason = standin.unavailable()
    if reason:
        sys.exit(f"cannot build a stand-in board: {reason}")
    board = standin.StandinBoard(sysroot("aarch64")).start()
    try:
        yield Board("standin", "pi4", board.host, board.user, board.port, str(board.key)), "stand-in (qemu-aarch64)"
    finally:
        board.stop()


def _timed(rows: list, step: str, fn):
    start = time.perf_counter()
    value = fn()
    rows.append({"step": step, "seconds": round(time.perf_counter() - start, 3)})
    print(f"{step:34} {rows[-1]['seconds']:8.3f} s", file=sys.stderr)
    return value


def _session_steps(rows: list, local_port: int, package: Path) -> None:
    """Connect, upload, load, run twice; the remote objects die when this returns."""
    import numpy as np
    from tvm.runtime.vm import VirtualMachine

    from edgetune import _tvm

    session = _timed(rows, "rpc connect", lambda: _tvm.rpc_connect("127.0.0.1", local_port))
    _timed(rows, f"upload {package.name}/model.so", lambda: session.upload(str(package / "model.so")))
    lib = _timed(rows, "load module", lambda: session.load_module("model.so"))
    manifest = json.loads((package / "manifest.json").read_text())
    dev = session.cpu(0)
    vm = VirtualMachine(lib, dev)
    inputs = [_tvm.tvm().runtime.tensor(np.zeros(s["shape"], s["dtype"]), dev) for s in manifest["inputs"]]
    _timed(rows, "first run", lambda: vm["main"](*inputs))
    _timed(rows, "second run", lambda: vm["main"](*inputs))


def measure(board, package: Path) -> list[dict]:
    from edgetune.remote.board import RemoteBoard, setup_board
    from edgetune.remote.rpc import board_server

    rows: list[dict] = []
    with RemoteBoard(board) as rb:
        _timed(rows, "ssh connect + facts", lambda: rb.facts(refresh=True))
        rb.conn.run(f"rm -rf {shlex.quote(rb.runtime_dir())}")
        rb.facts(refresh=True)
    _timed(rows, "setup (cold: push runtime bundle)", lambda: setup_board(board))
    _timed(rows, "setup (warm: already installed)", lambda: setup_board(board))
    with RemoteBoard(board) as rb:
        running = board_server(rb)
        server = _timed(rows, "rpc server start + tunnel", running.__enter__)
        _session_steps(rows, server.local_port, package)
        _timed(rows, "rpc server stop + tunnel close", lambda: running.__exit__(None, None, None))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--board", help="a board from the inventory (default: build a stand-in)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "remote_overhead.json")
    args = parser.parse_args()
    import models

    from edgetune.package import PackageOptions, package

    with tempfile.TemporaryDirectory() as tmp:
        model = models.randomized_light("squeezenet", Path(tmp) / "squeezenet.onnx")
        pkg = package(PackageOptions(model=model, device="pi4", output=Path(tmp) / "squeezenet-pi4", verify=False)).path
        size_mb = (pkg / "model.so").stat().st_size / 1e6
        if args.board:
            from edgetune.remote.inventory import get_board

            rows, kind = measure(get_board(args.board), pkg), args.board
        else:
            with _standin() as (board, kind):
                rows = measure(board, pkg)
    print(f"\nremote overhead on {kind} (squeezenet, {size_mb:.1f} MB library)")
    print(f"{'step':34} {'seconds':>8}")
    for row in rows:
        print(f"{row['step']:34} {row['seconds']:8.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"stamp": stamp(), "board": kind, "library_mb": round(size_mb, 2), "rows": rows}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
