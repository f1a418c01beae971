"""Micro-kernel schedules and design spaces: register-tiled convolutions (packed, few-output
lanes, int8 dot products), dense layers and matmuls, and Winograd kernels. Depthwise kernels
are in :mod:`.depthwise`, what they all share in :mod:`.registers`."""

from __future__ import annotations

import logging
from typing import Any

from ..kernels import dot as dots
from ..kernels.cpu import STREAMED, CpuFacts, divisors, max_rows, tile_rate
from ..kernels.dot_intrinsics import register as register_intrinsics
from .common import (
    NoMatchError,
    block_index,
    child_blocks,
    fold_epilogue,
    is_reduction,
    loop_extent,
    parallel_outer,
    vector_factor,
)
from .registers import (
    Decider,
    finish_microkernel,
    loop_exists,
    pad_stages,
    vector_epilogue,
    vector_registers,
)
from .rules import schedule_elementwise

log = logging.getLogger(__name__)





def default_rows(extent: int, vectors: int, cpu: CpuFacts, weight_cost: float = 1.0, accumulators: int = 0) -> int:
    """The register-tile height for a loop of ``extent``: the best-scoring divisor (holding at
    most ``accumulators`` registers of sums, where given)."""
    fits = [rw for rw in divisors(extent)
            if rw <= max_rows(vectors, cpu) and (not accumulators or rw * vectors <= accumulators)] or [1]
    return max(fits, key=lambda rw: (tile_rate(rw, vectors, cpu, weight_cost), rw))


# Accumulators of an fp32 convolution tile over ≤ 4 input channels (a first layer) on AArch64.
# Its whole reduction (ky, kx, channel) is unrolled, and LLVM keeps several input values in
# flight for the by-element FMLAs: the 24 the model allows (8 pixels × 12 channels: BlazeFace's
# 5×5 3 → 24 layer) spilled to the stack inside the tile. At ≤ 20 (4 × 12), by the Pi estimate
# (A72 / A76 M cycles): that layer 1.82 → 1.14 on the A76, the face detector 11.3 / 6.4 →
# 10.7 / 5.7, MobileNetV3 65.8 / 35.3 → 65.5 / 35.0; SqueezeNet, YOLO-style, OCR classifier,
# VGG-style CNN unchanged. (The same cap on every layer made SqueezeNet 68.3 / 35.4 → 98.4 /
# 80.4; 16 measured as 20, 24 as before.)
FIRST_LAYER_ACCUMULATORS = 20


# output channels per step of the Pi 4 int8 kernel's epilogue once per pixel (_partial_lanes): at
# most this many unrolled (eight blocks; more than that, a loop over chunks of them: unrolled
# whole, hand landmark's 1,152 channels are an i-cache's worth of code)
EPILOGUE_CHANNELS = 128


def accumulate_in_registers(sch: Any, main: Any, writer: Any, at: Any, row: Any, vec: Any, first_reduce: Any,
                            cpu: CpuFacts) -> None:
    """A register tile of ``main``: ``writer`` (the local accumulators' copy out, or a stage that
    reads them) placed under ``at``, the tile's ``row`` loop unrolled and ``vec`` in vector
    registers, the sums' init split off at ``first_reduce``; the init and the writer unrolled
    and vectorized the same way."""
    sch.reverse_compute_at(writer, at, preserve_unit_loops=True)
    sch.unroll(row)
    vector_registers(sch, vec, cpu)
    init = sch.decompose_reduction(main, first_reduce)
    for block in (init, writer):
        loops = sch.get_loops(block)
        sch.unroll(loops[-2])
        vector_registers(sch, loops[-1], cpu)


