"""MetaSchedule (Ansor's successor in TVM 0.27) behind plain Python: task extraction, tuning
contexts, a cross-compiling builder, runners with hard timeouts, the JSON records database,
applying records at build time, and trace edits for Droplet descent and schedule transfer.

The tuning *loop* lives in :mod:`edgetune.tuning`; this module only turns its requests into
MetaSchedule calls, so every ``tvm.s_tir.meta_schedule`` name is spelled here.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _cuda_compile_env, _last_line, tvm

# MetaSchedule's JSON database: its file names, and the run time it gives a failed candidate.
from .constants import FAILED_RUN_SECS, RECORDS_FILE, WORKLOADS_FILE  # noqa: F401 — re-exported

log = logging.getLogger(__name__)


def ms() -> Any:
    """``tvm.s_tir.meta_schedule`` (imported once, after the version gate), with edgetune's
    tensor intrinsics registered: stored traces that tensorize name them."""
    tvm()
    import tvm.s_tir.meta_schedule as _ms

    from . import dot

    dot.register()
    return _ms


# ---------------------------------------------------------------- tasks


def tuning_module(mod: Any) -> Any:
    """The module records apply to and tasks come from: inference-decomposed, canonical, unfused.

    Handing ``compile_relax`` a fused module silently stops records from matching (DESIGN §3).
    """
    from tvm import relax

    seq = tvm().transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                      relax.transform.CanonicalizeBindings()])
    return seq(mod)


@dataclass(frozen=True)
class Workload:
    """One tunable kernel of a network: a fused TIR function and how often the network calls it."""

    name: str
    shash: str
    weight: int
    flops: float
    mod: Any  # the TIR IRModule MetaSchedule tunes
    kind: str = "naive"  # what the default schedule treats it as (conv2d, depthwise, dense, …)
    signature: str = ""  # a convolution's shape, shared by its direct and Winograd variants
    variant: str = ""  # "direct" | "winograd" for convolutions that have both
    rules: str = ""  # the schedule rules that tune it (for --list-tasks)


def workload_hash(mod: Any) -> str:
    """The structural hash the JSON database files a workload under (as it writes it)."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(mod))


def extract_workloads(mod: Any, target: Any, lowering_key: str, conv_choice: Any = "auto") -> list[Workload]:
    """Lower and fuse ``mod`` exactly as the build will (``conv_choice``: direct or Winograd
    kernels for 3×3 stride-1 convolutions) and list its kernels."""
    from tvm.s_tir.analysis import estimate_tir_flops

    from . import cpu_schedules, lowering

    fused = lowering.fuse(mod, target, lowering.LOWERINGS[lowering_key], conv_choice)
    cpu = target.kind.name == "llvm"
    out = []
    for task in ms().relax_integration.extract_tasks(fused, target):
        tir = task.dispatched[0]  # an IRModule holding the PrimFunc as "main"
        func = tir["main"]
        if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
            continue  # written scheduled (a recurrent loop kernel): nothing to tune
        try:
            flops = float(estimate_tir_flops(tir))
        except Exception:  # noqa: BLE001 — data-dependent loops have no estimate
            flops = 0.0
        kind = cpu_schedules.classify(tir) if cpu else "gpu"
        sig, variant = cpu_schedules.conv_variant(tir) if cpu else ("", "")
        out.append(Workload(str(task.task_name), workload_hash(tir), int(task.weight), flops, tir, kind, sig, variant,
                            rule_family(tir, kind, target)))
    return out


def rule_family(tir: Any, kind: str, target: Any) -> str:
    """The schedule rules a task is tuned with (``--list-tasks``): edgetune's micro-kernel
    sketch, with the int8 dot-product instruction it is tensorized with, or MetaSchedule's own
    rules for the target (CUDA: GPU thread tiling; CPU: multi-level tiling, parallel/vectorize)."""
    from . import cpu_schedules, dot

    if target.kind.name == "cuda":
        return "MetaSchedule cuda"
    if kind not in cpu_schedules.MICROKERNEL_KINDS:
        return "MetaSchedule llvm"
    family = cpu_schedules.dot_family_of(tir)
    return f"micro-kernel, {dot.DESCRIPTIONS[family]}" if family else "micro-kernel"


