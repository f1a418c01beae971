"""``edgetune tune MODEL... --device D``: auto-tune kernels on the board, with a live task table."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from rich.live import Live
from rich.table import Table

from ._common import boundary, err, out, print_json
from .inspect_cmd import BIND_HELP, INPUT_SHAPE_HELP, PRECISION_HELP
from .remote_cmd import _tracker_addr


@boundary
def tune(
    models: list[Path] = typer.Argument(..., help="One or more .onnx / .tflite files (networks are named by file stem)."),
    device: str = typer.Option(..., "--device", "-d", help="Profile (host: measured here) or board; with --tracker, the profile."),
    trials: int = typer.Option(None, "--trials", "-n", help="Trial budget of this job (default 1000, or no limit with --time); "
                               "rerunning the same command resumes it."),
    time_budget: str = typer.Option(None, "--time", help="Time budget of this job, e.g. 20m, 1.5h (resumed runs continue it)."),
    layout: str = typer.Option("auto", "--layout", help="auto | nhwc | nchw: the kernels to tune (as `package --layout`)."),
    records: Path = typer.Option(None, "--records", help="Records directory (default: the profile's in the user cache)."),
    list_tasks: bool = typer.Option(False, "--list-tasks", help="Only print the task table (name, FLOPs, weight)."),
    objective: str = typer.Option("sum", "--objective", help="sum | targets | geomean over the networks' latencies."),
    latency: list[str] = typer.Option([], "--latency", metavar="NAME=TARGET", help="Latency target NAME=25ms, or NAME=0.8x: a share of the "
                                      "model's own runtime (onnxruntime / LiteRT) timed on the device first (objective targets)."),
    baseline: bool = typer.Option(False, "--baseline", help="Time every model's own runtime on the device first "
                                  "(shown beside the estimates and in `records report`)."),
    weight: list[str] = typer.Option([], "--weight", metavar="NAME=W", help="Network weight NAME=2 (objective sum)."),
    search: str = typer.Option("evolutionary", "--search", help="evolutionary | droplet | hybrid (explore, then Droplet "
                               "descent) | gensor (Markov-chain walks over the schedule graph)."),
    rules: str = typer.Option("auto", "--rules", help="auto | generic: MetaSchedule's own schedule rules even where "
                              "edgetune has a micro-kernel sketch (to compare searches on the big spaces)."),
    explore: float = typer.Option(0.5, "--explore", help="hybrid: share of the budget explored before descent."),
    transfer: bool = typer.Option(False, "--transfer", help="Seed new tasks from same-structure records of other networks."),
    tracker: str = typer.Option(None, "--tracker", help="HOST:PORT of a tracker: measure on every board under --key."),
    key: str = typer.Option(None, "--key", help="Tracker key (default: the profile name)."),
    batch: int = typer.Option(32, "--batch", help="Candidates per measured batch."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds per candidate before it counts as failed: the cap, and the limit until a task's untuned kernel is timed (then 20x its time per run)."),
    early_stop: int = typer.Option(None, "--early-stop", help="Stop a task after this many batches without gain."),
    skip_tail: str = typer.Option("5%", "--skip-tail", help="Leave the smallest tasks at their default schedule while "
                                  "together they are at most this share of latency (0: tune every task)."),
    seed: int = typer.Option(0, "--seed", help="Search seed."),
    population: int = typer.Option(512, "--population", help="Evolutionary population (smaller: faster batches, less exploration)."),
    input_shape: list[str] = typer.Option([], "--input-shape", metavar="NAME=DIMS", help=INPUT_SHAPE_HELP + " A dimension may be a range, "
                                          "LO..HI: an ONNX model's kernels are tuned as the range package builds them, with "
                                          "symbolic shapes, timed at the --shape-weights lengths; with --buckets (and for TFLite) "
                                          "each bucket is tuned as network NET@LENGTH."),
    buckets: str = typer.Option("", "--buckets", help="A range's lengths, as `edgetune package --buckets` takes them: "
                                "tune the buckets (package with the same --buckets to apply the records)."),
    shape_weights: str = typer.Option("", "--shape-weights", help="A symbolic range's lengths and how much each counts, "
                                      "LENGTH=WEIGHT,... (e.g. 16=1,64=4,256=1): each kernel's time is the weighted mean of "
                                      "its times at these lengths (default: the range's end and halvings, weighted equally); "
                                      "with several ranges one value per range: 4x128=1,1x64=3."),
    bind: list[str] = typer.Option([], "--bind", metavar="NAME=VALUE", help=BIND_HELP),
    precision: str = typer.Option("fp32", "--precision", help=PRECISION_HELP),
    network_check: bool = typer.Option(True, "--network-check/--no-network-check",
                                       help="At the end, time each network packaged with and without its records and "
                                            "keep a record only where its kernel runs faster inside the network (a time "
                                            "budget keeps room for it)."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Auto-tune MODELs for a device: MetaSchedule search, candidates cross-compiled here and
    timed on the board; records persist, so `edgetune package` picks them up."""
    from ..tuning.options import parse_duration, parse_share
    from ..tuning.scheduler import parse_amounts, parse_targets
    from ..tuning.session import TuneOptions
    from ..tuning.session import list_tasks as list_task_table
    from ..tuning.session import tune as run_tune
    from ..tuning.tasks import networks_of
    from ..util import parse_bindings, parse_input_shapes, parse_lengths, parse_shape_weights

    shapes, lengths = parse_input_shapes(input_shape, ranges=True), parse_lengths(buckets, "--buckets")
    by_length = parse_shape_weights(shape_weights)
    names = tuple(n.name for n in networks_of(models, shapes, lengths, by_length))
    targets, relative = parse_targets(latency, names)
    opts = TuneOptions(
        models=tuple(models), device=device, trials=trials, records=records, objective=objective,
        time_s=parse_duration(time_budget) if time_budget else None, layout=layout, precision=precision,
        weights=parse_amounts(weight, names, "weight", unit=False), targets=targets, relative_targets=relative, baseline=baseline,
        search=search, rules=rules, explore=explore, transfer=transfer, batch=batch,
        tracker=_tracker_addr(tracker) if tracker else None, key=key, timeout=timeout, seed=seed,
        early_stop=early_stop, skip_tail=parse_share(skip_tail), input_shapes=shapes, buckets=lengths,
        shape_weights=by_length, population=population,
        bindings=parse_bindings(bind), network_check=network_check)
    if list_tasks:
        taskset, stats, peak = list_task_table(opts)
        _render_tasks(taskset.networks, taskset.rows(stats, generic=opts.rules == "generic"), json_out, peak)
        return
    with _live(not json_out) as (show, notice):
        result = run_tune(opts, show, notice)
    if json_out:
        print_json(result.to_json())
    else:
        _render_result(result)
    if result.interrupted:
        raise typer.Exit(130)


