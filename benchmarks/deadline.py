"""``edgetune tune --time`` as a deadline: wall time of the whole command against its budget, on
this host and on a stand-in Raspberry Pi (tests/standin.py: a real OpenSSH server in a network
namespace, aarch64 userland under qemu-user; candidates timed there over the SSH tunnel and
TVM RPC — emulated, so each candidate is slow, the case a deadline is for).

    sudo .venv/bin/python benchmarks/deadline.py [--budget 3m] [--where host,board] [--model ocr_rec]

The model is one of tests/zoo.py's (default ``ocr_rec``: a PP-OCR-style recognizer, an attention
neck without a micro-kernel space; 32×128 here so the board's emulated runs stay short). Each
run starts from empty records and ends with the network check, as a user's first
``edgetune tune`` does; the command runs as the CLI a user runs (a subprocess) and its own
``--json`` summary gives trials and how the time went. Prints a table and writes
``benchmarks/results/deadline.json``. The board run needs root (namespaces, a test user) and the
packages ``scripts/install-system-deps.sh`` installs; never run it beside tests or another
benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from _stamp import stamp  # noqa: E402

OUT = REPO / "benchmarks" / "results" / "deadline.json"


def seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def tune(model: Path, device: str, budget: str, records: Path, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "edgetune", "tune", str(model), "--device", device, "--records", str(records),
           "--time", budget, "--json"]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"tune on {device} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout)
    limit = seconds(budget)
    return {"device": device, "budget_s": limit, "wall_s": round(wall, 1), "overrun_pct": round(100 * (wall - limit) / limit, 1),
            "trials": summary.get("trials_total"), "stop_reason": summary.get("stop_reason"),
            "time_breakdown_s": summary.get("time_breakdown_s"),
            "network_checks": [{k: c.get(k) for k in ("default_ms", "tuned_ms", "kept_ms", "skipped")}
                               for c in summary.get("network_checks") or []],
            "summary": {k: v for k, v in summary.items() if k not in ("tasks", "network_checks")}}


def board_env(work: Path) -> tuple[Any, dict[str, str]]:
    """A started stand-in board in an inventory of its own, with the runtime installed."""
    import conftest  # noqa: F401 — the tests' cache, which the board's own user can read (its sysroot)
    import standin

    from edgetune.emulation import sysroot

    reason = standin.unavailable()
    if reason:
        raise SystemExit(f"no stand-in board: {reason}")
    config = work / "config"
    env = dict(os.environ, EDGETUNE_DEVICES_FILE=str(config / "devices.toml"),
               EDGETUNE_KNOWN_HOSTS=str(config / "known_hosts"), EDGETUNE_SSH_CONFIG=str(config / "ssh_config"))
    os.environ.update(env)  # this process adds the board and installs the runtime
    from edgetune.remote.board import setup_board
    from edgetune.remote.inventory import Board, add_board

    sb = standin.StandinBoard(sysroot("aarch64"), 0).start()
    board = Board("deadlinepi", "pi4", sb.host, sb.user, sb.port, str(sb.key))
    add_board(board)
    setup_board(board)
    return sb, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", default="3m")
    parser.add_argument("--where", default="host,board")
    parser.add_argument("--model", default="ocr_rec")
    args = parser.parse_args()
    import zoo

    work = Path(tempfile.mkdtemp(prefix="edgetune-deadline-"))
    maker = {"ocr_rec": lambda p: zoo.ocr_rec(p, width=128)}.get(args.model, zoo.ZOO.get(args.model))
    if maker is None:
        raise SystemExit(f"unknown model {args.model}")
    model = maker(work / f"{args.model}.onnx")
    rows, board = [], None
    try:
        for where in args.where.split(","):
            env = dict(os.environ)
            device = "host"
            if where == "board":
                board, env = board_env(work)
                device = "deadlinepi"
            row = tune(model, device, args.budget, work / f"records-{where}", env)
            rows.append(row)
            print(f"{where:6s} budget {row['budget_s']:6.0f} s  wall {row['wall_s']:7.1f} s  overrun {row['overrun_pct']:+6.1f} %  "
                  f"trials {row['trials']}  ({row['stop_reason']})", flush=True)
    finally:
        if board is not None:
            board.stop()
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"stamp": stamp(), "model": args.model, "budget": args.budget, "rows": rows}, indent=1))
    print("\n| where | budget s | wall s | overrun | trials | ended |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['device']} | {r['budget_s']:.0f} | {r['wall_s']:.1f} | {r['overrun_pct']:+.1f} % | {r['trials']} | "
              f"{r['stop_reason']} |")


if __name__ == "__main__":
    main()
