"""Shared by the search benchmarks: tuning runs recorded as latency-vs-trials curves, and plots."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import models  # noqa: E402,F401  (re-exported for the scripts)


def curve(opts: Any) -> tuple[list[tuple[int, list[float | None]]], Any]:
    """Run one tuning job; returns [(trials, per-network estimated latency ms)] after every batch,
    and the TuneResult."""
    from edgetune.tuning.session import tune

    points: list[tuple[int, list[float | None]]] = []

    def record(snap: Any) -> None:
        points.append((snap.spent, [n.estimate_ms for n in snap.networks]))

    result = tune(opts, record)
    return points, result


def at(points: list[tuple[int, list[float | None]]], trials: int, network: int = 0) -> float | None:
    """The estimate after at most ``trials`` trials (the last point not beyond it)."""
    value = None
    for spent, lat in points:
        if spent > trials:
            break
        if lat[network] is not None:
            value = lat[network]
    return value


def median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def plot(path: Path, title: str, series: dict[str, list[tuple[int, float]]], ylabel: str, hlines: dict[str, float] | None = None) -> Path | None:
    """A PNG of curves (trials on x); None when matplotlib is missing (pip install edgetune[bench])."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'edgetune[bench]')", file=sys.stderr)
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, pts in series.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, drawstyle="steps-post")
    for label, y in (hlines or {}).items():
        ax.axhline(y, linestyle="--", linewidth=0.8, color="grey")
        ax.annotate(label, (0, y), fontsize=8, color="grey")
    ax.set_xlabel("trials")
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
