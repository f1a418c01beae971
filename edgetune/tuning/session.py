"""``edgetune tune``: the tuning loop.

Batch by batch: the scheduler picks a task, a search strategy proposes candidates (evolutionary
search, Droplet descent, transferred schedules, or the untuned kernel as a baseline), the host
builds them for the board in parallel, a runner times them (locally, on one board over an SSH
tunnel, or on a farm behind a tracker), and the batch is appended to the records before the next
one starts. Interrupting loses at most the batch in flight; running the same command again
resumes with the rest of the budget.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _tvm
from ..errors import EdgetuneError, RemoteError, UsageError
from ..profiles import Profile
from . import droplet
from .records import RecordStore, default_dir
from .scheduler import Network, Objective, Scheduler, TaskState
from .tasks import TaskSet, build_task_set

log = logging.getLogger(__name__)

SEARCHES = ("evolutionary", "droplet", "hybrid")


@dataclass(frozen=True)
class TuneOptions:
    """Everything ``edgetune tune`` needs; the CLI builds one of these."""

    models: tuple[Path, ...]
    device: str
    trials: int = 1000
    records: Path | None = None
    objective: str = "sum"
    weights: Mapping[str, float] = field(default_factory=dict)
    targets: Mapping[str, float] = field(default_factory=dict)  # network → seconds
    search: str = "evolutionary"
    explore: float = 0.5  # hybrid: share of the budget spent exploring before descent
    transfer: bool = False
    batch: int = 32
    tracker: tuple[str, int] | None = None
    key: str | None = None
    timeout: float = 60.0
    seed: int = 0
    early_stop: int | None = None
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    population: int = 512
    builders: int = 0  # 0: one per host core

    def check(self) -> None:
        if not self.models:
            raise UsageError("no model given", "edgetune tune MODEL.onnx --device pi4")
        if self.trials < 0 or self.batch < 1:
            raise UsageError("--trials must be ≥ 0 and --batch ≥ 1")
        if self.search not in SEARCHES:
            raise UsageError(f"unknown search '{self.search}'", f"choose one of {', '.join(SEARCHES)}")
        if not 0.0 <= self.explore <= 1.0:
            raise UsageError("--explore is a fraction of the budget between 0 and 1")


@dataclass(frozen=True)
class TaskRow:
    name: str
    trials: int
    best_ms: float | None
    baseline_ms: float | None
    status: str

    @property
    def speedup(self) -> float | None:
        return self.baseline_ms / self.best_ms if self.best_ms and self.baseline_ms else None


@dataclass(frozen=True)
class NetworkRow:
    name: str
    before_ms: float | None
    estimate_ms: float | None
    target_ms: float | None

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
    budget: int
    spent: int  # trials of this job so far (earlier interrupted runs included)
    spent_now: int  # trials measured by this process
    elapsed_s: float
    eta_s: float | None
    tasks: tuple[TaskRow, ...]
    networks: tuple[NetworkRow, ...]
    message: str = ""


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

    def to_json(self) -> dict[str, Any]:
        s = self.snapshot
        return {
            "device": s.device, "runner": s.runner, "records": str(self.records), "budget": s.budget,
            "trials_total": s.spent, "trials_this_run": s.spent_now, "failed_candidates": self.failures,
            "elapsed_s": round(s.elapsed_s, 1), "stop_reason": self.stop_reason, "interrupted": self.interrupted,
            "transferred": self.transferred, "batches": self.batches, "errors": list(self.errors),
            "networks": [{"name": n.name, "before_ms": n.before_ms, "estimate_ms": n.estimate_ms,
                          "target_ms": n.target_ms, "met": n.met} for n in s.networks],
            "tasks": [{"name": t.name, "trials": t.trials, "best_ms": t.best_ms, "baseline_ms": t.baseline_ms,
                       "speedup": t.speedup, "status": t.status} for t in s.tasks],
        }


Progress = Callable[[Snapshot], None]


# ---------------------------------------------------------------- entry points


def list_tasks(opts: TuneOptions) -> tuple[TaskSet, dict[str, Any]]:
    """The task table only (``--list-tasks``): tasks and what the records hold for them."""
    from ..package import resolve_device

    profile = resolve_device(opts.device)
    tasks = build_task_set(opts.models, profile, opts.input_shapes)
    store = RecordStore(opts.records or default_dir(profile.name), profile.name)
    return tasks, store.stats() if store.exists() else {}


def tune(opts: TuneOptions, progress: Progress = lambda _s: None, notice: Callable[[str], None] = lambda _m: None) -> TuneResult:
    """Tune ``opts.models`` for ``opts.device``; see the module docstring.

    Raises UsageError, ProfileError, ModelError, ToolchainError or RemoteError (a board that
    cannot be reached at the start, or every board lost mid-run, after saving what was measured).
    """
    from ..build import check_toolchain
    from ..package import resolve_device

    opts.check()
    profile = resolve_device(opts.device)
    cc, cuda = check_toolchain(profile)
    notice(f"importing {len(opts.models)} model(s) and extracting tasks for {profile.name}")
    tasks = build_task_set(opts.models, profile, opts.input_shapes)
    store = RecordStore(opts.records or default_dir(profile.name), profile.name)
    with store.lock():
        store.prepare(_tvm.target_to_json(tasks.target))
        with open_runner(opts, profile, notice) as runner:
            loop = TuneLoop(opts, profile, tasks, store, runner, (cc, cuda), progress, notice)
            return loop.run()


# ---------------------------------------------------------------- runners


@dataclass
class RunnerHandle:
    """A runner plus what the loop needs to know about it."""

    impl: Any
    label: str
    device_type: str
    alive: Callable[[], int]  # how many boards still answer (local: 1)
    workers: int = 1


@contextlib.contextmanager
def open_runner(opts: TuneOptions, profile: Profile, notice: Callable[[str], None]) -> Iterator[RunnerHandle]:
    """Local runs for the host profile; one board over an SSH tunnel; or a tracker farm."""
    from .._tvm import metaschedule as ms

    evaluator = ms.Evaluator()
    device_type = "cuda" if profile.runtime == "cuda" else "cpu"
    if opts.tracker:
        yield from _tracker_runner(opts, profile, evaluator, device_type, notice)
        return
    board = _board(opts.device)
    if board is None:
        if not profile.is_native:
            raise UsageError(f"profile '{profile.name}' ({profile.arch}) cannot be measured on this host",
                             "tune on a board: `edgetune devices add NAME ...` then --device NAME, or --tracker HOST:PORT")
        runner = ms.LocalPoolRunner(evaluator, opts.timeout)
        try:
            yield RunnerHandle(runner, "local", device_type, lambda: 1)
        finally:
            runner.close()
        return
    yield from _board_runner(opts, board, evaluator, device_type, notice)


def _board(device: str) -> Any:
    from ..remote.inventory import load_inventory

    return load_inventory().get(device)


def _board_runner(opts: TuneOptions, board: Any, evaluator: Any, device_type: str,
                  notice: Callable[[str], None]) -> Iterator[RunnerHandle]:
    from .._tvm import metaschedule as ms
    from ..remote.board import RemoteBoard
    from ..remote.rpc import board_server

    with RemoteBoard(board) as rb:
        notice(f"starting the RPC server on {board.name}")
        with board_server(rb) as server:
            endpoint = ms.RpcEndpoint("127.0.0.1", server.local_port)
            runner = ms.PoolRunner(endpoint, evaluator, 1, opts.timeout)

            def alive() -> int:
                return 1 if ms.probe(endpoint, 15.0) else 0

            try:
                yield RunnerHandle(runner, f"board {board.name}", device_type, alive)
            finally:
                runner.close()


def _tracker_runner(opts: TuneOptions, profile: Profile, evaluator: Any, device_type: str,
                    notice: Callable[[str], None]) -> Iterator[RunnerHandle]:
    from .._tvm import metaschedule as ms
    from ..remote.rpc import tracker_status

    host, port = opts.tracker  # type: ignore[misc]
    key = opts.key or profile.name

    def servers() -> int:
        try:
            return int(tracker_status(host, port).get("servers", {}).get(key, 0))
        except EdgetuneError:
            return 0

    count = servers()
    known = [count]

    def alive() -> int:
        """Servers under the key now; a busy one re-registers a moment after its session ends."""
        seen = servers()
        for wait in (2.0, 4.0):
            if seen >= known[0]:
                break
            time.sleep(wait)
            seen = max(seen, servers())
        known[0] = seen
        return seen

    if count == 0:
        raise RemoteError(f"no board is registered under key '{key}' at {host}:{port}",
                          "register boards with `edgetune tracker attach BOARD...`, or give --key")
    notice(f"{count} board(s) under '{key}' at {host}:{port}")
    runner = ms.PoolRunner(ms.RpcEndpoint(host, port, key, tracker=True), evaluator, count, opts.timeout)
    try:
        yield RunnerHandle(runner, f"tracker {host}:{port} key {key}", device_type, alive, count)
    finally:
        runner.close()


# ---------------------------------------------------------------- the loop


class DropletState:
    """Per task: where the descent stands."""

    def __init__(self) -> None:
        self.visited: set[str] = set()
        self.center_secs: float | None = None
        self.converged_at: float | None = None  # best time when the last descent ended


class TuneLoop:
    """One tuning run (build with :func:`tune`)."""

    def __init__(self, opts: TuneOptions, profile: Profile, tasks: TaskSet, store: RecordStore,
                 runner: RunnerHandle, toolchain: tuple[str | None, Any], progress: Progress,
                 notice: Callable[[str], None]):
        from .._tvm import metaschedule as ms

        self.ms, self.opts, self.profile, self.taskset = ms, opts, profile, tasks
        self.store, self.runner, self.progress, self.notice = store, runner, progress, notice
        self.threads = os.cpu_count() or 1  # host threads for the search; the board's cores are in the target
        self.database = ms.open_database(store.dir)
        self.cost_model = ms.make_cost_model(os.cpu_count() or 1)
        self.builder = ms.make_builder(toolchain[0], opts.builders or os.cpu_count() or 1, max(60.0, opts.timeout),
                                       toolchain[1])
        self.contexts: dict[int, Any] = {}
        self.droplets: dict[int, DropletState] = {}
        self.scheduler = self._scheduler()
        self.journal = store.dir / "runs" / f"{self._job_key()}.json"
        self.spent_before = self._read_journal()
        self.spent_now = 0
        self.failures = 0
        self.transferred = {"exact": 0, "similar": 0}
        self.start = time.monotonic()
        self.batches: dict[str, int] = {}
        self.errors: list[str] = []
        self.stop_requested = False

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
                state.baseline = s.baseline_ms / 1e3 if s.baseline_ms is not None else None
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
        return Scheduler(states, Objective(self.opts.objective, networks), early_stop=self.opts.early_stop)

    def _job_key(self) -> str:
        ident = sorted(m.sha256 for m in self.taskset.models)
        return hashlib.sha256(json.dumps([ident, self.opts.search]).encode()).hexdigest()[:16]

    def _read_journal(self) -> int:
        try:
            return int(json.loads(self.journal.read_text())["spent"])
        except (OSError, ValueError, KeyError):
            return 0

    def _write_journal(self) -> None:
        self.journal.parent.mkdir(exist_ok=True)
        tmp = self.journal.with_suffix(".tmp")
        tmp.write_text(json.dumps({"spent": self.spent, "budget": self.opts.trials, "search": self.opts.search,
                                   "networks": list(self.taskset.networks), "updated": time.time()}))
        os.replace(tmp, self.journal)

    @property
    def spent(self) -> int:
        return self.spent_before + self.spent_now

    # ---- run

    def run(self) -> TuneResult:
        reason, interrupted = "budget spent", False
        if self.spent_before:
            self.notice(f"resuming: {self.spent_before} of {self.opts.trials} trials already spent on this job")
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
        interrupted = reason == "interrupted"
        return TuneResult(self.snapshot(reason), self.store.dir, reason, interrupted, self.failures, self.transferred,
                          dict(self.batches), tuple(self.errors))

    def _warm_cost_model(self, per_task: int = 64) -> None:
        """On a resumed or shared database, train the cost model on the records first, so the
        search does not start blind."""
        with_records = [i for i, t in enumerate(self.scheduler.tasks) if t.best is not None and t.trials > 1]
        if not with_records:
            return
        self.notice(f"training the cost model on the records of {len(with_records)} task(s)")
        for i in with_records:
            ctx = self._context(i)
            measured = self.ms.top_traces(self.database, self.taskset.tasks[i].workload.mod, per_task)
            pairs = [(ctx.candidate_from_trace(trace), secs) for trace, secs in measured]
            cands = [c for c, _ in pairs if c is not None]
            results = [self.ms.runner_result([secs], None) for c, secs in pairs if c is not None]
            self.ms.update_cost_model(self.cost_model, ctx, cands, results)

    @contextlib.contextmanager
    def _graceful_stop(self) -> Iterator[None]:
        """Ctrl-C (or SIGTERM) ends the run after dropping the batch in flight: the terminal's
        Ctrl-C also reaches the build/run workers, so that batch's failures are not real. A
        second Ctrl-C stops at once."""
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

    def _loop(self) -> str:
        self.progress(self.snapshot("starting"))
        while self.spent < self.opts.trials:
            if self.stop_requested:
                return "interrupted"
            i = self.scheduler.next_task()
            if i is None:
                return "all latency targets met" if self.scheduler.targets_met() else "no task left to improve"
            kind, batch = self._propose(i)
            batch = batch[: self.opts.trials - self.spent]
            if not batch:
                self.scheduler.tasks[i].stop("search space exhausted")
                continue
            try:
                results = self._measure(batch)
            except Exception:
                if self.stop_requested:  # the workers were interrupted with us
                    return "interrupted"
                raise
            if self.stop_requested:
                return "interrupted"
            self._commit(i, kind, batch, results)
            self.progress(self.snapshot(f"{self.scheduler.tasks[i].name}: {kind} batch of {len(batch)}"))
            self._check_boards(results)
        return "budget spent"

    # ---- proposing

    def _context(self, i: int) -> Any:
        if i not in self.contexts:
            wl = self.taskset.tasks[i].workload
            cfg = self.ms.SearchConfig(population_size=self.opts.population,
                                       init_min_unmeasured=min(50, self.opts.population // 4))
            ctx = self.ms.TaskContext(wl, self.taskset.target, self.opts.seed * 7919 + i, self.threads, cfg)
            self.contexts[i] = ctx
        return self.contexts[i]

    def _propose(self, i: int) -> tuple[str, list[Any]]:
        ctx = self._context(i)
        state = self.scheduler.tasks[i]
        if state.trials == 0:
            first = [c for c in [ctx.baseline()] if c is not None]
            if self.opts.transfer:
                similar = self._transfer(i, ctx)
                if similar:
                    self.transferred["similar"] += 1
                    return "baseline+transfer", first + similar
            return "baseline+evolutionary", first + self._evolutionary(ctx)
        if self._use_droplet(i):
            batch = self._droplet(i, ctx)
            if batch:
                return "droplet", batch
        return "evolutionary", self._evolutionary(ctx)

    def _evolutionary(self, ctx: Any) -> list[Any]:
        if not ctx.started:
            ctx.start(self.database, self.cost_model, max_trials=max(self.opts.trials, 1) * 4, per_iter=self.opts.batch)
        return ctx.propose()

    def _use_droplet(self, i: int) -> bool:
        if self.opts.search == "evolutionary":
            return False
        if self.opts.search == "hybrid" and self.spent < self.opts.explore * self.opts.trials:
            return False
        d = self.droplets.setdefault(i, DropletState())
        best = self.scheduler.tasks[i].best
        return best is not None and (d.converged_at is None or best < d.converged_at)

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
        donors = self.ms.similar_workloads(self.database, self.taskset.tasks[i].workload.mod, limit=4)
        out = []
        for mod in donors:
            for trace, _secs in self.ms.top_traces(self.database, mod, 3):
                cand = ctx.candidate_from_trace(trace, provider=self.ms.fit_decisions)
                if cand is not None:
                    out.append(cand)
        return out[: self.opts.batch]

    # ---- measuring

    def _measure(self, batch: list[Any]) -> list[Any]:
        ms = self.ms
        built = self.builder.build([ms.builder_input(c, self.taskset.target) for c in batch])
        ok = [n for n, b in enumerate(built) if b.error_msg is None]
        results: list[Any] = [ms.runner_result(None, "build: " + _first_line(b.error_msg)) for b in built]
        try:
            if ok:
                ran = self.runner.impl.run([built[n].artifact_path for n in ok], self.runner.device_type, [batch[n] for n in ok])
                for n, res in zip(ok, ran):
                    results[n] = res
        finally:
            for b in built:
                ms.remove_artifact(b.artifact_path)
        return results

    def _commit(self, i: int, kind: str, batch: list[Any], results: list[Any]) -> None:
        ms = self.ms
        ctx = self.contexts[i]
        wl = self.taskset.tasks[i].workload
        ms.commit(self.database, wl.mod, batch, results, self.taskset.target)
        if kind.endswith("evolutionary"):
            own = [(c, r) for c, r in zip(batch, results) if not ctx.is_baseline(c)]
            ctx.notify([c for c, _ in own], [r for _, r in own])
        ms.update_cost_model(self.cost_model, ctx, batch, results)
        times = [ms.mean_secs(r) for r in results]
        valid = [t for t in times if t is not None]
        self.failures += len(times) - len(valid)
        for r, t in zip(results, times):
            if t is None:
                msg = _first_line(r.error_msg)
                log.debug("candidate failed: %s", r.error_msg)
                if msg not in self.errors and len(self.errors) < 5:
                    self.errors.append(msg)
        baseline = next((t for c, t in zip(batch, times) if ctx.is_baseline(c)), None) if kind.startswith("baseline") else None
        self.scheduler.record(i, len(batch), min(valid) if valid else None, baseline=baseline)
        if kind == "droplet":
            d = self.droplets[i]
            if not valid or d.center_secs is None or not droplet.improved(min(valid), d.center_secs):
                d.converged_at = self.scheduler.tasks[i].best
        self.spent_now += len(batch)
        self.batches[kind] = self.batches.get(kind, 0) + 1
        self._write_journal()

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

    # ---- reporting

    def snapshot(self, message: str = "") -> Snapshot:
        sched = self.scheduler
        rows = tuple(TaskRow(t.name, t.trials, _ms(t.best), _ms(t.baseline), t.stopped or "live") for t in sched.tasks)
        nets = tuple(NetworkRow(n.name, _ms(sched.baseline_latency(j)), _ms(sched.latency(j)), _ms(n.target_s))
                     for j, n in enumerate(sched.objective.networks))
        elapsed = time.monotonic() - self.start
        left = max(self.opts.trials - self.spent, 0)
        eta = elapsed / self.spent_now * left if self.spent_now else None
        return Snapshot(self.profile.name, self.runner.label, self.opts.trials, self.spent, self.spent_now,
                        elapsed, eta, rows, nets, message)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _first_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "unknown error"


def _run_failures(results: list[Any]) -> bool:
    """True when candidates failed at the runner (the board), not at the builder."""
    return any(r.error_msg and not str(r.error_msg).startswith("build:") for r in results)
