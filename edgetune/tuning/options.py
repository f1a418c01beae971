"""What ``edgetune tune`` is asked to do and what it reports: options, progress snapshots and
the result, as plain immutable data (no TVM)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

SEARCHES = ("evolutionary", "droplet", "hybrid", "gensor")
RULES = ("auto", "generic")
LAYOUTS = ("auto", "nhwc", "nchw")
DEFAULT_TRIALS = 1000  # when neither --trials nor --time is given


@dataclass(frozen=True)
class Baseline:
    """A network's own runtime (onnxruntime / LiteRT) timed on the tuning device."""

    runtime: str
    seconds: float  # p50


@dataclass(frozen=True)
class TuneOptions:
    """Everything ``edgetune tune`` needs; the CLI builds one of these."""

    models: tuple[Path, ...]
    device: str
    trials: int | None = None  # None: DEFAULT_TRIALS, or unlimited when a time budget is given
    time_s: float | None = None  # wall-clock budget of the job (resumed runs continue it)
    records: Path | None = None
    objective: str = "sum"
    weights: Mapping[str, float] = field(default_factory=dict)
    targets: Mapping[str, float] = field(default_factory=dict)  # network → seconds
    relative_targets: Mapping[str, float] = field(default_factory=dict)  # network → share of its baseline (0.8x)
    baseline: bool = False  # time every network's own runtime on the device first (relative targets do)
    baselines: Mapping[str, Baseline] = field(default_factory=dict)  # filled in by tune(): what was timed
    search: str = "evolutionary"
    explore: float = 0.5  # hybrid: share of the budget spent exploring before descent
    rules: str = "auto"  # generic: MetaSchedule's own rules even where a micro-kernel sketch applies
    transfer: bool = False
    batch: int = 32
    tracker: tuple[str, int] | None = None
    key: str | None = None
    timeout: float = 60.0
    seed: int = 0
    early_stop: int | None = None
    skip_tail: float = 0.05  # smallest tasks, together at most this share of latency, stay at their default
    input_shapes: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # a dimension may be a range (lo, hi)
    buckets: tuple[int, ...] = ()  # a range's bucket lengths (empty: one symbolic-shape library, ONNX)
    shape_weights: Mapping[int, float] = field(default_factory=dict)  # a symbolic range: length → weight
    bindings: Mapping[str, str] = field(default_factory=dict)  # --bind NAME=VALUE (NET:NAME scoped)
    population: int = 512
    builders: int = 0  # 0: one per host core
    layout: str = "auto"
    precision: str = "fp32"  # fp16: tune the float16 kernels (as `package --precision fp16` builds them)
    enumerate_limit: int = 256  # design spaces this small are measured whole (0: always search)
    network_check: bool = True  # at the end, veto records that make their network slower (.network_check)

    @property
    def trial_budget(self) -> int | None:
        """Trials this job may spend (None: no trial limit, the time budget decides)."""
        if self.trials is not None:
            return self.trials
        return None if self.time_s else DEFAULT_TRIALS

    def check(self) -> None:
        if not self.models:
            raise UsageError("no model given", "edgetune tune MODEL.onnx --device pi4")
        if (self.trials is not None and self.trials < 0) or self.batch < 1:
            raise UsageError("--trials must be ≥ 0 and --batch ≥ 1")
        if self.time_s is not None and self.time_s <= 0:
            raise UsageError("--time must be positive, e.g. --time 20m")
        if self.search not in SEARCHES:
            raise UsageError(f"unknown search '{self.search}'", f"choose one of {', '.join(SEARCHES)}")
        if self.precision not in ("fp32", "fp16"):
            raise UsageError(f"unknown precision '{self.precision}'", "choose one of fp32, fp16")
        if self.layout not in LAYOUTS:
            raise UsageError(f"unknown layout '{self.layout}'", f"choose one of {', '.join(LAYOUTS)}")
        if not 0.0 <= self.skip_tail < 1.0:
            raise UsageError("--skip-tail is a share of latency below 1, e.g. 5% or 0.05 (0 tunes every task)")
        if self.rules not in RULES:
            raise UsageError(f"unknown rules '{self.rules}'", f"choose one of {', '.join(RULES)}")
        if not 0.0 <= self.explore <= 1.0:
            raise UsageError("--explore is a fraction of the budget between 0 and 1")


def parse_share(text: str) -> float:
    """``5%`` or ``0.05`` → 0.05 (UsageError otherwise)."""
    value = text.strip()
    try:
        return float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError as err:
        raise UsageError(f"bad share '{text}'", "e.g. 5% or 0.05") from err