def kernel_workloads(fused: Any) -> dict[str, str]:
    """Per PrimFunc of a fused module, the workload hash its records are filed under (what
    ``MetaScheduleApplyDatabase`` looks up): kernel names change with the build, hashes do not."""
    from tvm import tirx

    return {gv.name_hint: workload_hash(tvm().IRModule({"main": f.with_attr("global_symbol", "main")}))
            for gv, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)}


def replay_problem(workload_line: Any, record: Any) -> tuple[str | None, float]:
    """Replay one record's trace on its workload, as a build would: (why it is not a schedule
    edgetune's spaces make — its workload does not parse or does not hash to its name, the
    trace does not replay, or the replayed kernel carries annotations no design space sets — or
    None; the workload's FLOPs, 0 when unknown). ``workload_line``: ``[hash, IR]``;
    ``record``: ``[trace, run_secs, target, args]`` (both already checked for their shape,
    :mod:`edgetune.tuning.record_check`)."""
    from tvm.s_tir import schedule as s
    from tvm.s_tir.analysis import estimate_tir_flops

    from .constants import TRACE_ANNOTATIONS

    m = ms()
    try:
        workload = m.database.Workload.from_json(workload_line)
    except Exception as err:  # noqa: BLE001 — TVM's deserializer raises many types
        return f"its workload does not parse ({_last_line(err)[:120]})", 0.0
    if workload_hash(workload.mod) != str(workload_line[0]):
        return "its workload does not hash to the name it is filed under", 0.0
    before = _annotation_keys(workload.mod)
    try:
        rec = m.database.TuningRecord.from_json(record, workload)
        sch = s.Schedule(workload.mod)
        rec.trace.apply_to_schedule(sch, remove_postproc=False)
    except Exception as err:  # noqa: BLE001 — a trace that does not replay is refused, whatever TVM raised
        return f"its trace does not replay on its workload ({_last_line(err)[:120]})", 0.0
    added = _annotation_keys(sch.mod) - before - TRACE_ANNOTATIONS
    if added:
        return f"its schedule carries annotation(s) {', '.join(sorted(added))}", 0.0
    try:
        flops = float(estimate_tir_flops(workload.mod))
    except Exception:  # noqa: BLE001 — data-dependent loops have no estimate
        flops = 0.0
    return None, flops


