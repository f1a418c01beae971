"""Gensor search as a MetaSchedule ``PySearchStrategy``: the states, moves and scores of the
construction graph whose Markov chain :mod:`edgetune.tuning.gensor` walks.

States are traces of a design-space sketch with every decision made; a move changes one
decision by one notch (a tile factor between levels, a categorical ±1, a compute-at location
±1 — on GPU sketches these are also the thread/block extents, virtual threads and the
shared-memory staging); a move is valid when its trace replays on the task and passes the
postprocessors (on GPU targets these verify threads per block and shared memory: the resource
limits). The score of a state mixes

* an **analytic hardware model** over MetaSchedule's per-store features (loop extents, vector
  and parallel extents, bytes and cache lines touched and each buffer's reuse distance): per
  store, the larger of compute time (iterations over vector lanes × cores in use; on GPUs over
  warps × SMs in use) and memory time (cache lines at the cost of the level their reuse
  distance fits: registers, L1, L2 or DRAM), summed over stores; and
* the **XGBoost cost model**'s prediction, once it has been trained on the task.

Both are log2 speeds. The model's weight grows with the task's measurements (n / (n + 32)); the
analytic model's weight becomes its rank correlation with the measured times (at least 0.1)
once eight states are measured: a model that orders this task's schedules wrongly stops leading
the walks. Then the **measurements** correct the mix: it is shifted by the median gap between
measured and predicted, and a state near measured ones (up to ``LOCAL`` moves, weights
1/(1+d)²) takes on their own gaps; a measured state scores its measured time. Measured on this
project's operators the analytic model alone orders schedules weakly (rank correlation 0.0–0.55
per task), and it is this correction that made the walks find fast schedules (README).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..core import plain, tvm
from .base import meta_schedule
from .search import decisions, realize

log = logging.getLogger(__name__)

# MetaSchedule's per-store feature layout (PerStoreFeature, buffers_per_store=5), TVM 0.27
_VEC_LEN, _PAR_PROD = 18, 39
_IS_GPU, _BLOCK, _THREAD, _VTHREAD = 49, (50, 51, 52), (53, 54, 55), 56
_BUFFER0, _BUFFER_STRIDE, _BUFFERS = 57, 18, 5
_LINES, _REUSE_BYTES = 5, 11  # within a buffer's 18 features
_OUTER_PROD = 161

MIN_CORRELATION = 0.1
CALIBRATE_AFTER = 8
LOCAL = 3  # measured states this many moves away or closer correct a state's score


def _unlog(x: float) -> float:
    """The inverse of the features' slog(x) = log2(x + 1)."""
    return max(2.0 ** float(x) - 1.0, 0.0)


def _in_use(extent: float, slots: int) -> float:
    """How many of ``slots`` (cores, vector lanes, SMs) a loop of ``extent`` keeps busy on
    average: all of them in full waves, the rest idle in the last one (1 without the loop)."""
    if extent < 1:
        return 1.0
    if extent <= slots:
        return extent
    return extent / math.ceil(extent / slots)


@dataclass(frozen=True)
class Hardware:
    """What the analytic model knows of the target."""

    cores: int = 4
    lanes: int = 4  # fp32 lanes of one vector register
    registers: int = 32  # vector registers
    l1: int = 32 * 1024
    l2: int = 1024 * 1024
    gpu: bool = False
    sms: int = 8
    warp: int = 32
    max_threads: int = 1024

    @property
    def register_bytes(self) -> float:
        return self.registers * self.lanes * 4 * 0.75  # a quarter of the file for operands in flight


# (SMs, L2 bytes) by CUDA architecture where the GPU is not here to ask: the Jetsons (Orin, Xavier,
# TX2, Nano) exactly; for data-centre and desktop archs, whose parts differ in SM count, the
# flagship (A100, RTX 3090, RTX 4090, H100). A GPU of the target's arch on this machine is asked
# instead (local_gpu_size): the H100 comparison of an earlier stop ran with 16 SMs and 4 MB
# assumed for sm_90 (it has 132 and 50 MB), rating block counts for a far smaller GPU.
GPU_SIZES = {"sm_87": (8, 4 << 20), "sm_72": (6, 512 << 10), "sm_62": (2, 512 << 10), "sm_53": (1, 256 << 10),
             "sm_80": (108, 40 << 20), "sm_86": (82, 6 << 20), "sm_89": (128, 72 << 20), "sm_90": (132, 50 << 20)}