def parse_duration(text: str) -> float:
    """``20m``, ``90s``, ``1.5h`` or plain seconds → seconds (UsageError otherwise)."""
    value = text.strip().lower()
    scale = 1.0
    for suffix, factor in (("h", 3600.0), ("min", 60.0), ("m", 60.0), ("s", 1.0)):
        if value.endswith(suffix):
            value, scale = value[: -len(suffix)], factor
            break
    try:
        seconds = float(value) * scale
    except ValueError as err:
        raise UsageError(f"bad duration '{text}'", "e.g. --time 20m, --time 90s, --time 1.5h") from err
    if seconds <= 0:
        raise UsageError(f"--time must be positive, got '{text}'")
    return seconds


@dataclass(frozen=True)
class TaskRow:
    """One task in progress reports: trials, the default and the best time, how fast."""

    name: str
    kind: str
    trials: int
    best_ms: float | None
    default_ms: float | None
    status: str
    flops: float = 0.0
    peak_gflops: float | None = None

    @property
    def speedup(self) -> float | None:
        return self.default_ms / self.best_ms if self.best_ms and self.default_ms else None

    @property
    def gflops(self) -> float | None:
        return self.flops / self.best_ms / 1e6 if self.best_ms and self.flops else None

    @property
    def peak_pct(self) -> float | None:
        g = self.gflops
        return 100.0 * g / self.peak_gflops if g is not None and self.peak_gflops else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "trials": self.trials, "best_ms": self.best_ms,
                "default_ms": self.default_ms, "speedup": self.speedup, "status": self.status, "flops": self.flops,
                "gflops": self.gflops, "peak_pct": self.peak_pct}


@dataclass(frozen=True)
class NetworkRow:
    name: str
    before_ms: float | None  # all kernels at their default schedules
    estimate_ms: float | None  # all kernels at their best records
    target_ms: float | None
    baseline_ms: float | None = None  # the network's own runtime on the device (p50)
    baseline_runtime: str | None = None

    @property
    def met(self) -> bool | None:
        if self.target_ms is None or self.estimate_ms is None:
            return None
        return self.estimate_ms <= self.target_ms


@dataclass(frozen=True)
class Snapshot:
    """Where tuning stands; the progress callback gets one after every batch."""

    device: str
    runner: str
    budget: int | None  # trials (None: time budget only)
    time_budget_s: float | None
    spent: int  # trials of this job so far (earlier interrupted runs included)
    spent_now: int  # trials measured by this process
    elapsed_s: float  # this run
    spent_s: float  # this job, earlier runs included
    eta_s: float | None
    tasks: tuple[TaskRow, ...]
    networks: tuple[NetworkRow, ...]
    message: str = ""

    @property
    def trials_per_min(self) -> float | None:
        return self.spent_now / self.elapsed_s * 60 if self.elapsed_s > 0 and self.spent_now else None


@dataclass(frozen=True)
class TuneResult:
    """What a tuning run did, and where its records are."""

    snapshot: Snapshot
    records: Path
    stop_reason: str
    interrupted: bool
    failures: int
    transferred: dict[str, int]
    batches: dict[str, int]  # measured batches by how they were proposed
    errors: tuple[str, ...] = ()  # the first distinct candidate errors
    time_breakdown: dict[str, float] = field(default_factory=dict)  # seconds per phase of this run
    conditions: tuple[str, ...] = ()  # the measuring machine was throttled, hot or busy meanwhile
    dropped: int = 0  # candidates built but not run: the time budget's deadline came first
    checks: tuple[Any, ...] = ()  # .network_check.NetworkCheck per network (empty: not run)

    def to_json(self) -> dict[str, Any]:
        s = self.snapshot
        return {
            "device": s.device, "runner": s.runner, "records": str(self.records), "budget": s.budget,
            "time_budget_s": s.time_budget_s, "trials_total": s.spent, "trials_this_run": s.spent_now,
            "failed_candidates": self.failures, "dropped_at_deadline": self.dropped, "elapsed_s": round(s.elapsed_s, 1), "job_elapsed_s": round(s.spent_s, 1),
            "trials_per_min": round(s.trials_per_min, 1) if s.trials_per_min else None,
            "time_breakdown_s": {k: round(v, 2) for k, v in self.time_breakdown.items()},
            "stop_reason": self.stop_reason, "interrupted": self.interrupted, "conditions": list(self.conditions),
            "transferred": self.transferred, "batches": self.batches, "errors": list(self.errors),
            "networks": [{"name": n.name, "before_ms": n.before_ms, "estimate_ms": n.estimate_ms,
                          "target_ms": n.target_ms, "met": n.met, "baseline_ms": n.baseline_ms,
                          "baseline_runtime": n.baseline_runtime} for n in s.networks],
            "tasks": [t.to_json() for t in s.tasks],
            "network_checks": [c.to_json() for c in self.checks],
        }


Progress = Callable[[Snapshot], None]
Notice = Callable[[str], None]
