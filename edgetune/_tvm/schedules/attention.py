"""The fused attention kernel's schedule (:mod:`..kernels.attention`).

Kᵀ is packed first (a parallel pass over heads). Then, in parallel over heads × blocks of
``RB`` query rows: the block's scores (a register tile of ``TR`` rows × ``TC`` keys, the head
dimension streamed), its softmax (the row kernel's stages, :mod:`.rows`), and its share of the
output (``OR`` rows × up to four vectors of V's columns in registers, the keys streamed). The
score block (``RB`` × keys) is the only buffer between them: it stays in L1 (32 × 256 keys:
32 KB), where the unfused kernels wrote the whole ``heads × S × T`` matrix out and read it back
twice (12 × 256 × 256: 3 MB a layer at 256 tokens)."""

from __future__ import annotations

from typing import Any

from ..kernels.attention import CROP, LOGITS, OUTPUT, PACK, SCORES, tiles
from ..kernels.cpu import CpuFacts
from ..kernels.rows import PARTIALS, SHIFT
from .common import NoMatchError, block_index, child_blocks, is_reduction, loop_extent
from .microkernels import accumulate_in_registers
from .registers import Decider
from .rows import vectorize_row


def schedule_attention(sch: Any, scores: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """``scores`` is the kernel's score block (its main block); ``order`` is not used (one loop
    order), nor ``cores`` (heads × row blocks: 96 parallel tasks for MiniLM at 256 tokens)."""
    del cores, order
    out = sch.get_sblock(OUTPUT)
    loops = sch.get_loops(out)
    rows, keys = (int(x) for x in sch.get(scores).writes[0].source.shape[2:])
    heads = int(sch.get(sch.get_sblock(PACK)).writes[0].source.shape[1])
    if len(loops) == 4:  # [B, S, N·Hv]: the columns split into heads
        b, i, nc, rj = loops
        n, c = sch.split(nc, [heads, None])
    else:
        b, i, n, c, rj = loops
    width = loop_extent(sch, c)
    found = tiles(rows, keys, width, cpu)
    if found is None:
        raise NoMatchError("rows or keys not whole tiles")
    rb, tr, tc, orows, oc = found
    io, i2, i3 = sch.split(i, decide.tile(i, [rows // rb, rb // orows, orows], orows))
    co, ci = sch.split(c, [None, oc])
    sch.reorder(b, n, io, co, i2, rj, i3, ci)
    row = sch.fuse(b, n, io)
    sch.parallel(row)

    # the score block and its softmax under the row block; the logits (scale, biases) inlined
    # into the softmax's reads of them
    sch.compute_inline(sch.get_sblock(LOGITS))
    for block in child_blocks(sch):
        if str(sch.get(block).name_hint).startswith(SHIFT):
            sch.compute_inline(block)
    blocks = child_blocks(sch)
    stages = blocks[block_index(sch, blocks, sch.get_sblock(SCORES)):block_index(sch, blocks, out)]
    for block in reversed(stages):
        sch.compute_at(block, row, preserve_unit_loops=True)
    # Kᵀ packed per head, a vector's worth of keys at a time (their rows of H read in turn,
    # written as columns: a tile in L1); a vectorized loop over all keys per column (a strided
    # gather) measured 5-10 % slower on the whole kernel (MiniLM's 12 × 256 × 32, AVX-512)
    pack = sch.get_sblock(PACK)
    pb, pn, ph, pj = sch.get_loops(pack)
    pjo, pji = sch.split(pj, [None, cpu.lanes])
    sch.reorder(pn, pjo, ph, pji)
    sch.parallel(sch.fuse(pb, pn))
    sch.unroll(pji)

    # the output: OR rows × OC columns in registers, the keys streamed; written out from them
    # (rows past the end cropped there)
    crop = next((blk for blk in child_blocks(sch) if sch.get(blk).name_hint == CROP), None)
    if crop is None:
        writer = sch.cache_write(out, 0, "local")
    else:
        writer = crop
        sch.set_scope(out, 0, "local")
    accumulate_in_registers(sch, out, writer, i2, i3, ci, rj, cpu)

    # softmax stages: partial results in vector lanes, the elementwise passes vectorized
    for block in child_blocks(sch):
        name = str(sch.get(block).name_hint)
        inner = sch.get_loops(block)
        if name.startswith(PARTIALS) and is_reduction(sch, block):
            lane, o = inner[-2:]
            sch.reorder(o, lane)
            sch.vectorize(lane)
            first = sch.decompose_reduction(block, o)
            sch.vectorize(sch.get_loops(first)[-1])
        elif name.startswith(("T_fast_exp", "softmax_norm")):
            vectorize_row(sch, inner[-1], cpu)  # (a row of 257 keys: 256 + a tail loop)

    # the scores: TR rows × TC keys in registers, the head dimension streamed
    scores = sch.get_sblock(SCORES)
    si, sj, sd = sch.get_loops(scores)[-3:]
    sio, sii = sch.split(si, [None, tr])
    sjo, sji = sch.split(sj, [None, tc])
    sch.reorder(sio, sjo, sd, sii, sji)
    accumulate_in_registers(sch, scores, sch.cache_write(scores, 0, "local"), sjo, sii, sji, sd, cpu)
