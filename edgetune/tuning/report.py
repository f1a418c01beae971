"""``edgetune records report``: a tuning report to look at rather than read.

Every tuning job leaves, next to its journal in ``RECORDS/runs/``, one progress line per batch
(job time, trials, each network's estimated latency) and its task table as it stood at the last
batch. The report draws, per network, the estimated latency against trials and against tuning
time with the untuned estimate, the target and the model's own runtime (when the job timed it)
as lines, and per task where the time is
(its share of the network's latency) beside where the trials went — as a PNG, or an HTML page
with the figures embedded and the task table.
"""

from __future__ import annotations

import base64
import html
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

TOP_TASKS = 15


@dataclass(frozen=True)
class ReportOptions:
    device: str
    output: Path  # .html or .png
    records: Path | None = None
    networks: tuple[str, ...] = ()  # only these (default: every network with progress)


@dataclass
class Job:
    key: str
    points: list[dict[str, Any]]
    tasks: list[dict[str, Any]]
    networks: list[str]


@dataclass(frozen=True)
class ReportResult:
    path: Path
    networks: tuple[str, ...]
    jobs: int
    figures: int = field(default=0)


def read_jobs(runs: Path) -> list[Job]:
    """Jobs with a progress log under ``runs`` (a torn last line, from a kill, is skipped)."""
    jobs = []
    for log in sorted(runs.glob("*.progress.jsonl")):
        key = log.name[: -len(".progress.jsonl")]
        points = []
        for line in log.read_text().splitlines():
            try:
                points.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        try:
            table = json.loads((runs / f"{key}.tasks.json").read_text())
        except (OSError, json.JSONDecodeError):
            table = {"tasks": [], "networks": sorted({n for p in points for n in p["networks"]})}
        if points:
            jobs.append(Job(key, points, table["tasks"], table["networks"]))
    return jobs


def build_report(opts: ReportOptions) -> ReportResult:
    """Write the report for ``opts.device``'s records; UsageError when there is nothing to show."""
    from ..devices import resolve_device
    from .records import default_dir

    if opts.output.suffix.lower() not in (".html", ".png"):
        raise UsageError(f"cannot write a report as '{opts.output.suffix}'", "name the output .html or .png")
    profile = resolve_device(opts.device)
    directory = opts.records or default_dir(profile.name)
    jobs = read_jobs(directory / "runs")
    if not jobs:
        raise UsageError(f"no tuning progress in {directory}",
                         "tune first (`edgetune tune MODEL --device ...`); jobs tuned before edgetune recorded progress have none")
    known = sorted({n for j in jobs for n in j.networks})
    unknown = sorted(set(opts.networks) - set(known))
    if unknown:
        raise UsageError(f"no tuning progress for network(s) {', '.join(unknown)}", f"networks with progress: {', '.join(known)}")
    wanted = list(opts.networks) or known
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise UsageError("`records report` draws with matplotlib, which is not installed",
                         "pip install 'edgetune[report]'") from err
    figures = [(name, _network_figure(plt, name, [j for j in jobs if name in j.networks])) for name in wanted]
    opts.output.parent.mkdir(parents=True, exist_ok=True)
    if opts.output.suffix.lower() == ".png":
        _stack_png(plt, [f for _n, f in figures], opts.output)
    else:
        opts.output.write_text(_html(profile.name, directory, figures, jobs, wanted))
    for _n, fig in figures:
        plt.close(fig)
    return ReportResult(opts.output, tuple(wanted), len(jobs), len(figures))


def _share_rows(job: Job, network: str) -> list[dict[str, Any]]:
    """The job's tasks in ``network``: share of its estimated latency, share of the trials."""
    rows = [t for t in job.tasks if t.get("calls", {}).get(network)]
    total = sum(t["calls"][network] * (t["best_ms"] or 0.0) for t in rows) or 1.0
    trials = sum(t["trials"] for t in rows) or 1
    out = [dict(t, time_pct=100 * t["calls"][network] * (t["best_ms"] or 0.0) / total, trial_pct=100 * t["trials"] / trials)
           for t in rows]
    return sorted(out, key=lambda r: -r["time_pct"])