def _annotation_keys(mod: Any) -> set[str]:
    """Every loop and block annotation key (and attribute key) in ``mod``'s PrimFuncs, read off
    the IR objects (TVM 0.27 exposes no TIR visitor to Python: the statement fields are walked)."""
    from tvm import s_tir, tirx

    keys: set[str] = set()
    stack = [f.body for _gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if isinstance(node, (tirx.For, s_tir.SBlock)):
            keys.update(str(k) for k in node.annotations.keys())
        if isinstance(node, tirx.AttrStmt):
            keys.add(str(node.attr_key))
        if isinstance(node, tirx.SeqStmt):
            stack.extend(node.seq)
        for field in ("body", "then_case", "else_case", "block", "init"):
            child = getattr(node, field, None)
            if isinstance(child, tirx.Stmt):
                stack.append(child)
    return keys


def apply_records(fused: Any, target: Any, database_dir: Path) -> Any:
    """Replace the kernels of a fused module that have tuning records by their best schedule."""
    from tvm import relax

    database = open_database(database_dir)
    with target, database:
        return relax.transform.MetaScheduleApplyDatabase()(fused)


# ---------------------------------------------------------------- contexts and search


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
    """A MetaSchedule TuneContext for one workload, with its evolutionary search started."""

    def __init__(self, workload: Workload, target: Any, seed: int, threads: int, config: SearchConfig):
        m = ms()
        strategy = m.search_strategy.EvolutionarySearch(
            population_size=config.population_size, init_measured_ratio=config.init_measured_ratio,
            init_min_unmeasured=config.init_min_unmeasured, genetic_num_iters=config.genetic_num_iters,
            genetic_mutate_prob=config.genetic_mutate_prob, eps_greedy=config.eps_greedy)
        self.workload = workload
        self.ctx = m.TuneContext(mod=workload.mod, target=target, space_generator=_space(workload, target),
                                 search_strategy=strategy, task_name=workload.name,
                                 rand_state=seed, num_threads=threads,
                                 logger=logging.getLogger("edgetune.tvm.task")).clone()
        self.started = False
        self._rng = random.Random(seed)
        self._default: str | None = None

    def start(self, database: Any, cost_model: Any, max_trials: int, per_iter: int) -> None:
        """Generate the design space and prime the evolutionary search (warm-starts from records)."""
        spaces = self.ctx.generate_design_space()
        self.ctx.pre_tuning(max_trials=max_trials, num_trials_per_iter=per_iter, design_spaces=spaces,
                            database=database, cost_model=cost_model)
        self.started = True

    def propose(self) -> list[Any]:
        """The evolutionary search's next batch (empty when the space is exhausted)."""
        return list(self.ctx.generate_measure_candidates() or [])

    def notify(self, candidates: list[Any], results: list[Any]) -> None:
        """Tell the evolutionary search what its batch measured (also for foreign batches)."""
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

        from .cpu_schedules import default_schedule

        if self.ctx.target.kind.name == "cuda":
            return None
        sch, _kind = default_schedule(self.workload.mod, self.ctx.target)
        if sch is None:
            sch = s.Schedule(self.workload.mod)
        self._default = _trace_key(sch.trace)
        return ms().search_strategy.MeasureCandidate(sch, ms().arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))

    def is_default(self, candidate: Any) -> bool:
        return self._default is not None and _trace_key(candidate.sch.trace) == self._default

    @staticmethod
    def key(candidate: Any) -> str:
        """Which point of the design space a candidate is (for not measuring one twice)."""
        return _trace_key(candidate.sch.trace)

    def enumerate_space(self, limit: int = 256) -> list[Any] | None:
        """Every point of a small design space (edgetune's micro-kernel sketches sample a tile
        split or two), as candidates; None when it has more than ``limit`` points or decisions
        that cannot be enumerated. Proposing from the whole list ranked by the cost model is
        far cheaper than an evolutionary search re-discovering a space of a few dozen points."""
        import itertools

        points = []
        for sketch in self.ctx.generate_design_space():
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
        from tvm.s_tir import schedule as s

        sch = s.Schedule(mod if mod is not None else self.workload.mod, debug_mask=0,
                         seed=self._rng.randrange(1 << 30))
        try:
            if provider is None:
                trace.apply_to_schedule(sch, remove_postproc=True)
            else:
                trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=functools.partial(provider, sch))
            sch.enter_postproc()  # marks where postprocessing starts, so replays can strip it
            for post in self.ctx.space_generator.postprocs:
                if not post.apply(sch):
                    return None
            # The database replays stored traces on the original module: keep only those that do.
            sch.trace.apply_to_schedule(s.Schedule(self.workload.mod, debug_mask=0), remove_postproc=True)
        except Exception:  # noqa: BLE001 — a trace from elsewhere that does not replay is no candidate
            return None
        return ms().search_strategy.MeasureCandidate(sch, ms().arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))

    def predict(self, cost_model: Any, candidates: list[Any]) -> list[float]:
        """Cost-model scores (higher is faster) for ranking untried candidates."""
        if not candidates:
            return []
        return [float(x) for x in cost_model.predict(self.ctx, candidates)]


def _space(workload: Workload, target: Any) -> Any:
    """The design space of a task: edgetune's micro-kernel sketches where one applies (tile
    sizes and loop order sampled), MetaSchedule's post-order-apply rules otherwise."""
    from .cpu_schedules import MICROKERNEL_KINDS, design_space

    if target.kind.name == "llvm" and workload.kind in MICROKERNEL_KINDS:
        return ms().space_generator.ScheduleFn(functools.partial(design_space, target=target))
    return "post-order-apply"


def _trace_key(trace: Any) -> str:
    """A hashable identity of a schedule: its instructions and decisions, postprocessing left
    out (a default schedule and the same point proposed by a search compare equal)."""
    import json

    return json.dumps(_py(trace.as_json(remove_postproc=True)), sort_keys=True, default=str)


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
            out.append((idx, str(inst.kind.name), _py(decs[inst]), tuple(_py(a) for a in inst.attrs)))
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
    max_inner = int(_py(attrs[1])) if len(attrs) > 1 else 0
    return fit_tile([int(x) for x in _py(decision)], extent, max_inner)


