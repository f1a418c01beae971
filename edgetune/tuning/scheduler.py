"""Where the next batch of trials goes: Ansor's gradient task scheduler over several networks.

Each network's latency is estimated as L_j = Σ_i w_ji · g_i (w_ji: how often network j calls
task i, g_i: the task's best measured time). An objective f(L_1..L_n) turns those into one
number; the scheduler picks the task whose next batch is expected to lower f the most:

    ∂f/∂t_i = (Σ_j ∂f/∂L_j · w_ji) · (α · backward_i + (1 − α) · forward_i)

with ``backward`` the latency drop over the last few batches of task i and ``forward`` an
optimistic guess (the task reaching the throughput of the best similar task, or improving as
1/t). Tasks nobody's objective cares about any more get a zero gradient and no trials, and the
smallest tasks of each network — those that together are at most ``skip_tail`` of its latency
(softmax, pooling, means, reshapes) — keep their measured default schedule: making all of them
free could not win more than that share, and their batches cost as much as a convolution's.
Pure Python: tested without TVM.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import UsageError

OBJECTIVES = ("sum", "targets", "geomean")


@dataclass(frozen=True)
class Network:
    """One network being tuned: task multiplicities, weight (``sum``) and target (``targets``)."""

    name: str
    tasks: Mapping[int, int]  # task index → calls per inference
    weight: float = 1.0
    target_s: float | None = None


@dataclass
class TaskState:
    """What the scheduler knows about one task."""

    name: str
    flops: float
    trials: int = 0
    best: float | None = None  # seconds
    baseline: float | None = None  # seconds, untuned kernel
    batches: int = 0
    history: list[float] = field(default_factory=list)  # best after each batch
    since_improved: int = 0
    stopped: str = ""  # why no more trials go here ("" = live)

    def stop(self, reason: str) -> None:
        """Take the task out of the rotation (the first reason is kept)."""
        if not self.stopped:
            self.stopped = reason

    @property
    def tag(self) -> str:
        """Similarity group: the fused op names without numbering (``fused_conv2d_add_relu``)."""
        return re.sub(r"\d+", "", self.name)


class Objective:
    """f(L) over network latencies and its partial derivatives ∂f/∂L_j."""

    def __init__(self, kind: str, networks: Sequence[Network]):
        if kind not in OBJECTIVES:
            raise UsageError(f"unknown objective '{kind}'", f"choose one of {', '.join(OBJECTIVES)}")
        if kind == "targets":
            missing = [n.name for n in networks if n.target_s is None]
            if missing:
                raise UsageError(f"objective 'targets' needs a latency target for {', '.join(missing)}",
                                 "add --latency NAME=25ms for each network")
        self.kind, self.networks = kind, list(networks)

    def value(self, latencies: Sequence[float]) -> float:
        if self.kind == "sum":
            return sum(n.weight * lat for n, lat in zip(self.networks, latencies))
        if self.kind == "targets":
            return sum(max(lat, n.target_s or 0.0) for n, lat in zip(self.networks, latencies))
        return sum(math.log(max(lat, 1e-12)) for lat in latencies) / len(latencies)

    def grad(self, latencies: Sequence[float]) -> list[float]:
        if self.kind == "sum":
            return [n.weight for n in self.networks]
        if self.kind == "targets":
            return [1.0 if lat > (n.target_s or 0.0) else 0.0 for n, lat in zip(self.networks, latencies)]
        return [1.0 / (len(latencies) * max(lat, 1e-12)) for lat in latencies]

    def met(self, latencies: Sequence[float]) -> bool:
        """True when tuning has nothing left to win (``targets``: every network meets its target)."""
        return self.kind == "targets" and all(lat <= (n.target_s or 0.0) for n, lat in zip(self.networks, latencies))


class Scheduler:
    """Chooses tasks for batches; updated with each batch's results."""

    def __init__(self, tasks: Sequence[TaskState], objective: Objective, *, window: int = 3,
                 alpha: float = 0.2, beta: float = 2.0, early_stop: int | None = None, skip_tail: float = 0.0):
        self.tasks, self.objective = list(tasks), objective
        self.window, self.alpha, self.beta, self.early_stop = window, alpha, beta, early_stop
        self.skip_tail = skip_tail

    # ---- estimates

    def latency(self, j: int) -> float | None:
        """Estimated latency of network j in seconds (None while one of its tasks is unmeasured)."""
        return self._network_total(j, "best")

    def baseline_latency(self, j: int) -> float | None:
        """Network j before tuning, from the untuned kernels' times."""
        return self._network_total(j, "baseline")

    def _network_total(self, j: int, field: str) -> float | None:
        """Σ calls × the tasks' ``field`` time over network j; None while a live task has none.
        A task stopped without a time (every candidate failed, or its whole space did) counts
        nothing: it cannot be tuned, and it must not stop the tuning of the others."""
        times = [(mult, getattr(self.tasks[i], field), self.tasks[i].stopped)
                 for i, mult in self.objective.networks[j].tasks.items()]
        if any(t is None and not stopped for _m, t, stopped in times):
            return None
        return sum(mult * t for mult, t, _s in times if t is not None)

    def latencies(self) -> list[float] | None:
        values = [self.latency(j) for j in range(len(self.objective.networks))]
        return None if any(v is None for v in values) else values  # type: ignore[return-value]

    def targets_met(self) -> bool:
        lat = self.latencies()
        return lat is not None and self.objective.met(lat)

    # ---- choice

    def next_task(self) -> int | None:
        """Index of the task for the next batch, or None when tuning should stop."""
        live = [i for i, t in enumerate(self.tasks) if not t.stopped]
        unmeasured = [i for i in live if self.tasks[i].best is None]
        if unmeasured:  # warm-up: every task measured once, heaviest first
            return max(unmeasured, key=lambda i: (self.tasks[i].flops * self._calls(i), -i))
        lat = self.latencies()
        if not live or lat is None or self.objective.met(lat):
            return None
        if self.skip_tail > 0:
            self._stop_tail(lat)
            live = [i for i in live if not self.tasks[i].stopped]
            if not live:
                return None
        chain = self._chain(lat)
        grads = {i: chain[i] * self._dg_dt(i) for i in live}
        if all(chain[i] == 0 for i in live):
            return None
        best = min(grads, key=lambda i: (grads[i], -chain[i], self.tasks[i].batches, i))
        if grads[best] >= 0:  # no gradient anywhere: spread trials over tasks that still matter
            return min((i for i in live if chain[i] > 0), key=lambda i: (self.tasks[i].batches, i))
        return best

    def tail(self, lat: Sequence[float]) -> set[int]:
        """Tasks too small to pay: in every network that calls them (and still wants to be faster),
        among its smallest tasks that together are at most ``skip_tail`` of its latency."""
        dl = self.objective.grad(lat)
        small: dict[int, bool] = {}
        for j, net in enumerate(self.objective.networks):
            if dl[j] <= 0 or lat[j] <= 0:
                continue
            share = {i: mult * (self.tasks[i].best or 0.0) / lat[j] for i, mult in net.tasks.items()}
            total = 0.0
            for i in sorted(share, key=lambda i: (share[i], i)):
                total += share[i]
                small[i] = small.get(i, True) and total <= self.skip_tail
        return {i for i, is_small in small.items() if is_small}

    def _stop_tail(self, lat: Sequence[float]) -> None:
        for i in self.tail(lat):
            self.tasks[i].stop(f"too small to pay (the smallest tasks, ≤ {self.skip_tail:.0%} of latency together)")

    def _calls(self, i: int) -> int:
        return sum(n.tasks.get(i, 0) for n in self.objective.networks) or 1

    def _chain(self, lat: Sequence[float]) -> dict[int, float]:
        dl = self.objective.grad(lat)
        chain = {i: 0.0 for i in range(len(self.tasks))}
        for j, net in enumerate(self.objective.networks):
            for i, mult in net.tasks.items():
                chain[i] += dl[j] * mult
        return chain

    def _dg_dt(self, i: int) -> float:
        """Expected change of task i's best time per batch (negative = improvement)."""
        t = self.tasks[i]
        assert t.best is not None
        hist = t.history
        backward = (t.best - hist[-self.window - 1]) / self.window if len(hist) > self.window else 0.0
        g_next = t.best - t.best / max(t.batches, 1)
        similar = [s for s in self.tasks if s.tag == t.tag and s.best and s.flops > 0]
        if t.flops > 0 and len(similar) > 1:
            best_rate = max(s.flops / s.best for s in similar)  # type: ignore[operator]
            g_next = min(g_next, self.beta * t.flops / best_rate)
        forward = g_next - t.best
        return self.alpha * backward + (1 - self.alpha) * forward

    # ---- updates

    def record(self, i: int, trials: int, batch_best: float | None, *, baseline: float | None = None) -> bool:
        """Account one measured batch of task i; returns True if it improved the task's best."""
        t = self.tasks[i]
        t.trials += trials
        t.batches += 1
        if baseline is not None and t.baseline is None:
            t.baseline = baseline
        improved = batch_best is not None and (t.best is None or batch_best < t.best * 0.995)
        if batch_best is not None and (t.best is None or batch_best < t.best):
            t.best = batch_best
        t.since_improved = 0 if improved else t.since_improved + 1
        if t.best is not None:
            t.history.append(t.best)
        if t.best is None and t.batches >= 3:
            t.stop("every candidate failed")
        if self.early_stop and t.since_improved >= self.early_stop:
            t.stop(f"no gain in {self.early_stop} batches")
        return improved