def _network_figure(plt: Any, name: str, jobs: list[Job]) -> Any:
    fig, (by_trials, by_time, where) = plt.subplots(1, 3, figsize=(15, 4.2))
    fig.suptitle(f"network {name}", fontsize=12)
    top = 0.0
    for job in jobs:
        pts = [p for p in job.points if p["networks"].get(name) is not None]
        if not pts:
            continue
        label = f"job {job.key[:6]}"
        marker = "o" if len({p["trials"] for p in pts}) == 1 else None  # a job that measured nothing: one point
        by_trials.plot([p["trials"] for p in pts], [p["networks"][name] for p in pts], "-", color="tab:blue", label=label,
                       marker=marker)
        by_time.plot([p["t"] / 60 for p in pts], [p["networks"][name] for p in pts], "-", color="tab:blue", label=label)
        before = next((p["before"].get(name) for p in pts if p["before"].get(name)), None)
        target = next((p["targets"].get(name) for p in pts if p.get("targets", {}).get(name)), None)
        base = _baseline(pts, name)
        top = max([top, before or 0.0, target or 0.0, base["ms"] if base else 0.0] + [p["networks"][name] for p in pts])
        for ax in (by_trials, by_time):
            if before:
                ax.axhline(before, linestyle="--", color="tab:gray", label="untuned (default schedules)")
            if target:
                ax.axhline(target, linestyle="--", color="tab:red", label="target")
            if base:
                ax.axhline(base["ms"], linestyle=":", color="tab:purple", label=f"{base['runtime']} (measured)")
    for ax, xlabel in ((by_trials, "trials"), (by_time, "tuning time (min)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("estimated latency (ms)")
        ax.set_ylim(0, top * 1.15 or 1.0)
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        ax.legend(unique.values(), unique.keys(), fontsize=7)
    rows = _share_rows(jobs[-1], name)[:TOP_TASKS]
    ys = range(len(rows))
    where.barh([y - 0.2 for y in ys], [r["time_pct"] for r in rows], height=0.4, color="tab:orange", label="% of latency")
    where.barh([y + 0.2 for y in ys], [r["trial_pct"] for r in rows], height=0.4, color="tab:green", label="% of trials")
    where.set_yticks(list(ys), [r["name"][:32] for r in rows], fontsize=6)
    where.invert_yaxis()
    where.set_xlabel("%")
    where.set_title("where the time is / where the trials went", fontsize=9)
    where.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _baseline(points: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The network's own runtime as the job last timed it (``tune --baseline`` or a relative target)."""
    return next((p["baselines"][name] for p in reversed(points) if p.get("baselines", {}).get(name)), None)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _stack_png(plt: Any, figs: list[Any], out: Path) -> None:
    """One PNG: the networks' figures one below the other."""
    import matplotlib.image as mpimg

    images = [mpimg.imread(io.BytesIO(_png(f)), format="png") for f in figs]
    width = max(i.shape[1] for i in images)
    height = sum(i.shape[0] for i in images)
    canvas = plt.figure(figsize=(width / 100, height / 100), dpi=100)
    y = 0
    for img in images:
        ax = canvas.add_axes((0, 1 - (y + img.shape[0]) / height, img.shape[1] / width, img.shape[0] / height))
        ax.imshow(img)
        ax.axis("off")
        y += img.shape[0]
    canvas.savefig(out, dpi=100)
    plt.close(canvas)


def _html(profile: str, directory: Path, figures: list[tuple[str, Any]], jobs: list[Job], wanted: list[str]) -> str:
    esc = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>edgetune tuning report — {esc(profile)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}</style></head><body>",
             f"<h1>Tuning report: {esc(profile)}</h1>",
             f"<p>records {esc(str(directory))}, {len(jobs)} job(s), generated {time.strftime('%Y-%m-%d %H:%M')}</p>"]
    for name, fig in figures:
        last = [j for j in jobs if name in j.networks][-1]
        p = [q for q in last.points if q["networks"].get(name) is not None]
        summary = ""
        if p:
            before, now = p[-1]["before"].get(name), p[-1]["networks"][name]
            base = _baseline(p, name)
            summary = (f"<p>{p[-1]['trials']} trials in {p[-1]['t'] / 60:.1f} min: estimated {now:.3f} ms"
                       + (f", untuned {before:.3f} ms ({before / now:.2f}×)" if before else "")
                       + (f", {esc(base['runtime'])} {base['ms']:.3f} ms measured ({now / base['ms']:.2f}× of it)" if base else "")
                       + "</p>")
        img = base64.b64encode(_png(fig)).decode()
        parts += [f"<h2>Network {esc(name)}</h2>", summary, f"<img alt='{esc(name)}' src='data:image/png;base64,{img}'>",
                  "<table><tr><th>task</th><th>kind</th><th>calls</th><th>trials</th><th>default ms</th><th>best ms</th>"
                  "<th>speedup</th><th>% of latency</th><th>% of trials</th><th>GFLOP/s</th><th>status</th></tr>"]
        for r in _share_rows(last, name):
            parts.append("<tr>" + "".join(f"<td>{esc(str(v))}</td>" for v in (
                r["name"], r["kind"], r["calls"][name], r["trials"], _f(r["default_ms"]), _f(r["best_ms"]),
                _f(r["speedup"], 2), f"{r['time_pct']:.1f}", f"{r['trial_pct']:.1f}", _f(r["gflops"], 1), r["status"])) + "</tr>")
        parts.append("</table>")
    parts.append(f"<p>networks: {esc(', '.join(wanted))}</p></body></html>")
    return "\n".join(parts)


def _f(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"