def structure(mod: Any) -> tuple[str, ...]:
    """The block names of a TIR workload: traces replay on workloads with the same blocks."""
    from tvm.s_tir import schedule as s

    sch = s.Schedule(mod)
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root", func_name="main"))
    except Exception:  # noqa: BLE001 — no root block: nothing to match on
        return ()
    return tuple(str(sch.get(b).name_hint) for b in blocks)


def similar_workloads(database: Any, mod: Any, limit: int) -> list[Any]:
    """Other workloads in ``database`` with the same block structure as ``mod`` (different shapes)."""
    want, own = structure(mod), workload_hash(mod)
    out = []
    for wl in _workloads(database):
        if workload_hash(wl.mod) != own and structure(wl.mod) == want:
            out.append(wl.mod)
            if len(out) >= limit:
                break
    return out


def mean_secs(result: Any) -> float | None:
    """Mean run time of a measured candidate, None if it failed."""
    if result.error_msg or result.run_secs is None:
        return None
    secs = [float(_py(x)) for x in result.run_secs]
    return sum(secs) / len(secs) if secs and min(secs) < FAILED_RUN_SECS else None


def _py(value: Any) -> Any:
    if hasattr(value, "value"):
        return value.value
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__iter__"):
        return [_py(v) for v in value]
    return value


# ---------------------------------------------------------------- database


def open_database(directory: Path) -> Any:
    """MetaSchedule's JSON database in ``directory`` (which must exist and be repaired)."""
    return ms().database.JSONDatabase(path_workload=str(directory / WORKLOADS_FILE),
                                      path_tuning_record=str(directory / RECORDS_FILE),
                                      module_equality="structural")


def commit(database: Any, workload_mod: Any, candidates: list[Any], results: list[Any], target: Any) -> None:
    """Append one measured batch; failed candidates are kept with MetaSchedule's failure time."""
    m = ms()
    wl = database.commit_workload(workload_mod)
    for cand, res in zip(candidates, results):
        secs = mean_secs(res)
        run_secs = [float(_py(x)) for x in res.run_secs] if secs is not None else [FAILED_RUN_SECS]
        database.commit_tuning_record(m.database.TuningRecord(cand.sch.trace, wl, run_secs, target, cand.args_info))


def top_traces(database: Any, workload_mod: Any, k: int) -> list[tuple[Any, float]]:
    """The ``k`` fastest valid records of a workload: (trace, mean seconds)."""
    if not database.has_workload(workload_mod):
        return []
    wl = database.commit_workload(workload_mod)
    out = []
    for rec in database.get_top_k(wl, k):
        secs = [float(x) for x in rec.run_secs]
        if secs and min(secs) < FAILED_RUN_SECS:
            out.append((rec.trace, sum(secs) / len(secs)))
    return out


def measured_keys(database: Any, workload_mod: Any) -> list[str]:
    """The design-space points already measured for a workload (see :meth:`TaskContext.key`)."""
    if not database.has_workload(workload_mod):
        return []
    wl = database.commit_workload(workload_mod)
    return [_trace_key(rec.trace) for rec in database.get_top_k(wl, 100_000)]


def _workloads(database: Any) -> list[Any]:
    seen, out = set(), []
    for rec in database.get_all_tuning_records():
        key = id(rec.workload)
        if key not in seen:
            seen.add(key)
            out.append(rec.workload)
    return out


def make_cost_model(threads: int) -> Any:
    """MetaSchedule's XGBoost cost model."""
    return ms().cost_model.XGBModel(num_tuning_cores=threads, tree_method="auto")


def update_cost_model(cost_model: Any, task: TaskContext, candidates: list[Any], results: list[Any]) -> None:
    if candidates:
        cost_model.update(task.ctx, candidates, results)


def runner_result(run_secs: Sequence[float] | None, error: str | None) -> Any:
    return ms().runner.RunnerResult(list(run_secs) if run_secs is not None else None, error)


# ---------------------------------------------------------------- builder