def parse_amounts(items: Sequence[str], names: Sequence[str], what: str, unit: bool) -> dict[str, float]:
    """``NAME=VALUE`` pairs (``--latency det=25ms``, ``--weight a=2``) keyed by network name.
    Latencies accept ``us``, ``ms`` (default) and ``s`` and come back in seconds."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in names:
            raise UsageError(f"bad --{what} '{item}'", f"write NAME=VALUE with NAME one of: {', '.join(names)}")
        try:
            out[name] = _seconds(value) if unit else float(value)
        except ValueError as err:
            raise UsageError(f"bad --{what} value '{value}'", "e.g. 25ms, 800us, 0.5s" if unit else "a number, e.g. 2") from err
        if out[name] <= 0:
            raise UsageError(f"--{what} for {name} must be positive")
    return out


def parse_targets(items: Sequence[str], names: Sequence[str]) -> tuple[dict[str, float], dict[str, float]]:
    """``--latency`` values: absolute (``det=25ms``, seconds back) and relative to the network's
    own runtime measured on the device (``det=0.8x``, the share back)."""
    relative = [i for i in items if i.strip().lower().endswith("x")]
    shares = parse_amounts([i.strip()[:-1] for i in relative], names, "latency", unit=False)
    seconds = parse_amounts([i for i in items if i not in relative], names, "latency", unit=True)
    both = sorted(set(shares) & set(seconds))
    if both:
        raise UsageError(f"two latency targets for {', '.join(both)}", "give each network one: NAME=25ms or NAME=0.8x")
    return seconds, shares


def _seconds(text: str) -> float:
    text = text.strip().lower()
    for suffix, scale in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text) * 1e-3
