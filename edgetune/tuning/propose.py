"""How the tuning loop proposes a batch for a task: evolutionary search from MetaSchedule's
context (warm-started from the records), a micro-kernel task's small space measured whole,
Gensor's walks, Droplet descent from the task's best, or schedules transferred from other
networks' records. :class:`Proposing` is one side of :class:`.loop.TuneLoop`."""

from __future__ import annotations

import logging
from typing import Any

from . import droplet, gensor

log = logging.getLogger(__name__)


class DropletState:
    """Per task: where the descent stands."""

    def __init__(self) -> None:
        self.visited: set[str] = set()
        self.center_secs: float | None = None
        self.converged_at: float | None = None  # best time when the last descent ended


class NotSearchableError(Exception):
    """A task no search of this job can tune (why: the message); it stops with that reason."""


class Proposing:
    """The proposing half of the tuning loop (its state lives on :class:`.loop.TuneLoop`)."""

    def _context(self, i: int) -> Any:
        if i not in self.contexts:
            wl = self.taskset.tasks[i].workload
            cfg = self.ms.SearchConfig(population_size=self.opts.population,
                                       init_min_unmeasured=min(50, self.opts.population // 4))
            seed = self.opts.seed * 7919 + i
            strategy = None  # MetaSchedule's evolutionary search
            if self.opts.search == "gensor":
                strategy = self.ms.gensor_search(gensor.Chain, droplet.moves, self.cost_model, seed,
                                                 lambda: self.deadline)
            self.contexts[i] = self.ms.TaskContext(wl, self.taskset.target, seed, self.threads, cfg, strategy,
                                                   generic=self.opts.rules == "generic")
        return self.contexts[i]

    def _propose(self, i: int) -> tuple[str, list[Any]]:
        """The next batch for task i: transferred schedules first (``--transfer``), then the
        whole of a small design space in cost-model order, else Droplet descent or evolutionary
        search."""
        ctx = self._context(i)
        if self.opts.transfer and i not in self.transfer_done:
            self.transfer_done.add(i)
            similar = self._transfer(i, ctx)
            if similar:
                self.transferred["similar"] += 1
                return "transfer", similar
        if i not in self.enumerated:
            self.enumerated[i] = self._enumerate(i, ctx)
        if self.enumerated[i] is not None:
            return "enumerated", self._next_enumerated(i, ctx)
        if self.taskset.tasks[i].workload.symbolic:
            raise NotSearchableError("a kernel of symbolic shape is tuned only where its design space is small "
                                      "enough to measure whole (edgetune's micro-kernel sketches)")
        if self._use_droplet(i):
            batch = self._droplet(i, ctx)
            if batch:
                return "droplet", batch
        return ("gensor" if self.opts.search == "gensor" else "evolutionary"), self._strategy(ctx)

    def _enumerate(self, i: int, ctx: Any) -> list[Any] | None:
        """The unmeasured points of task i's design space if it is small enough to measure whole."""
        if self.opts.enumerate_limit <= 0 or ctx.started:
            return None
        points = ctx.enumerate_space(self.opts.enumerate_limit)
        if points is None:
            return None
        measured = set(self.ms.measured_keys(self.database, self.taskset.tasks[i].workload.mod))
        return [c for c in points if ctx.key(c) not in measured]

    def _next_enumerated(self, i: int, ctx: Any) -> list[Any]:
        """The cost model's favourites among the space's unmeasured points (empty: all measured)."""
        pending = self.enumerated[i] or []
        if not pending:
            return []
        scores = ctx.predict(self.cost_model, pending)
        order = sorted(range(len(pending)), key=lambda n: -scores[n])
        take = set(order[: self.opts.batch])
        self.enumerated[i] = [c for n, c in enumerate(pending) if n not in take]
        return [pending[n] for n in order[: self.opts.batch]]

    def _strategy(self, ctx: Any) -> list[Any]:
        """The next batch of the task's MetaSchedule search strategy (evolutionary or Gensor)."""
        if not ctx.started:
            budget = self.opts.trial_budget or 100_000
            ctx.start(self.database, self.cost_model, max_trials=max(budget, 1) * 4, per_iter=self.opts.batch)
        return ctx.propose()

    def _use_droplet(self, i: int) -> bool:
        if self.opts.search in ("evolutionary", "gensor"):
            return False
        if self.opts.search == "hybrid" and not self._explored():
            return False
        d = self.droplets.setdefault(i, DropletState())
        best = self.scheduler.tasks[i].best
        return best is not None and (d.converged_at is None or best < d.converged_at)

    def _explored(self) -> bool:
        """hybrid: has the exploration share of the budget (trials, else time) been spent?"""
        budget = self.opts.trial_budget
        if budget is not None:
            return self.spent >= self.opts.explore * budget
        return self.seconds >= self.opts.explore * (self.opts.time_s or 0.0)

    def _droplet(self, i: int, ctx: Any) -> list[Any]:
        """One descent step: the untried one-notch neighbours of the task's best schedule, ranked
        by the cost model, at most one batch of them."""
        d = self.droplets[i]
        top = self.ms.top_traces(self.database, self.taskset.tasks[i].workload.mod, 1)
        if not top:
            return []
        trace, secs = top[0]
        d.center_secs = secs
        center = self.ms.decisions(trace)
        d.visited.add(droplet.key(center))
        found = []
        for idx, decision in droplet.moves(center):
            try:
                new = self.ms.with_decision(trace, idx, decision)
            except Exception:  # noqa: BLE001 — a move TVM rejects is no neighbour
                continue
            k = droplet.key(self.ms.decisions(new))
            if k in d.visited:
                continue
            cand = ctx.candidate_from_trace(new)
            if cand is not None:
                found.append((k, cand))
        if not found:
            d.converged_at = secs
            return []
        scores = ctx.predict(self.cost_model, [c for _k, c in found])
        ranked = sorted(zip(scores, range(len(found))), key=lambda p: -p[0])[: self.opts.batch]
        batch = []
        for _score, n in ranked:
            d.visited.add(found[n][0])
            batch.append(found[n][1])
        return batch

    def _transfer(self, i: int, ctx: Any) -> list[Any]:
        """Schedules of same-structure workloads from other networks, fitted to this task's loop
        extents; re-measured here before any search trial."""
        import functools

        donors = self.ms.similar_workloads(self.database, self.taskset.tasks[i].workload.mod, limit=4)
        provider = functools.partial(self.ms.fit_decisions, fit_tile=droplet.fit_tile)
        out = []
        for mod in donors:
            for trace, _secs in self.ms.top_traces(self.database, mod, 3):
                cand = ctx.candidate_from_trace(trace, provider=provider)
                if cand is not None:
                    out.append(cand)
        return out[: self.opts.batch]