def schedule_conv2d_packed(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """The packed NHWC convolution micro-kernel (see module docstring); ``order`` 0 keeps a
    row of pixels fixed while output-channel blocks stream weights, 1 the reverse."""
    pad_stages(sch, cpu, cores)
    epi, cropped = fold_epilogue(sch, main, per_tile=True)
    b, y, x, o, ry, rx, rc = sch.get_loops(main)
    weights = sch.get(main).reads[1].source
    oci = int(weights.shape[-1])
    vectors = -(-oci // cpu.lanes)
    tile = sch.get(main).annotations.get("edgetune.row_tile")
    if tile is not None:  # a symbolic width, computed as whole tiles of this many pixels
        xo, xi = sch.split(x, [None, int(tile)])
    else:
        ow = loop_extent(sch, x)
        cap = FIRST_LAYER_ACCUMULATORS if cpu.aarch64 and loop_extent(sch, rc) <= 4 else 0
        rows = default_rows(ow, vectors, cpu, accumulators=cap)
        xo, xi = sch.split(x, decide.tile(x, [ow // rows, rows], max_rows(vectors, cpu)))
    oo, oi = sch.split(o, [None, oci])
    if order == 0:
        sch.reorder(b, y, xo, oo, ry, rx, rc, xi, oi)
        at = oo
        par = [b, y, xo]
    else:
        sch.reorder(b, y, oo, xo, ry, rx, rc, xi, oi)
        at = xo
        par = [b, y, oo]
    parallel_outer(sch, par, cpu, cores)
    finish_microkernel(sch, main, epi, at, ry, xi, oi, cpu, cores, cropped)


LANES_ACCUMULATORS = 8  # registers of partial sums in a tile of the few-outputs convolution


def schedule_conv2d_lanes(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """The convolution to few output channels (:func:`..kernels.conv.conv2d_nhwc_lanes`): a
    register tile of ``RW`` pixels (8 accumulators: the A72's FMLA latency) × the output
    channels, one vector of partial sums each, over (ky, ic / lanes, kx) — kx unrolled, so per
    kernel row and channel block the tile's input vectors are read once for every kx —; per
    tile the sums across lanes and the epilogue, from registers (the outputs adjacent: a vector
    store where the tile holds whole registers). One loop order. Measured on the 8 → 1 layer
    (A72 M cycles): 8 pixels 1.89, 4 pixels 2.17, 16 pixels 2.14 (spilled); kx outside the
    channel blocks with those unrolled 1.85 (an unrolled loop of ic / lanes: not kept)."""
    if order:
        raise NoMatchError("one loop order")
    pad_stages(sch, cpu, cores)
    total = sch.get_consumers(main)[0]
    epi, _cropped = fold_epilogue(sch, total)
    b, y, p, lane, ry, rx, rb = sch.get_loops(main)
    oc = int(sch.get(main).reads[1].source.shape[0])  # the weights [OC, KH, KW, IC]
    ow = loop_extent(sch, p) // oc
    rows = max(d for d in divisors(ow) if d * oc <= LANES_ACCUMULATORS or d == 1)
    po, pi = sch.split(p, decide.tile(p, [ow // rows, rows * oc], LANES_ACCUMULATORS))
    sch.reorder(b, y, po, ry, rb, rx, pi, lane)
    sch.unroll(rx)
    fused = parallel_outer(sch, [b, y, po], cpu, cores)
    at = po if loop_exists(sch, po) else fused
    sch.reverse_compute_at(total, at, preserve_unit_loops=True)
    sch.set_scope(main, 0, "local")
    if epi is not None:
        sch.reverse_compute_at(epi, at, preserve_unit_loops=True)
        sch.set_scope(total, 0, "local")
    sch.unroll(pi)
    sch.vectorize(lane)
    init = sch.decompose_reduction(main, ry)
    *_, ipi, ilane = sch.get_loops(init)
    sch.unroll(ipi)
    sch.vectorize(ilane)
    *_, tp, tl = sch.get_loops(total)
    if cpu.aarch64 and loop_extent(sch, tp) % 4 == 0 and loop_extent(sch, tl) == 4:
        # four outputs' sums a tree of three faddp (dot.LANES_SUM_F32): summed one by one, LLVM
        # moved single lanes (transposes and lane inserts: 0.57 of the 8 → 1 layer's 1.99 M cycles)
        group, four = sch.split(tp, [None, 4])
        sums = sch.decompose_reduction(total, group)
        register_intrinsics()
        sch.tensorize(four, dots.LANES_SUM_F32)
        sch.unroll(group)
        vector_registers(sch, sch.get_loops(sums)[-1], cpu)
    else:
        sch.unroll(tp)
        sch.unroll(tl)
    if epi is not None:
        *_, exi, eo = sch.get_loops(epi)
        flat = sch.fuse(exi, eo)
        width = vector_factor(loop_extent(sch, flat), cpu)
        if width:
            outer, inner = sch.split(flat, [None, width])
            sch.unroll(outer)
            sch.vectorize(inner)
        else:
            sch.unroll(flat)


def schedule_conv2d_int8(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """The integer convolution micro-kernel: ``RW`` output pixels × ``NB`` blocks of 16 output
    channels of int32 accumulators in registers over (ky, kx, ic/4), each step one dot-product
    instruction per pixel and block (per 4 channels on Arm) — the target's family, read from
    the kernel (:mod:`..kernels.dot`). ``RW`` and ``NB`` are tuned."""
    pad_stages(sch, cpu, cores)
    family = str(sch.get(main).annotations["edgetune.dot"])
    # The requantize epilogue runs in this kernel: as a pass of its own (the fp32 kernels'
    # choice when padded channels are cropped) it cost 3× the convolution (BlazeFace). Per
    # tile of blocks, from the registers — unless the output is cropped (120 channels computed
    # as 128) or a residual's channel pad is read: per tile, their bounds flip at a lane that
    # depends on the tile, so TVM leaves the epilogue scalar (120 channels: 0.116 ms, 0.068
    # once per row of pixels after all tiles, its channel loop cut into whole registers —
    # measured). Then it runs once per row of pixels, from the accumulators in L1.
    lanes = sch.get_consumers(main)[0] if sch.get(main).annotations.get("edgetune.dot_lanes") else None
    epi, cropped = fold_epilogue(sch, main if lanes is None else lanes)
    ragged = cropped or (epi is not None and "if_then_else" in str(sch.get(epi).body))
    weights = next(r.source for r in sch.get(main).reads if len(r.source.shape) == 6)
    block, depth = int(weights.shape[-2]), int(weights.shape[-1])
    if lanes is not None:
        _partial_lanes(sch, main, lanes, epi, ragged, family, depth, cpu, cores, order)
        return
    *lead, x, o, ry, rx, rc = sch.get_loops(main)  # lead: batch and rows (a dense layer's: its batch)
    # x86: a zmm accumulator per pixel and block, two or three blocks (dot.blocks_per_tile),
    # rows of 8; Arm: four q registers per pixel and block (and the intrinsic's temporaries),
    # rows of 4
    rows = dots.tile_rows(family)
    ow = loop_extent(sch, x)
    default = max(d for d in divisors(ow) if d <= rows)
    if default == 1 and family == "sdot" and ow % 5 == 0:
        # A width with no divisor from 2 to 4 (SqueezeNet's 55) ran one pixel a tile: each
        # weight register fed one sdot. Five pixels fit the A76's registers (20 accumulators,
        # 5 input quads, 4 weights): SqueezeNet's 55-wide layers 1.46 / 1.30 → 1.23 / 1.06 M
        # cycles (a 1×1 layer over 16 channels 0.42 → 0.45), the model 17.60 → 17.16 M
        default = 5
    oo, oi = sch.split(o, [None, block])
    nob = loop_extent(sch, oo)
    # A first layer's row of taps on sdot whose output is cropped (24 channels as two blocks of
    # 16): its epilogue runs per pixel tile over all the blocks, the blocks a loop inside the
    # tile and the taps' rows (ky: 3) unrolled by LLVM — so every broadcast input quad was
    # invariant across the blocks: hoisted out of their loop (36 q registers for 4 pixels) and
    # spilled, and the by-lane sdot lost (a broadcast in another basic block is not folded).
    # The blocks unrolled, and pixels to 16 accumulators: each quad a by-lane operand, loaded
    # once per tile (MediaPipe hand landmark int8's 224² → 24 layer, A76 estimate, 1.24 → 0.83
    # M cycles; models whose first layer's channels are whole blocks measured no better)
    unrolled_blocks = (family == "sdot" and ragged and nob > 1
                       and "edgetune.tap_steps" in sch.get(main).annotations)
    if unrolled_blocks:
        default = max(d for d in divisors(ow) if d <= max(1, rows // nob))
    per = dots.blocks_per_tile(family, nob)
    if depth == dots.PAIR:
        # a first layer's row of pairs (dot.NEON_PAIRS): blocks of 8 channels (24: three, as
        # one tile) and pixels to 16 accumulators
        per = nob if nob * block <= 24 else 1
        default = max(d for d in divisors(ow) if d <= max(1, 16 // (per * block // 4)))
    xo, xi = sch.split(x, decide.tile(x, [ow // default, default], 2 * rows if family == "vnni" else 6))
    oo, ob = sch.split(oo, decide.tile(oo, [nob // per, per], 4))
    rco, rci = sch.split(rc, [None, depth])
    group = int(sch.get(main).annotations.get("edgetune.tap_steps", dots.QUADS))  # (a first layer's row of taps)
    group = dots.quad_group(family, depth, loop_extent(sch, rco), group)
    narrow = bool(int(sch.get(main).annotations.get("edgetune.dot_narrow", 0)))
    intrinsic = dots.row_intrinsic(family, depth, loop_extent(sch, rco), group, narrow)
    if intrinsic is not None:
        # sdot by element over four quads of a pixel's input at a time (dot.SDOT_QUADS; a first
        # layer's row of taps: dot.SDOT_TAPS): per 4-channel group of a block its steps' weights
        # stay in registers while every pixel of the tile is multiplied by them, each pixel's
        # bytes loaded once per group of steps. On plain NEON (a first layer's row of pairs,
        # dot.NEON_PAIRS) each pixel's broadcast pairs stay in registers while the block's
        # 8-channel groups stream their weights past them (with the weights kept, LLVM spilled
        # every pixel's broadcasts: SqueezeNet's first layer, A72 estimate, 4.74 → 4.03 M cycles;
        # 4-channel groups, a d register of weights each, 5.04 and 4.77)
        rco, rcq = sch.split(rco, [None, group])
        if depth == dots.PAIR:
            og, ol = sch.split(oi, [None, dots.PAIR_CHANNELS])
            inner = [ob, xi, og, rcq, ol, rci]
        else:
            og, ol = sch.split(oi, [None, dots.lanes(family)])
            inner = [ob, og, xi, rcq, ol, rci]
        vec = rcq
        register_intrinsics()
        sch.unroll(og)
    else:
        inner, vec = [xi, ob, oi, rci], oi
    sch.unroll(ob)
    at = _tile_order(sch, lead, xo, oo, [ry, rx, rco], inner, ragged, order, cpu, cores)
    if unrolled_blocks and loop_exists(sch, oo):
        sch.unroll(oo)
    finish_microkernel(sch, main, epi, at, ry, xi, vec, cpu, cores, dot=family, intrinsic=intrinsic)


def _tile_order(sch: Any, lead: list[Any], xo: Any, oo: Any, reduce: list[Any], inner: list[Any], ragged: bool,
                order: int, cpu: CpuFacts, cores: int) -> Any:
    """The integer micro-kernel's loops in order: ``lead``, the pixel tiles ``xo`` and channel
    blocks ``oo`` (``order`` 0: pixels first), the reduction, the tile's ``inner`` loops — the
    outer ones parallel. Returns the loop the epilogue goes under: each channel block, or each
    pixel tile where the epilogue is ``ragged`` or the blocks come first (a small output's
    pixel tiles fused into the parallel loop: that loop, 8×8 on 4 cores)."""
    outer = [xo, oo] if order == 0 else [oo, xo]
    sch.reorder(*lead, *outer, *reduce, *inner)
    at = xo if ragged or order != 0 else oo
    fused = parallel_outer(sch, [*lead, outer[0]], cpu, cores)
    if at.same_as(xo) and order == 0 and not loop_exists(sch, at):
        at = fused
    return at


def _partial_lanes(sch: Any, main: Any, lanes: Any, epi: Any | None, ragged: bool, family: str, depth: int,
                   cpu: CpuFacts, cores: int, order: int) -> None:
    """The integer micro-kernel over partial sums (:func:`..kernels.dot.partial_lanes`: the
    Pi 4's NEON step over 16 input channels): a register tile of one pixel × one block of 16
    output channels — 16 int32x4 accumulators, the weights reloaded per pixel from L1 (the A72's
    load pipe has the room: 9 loads per 32 multiplies) —, then per tile the ``lanes`` stage
    sums each output's partial sums (an ``addp`` tree per four channels: dot.LANES_SUM), and
    the epilogue runs once per pixel over its blocks' sums (per tile where the blocks are the
    outer loop or the output is cropped). By the A72 estimate every int8 convolution of a
    YOLOv8n-style detector took 0.77–1.02× the cycles of the 4-pixel tile summing its four
    channels per step (1×1 layers of 2 steps as 3×3 layers of 144)."""
    *lead, x, o, lane, ry, rx, rc, e = sch.get_loops(main)
    xo, xi = sch.split(x, [None, 1])
    oo, oi = sch.split(o, [None, dots.BLOCK])
    og, ol = sch.split(oi, [None, dots.lanes(family)])
    sch.unroll(og)
    at = _tile_order(sch, lead, xo, oo, [ry, rx, rc], [xi, og, ol, lane, e], ragged, order, cpu, cores)
    sch.reverse_compute_at(lanes, at, preserve_unit_loops=True)
    sch.set_scope(main, 0, "local")
    pixel = None
    if epi is not None:
        if order == 0 and not ragged:
            # the epilogue once per pixel, over all its channel blocks' sums (left in L1 by the
            # lanes stage): per block its four registers were each a chain of requantize steps,
            # too few to overlap; several blocks' registers at once overlap (iris landmark
            # int8's conv + requantize + residual add + PReLU layers 0.60 → 0.56 M A72 cycles;
            # Pi 4 estimate, M cycles: iris landmark int8 11.74 → 11.54, hand landmark full
            # 54.6 → 54.0, MobileNetV2 51.9 → 51.5, YOLOv8n 161.6 → 159.6, SqueezeNet 50.2 → 49.9)
            loops = sch.get_loops(main)
            k = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(at)))
            pixel = loops[k - 1] if k > 0 else None
        sch.reverse_compute_at(epi, pixel if pixel is not None else at, preserve_unit_loops=True)
        sch.set_scope(lanes, 0, "local")
    else:  # the sums are the kernel's output (ConvInteger's int32): summed locally, then stored
        epi = sch.cache_write(lanes, 0, "local")
    init = sch.decompose_reduction(main, ry)
    narrow = bool(int(sch.get(main).annotations.get("edgetune.dot_narrow", 0)))
    register_intrinsics()
    sch.tensorize(ol, dots.intrinsic(family, "int8", depth, narrow))
    *_, channels, partial = sch.get_loops(init)
    sch.unroll(channels)
    sch.vectorize(partial)
    # the sums: an addp tree per four channels (dot.LANES_SUM)
    *_, channels, _partial = sch.get_loops(lanes)
    group, four = sch.split(channels, [None, dots.lanes(family)])
    sums = sch.decompose_reduction(lanes, group)
    sch.tensorize(four, dots.LANES_SUM)
    sch.unroll(group)
    vector_registers(sch, sch.get_loops(sums)[-1], cpu)
    if pixel is not None:
        channels = sch.get_loops(epi)[-1]
        extent = loop_extent(sch, channels)
        if extent > EPILOGUE_CHANNELS:
            chunk = max(d for d in divisors(extent) if d % dots.BLOCK == 0 and d <= EPILOGUE_CHANNELS)
            sch.split(channels, [None, chunk])
    vector_epilogue(sch, epi, cpu)


def schedule_dense(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """Packed dense: ``RM`` rows × ``NB`` output features in registers, K streamed. Its input
    may be computed in the kernel (a recurrent step's ``r ⊙ h``): a parallel pass first."""
    epi, cropped = fold_epilogue(sch, main)
    inputs = {r.source for r in sch.get(main).reads}
    for block in child_blocks(sch):
        if not is_reduction(sch, block) and any(w.source in inputs for w in sch.get(block).writes):
            schedule_elementwise(sch, block, cpu, cores)
    *rows, j, rk = sch.get_loops(main)
    row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    _row_tiles(sch, main, epi, cropped, [], row, j, rk, cpu, cores, decide, order)


def schedule_matmul(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """Matmul of two computed tensors: the right operand packed (a parallel pass, what computes
    it inlined there), then per batch the dense micro-kernel, ``RM`` rows × ``NB`` columns."""
    epi, cropped = fold_epilogue(sch, main)
    inputs = {r.source for r in sch.get(main).reads}
    feeders = []
    blocks = child_blocks(sch)
    for block in blocks[:block_index(sch, blocks, main)]:
        if any(w.source in inputs for w in sch.get(block).writes):
            feeders.append(block)
        else:
            sch.compute_inline(block)  # a transpose or reshape before the packing
    for block in feeders:
        schedule_elementwise(sch, block, cpu, cores)
    *batch, i, j, rk = sch.get_loops(main)
    _row_tiles(sch, main, epi, cropped, batch, i, j, rk, cpu, cores, decide, order)


def _row_tiles(sch: Any, main: Any, epi: Any | None, cropped: bool, batch: list[Any], row: Any, j: Any, rk: Any,
               cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """The dense micro-kernel's tiles (dense and matmul): ``RM`` of ``row`` × the packed
    operand's ``NB`` columns in registers, K streamed; batch, row tiles and column blocks fused
    into one parallel loop (``order`` 0: row tiles outside column blocks, 1 the reverse)."""
    nb = int(sch.get(main).reads[1].source.shape[-1])
    vectors = -(-nb // cpu.lanes)
    tile = sch.get(main).annotations.get("edgetune.row_tile")
    if tile is not None:  # a symbolic row count, computed as whole tiles of this height
        ro, ri = sch.split(row, [None, int(tile)])
    else:
        m = loop_extent(sch, row)
        rm = default_rows(m, vectors, cpu, STREAMED) if m > 1 else 1
        ro, ri = sch.split(row, decide.tile(row, [m // rm, rm], max_rows(vectors, cpu)))
    jo, ji = sch.split(j, [None, nb])
    outer = [*batch, ro, jo] if order == 0 else [*batch, jo, ro]
    sch.reorder(*outer, rk, ri, ji)
    at = sch.fuse(*outer)
    sch.parallel(at)
    finish_microkernel(sch, main, epi, at, rk, ri, ji, cpu, cores, cropped)


def schedule_winograd(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """Winograd F(m, 3): input transform per tile and channel vector (parallel over tiles), the
    α² GEMMs as register-tiled micro-kernels (tiles × output channels), output transform per
    tile, then crop + epilogue as one elementwise pass."""
    pad_stages(sch, cpu, cores)
    _winograd_input(sch, cpu)
    e, p, o, rc = sch.get_loops(main)
    oci = int(sch.get(main).reads[1].source.shape[-1])
    vectors = -(-oci // cpu.lanes)
    tiles = loop_extent(sch, p)
    rows = default_rows(tiles, vectors, cpu)
    po, pi = sch.split(p, decide.tile(p, [tiles // rows, rows], max_rows(vectors, cpu)))
    oo, oi = sch.split(o, [None, oci])
    outer = [e, po, oo] if order == 0 else [e, oo, po]
    sch.reorder(*outer, rc, pi, oi)
    sch.parallel(sch.fuse(outer[0], outer[1]))
    accumulate_in_registers(sch, main, sch.cache_write(main, 0, "local"), outer[2], pi, oi, rc, cpu)
    _winograd_output(sch, cpu)
    epi, _separate = fold_epilogue(sch, sch.get_sblock("winograd_crop"))
    tail = epi if epi is not None else sch.get_sblock("winograd_crop")
    if epi is not None:
        sch.compute_inline(sch.get_sblock("winograd_crop"))
    schedule_elementwise(sch, tail, cpu, cores)


def _winograd_input(sch: Any, cpu: CpuFacts) -> None:
    """Bᵀ d B per tile: tiles in parallel, channels in vectors, the α × α transform unrolled."""
    v = sch.get_sblock("winograd_input")
    e, p, c = sch.get_loops(v)
    width = vector_factor(loop_extent(sch, c), cpu) or 1
    co, ci = sch.split(c, [None, width])
    sch.reorder(p, co, e, ci)
    sch.parallel(p)
    sch.unroll(e)
    sch.vectorize(ci)
    _first_stage_at(sch, "winograd_input1", co)


def _winograd_output(sch: Any, cpu: CpuFacts) -> None:
    """Aᵀ m A per tile: tiles in parallel, output channels in vectors, the transform unrolled."""
    out = sch.get_sblock("winograd_output")
    p, i, j, o = sch.get_loops(out)
    width = vector_factor(loop_extent(sch, o), cpu) or 1
    oo, oi = sch.split(o, [None, width])
    sch.reorder(p, oo, i, j, oi)
    sch.parallel(p)
    sch.unroll(i)
    sch.unroll(j)
    sch.vectorize(oi)
    _first_stage_at(sch, "winograd_output1", oo)


def _first_stage_at(sch: Any, name: str, at: Any) -> None:
    """The first (row) pass of a separable transform, per channel block: unrolled, its channel
    loop vectorized. Over a whole vector of channels the channel block (``at``) and the first
    tile loop are unrolled; unrolling both tile loops instead measured mixed (VGG block, Pi 5
    estimate: fp32 120.6 → 121.5 M cycles, fp16 65.8 → 65.3). Over channels that make no
    vector (YOLO11n-pose's 51 keypoint channels: a channel loop of one) the two tile loops are:
    the unit loop had been dropped, and the unrolls took the tile loop and the 51 channels —
    25 × 51 transforms unrolled, over 15 minutes in TVM's simplifier."""
    first = sch.get_sblock(name)
    sch.compute_at(first, at, preserve_unit_loops=True)
    *_, xi, r2, _tile, ch = sch.get_loops(first)
    scalar = loop_extent(sch, ch) == 1
    sch.unroll(xi if scalar else at)
    sch.unroll(r2 if scalar else xi)
    sch.vectorize(ch)