def _render_tasks(networks: tuple[str, ...], rows: list[dict[str, Any]], json_out: bool, peak: float | None) -> None:
    for r in rows:
        r["gflops"] = r["flops"] / r["best_ms"] / 1e6 if r["best_ms"] and r["flops"] else None
        r["peak_pct"] = 100 * r["gflops"] / peak if r["gflops"] and peak else None
    if json_out:
        print_json(rows)
        return
    table = Table("task", "kind", "rules", "GFLOP", *(f"weight {n}" if len(networks) > 1 else "weight" for n in networks),
                  "trials", "default ms", "best ms", "GFLOP/s", "% peak")
    for r in rows:
        table.add_row(r["task"], r["kind"], r["rules"], f"{r['flops'] / 1e9:.4f}", *(str(r["weight"][n]) for n in networks),
                      str(r["trials"]), _fmt(r["default_ms"]), _fmt(r["best_ms"]), _fmt(r["gflops"]), _pct(r["peak_pct"]))
    out.print(table)
    out.print(f"{len(rows)} tasks; {sum(1 for r in rows if r['best_ms'] is not None)} already have records"
              + (f"; peak {peak:.0f} GFLOP/s" if peak else ""))


def _fmt(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.4g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _table(snap: Any) -> Table:
    eta = f", about {snap.eta_s / 60:.0f} min left" if snap.eta_s else ""
    budget = f"{snap.spent}/{snap.budget} trials" if snap.budget is not None else f"{snap.spent} trials"
    rate = f", {snap.trials_per_min:.0f}/min" if snap.trials_per_min else ""
    title = f"{snap.device} via {snap.runner}: {budget}{rate}, {snap.spent_s / 60:.1f} min{eta}"
    table = Table("task", "kind", "trials", "default ms", "best ms", "speedup", "GFLOP/s", "% peak", "status",
                  title=title, title_justify="left")
    for t in snap.tasks:
        table.add_row(t.name, t.kind, str(t.trials), _fmt(t.default_ms), _fmt(t.best_ms),
                      f"{t.speedup:.1f}×" if t.speedup else "-", _fmt(t.gflops), _pct(t.peak_pct), t.status)
    for n in snap.networks:
        target = f"target {n.target_ms:.4g}{' met' if n.met else ''}" if n.target_ms is not None else ""
        if n.baseline_ms is not None:
            target += f"{'; ' if target else ''}{n.baseline_runtime} {n.baseline_ms:.4g}"
        table.add_row(f"[bold]network {n.name}[/]", "", "", _fmt(n.before_ms), _fmt(n.estimate_ms), "", "", "",
                      f"({target})" if target else "")
    if snap.message:
        table.caption = snap.message
    return table


@contextlib.contextmanager
def _live(enabled: bool) -> Iterator[tuple[Callable[[Any], None], Callable[[str], None]]]:
    """Live table on a TTY; one line per batch (at most every 10 s) otherwise; nothing with --json."""
    if not enabled:
        yield (lambda _s: None), (lambda _m: None)
        return
    if err.is_terminal:
        with Live(console=err, refresh_per_second=2, transient=True) as live:
            yield (lambda s: live.update(_table(s))), (lambda m: live.console.print(f"edgetune: {m}"))
        return
    last = [0.0]

    def line(s: Any) -> None:
        if time.monotonic() - last[0] >= 10 or (s.budget is not None and s.spent >= s.budget):
            last[0] = time.monotonic()
            nets = "  ".join(f"{n.name} {_fmt(n.estimate_ms)} ms" for n in s.networks)
            budget = f"{s.spent}/{s.budget}" if s.budget is not None else f"{s.spent}"
            err.print(f"edgetune: [{budget}] {s.spent_s:.0f}s  {nets}  {s.message}", markup=False)

    yield line, (lambda m: err.print(f"edgetune: {m}", markup=False))


def _render_result(result: Any) -> None:
    s = result.snapshot
    if result.interrupted:
        err.print(f"interrupted: {s.spent_now} trials of this run are saved in {result.records}; "
                  "run the same command to resume", markup=False)
    out.print(_table(s))
    job = f"{s.spent}/{s.budget}" if s.budget is not None else f"{s.spent}"
    rate = f", {s.trials_per_min:.0f} trials/min" if s.trials_per_min else ""
    out.print(f"stopped: {result.stop_reason}; {s.spent_now} trials this run ({job} for this job), "
              f"{result.failures} failed candidates, {s.elapsed_s / 60:.1f} min{rate}; records in {result.records}")
    if result.dropped:
        out.print(f"  {result.dropped} candidates of the last batch were not run: the time budget ran out first")
    for e in result.errors:
        out.print(f"  [yellow]a failed candidate:[/] {e}")
    for c in result.conditions:
        out.print(f"  [red]while measuring:[/] {c} — consider tuning again once that clears")
    for n in s.networks:
        if n.before_ms and n.estimate_ms:
            out.print(f"  {n.name}: estimated {n.before_ms:.4g} ms with default schedules → {n.estimate_ms:.4g} ms tuned "
                      f"({n.before_ms / n.estimate_ms:.1f}×)")
        if n.baseline_ms and n.estimate_ms:
            out.print(f"  {n.name}: {n.baseline_runtime} measured {n.baseline_ms:.4g} ms on {s.device}; the tuned estimate is "
                      f"{n.estimate_ms / n.baseline_ms:.2f}× of it (kernels only: `edgetune bench PKG --baseline MODEL` times both whole)")
    for c in result.checks:
        out.print(f"  {_check_line(c)}")
    if not result.interrupted:
        out.print("next: edgetune package MODEL --device ... -o OUT  (applies these records)")


def _check_line(c: Any) -> str:
    """One network's check, as a line: what it measured and which records it vetoed."""
    if c.error:
        return f"{c.network}: network check failed ({c.error}); records kept as they are"
    if c.skipped:
        return f"{c.network}: network check: {c.skipped}"
    line = (f"{c.network}: measured {c.default_ms:.4g} ms with default schedules, {c.tuned_ms:.4g} ms with every record")
    vetoed = c.vetoed
    if vetoed:
        line += (f"; {len(vetoed)} of {len(c.kernels)} record(s) vetoed (slower inside the network), "
                 f"{c.kept_ms:.4g} ms with the rest" if len(vetoed) < len(c.kernels) else
                 "; every record vetoed: the package keeps its default schedules")
    return line
