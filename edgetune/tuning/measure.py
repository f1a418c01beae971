"""How the tuning loop measures a batch: built here in the worker pool, timed by the runner
(this machine, a board, a tracker's boards) within the deadline and each candidate's timeout,
implausible times refused, and the batch committed to the records before the next one.
:class:`Measuring` is one side of :class:`.loop.TuneLoop`."""

from __future__ import annotations

import logging
import time
from typing import Any

from ..errors import RemoteError
from . import droplet
from .record_check import impossible_time, run_secs_problem

log = logging.getLogger(__name__)

Batch = list[tuple[int, Any]]  # (task index, candidate)


def last_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "unknown error"


def _run_failures(results: list[Any]) -> bool:
    """True when candidates failed at the runner (the board), not at the builder."""
    return any(r.error_msg and not str(r.error_msg).startswith("build:") for r in results)


class Measuring:
    """The measuring half of the tuning loop (its state lives on :class:`.loop.TuneLoop`)."""

    # a candidate is timed once only when that run is this much slower than its task's best
    HOPELESS = 3.0
    # a candidate may take this many times its task's untuned kernel, for each call the evaluator
    # makes (warm-up, probe, its runs), before it is killed
    SLOWEST = 20.0

    @property
    def budget_end(self) -> float | None:
        """When this run's share of the time budget ends, on ``time.monotonic``'s clock (None: no
        time budget): counted from the command's start (importing, extracting tasks, reaching the
        board are the user's time too), less what earlier runs of the job spent. The network
        check after the search ends by it."""
        if self.opts.time_s is None:
            return None
        return self.began + self.opts.time_s - self.seconds_before

    @property
    def deadline(self) -> float | None:
        """When the search stops: :attr:`budget_end` less the network check's share."""
        end = self.budget_end
        return None if end is None else end - self.reserve_s

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def candidate_timeout(self, i: int) -> float:
        """How long one candidate of task i may take: loading it, then its evaluator's calls at
        ``SLOWEST`` times the task's untuned kernel (``--timeout`` caps it; before the untuned
        kernel is measured, ``--timeout`` itself)."""
        base = self.scheduler.tasks[i].baseline
        if base is None:
            return self.opts.timeout
        calls = 2 + 3 * 2  # warm-up and probe, then up to number × repeat runs (x2: min_repeat_ms)
        lengths = max(1, len(self.taskset.tasks[i].workload.sizes))  # a symbolic kernel: that many times over
        return min(self.opts.timeout, self.runner.load_s + self.SLOWEST * base * calls * lengths)

    def _cutoff(self, i: int) -> float | None:
        best = self.scheduler.tasks[i].best
        return None if best is None else self.HOPELESS * best

    def _measure(self, batch: Batch) -> list[Any]:
        """Results of a batch, in order; None for a candidate the deadline dropped."""
        if self._past_deadline():
            return [None] * len(batch)
        fit = self._fit_before_deadline(len(batch))  # the rest would be built past the deadline: dropped
        return (self._build_and_run(batch[:fit]) if fit else []) + [None] * (len(batch) - fit)

    def _build_and_run(self, batch: Batch) -> list[Any]:
        ms = self.ms
        t0 = time.monotonic()
        with self._timed("build"):
            built = self.builder.build([ms.builder_input(c, self.taskset.target) for _i, c in batch])
        ok = [n for n, b in enumerate(built) if b.error_msg is None]
        results: list[Any] = [ms.runner_result(None, "build: " + last_line(b.error_msg)) for b in built]
        try:
            for b in built:
                for phase, secs in ms.artifact_timing(b.artifact_path).items():
                    self.timers[f"worker_{phase}"] += secs
            if ok and self._past_deadline():
                for n in ok:
                    results[n] = None
            elif ok:
                with self._timed("run"):
                    inputs = [ms.runner_input(built[n].artifact_path, self.runner.device_type, batch[n][1]) for n in ok]
                    timeout = max(self.candidate_timeout(batch[n][0]) for n in ok)
                    sizes = [self.taskset.tasks[batch[n][0]].workload.sizes for n in ok]
                    futures = self.runner.impl.submit(inputs, timeout, [self._cutoff(batch[n][0]) for n in ok], sizes)
                    for n, res in zip(ok, ms.collect(futures, self.deadline)):
                        results[n] = res
        finally:
            for b in built:
                ms.remove_artifact(b.artifact_path)
        self._measured_s += time.monotonic() - t0
        self._measured_n += len(batch)
        return results

    def _fit_before_deadline(self, n: int) -> int:
        """How many of ``n`` candidates can be built and timed before the deadline, at the
        wall time per candidate of the batches so far (all ``n`` before the first batch, or
        without a time budget): a batch's build is not cut once started."""
        if self.deadline is None or not self._measured_n:
            return n
        per = self._measured_s / self._measured_n
        return max(0, min(n, int((self.deadline - time.monotonic()) / max(per, 1e-6))))

    def _commit(self, i: int, kind: str, batch: list[Any], results: list[Any]) -> None:
        ms = self.ms
        ctx = self._context(i)
        task = self.taskset.tasks[i]
        results = [self._plausible(task.flops, r, self._peak(task)) for r in results]
        ms.commit(self.database, task.workload.mod, batch, results, self.taskset.target)
        if kind in ("evolutionary", "gensor"):
            ctx.notify(batch, results)
        with self._timed("cost_model"):
            ms.update_cost_model(self.cost_model, ctx, batch, results)
        times = [ms.mean_secs(r) for r in results]
        valid = [t for t in times if t is not None]
        self.failures += len(times) - len(valid)
        for r, t in zip(results, times):
            if t is None:
                msg = last_line(r.error_msg)
                log.debug("candidate failed: %s", r.error_msg)
                if msg not in self.errors and len(self.errors) < 5:
                    self.errors.append(msg)
        default = next((t for c, t in zip(batch, times) if ctx.is_default(c)), None)
        if default is not None and task.shash not in self.store.defaults():
            # the first measurement stays, as the scheduler keeps it: the default schedule drawn
            # again by the search (a small reduction's space) was measured again, and the store
            # and the job's report then told two different defaults
            self.store.record_defaults({task.shash: default})
        self.scheduler.record(i, len(batch), min(valid) if valid else None, baseline=default)
        if kind == "droplet":
            d = self.droplets[i]
            if not valid or d.center_secs is None or not droplet.improved(min(valid), d.center_secs):
                d.converged_at = self.scheduler.tasks[i].best
        self.spent_now += len(batch)

    def _peak(self, task: Any) -> float | None:
        """The GFLOP/s a perfect kernel of ``task`` reaches on the device: its fp32 peak, times
        the task's ``peak_factor`` (an int8 dot-product kernel: VNNI does 4× the multiply-adds)."""
        return self.peak_gflops * task.workload.peak_factor if self.peak_gflops else None

    def _plausible(self, flops: float, result: Any, peak: float | None) -> Any:
        """``result``, or a failure where its times cannot have been measured (not positive
        finite numbers, or faster than ``peak``: a board or tracker feeding forged timings
        would otherwise make its schedule "best")."""
        secs = [float(getattr(t, "value", t)) for t in result.run_secs] if result.run_secs is not None else None
        if secs is None:
            return result
        why = run_secs_problem(secs) or next((w for w in (impossible_time(flops, t, peak) for t in secs) if w), None)
        if why is None:
            return result
        log.warning("a measurement was refused as impossible: %s", why)
        return self.ms.runner_result(None, f"impossible timing: {why}")

    def _check_boards(self, results: list[Any]) -> None:
        """Whether the boards are still there: after candidates failed on the board side, and
        after every batch on a farm (the tracker forgets a dead board before anything fails)."""
        if self.runner.label == "local" or not (_run_failures(results) or self.runner.workers > 1):
            return
        alive = self.runner.alive()
        if alive == 0:
            raise RemoteError(f"{self.runner.label}: no board answers any more; the {self.spent_now} trials measured "
                              "so far are saved", "bring the board back and run the same command to resume")
        if alive < self.runner.workers:
            self.notice(f"warning: {self.runner.workers - alive} board(s) dropped out; continuing on {alive}")
            self.runner.workers = alive
