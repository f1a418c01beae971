"""GPU schedules: TVM's DLight rules, with edgetune's rule for the reductions they leave to
their one-thread-per-output fallback, in TVM's CUDA pipeline."""

from __future__ import annotations

import math
from typing import Any

from ..core import tvm


def _rule_base() -> Any:
    from tvm.s_tir.dlight.gpu.base import GPUScheduleRule

    return GPUScheduleRule


class ReductionRows(_rule_base()):  # type: ignore[misc]
    """A lone reduction block of any commutative reducer — ``max`` and ``min`` included, which
    DLight's reduction rule does not recognise (it matches sums only) — as one thread block per
    output: the reduced axes split over the block's threads, each thread's partial in a
    register (``rfactor``), then combined across the threads. The fallback gave each output one
    thread looping over every reduced element: a per-tensor ``max`` of 64 × 1024 values took
    0.2–1.0 ms on an H200. Reductions with an epilogue, a short reduced extent or symbolic
    extents are left to DLight."""

    MIN_REDUCED = 64  # shorter reductions: one thread per output is fine

    def apply(self, func: Any, target: Any, _tunable: bool) -> Any:
        from tvm import s_tir, tirx
        from tvm.s_tir.dlight.analysis import normalize_prim_func
        from tvm.s_tir.dlight.base import try_inline_contiguous_spatial

        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        infos = try_inline_contiguous_spatial(sch, infos)
        if infos is None or len(infos) != 1 or not infos[0].is_reduction():
            return None
        info = infos[0]
        kinds = "".join(i.kind for i in info.iters)
        extents = [i.dom if isinstance(i.dom, int) else getattr(i.dom, "value", None) for i in info.iters]
        if not kinds.endswith("R") or kinds.strip("S").strip("R") or None in extents or len(sch.get(info.block_rv).writes) != 1:
            return None  # not spatial axes then reduced ones, all static
        reduced = math.prod(extent for kind, extent in zip(kinds, extents) if kind == "R")
        if reduced < self.MIN_REDUCED:
            return None
        block = info.block_rv
        loops = sch.get_loops(block)
        spatial = [loop for loop, kind in zip(loops, kinds) if kind == "S"]
        r = sch.fuse(*[loop for loop, kind in zip(loops, kinds) if kind == "R"])
        if not spatial:
            sch.add_unit_loop(block)
        elif len(spatial) > 1:
            sch.fuse(*spatial)
        threads = min(int(target.max_num_threads), 256 if reduced >= 256 else 64)
        _, tx = sch.split(r, [None, threads])
        rf = sch.rfactor(tx, 0)
        bx, r_outer, tx_rf = sch.get_loops(rf)
        sch.reorder(bx, tx_rf, r_outer)
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx_rf, "threadIdx.x")
        sch.set_scope(rf, 0, "local")
        sch.decompose_reduction(rf, r_outer)
        sch.reverse_compute_at(block, bx, preserve_unit_loops=True)
        _, tx, *rest = sch.get_loops(block)
        if rest:  # the unit spatial loop goes above the threads: they must be the innermost
            sch.reorder(sch.fuse(*rest) if len(rest) > 1 else rest[0], tx)
        sch.bind(tx, "threadIdx.x")
        return sch


def cuda_pipeline(target: Any) -> Any:
    """TVM's CUDA pipeline (``relax.get_default_pipeline``), with :class:`ReductionRows` among
    DLight's rules after its own reduction rules and before its fallback."""
    from tvm.relax.backend.cuda import pipeline as cuda
    from tvm.s_tir import dlight as dl

    schedule = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                                       ReductionRows(), dl.gpu.Fallback())
    legalize = [schedule if isinstance(p, dl.ApplyDefaultSchedule) else p for p in cuda.legalize_passes(target)]

    @tvm().transform.module_pass(opt_level=0)
    def _pipeline(mod: Any, _ctx: Any) -> Any:
        with target:
            return tvm().transform.Sequential(cuda.library_dispatch_passes(target) + legalize +
                                              cuda.dataflow_lower_passes(target) + cuda.finalize_passes(target))(mod)

    return _pipeline
