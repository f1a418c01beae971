"""``edgetune deploy``, ``edgetune bench`` and ``edgetune tracker``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from ..errors import UsageError
from ._common import boundary, out, print_json, progress

tracker_app = typer.Typer(help="A TVM RPC tracker for a farm of boards.", no_args_is_help=True, rich_markup_mode=None)


def _tracker_addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"malformed tracker address '{text}'", "write it as HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


def _tracker_or_running(tracker: str | None) -> tuple[str, int]:
    """HOST:PORT from the option, else the tracker `edgetune tracker start` left running."""
    from ..remote.rpc import tracker_state

    if tracker:
        return _tracker_addr(tracker)
    info = tracker_state()
    if info is None:
        raise UsageError("no tracker is running", "start one with `edgetune tracker start`, or pass --tracker HOST:PORT")
    return info.host, info.port


@boundary
def deploy(
    package: Path = typer.Argument(..., help="A package directory from `edgetune package`."),
    device: str = typer.Option(..., "--device", "-d", help="Board name (see `edgetune devices list`)."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Push a package, verify its checksums on the board, run it there against the reference."""
    from ..remote.board import deploy_package
    from ..remote.inventory import get_board

    with progress(not json_out) as report:
        report(f"deploying {package.name} to {device}")
        result = deploy_package(package, get_board(device))
    if json_out:
        print_json(result.__dict__)
    else:
        status = "[green]passed[/]" if result.check["passed"] else "[red]FAILED[/]"
        out.print(f"deployed {package.name} to {device}:{result.remote_path} ({result.uploaded_files} files, checksums verified)")
        for name, o in result.check["outputs"].items():
            out.print(f"  {name}: max abs error {o.get('max_abs_error', o.get('error'))}")
        out.print(f"  reference check on the board {status}")
    if not result.check["passed"]:
        raise typer.Exit(6)


