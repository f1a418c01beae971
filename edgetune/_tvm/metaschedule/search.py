"""Searching a task's design space: MetaSchedule's evolutionary search and cost model, and the
trace edits Droplet descent and transfer make."""

from __future__ import annotations

import functools
import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core import plain, tensor_intrinsics
from .base import meta_schedule
from .tasks import Workload, workload_hash

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchConfig:
    """Evolutionary search settings (MetaSchedule's defaults are sized for big budgets)."""

    population_size: int = 512
    init_measured_ratio: float = 0.2
    init_min_unmeasured: int = 50
    genetic_num_iters: int = 4
    genetic_mutate_prob: float = 0.85
    eps_greedy: float = 0.05


class TaskContext:
    """A MetaSchedule TuneContext for one workload, with its search strategy (evolutionary
    search unless another ``PySearchStrategy`` is given, e.g. Gensor's)."""

    def __init__(self, workload: Workload, target: Any, seed: int, threads: int, config: SearchConfig,
                 strategy: Any = None, generic: bool = False):
        tensor_intrinsics()  # before TuneContext imports them the slow way
        m = meta_schedule()
        if strategy is None:
            strategy = m.search_strategy.EvolutionarySearch(
                population_size=config.population_size, init_measured_ratio=config.init_measured_ratio,
                init_min_unmeasured=config.init_min_unmeasured, genetic_num_iters=config.genetic_num_iters,
                genetic_mutate_prob=config.genetic_mutate_prob, eps_greedy=config.eps_greedy)
        self.workload = workload
        self.ctx = m.TuneContext(mod=workload.mod, target=target, space_generator=design_space_of(workload, target, generic),
                                 search_strategy=strategy, task_name=workload.name,
                                 rand_state=seed, num_threads=threads,
                                 logger=logging.getLogger("edgetune.tvm.task")).clone()
        self.started = False
        self._rng = random.Random(seed)
        self._default: str | None = None

    def start(self, database: Any, cost_model: Any, max_trials: int, per_iter: int) -> None:
        """Generate the design space and prime the evolutionary search (warm-starts from records)."""
        spaces = self.design_space()
        self.ctx.pre_tuning(max_trials=max_trials, num_trials_per_iter=per_iter, design_spaces=spaces,
                            database=database, cost_model=cost_model)
        self.started = True

    def design_space(self, tries: int = 3) -> list[Any]:
        """The task's sketches. Generating them samples decisions, and for some workloads TVM's
        generic rules fail on some samples (TVM 0.27: ``ReverseComputeAt`` on a packed
        convolution, "TensorRegion pattern match failed"): tried ``tries`` times, then the
        error is raised for the caller to stop the task."""
        for attempt in range(tries):
            try:
                return list(self.ctx.generate_design_space())
            except Exception:  # noqa: BLE001 — TVM raises ValueError / TVMError subclasses here
                if attempt == tries - 1:
                    raise
        return []

    def propose(self) -> list[Any]:
        """The search strategy's next batch (empty when the space is exhausted)."""
        return list(self.ctx.generate_measure_candidates() or [])

    def notify(self, candidates: list[Any], results: list[Any]) -> None:
        """Tell the search strategy what its batch measured (also for foreign batches)."""
        if self.started and candidates:
            self.ctx.search_strategy.notify_runner_results(candidates, results)

    def stop(self) -> None:
        if self.started:
            self.ctx.post_tuning()
            self.started = False

    def default_candidate(self) -> Any | None:
        """The kernel as an untuned package builds it (the default schedule, or plain loops
        where no rule applies): the "before" time of the task, measured in its first batch.
        None on GPUs, where an unscheduled kernel (no thread binding) does not build."""
        from tvm.s_tir import schedule as s

        from ..schedules.dispatch import default_schedule

        if self.ctx.target.kind.name == "cuda":
            return None
        sch = default_schedule(self.workload.mod, self.ctx.target).sch
        if sch is None:
            sch = s.Schedule(self.workload.mod)
        self._default = trace_key(sch.trace)
        return measure_candidate(sch)

    def is_default(self, candidate: Any) -> bool:
        return self._default is not None and trace_key(candidate.sch.trace) == self._default

    @staticmethod
    def key(candidate: Any) -> str:
        """Which point of the design space a candidate is (for not measuring one twice)."""
        return trace_key(candidate.sch.trace)

    def enumerate_space(self, limit: int = 256) -> list[Any] | None:
        """Every point of a small design space (edgetune's micro-kernel sketches sample a tile
        split or two), as candidates; None when it has more than ``limit`` points or decisions
        that cannot be enumerated. Proposing from the whole list ranked by the cost model is
        far cheaper than an evolutionary search re-discovering a space of a few dozen points."""
        import itertools

        points = []
        for sketch in self.design_space():
            options = []
            for idx, kind, decision, attrs in decisions(sketch.trace):
                if kind == "SamplePerfectTile":
                    extent = 1
                    for factor in decision:
                        extent *= int(factor)
                    options.append([(idx, f) for f in perfect_tiles(extent, int(attrs[0]), int(attrs[1]))])
                elif kind == "SampleCategorical":
                    options.append([(idx, k) for k in range(len(attrs[0]))])
                else:
                    return None
            count = 1
            for opt in options:
                count *= len(opt)
            if len(points) + count > limit:
                return None
            points.extend((sketch.trace, combo) for combo in itertools.product(*options))
        out = []
        for trace, combo in points:
            for idx, decision in combo:
                trace = with_decision(trace, idx, decision)
            cand = self.candidate_from_trace(trace)
            if cand is not None:
                out.append(cand)
        return out

    # ---- traces: Droplet descent and transfer

    def candidate_from_trace(self, trace: Any, mod: Any | None = None,
                             provider: Callable[..., Any] | None = None) -> Any | None:
        """Replay ``trace`` on this task's module and re-apply the postprocessors; None if the
        trace does not fit (another structure) or a postprocessor rejects the schedule."""
        return realize(trace, self.workload.mod, self.ctx.space_generator.postprocs, self._rng.randrange(1 << 30),
                       mod=mod, provider=provider)

    def predict(self, cost_model: Any, candidates: list[Any]) -> list[float]:
        """Cost-model scores (higher is faster) for ranking untried candidates; all equal for a
        kernel of symbolic shape (see :func:`update_cost_model`)."""
        if not candidates or self.workload.symbolic:
            return [0.0] * len(candidates)
        return [float(x) for x in cost_model.predict(self.ctx, candidates)]


