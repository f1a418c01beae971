"""The row kernels' schedule (softmax, layer norm: :mod:`..kernels.rows`): rows in parallel,
every stage of a row computed there while the row is in L1, partial results and elementwise
passes vectorized by whole registers, a row's odd tail (197 tokens: 192 + 5) a loop of its own."""

from __future__ import annotations

from typing import Any

from ..kernels.cpu import CpuFacts
from ..kernels.rows import EXP, OUTPUTS, PARTIALS, SHIFT
from .common import block_index, child_blocks, is_reduction, static_extent
from .registers import Decider


def schedule_rows(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """``main`` is the kernel's first stage. Producers fused before it are inlined (recomputed
    per pass over the row: elementwise, cheap); consumers fused after its output are inlined
    into the last one, which writes the result."""
    blocks = child_blocks(sch)
    for block in blocks[:block_index(sch, blocks, main)]:
        sch.compute_inline(block)
    for block in child_blocks(sch):
        if str(sch.get(block).name_hint).startswith(SHIFT):
            sch.compute_inline(block)  # into the exp
    for block in child_blocks(sch):
        if str(sch.get(block).name_hint).startswith(EXP) and static_extent(sch, sch.get_loops(block)[-1]) is None:
            # a row of symbolic length: its exponentials computed twice (for the sum, then for
            # the result) rather than kept in a row buffer of run-time size, a workspace
            # allocation per row (TVM 0.27)
            sch.compute_inline(block)
    blocks = child_blocks(sch)
    norm = next(b for b in blocks if str(sch.get(b).name_hint).startswith(OUTPUTS))
    at = block_index(sch, blocks, norm)
    stages, after = blocks[:at], blocks[at + 1:]
    out = norm
    if after:
        sch.compute_inline(norm)
        for block in after[:-1]:
            sch.compute_inline(block)
        out = after[-1]
    *rows, _c = sch.get_loops(out)
    row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    sch.parallel(row)
    for block in reversed(stages):
        sch.compute_at(block, row, preserve_unit_loops=True)
    for block in [*stages, out]:
        loops = sch.get_loops(block)
        if str(sch.get(block).name_hint).startswith(PARTIALS):  # (…, lanes, vectors of the row)
            lane, o = loops[-2:]
            sch.reorder(o, lane)
            sch.vectorize(lane)  # (before the init is split off: TVM vectorizes reductions, not their updates)
            init = sch.decompose_reduction(block, o)
            sch.vectorize(sch.get_loops(init)[-1])
        elif is_reduction(sch, block) and len(loops) > 1:
            # A row total over the tail past the last whole vector (symbolic rows): its identity
            # set before the loop. Left in the loop, TVM sets it on the first iteration only, and
            # a row whose length is a multiple of the lanes (an empty tail) read the total
            # uninitialized: NaN or garbage in the softmax of 16 / 32 tokens on AVX-512.
            sch.decompose_reduction(block, loops[1])
        elif not is_reduction(sch, block) and len(loops) > 1:
            vectorize_row(sch, loops[-1], cpu)


def vectorize_row(sch: Any, loop: Any, cpu: CpuFacts) -> None:
    """A row's elementwise loop in whole registers (two a step on NEON); the tail past the last
    one a loop of its own.
    A row of symbolic length is left to LLVM's loop vectorizer (vector body, scalar remainder).
    Measured on a softmax over 12 × 200 × 200 (AVX2; fixed-length kernel 0.32 ms): this 0.51 ms;
    TVM's split under a bounds predicate 1.99 ms (its lanes stay scalar; TVM cannot partition a
    loop of symbolic extent); rows padded to whole registers 1.32 ms (the clamped reads past the
    row's end become gathers)."""
    n = static_extent(sch, loop)
    if n is None:
        return
    # 128-bit registers (NEON): two a step. One 4-lane exp a step was a chain of dependent
    # multiply-adds the A72 could not overlap (45 cycles per 4 values by llvm-mca; a softmax
    # over 12 × 64 × 64: 0.71 → 0.47 M cycles on the Pi 4, 0.29 → 0.27 on the Pi 5; four a step
    # measured the same as two, with spills)
    wide = cpu.lanes * (2 if cpu.lanes == 4 else 1)
    lanes = wide if n >= wide else cpu.lanes if n >= cpu.lanes else 4 if n >= 4 else 1
    if lanes == 1:
        return
    full = n // lanes * lanes
    if full < n:
        loop, _tail = sch.loop_partition(loop, [full, None])
    if full > lanes:
        _outer, loop = sch.split(loop, [None, lanes])
    sch.vectorize(loop)