@boundary
def bench(
    package: Path = typer.Argument(..., help="A package directory from `edgetune package`."),
    device: str = typer.Option(..., "--device", "-d", help="host (this machine), a board name, or with --tracker a key."),
    runs: int = typer.Option(50, "--runs", help="Timed runs after the warm-up."),
    profile: bool = typer.Option(False, "--profile", help="Also time every kernel inside the network."),
    strict: bool = typer.Option(False, "--strict", help="Refuse (exit 2) when the machine is throttled or busy."),
    baseline: Path = typer.Option(None, "--baseline", help="The model file — or `source`: the one the package was "
                                  "built from, if unchanged — also timed with its own runtime (onnxruntime / "
                                  "LiteRT+XNNPACK), same inputs and threads, alternating."),
    tracker: str = typer.Option(None, "--tracker", help="HOST:PORT of a tracker; --device is then the key."),
    number: int = typer.Option(10, help="With --tracker: runs per measurement."),
    repeat: int = typer.Option(10, help="With --tracker: measurements."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Latency of a package where it runs, and whether to trust the number: the machine's state
    (throttled, busy, governor), p50/p90/p99 and a 95 % CI; --profile: time per kernel."""
    from ..remote.bench import MeasureOptions, bench_on_tracker, measure_package

    if tracker:
        if profile or strict or baseline:
            raise UsageError("--profile, --strict and --baseline need a shell on the board",
                             "bench a board by name, or --device host")
        with progress(not json_out) as report:
            report(f"benchmarking {package.name} on {device} through the tracker")
            result = bench_on_tracker(package, _tracker_addr(tracker), device, number, repeat)
        if json_out:
            print_json(result.to_json())
            return
        out.print(f"{package.name} on {result.device}: mean {result.mean_ms:.3f} ms  p50 {result.p50_ms:.3f}  "
                  f"p90 {result.p90_ms:.3f}  std {result.std_ms:.3f}  ({result.repeat}×{result.number} runs)")
        out.print(f"  outputs vs reference: {'[green]match[/]' if result.check['passed'] else '[red]DIFFER[/]'}")
        return
    with progress(not json_out) as report:
        report(f"benchmarking {package.name} on {device}" + (" with a per-kernel profile" if profile else ""))
        m = measure_package(MeasureOptions(package, device, runs, profile, strict, baseline=baseline))
    if json_out:
        print_json(m.to_json())
        return
    _render_measurement(package.name, m)


def _render_measurement(name: str, m: Any) -> None:
    from edgetune_runtime.measure import describe

    lat = m.latency
    for length, bucket in (m.buckets or {}).items():  # a range package: a bucket's length, or a symbolic one's
        b = bucket["latency"]
        out.print(f"  length {length}: p50 {b['p50_ms']:.3f} ms  p90 {b['p90_ms']:.3f}  ({b['runs']} runs)"
                  + ("" if "baseline" not in bucket else f"  → edgetune/baseline {bucket['baseline']['ratio_p50']:.2f}×"))
    if m.buckets:
        name = f"{name} (at its longest length)"
    out.print(f"{name} on {m.device} ({m.threads} threads): p50 [bold]{lat['p50_ms']:.3f} ms[/]  p90 {lat['p90_ms']:.3f}  "
              f"p99 {lat['p99_ms']:.3f}  mean {lat['mean_ms']:.3f} (95 % CI {lat['ci95_ms'][0]:.3f}–{lat['ci95_ms'][1]:.3f})  "
              f"{lat['runs']} runs after {lat['warmup']['runs']} warm-up"
              + ("" if lat["warmup"]["stable"] else " [yellow](never stable)[/]"))
    out.print(f"  machine: {describe(m.system)}")
    for w in m.warnings:
        out.print(f"  {'[red]warning[/]' if w['level'] == 'bad' else 'note'}: {w['text']}")
    out.print(f"  outputs vs reference: {'[green]match[/]' if m.check['passed'] else '[red]DIFFER[/]'}")
    if m.baseline:
        b = m.baseline
        out.print(f"  baseline {b['runtime']}: p50 {b['p50_ms']:.3f} ms  p90 {b['p90_ms']:.3f}  (alternating blocks, same "
                  f"inputs and threads) → edgetune/baseline [bold]{b['ratio_p50']:.2f}×[/]")
    if m.profile:
        _render_profile(m.profile, m.kernels_known)


def _render_profile(p: dict[str, Any], known: bool) -> None:
    table = Table("kernel", "kind", "calls", "ms", "%", "GFLOP/s", "tuned", "trials", box=None, header_style="bold")
    for r in p["kernels"]:
        table.add_row(r["name"][:60], r["kind"] or "?", str(r["calls"]), f"{r['ms']:.4f}", f"{r['pct']:.1f}",
                      f"{r['gflops']:.1f}" if r["gflops"] else "", {True: "yes", False: "no"}.get(r["tuned"], ""),
                      str(r["trials"]) if r["trials"] is not None else "")
    out.print(table)
    share = 100 * p["kernels_ms"] / p["end_to_end_ms"]
    out.print(f"  kernels: {p['kernels_ms']:.3f} ms of {p['end_to_end_ms']:.3f} ms end to end ({share:.0f} %; each timed "
              f"inside the run, the hook's {p['hook_overhead_us']:.2f} µs per call taken out); the runtime row is the rest")
    if p["next"]:
        out.print(f"  tune next: [bold]{p['next']['kernel']}[/] ({p['next']['pct']:.0f} % of the time, {p['next']['why']})")
    if not known:
        out.print("  (this package predates per-kernel facts: package it again for kinds, FLOPs and trials)")


@tracker_app.command("start")
@boundary
def tracker_start(host: str = typer.Option("127.0.0.1", help="Address to listen on (loopback unless you trust the network)."),
                  port: int = typer.Option(9190, help="Port (0: any free one)."),
                  yes: bool = typer.Option(False, "--yes", help="Listen on a non-loopback address: anyone who reaches it "
                                           "can register boards and feed timings into your records.")) -> None:
    """Start a tracker in the background."""
    from ..remote.rpc import start_tracker

    info = start_tracker(host, port, allow_network=yes)
    out.print(f"tracker running at {info.host}:{info.port} (pid {info.pid}); attach boards with "
              f"`edgetune tracker attach BOARD --tracker {info.host}:{info.port}`")


@tracker_app.command("stop")
@boundary
def tracker_stop() -> None:
    """Stop the tracker started by `edgetune tracker start`."""
    from ..remote.rpc import stop_tracker

    info = stop_tracker()
    out.print(f"stopped tracker at {info.host}:{info.port}" if info else "no tracker running")


@tracker_app.command("status")
@boundary
def tracker_status(tracker: str = typer.Option(None, "--tracker", help="HOST:PORT (default: the one edgetune started)."),
                   json_out: bool = typer.Option(False, "--json")) -> None:
    """Boards registered per key, and queued requests."""
    from ..remote import rpc

    addr = _tracker_or_running(tracker)
    status = rpc.tracker_status(*addr)
    if json_out:
        print_json(status)
        return
    table = Table("key", "servers", box=None, header_style="bold")
    for key, count in status["servers"].items():
        table.add_row(key, str(count))
    out.print(f"tracker {addr[0]}:{addr[1]}")
    out.print(table if status["servers"] else "no servers registered")


@tracker_app.command("attach", short_help="Register boards' RPC servers with the tracker.")
@boundary
def tracker_attach(boards: list[str] = typer.Argument(..., help="Board names to register."),
                   tracker: str = typer.Option(None, "--tracker", help="HOST:PORT (default: the one edgetune started).")) -> None:
    """Start RPC servers on boards and register them with the tracker; runs until Ctrl-C."""
    import contextlib
    import time

    from ..remote import rpc
    from ..remote.board import RemoteBoard
    from ..remote.inventory import get_board

    addr = _tracker_or_running(tracker)
    with contextlib.ExitStack() as stack:
        for name in boards:
            board = get_board(name)
            rb = stack.enter_context(RemoteBoard(board))
            stack.enter_context(rpc.tracker_server(rb, addr, board.tracker_key))
            out.print(f"{name} registered under key '{board.tracker_key}' at {addr[0]}:{addr[1]}")
        out.print("serving; press Ctrl-C to stop the servers")
        while True:
            time.sleep(3600)