def local_gpu_size(arch: str) -> tuple[int, int] | None:
    """(SMs, L2 bytes) of this machine's first CUDA GPU when its compute capability is ``arch``
    (``sm_90`` ↔ 9.0), else None (no GPU, no driver, another arch)."""
    try:
        dev = tvm().cuda(0)
        if not dev.exist or f"sm_{str(dev.compute_version).replace('.', '')}" != arch:
            return None
        return int(dev.multi_processor_count), int(dev.l2_cache_size_bytes)
    except Exception:  # noqa: BLE001 — TVM built without CUDA, or the driver refuses: no local GPU
        return None


def hardware_of(target: Any) -> Hardware:
    """The model's parameters from a TVM target (its cores, ISA, or CUDA architecture)."""
    attrs = {str(k): plain(v) for k, v in target.attrs.items()}
    if target.kind.name == "cuda":
        arch = str(attrs.get("arch", ""))
        sms, l2 = local_gpu_size(arch) or GPU_SIZES.get(arch, (16, 4 << 20))
        return Hardware(cores=sms, lanes=1, registers=255, l1=int(attrs.get("max_shared_memory_per_block", 49152)),
                        l2=l2, gpu=True, sms=sms, warp=int(attrs.get("thread_warp_size", 32)),
                        max_threads=int(attrs.get("max_num_threads", 1024)))
    mcpu = str(attrs.get("mcpu", ""))
    mattr = " ".join(str(a) for a in (attrs.get("mattr") or []))
    triple = str(attrs.get("mtriple", ""))
    cores = int(attrs.get("num-cores", 0) or 0) or 4
    if "avx512" in mattr or "avx512" in mcpu or mcpu in ("skylake-avx512", "cascadelake", "icelake-server",
                                                         "sapphirerapids", "znver4"):
        return Hardware(cores=cores, lanes=16, registers=32, l2=1024 * 1024)
    if "aarch64" in triple or "arm" in triple or "neon" in mattr:
        big = mcpu in ("cortex-a76", "cortex-a78", "neoverse-n1", "cortex-a715", "cortex-x1")
        return Hardware(cores=cores, lanes=4, registers=32, l1=(64 if big else 32) * 1024,
                        l2=(512 if big else 1024) * 1024)
    return Hardware(cores=cores, lanes=8, registers=16, l2=256 * 1024)


def analytic_seconds(rows: Any, hw: Hardware) -> float:
    """The analytic model's time (in cycles, as a relative measure) of one candidate, from its
    per-store feature rows."""
    total = 0.0
    for row in rows:
        iters = _unlog(row[_OUTER_PROD])
        if iters <= 0:
            continue
        if hw.gpu or row[_IS_GPU] > 0.5:
            threads = math.prod(max(_unlog(row[i]), 1.0) for i in _THREAD)
            blocks = math.prod(max(_unlog(row[i]), 1.0) for i in _BLOCK) * max(_unlog(row[_VTHREAD]), 1.0)
            if threads > hw.max_threads:
                return math.inf
            warps = math.ceil(threads / hw.warp)
            lane_use = threads / (warps * hw.warp)  # a partial warp idles lanes
            units = _in_use(blocks, hw.sms)
            # threads of a block run as warps on one SM's 4 schedulers × 32 lanes
            width = min(threads, 4 * hw.warp) * lane_use * units
        else:
            units = _in_use(_unlog(row[_PAR_PROD]), hw.cores)
            width = _in_use(_unlog(row[_VEC_LEN]), hw.lanes) * units
        compute = iters / max(width, 1e-9)
        memory = 0.0
        for b in range(_BUFFERS):
            base = _BUFFER0 + b * _BUFFER_STRIDE
            lines = _unlog(row[base + _LINES])
            if lines <= 0:
                continue
            reuse = _unlog(row[base + _REUSE_BYTES])
            if reuse and reuse <= hw.register_bytes and not hw.gpu:
                cost = 0.25
            elif reuse and reuse <= hw.l1:
                cost = 1.0
            elif reuse and reuse <= hw.l2:
                cost = 4.0
            else:
                cost = 16.0
            memory += lines * cost
        total += max(compute, memory / max(units, 1e-9))
    return total if total > 0 else math.inf