def realize(trace: Any, task_mod: Any, postprocs: Any, seed: int, mod: Any | None = None,
            provider: Callable[..., Any] | None = None, check_replay: bool = True) -> Any | None:
    """A measure candidate: ``trace`` replayed on ``mod`` (default: the task's module), its
    postprocessors applied; None if the trace does not fit or a postprocessor rejects it
    (``check_replay``: or if the result does not replay on the task's own module, as the
    records database will replay it)."""
    from tvm.s_tir import schedule as s

    sch = s.Schedule(mod if mod is not None else task_mod, debug_mask=0, seed=1 + seed % 2147483646)
    try:
        if provider is None:
            trace.apply_to_schedule(sch, remove_postproc=True)
        else:
            trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=functools.partial(provider, sch))
        sch.enter_postproc()  # marks where postprocessing starts, so replays can strip it
        for post in postprocs:
            if not post.apply(sch):
                return None
        if check_replay:  # the database replays stored traces on the original module
            sch.trace.apply_to_schedule(s.Schedule(task_mod, debug_mask=0), remove_postproc=True)
    except Exception:  # noqa: BLE001 — a trace from elsewhere that does not replay is no candidate
        return None
    return measure_candidate(sch)


def measure_candidate(sch: Any) -> Any:
    """A schedule as MetaSchedule's measure candidate. A kernel of symbolic shape (a range
    package's) has no argument info MetaSchedule can hold (its shapes are not constants): its
    arguments are made per length from the workload's ``sizes`` when it is timed."""
    from .tasks import is_symbolic

    m = meta_schedule()
    args = [] if is_symbolic(sch.mod) else m.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)
    return m.search_strategy.MeasureCandidate(sch, args)


def design_space_of(workload: Workload, target: Any, generic: bool = False) -> Any:
    """The design space of a task: edgetune's micro-kernel sketches where one applies (tile
    sizes and loop order sampled), MetaSchedule's post-order-apply rules otherwise (or always,
    ``generic``). A kernel of symbolic shape keeps its loops of run-time extent: MetaSchedule's
    ``DisallowDynamicLoop`` postprocessor is left out (it exists because MetaSchedule's own
    runners cannot make such a kernel's arguments; edgetune's make them per length)."""
    from ..schedules.dispatch import MICROKERNEL_KINDS, design_space

    m = meta_schedule()
    postprocs: Any = "from-target"
    if workload.symbolic:
        postprocs = [p for p in m.postproc.Postproc.create(target.kind.name)
                     if not isinstance(p, m.postproc.DisallowDynamicLoop)]
    if not generic and target.kind.name == "llvm" and workload.kind in MICROKERNEL_KINDS:
        return m.space_generator.ScheduleFn(functools.partial(design_space, target=target), postprocs=postprocs)
    return m.space_generator.PostOrderApply(postprocs=postprocs) if workload.symbolic else "post-order-apply"