_BUILD_SECS: list[float] = []  # set by build_candidate in a builder worker, read by export_candidate
TIMING_FILE = "timing.json"


def build_candidate(mod: Any, target: Any, _params: Any, cuda: Any = None) -> Any:
    """Build one candidate (runs in a builder worker). Unlike MetaSchedule's default it does not
    import ``tvm.s_tir.tensor_intrin`` (≈23 s per fresh worker, which times every build out).
    With ``cuda`` (a CudaToolchain) GPU kernels are compiled by nvcc into a cubin."""
    import time

    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    start = time.perf_counter()
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    if cuda is not None:
        with _cuda_compile_env(cuda), target:
            built = tvm_build(mod, target=target)
    else:  # a CPU: table lookups as vector code (:mod:`.lookups`), as the package is built
        from . import lookups

        lookups.register()
        built = tvm_build(mod, target=target, pipeline=lookups.PIPELINE)
    _BUILD_SECS[:] = [time.perf_counter() - start]
    return built


def export_candidate(rt_mod: Any, cc: str | None, workdir: str | None = None) -> str:
    """Link a candidate into a shared library for the board (runs in a builder worker), in a
    directory under ``workdir`` (the tuning run's, removed with it even when a worker is killed
    mid-build); the compile and link times go into ``timing.json`` beside it."""
    import json
    import time

    from tvm.support import cc as tvm_cc

    start = time.perf_counter()
    directory = tempfile.mkdtemp(prefix="cand-", dir=workdir)
    path = os.path.join(directory, "candidate.so")
    link = tvm_cc.cross_compiler(cc) if cc else tvm_cc.create_shared
    linking = [0.0]

    def timed_link(output: str, objects: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return link(output, objects, **kwargs)
        finally:
            linking[0] += time.perf_counter() - t0

    timed_link.output_format = getattr(link, "output_format", "so")  # type: ignore[attr-defined]
    rt_mod.export_library(path, fcompile=timed_link)
    total = time.perf_counter() - start
    # export_library runs LLVM's code generation (object file), then the linker
    timing = {"lower_s": _BUILD_SECS[0] if _BUILD_SECS else 0.0, "codegen_s": total - linking[0], "link_s": linking[0]}
    with open(os.path.join(directory, TIMING_FILE), "w") as fh:
        json.dump(timing, fh)
    return path


def artifact_timing(path: str | None) -> dict[str, float]:
    """Compile and link seconds of a built candidate (empty if unknown)."""
    import json

    if not path:
        return {}
    try:
        with open(os.path.join(os.path.dirname(path), TIMING_FILE)) as fh:
            return {k: float(v) for k, v in json.load(fh).items()}
    except (OSError, ValueError):
        return {}


def make_builder(cc: str | None, workers: int, timeout: float, cuda: Any = None, workdir: Path | None = None) -> Any:
    """A parallel host builder whose candidates are shared libraries for the board's arch."""
    return PooledBuilder(workers, timeout, functools.partial(build_candidate, cuda=cuda),
                         functools.partial(export_candidate, cc=cc, workdir=str(workdir) if workdir else None))


def shielded_pool(workers: int, timeout: float | None, uses: int | None = None, stderr: Any = None) -> Any:
    """A ``PopenPoolExecutor`` whose worker processes never see the terminal's Ctrl-C (or a
    SIGTERM to the process group): its threads are started here with SIGINT and SIGTERM blocked,
    so the processes they spawn (now and when recycled) start with them blocked, and each worker
    then catches them with a no-op handler and unblocks them (:func:`_shield_worker`), so the
    compilers it starts get them as usual. The driver decides when to stop and shuts the pool
    down, so a Ctrl-C neither kills a candidate half-measured nor prints a worker's traceback.
    The workers start (and import TVM) here, once."""
    import signal
    import threading

    from tvm.support.popen_pool import PopenPoolExecutor

    pool = PopenPoolExecutor(max_workers=workers, timeout=timeout, maximum_process_uses=uses, stderr=stderr,
                             initializer=_shield_worker)
    sigs = {signal.SIGINT, signal.SIGTERM}
    shield = threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs) if shield else None
    try:
        started = [pool.submit(os.getpid) for _ in range(workers)]  # one new thread per submit
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
    for future in started:
        future.result()
    return pool


