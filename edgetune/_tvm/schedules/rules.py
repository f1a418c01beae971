"""Generic CPU schedule rules: elementwise, injective and reduction kernels."""

from __future__ import annotations

import math
from typing import Any

from ..kernels.cpu import CpuFacts
from ..kernels.resize import TABLE
from .common import (
    NoMatchError,
    block_index,
    child_blocks,
    fold_epilogue,
    has_select,
    is_reduction,
    loop_extent,
    parallel_outer,
    select_edges,
    static_extent,
    vector_factor,
    vectorize_inner,
)


def schedule_elementwise(sch: Any, block: Any, cpu: CpuFacts, cores: int, widths: tuple[int, ...] = ()) -> None:
    """Outer loops parallel, innermost vectorized (for pad stages and injective blocks; by the
    first of ``widths`` that fits, else by whole registers). Little work per pixel: a symbolic
    width stays out of the parallel loop where the rows before it are enough (a depthwise
    layer's pad stage over a symbolic width, fused, divided by it three times per pixel: 30 % of
    the layer's cycles on the Pi 4 estimate)."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        parallel_outer(sch, loops[:-1], cpu, cores, divide=False)
    vectorize_inner(sch, block, cpu, widths)


def schedule_reduction(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """One reduction block (pooling, mean, sum): producers inlined, the consumer chain computed
    per output, spatial loops outside the reduction, the innermost spatial loop vectorized."""
    blocks = child_blocks(sch)
    reductions = [b for b in blocks if is_reduction(sch, b)]
    if len(reductions) != 1:
        raise NoMatchError(f"{len(reductions)} reduction blocks, not one")
    main = reductions[0]
    for block in blocks[:block_index(sch, blocks, main)]:
        sch.compute_inline(block)
    epi, separate = fold_epilogue(sch, main)
    kinds = [int(iv.iter_type) for iv in sch.get(main).iter_vars]
    loops = sch.get_loops(main)
    if len(loops) != len(kinds):
        raise NoMatchError("the reduction's loops are not its iteration axes")
    spatial = [lp for lp, k in zip(loops, kinds) if k == 0]
    reduce = [lp for lp, k in zip(loops, kinds) if k != 0]
    if not spatial:
        _reduce_to_scalar(sch, main, reduce, cpu)
        return
    inner = spatial[-1]
    width = vector_factor(static_extent(sch, inner) or 1, cpu)
    vec = None
    if width and width < loop_extent(sch, inner):
        vo, vec = sch.split(inner, [None, width])
        par = [*spatial[:-1], vo]
    elif width:
        vec, par = inner, spatial[:-1]
    else:  # no whole-register width divides the channels: scalar, but every output in parallel
        par = spatial
    sch.reorder(*par, *reduce, *([vec] if vec is not None else []))
    if par:
        parallel_outer(sch, par, cpu, cores)
    now = sch.get_loops(main)
    first_reduce = len(now) - len(reduce) - (1 if vec is not None else 0)
    at = now[first_reduce - 1] if first_reduce > 0 else None
    if epi is not None and at is not None and not separate:
        sch.reverse_compute_at(epi, at, preserve_unit_loops=True)
        vectorize_inner(sch, epi, cpu)
    elif epi is not None:
        schedule_elementwise(sch, epi, cpu, cores)
    if vec is not None:
        sch.vectorize(vec)
    init = sch.decompose_reduction(main, now[first_reduce])
    if vec is not None:
        sch.vectorize(sch.get_loops(init)[-1])


SEAM_UNROLL = (4, 5, 3, 2)  # registers a step of a concatenation's pieces (the first that divides them all)


def schedule_injective(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """Only spatial blocks: inline what inlines, then each remaining block parallel + vector."""
    blocks = child_blocks(sch)
    if any(is_reduction(sch, b) for b in blocks):
        raise NoMatchError("has a reduction")
    for block in blocks[:-1]:
        if TABLE in sch.get(block).annotations:  # a resize's coordinates: computed once, read per pixel
            continue
        try:
            sch.compute_inline(block)
        except Exception:  # noqa: BLE001 — a block that cannot be inlined is scheduled on its own
            pass
    blocks = child_blocks(sch)
    if len(blocks) == 1 and _split_pad(sch.copy(), blocks[0], cpu, cores):
        _split_pad(sch, blocks[0], cpu, cores)
        return
    for block in blocks:
        loops = sch.get_loops(block)
        inner = static_extent(sch, loops[-1]) if loops else None
        edges = select_edges(sch, block, inner) if inner else []
        # the registers' loop is split off first: a partitioned piece that does not start at 0
        # cannot be split (TVM refuses), so the seams cut the loop of registers
        width = vector_factor(math.gcd(loop_extent(sch, loops[-1]), *edges), cpu) if edges else None
        if not width:  # no seam, or one no register fits between (a pad of 1): as before
            schedule_elementwise(sch, block, cpu, cores)
            continue
        # A concatenation along the innermost axis (YOLO's head: three scales' boxes and classes,
        # 144 × 1600 + 400 + 100) selects its source per lane, so TVM left every lane scalar, all
        # branches' requantizations computed: 44 cycles per element on the A76, 12 % of an int8
        # YOLO. Cut at each seam: every piece reads one source and vectorizes.
        if len(loops) > 1:
            parallel_outer(sch, loops[:-1], cpu, cores)
        outer, inner = sch.split(loops[-1], [None, width])
        sch.vectorize(inner)
        sizes = [(b - a) // width for a, b in zip([0, *edges], edges)]
        sizes.append(loop_extent(sch, outer) - sum(sizes))
        # a few registers a step, unrolled: a gathering read (the head's transpose) builds each
        # register lane by lane, a chain of dependent inserts; unrolled, the chains overlap
        unroll = next((u for u in SEAM_UNROLL if all(n % u == 0 for n in sizes)), 1)
        if unroll > 1:
            outer, step = sch.split(outer, [None, unroll])
            sch.unroll(step)
        sch.loop_partition(outer, [n // unroll for n in sizes[:-1]] + [None])


def _split_pad(sch: Any, block: Any, cpu: CpuFacts, cores: int) -> bool:
    """A padded block whose innermost axis no register fits: an int8 image model's input, NCHW
    float to the first convolution's padded NHWC int8 (3 channels innermost). With the pad's
    conditions in it LLVM left every element scalar (12 cycles per element on the A76, 5 % of an
    int8 MobileNetV3); without a pad LLVM vectorizes such a loop itself, storing the channels
    interleaved (``st3``). So the pad is split off — a fill of the whole output, then the
    in-bound part without conditions — and both are left to LLVM, rows in parallel: the fill a
    ``memset`` per row (fused and vectorized by TVM, its indices were divisions of the fused
    index that TVM did not simplify back, a byte store per lane: 1.13 M cycles of a 320² input
    on the A76 estimate; the input kernel 1.83 → 0.69 M without it).
    (Vectorized by TVM along the image rows instead, the stores are one lane at a time: slower
    on x86 and no faster on the A72/A76 estimates, measured.) False, with ``sch`` half-changed,
    where it does not apply: try it on a copy."""
    loops = sch.get_loops(block)
    inner = static_extent(sch, loops[-1]) if loops else None
    if len(loops) < 2 or inner is None or vector_factor(inner, cpu) or not has_select(sch, block):
        return False
    try:
        sch.decompose_padding(block, loops[0])
    except Exception:  # noqa: BLE001 — not a pad TVM can split off
        return False
    fill, inner = child_blocks(sch)
    rows = sch.get_loops(fill)[:-2]
    if rows:
        parallel_outer(sch, rows, cpu, cores)
    parallel_outer(sch, sch.get_loops(inner)[:-1], cpu, cores)
    return True


def _reduce_to_scalar(sch: Any, main: Any, reduce: list[Any], cpu: CpuFacts) -> None:
    """A whole tensor reduced to one value (a dynamically quantized activation's min and max):
    vector-wide partial results (``rfactor``), then a scalar finish over the lanes. Scalar, one
    element per step, it was 10 % of an int8 MiniLM."""
    loop = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
    width = vector_factor(loop_extent(sch, loop), cpu)
    if not width or width == loop_extent(sch, loop):
        raise NoMatchError("a reduction to a scalar no whole register divides")
    _outer, lanes = sch.split(loop, [None, width])
    partial = sch.rfactor(lanes, 0)
    first, second = sch.get_loops(partial)[-2:]  # the lanes (of extent ``width``) outside what they reduce
    lane, outer = (first, second) if loop_extent(sch, first) == width else (second, first)
    sch.reorder(outer, lane)
    sch.vectorize(lane)
    init = sch.decompose_reduction(partial, outer)
    sch.vectorize(sch.get_loops(init)[-1])


def schedule_blockwise(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """Several reductions (softmax, layer norms): every elementwise block parallel + vectorized
    on its own, reductions left serial. (TVM's DLight CPU rule computed the whole softmax once
    per output element here — 1000× the work on a 1000-class softmax, measured.)"""
    for block in child_blocks(sch):
        if not is_reduction(sch, block):
            schedule_elementwise(sch, block, cpu, cores)