def trace_key(trace: Any) -> str:
    """A hashable identity of a schedule: its instructions and decisions, postprocessing left
    out (a default schedule and the same point proposed by a search compare equal)."""

    return json.dumps(plain(trace.as_json(remove_postproc=True)), sort_keys=True, default=str)


def perfect_tiles(extent: int, levels: int, max_innermost: int) -> list[list[int]]:
    """Every split of ``extent`` into ``levels`` factors whose innermost is ≤ ``max_innermost``."""
    if levels == 1:
        return [[extent]] if max_innermost <= 0 or extent <= max_innermost else []
    out = []
    for first in range(1, extent + 1):
        if extent % first == 0:
            out.extend([first, *rest] for rest in perfect_tiles(extent // first, levels - 1, max_innermost))
    return out


def decisions(trace: Any) -> list[tuple[int, str, Any, tuple[Any, ...]]]:
    """The sampling decisions of a trace: (instruction index, kind, decision, attrs)."""
    out = []
    insts = list(trace.insts)
    decs = trace.decisions
    for idx, inst in enumerate(insts):
        if inst in decs:
            out.append((idx, str(inst.kind.name), plain(decs[inst]), tuple(plain(a) for a in inst.attrs)))
    return out


def with_decision(trace: Any, inst_index: int, decision: Any) -> Any:
    """``trace`` with one decision replaced (postprocessors dropped; re-applied on replay)."""
    inst = list(trace.insts)[inst_index]
    return trace.with_decision(inst, decision, remove_postproc=True)


def loop_extent(sch: Any, loop_rv: Any) -> int | None:
    """The constant extent of a loop random variable in ``sch`` (None if symbolic)."""
    extent = sch.get(loop_rv).extent
    return int(extent.value) if hasattr(extent, "value") else None


def fit_decisions(sch: Any, inst: Any, inputs: Any, attrs: Any, decision: Any,
                  fit_tile: Callable[[list[int], int, int], list[int]]) -> Any:
    """Decision provider for replaying another workload's trace: tile splits are refitted to
    this module's loop extents by ``fit_tile(factors, extent, max_innermost)``, other
    decisions kept."""
    if str(inst.kind.name) != "SamplePerfectTile" or decision is None:
        return decision
    extent = loop_extent(sch, inputs[0])
    if extent is None:
        return decision
    max_inner = int(plain(attrs[1])) if len(attrs) > 1 else 0
    return fit_tile([int(x) for x in plain(decision)], extent, max_inner)


def structure(mod: Any) -> tuple[str, ...]:
    """The block names of a TIR workload: traces replay on workloads with the same blocks."""
    from tvm.s_tir import schedule as s

    sch = s.Schedule(mod)
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root", func_name="main"))
    except Exception:  # noqa: BLE001 — no root block: nothing to match on
        return ()
    return tuple(str(sch.get(b).name_hint) for b in blocks)


def workloads_of(database: Any) -> list[Any]:
    """The distinct workloads ``database`` holds records of."""
    seen, out = set(), []
    for rec in database.get_all_tuning_records():
        key = id(rec.workload)
        if key not in seen:
            seen.add(key)
            out.append(rec.workload)
    return out


def similar_workloads(database: Any, mod: Any, limit: int) -> list[Any]:
    """Other workloads in ``database`` with the same block structure as ``mod`` (different shapes)."""
    want, own = structure(mod), workload_hash(mod)
    out = []
    for wl in workloads_of(database):
        if workload_hash(wl.mod) != own and structure(wl.mod) == want:
            out.append(wl.mod)
            if len(out) >= limit:
                break
    return out


def make_cost_model(threads: int) -> Any:
    """MetaSchedule's XGBoost cost model."""
    return meta_schedule().cost_model.XGBModel(num_tuning_cores=threads, tree_method="auto")


def update_cost_model(cost_model: Any, task: TaskContext, candidates: list[Any], results: list[Any]) -> None:
    """Train the cost model on a measured batch. Not on kernels of symbolic shape: their
    features count loops of unknown extent (TVM 0.27 writes inf there, and XGBoost refuses the
    whole training set); their spaces are small (the micro-kernel sketches) and measured whole."""
    if candidates and not task.workload.symbolic:
        cost_model.update(task.ctx, candidates, results)