def _shield_worker() -> None:
    """In each pool worker, once started: Ctrl-C and SIGTERM caught by a handler that does
    nothing, then unblocked. The worker still ignores them in effect, but the compilers and
    linkers it starts begin with the default dispositions and an empty mask (a caught signal is
    reset by exec, a blocked or ignored one is not), so they can be interrupted and killed."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _ignore_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _ignore_signal(_signum: int, _frame: Any) -> None:
    return None


class PooledBuilder:
    """MetaSchedule's ``LocalBuilder`` without its new process pool per batch: the workers stay
    (each imports TVM once, ~0.7 s of CPU that LocalBuilder paid per worker and batch) and are
    recycled after ``uses`` builds, which bounds the slow leak LocalBuilder restarts them for."""

    def __init__(self, workers: int, timeout: float, f_build: Callable[..., Any], f_export: Callable[..., Any],
                 uses: int = 256):
        self.timeout, self.f_build, self.f_export = timeout, f_build, f_export
        self.pool = shielded_pool(workers, timeout, uses)

    def build(self, inputs: Sequence[Any]) -> list[Any]:
        from tvm.s_tir.meta_schedule.builder import local_builder as lb
        from tvm.support.popen_pool import StatusKind

        jobs = [(self.f_build, self.f_export, i.mod, i.target, lb._serialize_params(i.params)) for i in inputs]
        out = []
        for res in self.pool.map_with_error_catching(lambda job: lb._worker_func(*job), jobs):
            if res.status == StatusKind.COMPLETE:
                out.append(ms().builder.BuilderResult(res.value, None))
            elif res.status == StatusKind.TIMEOUT:
                out.append(ms().builder.BuilderResult(None, f"build timed out after {self.timeout:.0f} s"))
            else:
                out.append(ms().builder.BuilderResult(None, f"build failed: {res.value}"))
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pool.shutdown()


def remove_artifact(path: str | None) -> None:
    if path:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def builder_input(candidate: Any, target: Any) -> Any:
    return ms().builder.BuilderInput(candidate.sch.mod, target)


def runner_input(artifact: str, device_type: str, candidate: Any) -> Any:
    return ms().runner.RunnerInput(artifact, device_type, candidate.args_info)


# ---------------------------------------------------------------- runners


@dataclass(frozen=True)
class Evaluator:
    """How each candidate is timed (TVM's time evaluator settings)."""

    number: int = 3
    repeat: int = 1
    min_repeat_ms: int = 40
    flush_cpu_cache: bool = False

    def config(self) -> Any:
        return ms().runner.EvaluatorConfig(number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                                           enable_cpu_cache_flush=self.flush_cpu_cache)


def make_local_runner(evaluator: Evaluator, timeout: float) -> Any:
    """Time candidates on this machine, one at a time (parallel runs would disturb each other), in
    a worker shielded from Ctrl-C (:func:`shielded_pool`)."""
    import subprocess

    runner = ms().runner.LocalRunner(timeout_sec=timeout, evaluator_config=evaluator.config())
    runner.pool.shutdown()
    runner.pool = shielded_pool(1, timeout, stderr=subprocess.DEVNULL)  # LocalRunner's own stderr choice
    return runner


@dataclass(frozen=True)
class RpcEndpoint:
    """Where candidates run: a server (``tracker`` False) or a tracker key (``tracker`` True)."""

    host: str
    port: int
    key: str = ""
    tracker: bool = False


def _connect(endpoint: RpcEndpoint, timeout: float) -> Any:
    """An RPC session that gives up after ``timeout`` seconds instead of waiting forever."""
    from tvm import rpc

    if not endpoint.tracker:
        return rpc.connect(endpoint.host, endpoint.port, key=endpoint.key, session_timeout=timeout)
    tracker = rpc.connect_tracker(endpoint.host, endpoint.port)
    return tracker.request(endpoint.key, priority=1, session_timeout=timeout)


def _host_random_fill(tensor: Any) -> None:
    """Random inputs made here and copied over: the board's runtime-only TVM has no
    ``tvm.contrib.random`` (it lives in the compiler library)."""
    import numpy as np

    rng = np.random.default_rng(0)
    shape, dtype = tuple(int(x) for x in tensor.shape), str(tensor.dtype)
    if dtype.startswith("float") or dtype.startswith("bfloat"):
        data = rng.uniform(-1.0, 1.0, shape).astype(dtype)
    elif dtype == "bool":
        data = rng.integers(0, 2, shape).astype(dtype)
    else:
        data = rng.integers(0, 8, shape).astype(dtype)
    tensor.copyfrom(data)


def rpc_measure(endpoint: RpcEndpoint, evaluator: Any, artifact: str, device_type: str,
                args_info: tuple[Any, ...], timeout: float) -> list[float]:
    """Upload, load and time one candidate on a board (runs in a runner worker, which the pool
    kills after ``timeout``)."""
    from tvm.s_tir.meta_schedule.runner import rpc_runner as r
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    session = _connect(endpoint, timeout)
    remote_path = None
    try:
        device = session.device(device_type, 0)
        remote_path = os.path.basename(artifact)
        rt_mod = r.default_upload_module(session, artifact, remote_path)
        args = alloc_argument_common(_host_random_fill, device, args_info, 1)
        return [float(x) for x in r.default_run_evaluator(session, rt_mod, device, evaluator, args)]
    finally:
        with contextlib.suppress(Exception):
            session.get_function("tvm.rpc.server.remove")(remote_path)


def probe(endpoint: RpcEndpoint, timeout: float) -> bool:
    """Whether a server (or, for a tracker, any server under the key) answers within ``timeout``."""
    from tvm.support.popen_pool import PopenPoolExecutor

    pool = PopenPoolExecutor(max_workers=1, timeout=timeout)
    try:
        pool.submit(_ping, endpoint, timeout).result()
        return True
    except Exception:  # noqa: BLE001 — any failure means no answer
        return False
    finally:
        pool.shutdown()


def _ping(endpoint: RpcEndpoint, timeout: float) -> None:
    _connect(endpoint, timeout).cpu(0)


class PoolRunner:
    """Candidates timed over RPC by a pool of ``workers`` processes, each killed after ``timeout``.

    MetaSchedule's RPCRunner waits forever on a dead board; here a stuck candidate becomes an
    error result and its worker process is replaced.
    """

    def __init__(self, endpoint: RpcEndpoint, evaluator: Evaluator, workers: int, timeout: float):
        self.endpoint, self.timeout = endpoint, timeout
        self.evaluator = evaluator.config()
        self.pool = shielded_pool(workers, timeout)

    def run(self, artifacts: list[str], device_type: str, candidates: list[Any]) -> list[Any]:
        futures = [self.pool.submit(rpc_measure, self.endpoint, self.evaluator, art, device_type,
                                    tuple(a.as_json() for a in c.args_info), self.timeout)
                   for art, c in zip(artifacts, candidates)]
        return [self._result(f) for f in futures]

    def _result(self, future: Any) -> Any:
        try:
            return runner_result(future.result(), None)
        except TimeoutError:
            return runner_result(None, f"timed out after {self.timeout:.0f} s")
        except Exception as err:  # noqa: BLE001 — a failed candidate is data
            return runner_result(None, f"RPC error: {_last_line(err)}")

    def close(self) -> None:
        self.pool.shutdown()


class LocalPoolRunner:
    """MetaSchedule's LocalRunner behind the same ``run``/``close`` interface as :class:`PoolRunner`."""

    def __init__(self, evaluator: Evaluator, timeout: float):
        self.runner = make_local_runner(evaluator, timeout)

    def run(self, artifacts: list[str], device_type: str, candidates: list[Any]) -> list[Any]:
        inputs = [runner_input(a, device_type, c) for a, c in zip(artifacts, candidates)]
        return [f.result() for f in self.runner.run(inputs)]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.runner.pool.shutdown()


# ---------------------------------------------------------------- build with records


def compile_with_records(mod: Any, target: Any, database_dir: Path) -> Any:
    """``compile_relax`` with the records in ``database_dir`` applied (untuned kernels stay as the
    default pipeline leaves them; on GPU, DLight schedules them)."""
    database = open_database(database_dir)
    return ms().relax_integration.compile_relax(database, tuning_module(mod), target, params=None)