def rank_correlation(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (ties broken by order)."""
    n = len(xs)
    if n < 2:
        return 0.0

    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(n), key=lambda i: v[i])
        out = [0.0] * n
        for r, i in enumerate(order):
            out[i] = float(r)
        return out

    rx, ry = ranks(xs), ranks(ys)
    mean = (n - 1) / 2
    cov = sum((a - mean) * (b - mean) for a, b in zip(rx, ry))
    var = sum((a - mean) ** 2 for a in rx)
    return cov / var if var else 0.0


def state_key(trace: Any) -> tuple[str, str, tuple[int, ...]]:
    """A state's identity (its sketch's instructions and its decisions), the sketch's identity,
    and its decision vector (one code per decision: states one move apart differ in one)."""
    decs = trace.decisions
    parts, codes = [], []
    for i, inst in enumerate(trace.insts):
        name = str(inst.kind.name)
        if inst in decs:
            value = f"{plain(decs[inst])}"
            parts.append(f"{i}:{name}={value}")
            codes.append(int(hashlib.sha1(value.encode()).hexdigest()[:12], 16))
        else:
            parts.append(name)
    sketch = hashlib.sha1("|".join(p.split("=")[0] for p in parts).encode()).hexdigest()
    return hashlib.sha1("|".join(parts).encode()).hexdigest(), sketch, tuple(codes)


def _strip(trace: Any) -> Any:
    """``trace`` without its postprocessing instructions (what moves edit and keys compare)."""
    for inst in trace.insts:
        if inst in trace.decisions:
            return trace.with_decision(inst, trace.decisions[inst], remove_postproc=True)
    return trace.simplified(remove_postproc=True)


def moves(trace: Any, decision_moves: Callable[[list[Any]], list[tuple[int, Any]]]) -> list[tuple[int, Any]]:
    """The primitive moves out of a state: (instruction index, new decision); tile splits and
    categoricals by ``decision_moves`` (Droplet's notches, over (index, kind, decision, attrs)),
    compute-at locations one loop in or out here."""
    out: list[tuple[int, Any]] = []
    listed = []
    for i, kind, decision, attrs in decisions(trace):
        if kind == "SampleComputeLocation":
            out.extend((i, d) for d in (int(decision) - 1, int(decision) + 1) if d >= -2)
        else:
            listed.append((i, kind, decision, attrs))
    return decision_moves(listed) + out


def _gensor_class() -> type:
    """The strategy class (defined on first use: deriving from TVM's classes imports TVM)."""
    from tvm.ir.utils import derived_object

    m = meta_schedule()

    @derived_object
    class GensorSearch(m.search_strategy.PySearchStrategy):
        """Markov-chain walks over the construction graph (see the module docstring)."""

        def __init__(self, chain_factory: Callable[..., Any], decision_moves: Callable[..., Any],
                     cost_model: Any = None, deadline: Callable[[], float | None] | None = None, walks: int = 48,
                     evaluations: int = 1500, starts: int = 6, seed: int = 0):
            self.chain_factory, self.decision_moves, self.model = chain_factory, decision_moves, cost_model
            self.deadline = deadline
            self.walks, self.evaluations, self.starts = walks, evaluations, starts
            self.seed = seed
            self.context: Any = None
            self.pool: ThreadPoolExecutor | None = None
            self.local = threading.local()
            self._reset()

        def _reset(self) -> None:
            self.chain: Any = None
            self.traces: dict[str, Any] = {}  # key → trace without postprocessing
            self.vectors: dict[str, tuple[str, tuple[int, ...]]] = {}  # key → (sketch, decision codes)
            self.offset = 0.0  # measured − predicted, median over the measured states
            self.residuals: dict[str, tuple[Any, Any]] = {}  # sketch → (decision codes, residuals) measured
            self.cands: dict[str, Any] = {}  # key → measure candidate (None: it does not replay)
            self.analytic: dict[str, float] = {}  # key → the analytic model's score
            self.predicted: dict[str, tuple[int, float]] = {}  # key → (round, the cost model's score)
            self.measured: dict[str, float] = {}
            self.sketches: list[Any] = []
            self.database = self.cost_model = None
            self.per_iter = 32
            self.weights = (1.0, 0.0)
            self.last: Any = None  # the last round's statistics

        def _initialize_with_tune_context(self, context: Any) -> None:
            self.context = context
            self.hw = hardware_of(context.target)
            self.rng = random.Random(int(context.rand_state) if context.rand_state is not None else self.seed)

        def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: list[Any],
                       database: Any = None, cost_model: Any = None) -> None:
            self._reset()
            self.sketches = [_strip(s.trace) for s in design_spaces]
            # the Python cost model given at construction, else the one MetaSchedule passes here
            self.database, self.cost_model, self.per_iter = database, self.model or cost_model, num_trials_per_iter
            self.chain = self.chain_factory(self._expand, self._score, self.rng)
            self.extractor = m.feature_extractor.PerStoreFeature()
            for trace, secs in self._measured_records():
                self.measured[self._add(trace)] = secs
            self.chain.mark_measured(list(self.measured))
            self.pool = ThreadPoolExecutor(os.cpu_count() or 1) if (os.cpu_count() or 1) > 1 else None

        def post_tuning(self) -> None:
            if self.pool is not None:
                self.pool.shutdown()
                self.pool = None
            self._reset()

        def clone(self) -> Any:
            return GensorSearch(self.chain_factory, self.decision_moves, self.model, self.deadline, self.walks,
                                self.evaluations, self.starts, self.seed)

        # ---- states

        def _realize(self, trace: Any, seed: int) -> Any | None:
            # each thread its own postprocessors (as MetaSchedule's own search does); states come
            # from this task's own sketches: no check that the records replay them
            posts = getattr(self.local, "postprocs", None)
            if posts is None:
                posts = self.local.postprocs = [p.clone() for p in self.context.space_generator.postprocs]
            return realize(trace, self.context.mod, posts, seed, check_replay=False)

        def _add(self, trace: Any, cand: Any = None) -> str:
            """Register a state by its trace (realized when first scored, unless ``cand`` is given)."""
            trace = _strip(trace)
            key, sketch, codes = state_key(trace)
            if key not in self.traces:
                self.traces[key] = trace
                self.vectors[key] = (sketch, codes)
            if cand is not None and key not in self.cands:
                self.cands[key] = cand
            return key

        def _random_state(self) -> str | None:
            """A sketch with fresh random decisions: an initial state of the chain."""
            from tvm.s_tir.schedule import Trace

            for _ in range(4):
                sketch = self.rng.choice(self.sketches)
                cand = self._realize(Trace(list(sketch.insts), {}), self.rng.randrange(1 << 30))
                if cand is not None:
                    return self._add(cand.sch.trace, cand)
            return None

        def _expand(self, key: str) -> list[str]:
            trace = self.traces[key]
            insts = list(trace.insts)
            out = []
            for idx, decision in moves(trace, self.decision_moves):
                try:
                    new = trace.with_decision(insts[idx], decision, remove_postproc=True)
                except Exception:  # noqa: BLE001 — a decision TVM refuses is no move
                    continue
                out.append(self._add(new))
            return out

        def _realize_all(self, keys: list[str]) -> None:
            """Replay the states not replayed yet, on every core (TVM releases the GIL)."""
            todo = [k for k in keys if k not in self.cands]
            if not todo:
                return
            seeds = [self.rng.randrange(1 << 30) for _ in todo]
            work = list(zip(todo, seeds))
            if len(work) > 1 and self.pool is not None:
                done = list(self.pool.map(lambda ks: self._realize(self.traces[ks[0]], ks[1]), work))
            else:
                done = [self._realize(self.traces[k], sd) for k, sd in work]
            for k, cand in zip(todo, done):
                self.cands[k] = cand

        def _features(self, keys: list[str]) -> list[Any]:
            cands = [self.cands[k] for k in keys]
            try:
                return [f.numpy() for f in self.extractor.extract_from(self.context, cands)]
            except Exception:  # noqa: BLE001 — one program the extractor cannot read: find it
                out = []
                for c in cands:
                    try:
                        out.append(self.extractor.extract_from(self.context, [c])[0].numpy())
                    except Exception:  # noqa: BLE001 — scored as outside the graph
                        out.append(None)
                return out

        def _prior(self, keys: list[str]) -> list[float]:
            """The models' score of each state: the analytic model, mixed with the cost model's
            prediction once it is trained (−inf: the state does not replay or is outside the
            resource limits)."""
            self._realize_all(keys)
            w_a, w_m = self.weights
            todo = [k for k in keys if (k not in self.analytic or (w_m > 0 and self.predicted.get(k, (-1,))[0]
                                                                    != self.chain.round)) and self.cands[k] is not None]
            for k in keys:
                if self.cands[k] is None:
                    self.analytic[k] = -math.inf
            if todo:
                feats = self._features(todo)
                for k, f in zip(todo, feats):
                    secs = analytic_seconds(f, self.hw) if f is not None else math.inf
                    self.analytic[k] = -math.log2(secs) if math.isfinite(secs) and secs > 0 else -math.inf
                live = [(k, f) for k, f in zip(todo, feats) if f is not None and math.isfinite(self.analytic[k])]
                if w_m > 0 and live:
                    for (k, _f), p in zip(live, _predict(self.cost_model, self.context, [f for _k, f in live],
                                                        [self.cands[k] for k, _f in live])):
                        self.predicted[k] = (self.chain.round, math.log2(max(float(p), 1e-4)))
            out = []
            for k in keys:
                a = self.analytic[k]
                out.append(w_a * a + w_m * self.predicted[k][1] if w_m > 0 and math.isfinite(a) and k in self.predicted
                           else w_a * a)
            return out

        def _score(self, keys: list[str]) -> list[float]:
            """Scores on the measured scale (−log2 seconds): a measured state's own time; else
            the models' score, shifted by the median gap to the measurements, plus the gap
            measured at the nearby measured states (within LOCAL moves, closer ones weigh more)."""
            import numpy as np

            prior = self._prior(keys)
            out = []
            for k, p in zip(keys, prior):
                if k in self.measured:
                    out.append(-math.log2(self.measured[k]))
                    continue
                if not math.isfinite(p):
                    out.append(p)
                    continue
                sketch, codes = self.vectors[k]
                local = 0.0
                got = self.residuals.get(sketch)
                if got is not None and len(codes) == got[0].shape[1]:
                    dist = (got[0] != np.asarray(codes)).sum(axis=1)
                    near = dist <= LOCAL
                    if near.any():
                        w = 1.0 / (1.0 + dist[near]) ** 2
                        local = float((w * got[1][near]).sum() / (1.0 + w.sum()))
                out.append(p + self.offset + local)
            return out

        # ---- rounds

        def _measured_records(self) -> list[tuple[Any, float]]:
            from .database import top_traces

            if self.database is None:
                return []
            return top_traces(self.database, self.context.mod, 256)

        def _calibrate(self) -> None:
            """This round's models, from the measurements: the mix of analytic model and cost
            model (the analytic model weighs its rank correlation with the measured times, the
            cost model n / (n + 32) once trained), the median gap between that score and the
            measured times, and each measured state's own gap (for the states near it)."""
            import numpy as np

            n = len(self.measured)
            w_m = n / (n + 32.0) if self.cost_model is not None and _trained(self.cost_model) else 0.0
            self.weights = (1.0, 0.0)
            keys = [k for k in self.measured if k in self.vectors]
            w_a = 1.0
            if len(keys) >= CALIBRATE_AFTER:
                analytic = self._prior(keys)
                pairs = [(a, -math.log2(self.measured[k])) for k, a in zip(keys, analytic) if math.isfinite(a)]
                if len(pairs) >= CALIBRATE_AFTER:
                    w_a = max(MIN_CORRELATION, rank_correlation([a for a, _ in pairs], [b for _, b in pairs]))
            self.weights = (w_a, w_m)
            prior = self._prior(keys) if keys else []
            gaps = {k: -math.log2(self.measured[k]) - p for k, p in zip(keys, prior) if math.isfinite(p)}
            self.offset = float(np.median(list(gaps.values()))) if gaps else 0.0
            by_sketch: dict[str, list[tuple[tuple[int, ...], float]]] = {}
            for k, g in gaps.items():
                sketch, codes = self.vectors[k]
                by_sketch.setdefault(sketch, []).append((codes, g - self.offset))
            self.residuals = {}
            for sketch, rows in by_sketch.items():
                width = len(rows[0][0])
                rows = [r for r in rows if len(r[0]) == width]
                self.residuals[sketch] = (np.array([r[0] for r in rows], dtype=np.int64),
                                          np.array([r[1] for r in rows], dtype=np.float64))

        def generate_measure_candidates(self) -> list[Any] | None:
            if self.chain is None:
                return None
            until = self.deadline() if self.deadline is not None else None
            while not self.chain.converged:
                if until is not None and time.monotonic() >= until:
                    return []  # the tuning deadline: nothing more this run (the task is not exhausted)
                self.chain.next_round()
                self._calibrate()
                best = sorted(self.measured, key=self.measured.get)[: self.starts // 2]
                fresh = [k for k in (self._random_state() for _ in range(self.starts)) if k is not None]
                starts = fresh + best
                self.rng.shuffle(starts)
                self.last = self.chain.run_round(starts, self.per_iter, self.walks, self.evaluations, until)
                log.debug("gensor round %d: %d walks, %d steps, %d states scored, %d absorbed, %d new; "
                          "weights analytic %.2f / cost model %.2f; %d measured", self.chain.round, self.last.walks,
                          self.last.steps, self.last.evaluated, self.last.absorbed, self.last.new, *self.weights,
                          len(self.measured))
                if self.last.found:
                    return [self.cands[k] for k in self.last.found[: self.per_iter]]
            return None

        def notify_runner_results(self, measure_candidates: list[Any], results: list[Any]) -> None:
            keys = []
            for cand, res in zip(measure_candidates, results):
                key = self._add(cand.sch.trace, cand)
                keys.append(key)
                secs = [float(getattr(t, "value", t)) for t in (res.run_secs or [])]
                if secs and res.error_msg is None:
                    self.measured[key] = sum(secs) / len(secs)
            self.chain.mark_measured(keys)

    return GensorSearch


def _predict(cost_model: Any, context: Any, features: list[Any], cands: list[Any]) -> list[float]:
    """The cost model's scores, from features already extracted where it allows (XGBModel)."""
    try:
        return [float(x) for x in cost_model._predict(xs=[f.astype("float32") for f in features])]
    except AttributeError:
        return [float(x) for x in cost_model.predict(context, cands)]


def _trained(cost_model: Any) -> bool:
    """Whether the XGBoost model predicts (untrained, it answers random numbers)."""
    try:
        return cost_model.booster is not None and cost_model.data_size >= cost_model.num_warmup_samples
    except AttributeError:
        return True


_CLASS: type | None = None


def gensor_search(chain_factory: Callable[..., Any], decision_moves: Callable[..., Any], cost_model: Any = None,
                  seed: int = 0, deadline: Callable[[], float | None] | None = None) -> Any:
    """A new Gensor ``PySearchStrategy``: its chain built by ``chain_factory(expand, score, rng)``,
    tile and categorical moves listed by ``decision_moves`` (both pure Python, from
    :mod:`edgetune.tuning`); ``deadline()`` (``time.monotonic``, or None) cuts a round short."""
    global _CLASS
    if _CLASS is None:
        _CLASS = _gensor_class()
    return _CLASS(chain_factory, decision_moves, cost_model, deadline, seed=seed)
