"""The tuning loop: batch by batch, propose → build → run → commit.

The first round measures every task's *default schedule* (what an untuned package runs) —
several tasks per batch, so a 60-task network is seen in a couple of batches, not 60 × 32
trials. From then on the scheduler gives each batch to the task whose next batch should lower
the objective most (time share × expected gain): trivial kernels keep their defaults. A batch
is proposed by evolutionary search (warm-started from the records), Gensor's walks, Droplet
descent, or schedule transfer; the host builds it for the board in parallel; a runner times it;
the batch is appended to the records before the next one starts. Interrupting loses at most the batch in flight;
running the same command again resumes with the rest of the budget (trials and time).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..profiles import Profile
from ..util import process_alive, to_ms, write_atomic
from .measure import Batch, Measuring, last_line
from .options import NetworkRow, Notice, Progress, Snapshot, TaskRow, TuneOptions, TuneResult
from .propose import DropletState, NotSearchableError, Proposing
from .records import RecordStore
from .runners import RunnerHandle
from .scheduler import Network, Objective, Scheduler, TaskState
from .tasks import TaskSet

log = logging.getLogger(__name__)


class TuneLoop(Proposing, Measuring):
    """One tuning run (build with :func:`edgetune.tuning.session.tune`)."""

    def __init__(self, opts: TuneOptions, profile: Profile, tasks: TaskSet, store: RecordStore,
                 runner: RunnerHandle, toolchain: tuple[str | None, Any], progress: Progress, notice: Notice,
                 began: float, peak_gflops: float | None = None, reserve_s: float = 0.0):
        from .._tvm import metaschedule as ms

        self.ms, self.opts, self.profile, self.taskset = ms, opts, profile, tasks
        self.store, self.runner, self.progress, self.notice = store, runner, progress, notice
        self.peak_gflops = peak_gflops
        self.reserve_s = reserve_s  # of a time budget: kept for the network check after the search
        self.began = began  # when the command started (``time.monotonic``): a time budget counts from it
        self.threads = os.cpu_count() or 1  # host threads for the search; the board's cores are in the target
        self.scheduler = self._scheduler()  # checks the options (may raise): before anything needs cleaning up
        self.database = ms.open_database(store.dir)
        self.cost_model = ms.make_cost_model(os.cpu_count() or 1)
        _remove_stale_runs()
        self.contexts: dict[int, Any] = {}
        self.droplets: dict[int, DropletState] = {}
        self.transfer_done: set[int] = set()
        self.choice: dict[str, str] = {}  # convolution signature → the variant being tuned
        self.enumerated: dict[int, list[Any] | None] = {}  # small design spaces: points left to measure
        self.journal = store.dir / "runs" / f"{self._job_key()}.json"
        self.spent_before, self.seconds_before = self._read_journal()
        self.spent_now = 0
        self.conditions: list[str] = []  # what made the measuring machine a bad judge meanwhile
        self._conditions_at = -1e9
        self._probe_failed = False
        self.failures = 0
        self.dropped = 0  # candidates the deadline cut off before they ran
        self._measured_s, self._measured_n = 0.0, 0  # wall time of the batches built and timed, and their size
        self.transferred = {"exact": 0, "similar": 0}
        self.start = time.monotonic()
        self.batches: dict[str, int] = {}
        self.errors: list[str] = []
        self.timers: dict[str, float] = defaultdict(float)
        self.stop_requested = False
        # last: the worker pool and the candidates' directory, which the run's end removes
        self.workdir = Path(tempfile.mkdtemp(prefix=f"edgetune-tune-{os.getpid()}-"))
        try:
            self.builder = ms.make_builder(toolchain[0], opts.builders or os.cpu_count() or 1, max(60.0, opts.timeout),
                                           toolchain[1], self.workdir)
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise

    # ---- setup

    def _scheduler(self) -> Scheduler:
        stats = self.store.stats()
        states = []
        for t in self.taskset.tasks:
            s = stats.get(t.shash)
            state = TaskState(t.name, t.flops)
            if s is not None:
                state.trials = s.trials
                state.best = s.best_ms / 1e3 if s.best_ms is not None else None
                state.baseline = s.default_ms / 1e3 if s.default_ms is not None else None
                if state.best is not None:
                    state.history.append(state.best)
                    state.batches = max(1, s.trials // self.opts.batch)
            states.append(state)
        names = self.taskset.networks
        for label, given in (("weight", self.opts.weights), ("latency", self.opts.targets)):
            unknown = sorted(set(given) - set(names))
            if unknown:
                raise UsageError(f"--{label} names no model: {', '.join(unknown)}", f"networks are: {', '.join(names)}")
        networks = [Network(n, self.taskset.network_tasks(j), self.opts.weights.get(n, 1.0), self.opts.targets.get(n))
                    for j, n in enumerate(names)]
        return Scheduler(states, Objective(self.opts.objective, networks), early_stop=self.opts.early_stop,
                         skip_tail=self.opts.skip_tail)

    def _job_key(self) -> str:
        ident = sorted(m.sha256 for m in self.taskset.models)
        key = [ident, self.opts.search, self.taskset.lowering] + ([self.opts.rules] if self.opts.rules != "auto" else [])
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]

    def _read_journal(self) -> tuple[int, float]:
        try:
            data = json.loads(self.journal.read_text())
            return int(data["spent"]), float(data.get("seconds", 0.0))
        except (OSError, ValueError, KeyError):
            return 0, 0.0

    def _write_progress(self) -> None:
        """For ``edgetune records report``: one line per batch (job time, trials, each network's
        estimate) appended to ``runs/JOB.progress.jsonl``, and the task table as it stands now
        (with each task's share of every network's estimate) in ``runs/JOB.tasks.json``."""
        snap = self.snapshot()
        point = {"t": round(self.seconds, 2), "trials": self.spent,
                 "networks": {n.name: n.estimate_ms for n in snap.networks},
                 "before": {n.name: n.before_ms for n in snap.networks},
                 "targets": {n.name: n.target_ms for n in snap.networks if n.target_ms is not None},
                 "baselines": {n.name: {"ms": n.baseline_ms, "runtime": n.baseline_runtime}
                               for n in snap.networks if n.baseline_ms is not None}}
        base = self.journal.with_suffix("")
        self.journal.parent.mkdir(exist_ok=True)
        with open(f"{base}.progress.jsonl", "a") as fh:
            fh.write(json.dumps(point) + "\n")
        nets = self.scheduler.objective.networks
        rows = []
        for i, row in enumerate(snap.tasks):
            calls = {n.name: n.tasks.get(i, 0) for n in nets}
            rows.append(row.to_json() | {"calls": calls})
        write_atomic(Path(f"{base}.tasks.json"), json.dumps({"profile": self.profile.name, "updated": time.time(),
                                                             "networks": [n.name for n in nets], "tasks": rows}))

    def _write_journal(self) -> None:
        self.journal.parent.mkdir(exist_ok=True)
        write_atomic(self.journal, json.dumps({"spent": self.spent, "seconds": self.seconds, "budget": self.opts.trial_budget,
                                               "time_budget_s": self.opts.time_s, "search": self.opts.search,
                                               "networks": list(self.taskset.networks), "updated": time.time()}))

    @property
    def spent(self) -> int:
        return self.spent_before + self.spent_now

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    @property
    def seconds(self) -> float:
        """Wall-clock seconds this job has tuned, earlier runs included."""
        return self.seconds_before + self.elapsed

    def _trials_left(self) -> int | None:
        budget = self.opts.trial_budget
        return None if budget is None else max(budget - self.spent, 0)

    def _budget_spent(self) -> str | None:
        if self._trials_left() == 0:
            return "budget spent"
        if self._past_deadline():
            return "time budget spent"
        return None

    # ---- run

    def run(self) -> TuneResult:
        reason = "budget spent"
        if self.spent_before:
            left = f"{self.opts.trial_budget} trials" if self.opts.trial_budget is not None else ""
            if self.opts.time_s:
                left += f"{' / ' if left else ''}{self.opts.time_s / 60:.0f} min"
            self.notice(f"resuming: {self.spent_before} trials ({self.seconds_before / 60:.1f} min) of {left} "
                        "already spent on this job")
        known = sum(1 for t in self.scheduler.tasks if t.best is not None)
        if known:
            self.transferred["exact"] = known
            self.notice(f"{known} of {len(self.scheduler.tasks)} tasks already have records (reused as they are)")
        try:
            with self._graceful_stop():
                self._warm_cost_model()
                reason = self._loop()
        except KeyboardInterrupt:
            reason = "interrupted"
        finally:
            for ctx in self.contexts.values():
                with contextlib.suppress(Exception):
                    ctx.stop()
            self.builder.close()
            shutil.rmtree(self.workdir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self._write_progress()  # where the run ended (also a run that measured nothing: its baselines)
        return TuneResult(self.snapshot(reason), self.store.dir, reason, reason == "interrupted", self.failures,
                          self.transferred, dict(self.batches), tuple(self.errors), dict(self.timers),
                          tuple(self.conditions), self.dropped)

    def _warm_cost_model(self, per_task: int = 64) -> None:
        """On a resumed or shared database, train the cost model on the records first, so the
        search does not start blind."""
        with_records = [i for i, t in enumerate(self.scheduler.tasks) if t.best is not None and t.trials > 1
                        and not self.taskset.tasks[i].workload.symbolic]  # (no cost model there: update_cost_model)
        if not with_records:
            return
        self.notice(f"training the cost model on the records of {len(with_records)} task(s)")
        with self._timed("cost_model"):
            for i in with_records:
                ctx = self._context(i)
                measured = self.ms.top_traces(self.database, self.taskset.tasks[i].workload.mod, per_task)
                pairs = [(ctx.candidate_from_trace(trace), secs) for trace, secs in measured]
                cands = [c for c, _ in pairs if c is not None]
                results = [self.ms.runner_result([secs], None) for c, secs in pairs if c is not None]
                self.ms.update_cost_model(self.cost_model, ctx, cands, results)

    @contextlib.contextmanager
    def _graceful_stop(self) -> Iterator[None]:
        """Ctrl-C (or SIGTERM) ends the run after the batch in flight is measured and saved (the
        build/run workers never see the signal: ``shielded_pool``). A second Ctrl-C stops at
        once, dropping that batch."""
        self.stop_requested = False
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, _frame: Any) -> None:
            if self.stop_requested:
                raise KeyboardInterrupt
            self.stop_requested = True
            self.notice("stopping after the batch in flight (Ctrl-C again to stop at once)")

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    @contextlib.contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timers[phase] += time.perf_counter() - start

    def _loop(self) -> str:
        self.progress(self.snapshot("starting"))
        self._check_conditions(force=True)
        self._choose_variants()
        for batch in self._default_batches():
            reason = self._budget_spent() or ("interrupted" if self.stop_requested else None)
            if reason:
                return reason
            if not self._run_batch("default", batch):
                return "interrupted"
        self._choose_variants()
        while not (reason := self._budget_spent()):
            if self.stop_requested:
                return "interrupted"
            self._check_conditions()
            i = self.scheduler.next_task()
            if i is None:
                return ("all latency targets met" if self.scheduler.targets_met()
                        else "no task left that pays (each is measured out or among the smallest)")
            try:
                with self._timed("propose"):
                    kind, cands = self._propose(i)
            except NotSearchableError as why:
                self.scheduler.tasks[i].stop(str(why))
                continue
            except Exception as err:  # noqa: BLE001 — TVM failing on one task's design space is data
                log.debug("proposing for %s failed", self.scheduler.tasks[i].name, exc_info=True)
                self.scheduler.tasks[i].stop(f"its design space failed ({last_line(str(err))[:120]})")
                continue
            left = self._trials_left()
            cands = cands if left is None else cands[:left]
            if not cands:
                if self._past_deadline():
                    continue  # the search gave up at the deadline: the task is not exhausted
                self.scheduler.tasks[i].stop({"enumerated": "all of its design space measured",
                                              "gensor": "its chain finds no new absorbing state"}.get(
                                                 kind, "search space exhausted"))
                continue
            if not self._run_batch(kind, [(i, c) for c in cands]):
                return "interrupted"
        return reason

    CONDITIONS_EVERY_S = 300.0

    def _check_conditions(self, force: bool = False) -> None:
        """Every few minutes: is the measuring machine throttled, hot or busy? Then its times
        are a bad judge: say so (once per finding) and keep it in the summary."""
        if not force and time.monotonic() - self._conditions_at < self.CONDITIONS_EVERY_S:
            return
        self._conditions_at = time.monotonic()
        try:
            found = [w["text"] for w in self.runner.conditions() if w["level"] == "bad"]
        except Exception as err:  # noqa: BLE001 — a failed probe must not stop tuning
            if not self._probe_failed:
                self._probe_failed = True
                self.notice(f"could not read the state of {self.runner.label} ({err}); tuning goes on")
            return
        for text in found:
            if text not in self.conditions:
                self.conditions.append(text)
                self.notice(f"warning: measuring on {self.runner.label}: {text}; its timings are not trustworthy "
                            "until that clears")

    def _choose_variants(self) -> None:
        """Kernels with variants (a convolution's direct and Winograd kernels, a symbolic
        kernel's register-tile heights): keep tuning the fastest (by what was measured so far;
        the untuned build's until all are); the others stop drawing trials and leave the
        networks' latency estimates."""
        from .tasks import choose_variants

        alternatives = self.taskset.alternatives()
        if not alternatives:
            return
        rows = [t.to_json() | {"signature": task.workload.signature, "variant": task.workload.variant,
                               "default_variant": task.workload.default_variant, "calls": sum(task.calls)}
                for t, task in zip(self.snapshot().tasks, self.taskset.tasks)]
        self.choice = choose_variants(rows, self.taskset.default_variant)
        objective = self.scheduler.objective
        objective.networks = [Network(n.name, self.taskset.network_tasks(j, self.choice), n.weight, n.target_s)
                              for j, n in enumerate(objective.networks)]
        for sig, variants in alternatives.items():
            chosen = self.choice[sig]
            for variant, indices in variants.items():
                for i in indices:
                    state = self.scheduler.tasks[i]
                    if state.stopped.startswith("its ") and state.stopped.endswith(" variant is faster"):
                        state.stopped = ""  # (the choice may have changed since)
                    if variant != chosen:
                        state.stop(f"its {chosen} variant is faster")

    def _default_batches(self) -> Iterator[Batch]:
        """The first round: every task without records measured at its default schedule,
        heaviest first, several tasks per batch (each is one trial)."""
        order = sorted((i for i, t in enumerate(self.scheduler.tasks) if t.trials == 0),
                       key=lambda i: -self.taskset.tasks[i].flops * max(sum(self.taskset.tasks[i].calls), 1))
        batch: Batch = []
        for i in order:
            with self._timed("propose"):
                cand = self._context(i).default_candidate()
            if cand is None:
                continue  # GPU: the task's first batch is an evolutionary one
            batch.append((i, cand))
            if len(batch) >= self.opts.batch:
                yield batch
                batch = []
        if batch:
            yield batch

    def _run_batch(self, kind: str, batch: Batch) -> bool:
        """Measure and commit one batch; False when the run was interrupted meanwhile (the batch
        is saved all the same: its workers were not interrupted). Candidates the time budget's
        deadline cut off before they ran are dropped: not measured, not failed, not counted."""
        results = self._measure(batch)
        kept = [n for n, r in enumerate(results) if r is not None]
        if len(kept) < len(batch):
            self.dropped += len(batch) - len(kept)
            batch, results = [batch[n] for n in kept], [results[n] for n in kept]
            if not batch:
                return not self.stop_requested
        by_task: dict[int, list[int]] = defaultdict(list)
        for n, (i, _c) in enumerate(batch):
            by_task[i].append(n)
        with self._timed("commit"):
            for i, idx in by_task.items():
                self._commit(i, kind, [batch[n][1] for n in idx], [results[n] for n in idx])
            self.batches[kind] = self.batches.get(kind, 0) + 1
            self._write_journal()
            self._write_progress()
        names = sorted({self.scheduler.tasks[i].name for i in by_task})
        label = names[0] if len(names) == 1 else f"{len(names)} tasks"
        self.progress(self.snapshot(f"{label}: {kind} batch of {len(batch)}"))
        self._check_boards(results)
        return not self.stop_requested

    # ---- reporting

    def snapshot(self, message: str = "") -> Snapshot:
        sched = self.scheduler
        rows = tuple(TaskRow(t.name, task.workload.kind, t.trials, to_ms(t.best), to_ms(t.baseline), t.stopped or "live",
                             task.flops, self._peak(task))
                     for t, task in zip(sched.tasks, self.taskset.tasks))
        base = self.opts.baselines
        nets = tuple(NetworkRow(n.name, to_ms(sched.baseline_latency(j)), to_ms(sched.latency(j)), to_ms(n.target_s),
                                to_ms(base[n.name].seconds) if n.name in base else None,
                                base[n.name].runtime if n.name in base else None)
                     for j, n in enumerate(sched.objective.networks))
        return Snapshot(self.profile.name, self.runner.label, self.opts.trial_budget, self.opts.time_s, self.spent,
                        self.spent_now, self.elapsed, self.seconds, self._eta(), rows, nets, message)

    def _eta(self) -> float | None:
        estimates = []
        left = self._trials_left()
        if left is not None and self.spent_now:
            estimates.append(self.elapsed / self.spent_now * left)
        if self.opts.time_s is not None:
            estimates.append(max(self.opts.time_s - self.seconds, 0.0))
        return min(estimates) if estimates else None


def _remove_stale_runs() -> None:
    """Candidate directories of tuning runs that were killed (SIGKILL leaves them behind)."""
    import re

    for path in Path(tempfile.gettempdir()).glob("edgetune-tune-*"):
        match = re.match(r"^edgetune-tune-(\d+)-", path.name)
        if match and path.is_dir() and not process_alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)


