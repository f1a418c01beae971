"""Micro-kernel schedules and design spaces: register-tiled convolutions, dense layers,
depthwise and Winograd kernels."""

from __future__ import annotations

import logging
from typing import Any

from ..core import ir_nodes
from ..kernels.cpu import STREAMED, CpuFacts, divisors, max_rows, tile_rate, vector_widths
from .common import (
    NoMatchError,
    block_index,
    block_name,
    child_blocks,
    fold_epilogue,
    is_reduction,
    loop_extent,
    out_shape,
    parallel_outer,
    register_pieces,
    select_edges,
    vector_factor,
)
from .rules import schedule_elementwise

log = logging.getLogger(__name__)


class Decider:
    """Schedule decisions: sampled (``tunable``) or pinned to the heuristic default."""

    def __init__(self, sch: Any, tunable: bool):
        self.sch, self.tunable = sch, tunable

    def tile(self, loop: Any, default: list[int], max_innermost: int) -> list[Any]:
        """Factors of a perfect split of ``loop`` (len(default) levels)."""
        decision = None if self.tunable else [int(x) for x in default]
        return list(self.sch.sample_perfect_tile(loop, n=len(default), max_innermost_factor=max(max_innermost, 1),
                                                 decision=decision))


def default_rows(extent: int, vectors: int, cpu: CpuFacts, weight_cost: float = 1.0, accumulators: int = 0) -> int:
    """The register-tile height for a loop of ``extent``: the best-scoring divisor (holding at
    most ``accumulators`` registers of sums, where given)."""
    fits = [rw for rw in divisors(extent)
            if rw <= max_rows(vectors, cpu) and (not accumulators or rw * vectors <= accumulators)] or [1]
    return max(fits, key=lambda rw: (tile_rate(rw, vectors, cpu, weight_cost), rw))


def _finish_microkernel(sch: Any, main: Any, epi: Any | None, at: Any, first_reduce: Any,
                        row: Any, vec: Any, cpu: CpuFacts, cores: int, separate: bool = False,
                        dot: str | None = None, intrinsic: str | None = None) -> None:
    """Accumulate in registers, epilogue from them, then vectorize/unroll every stage. With
    ``separate`` (zero-padded output channels cropped, or an epilogue of another shape) the
    epilogue is a pass of its own: per tile it would carry a bounds predicate that measured
    slower than the extra pass. With ``dot`` (an int8 dot-product family) the accumulation
    below ``vec`` is tensorized with its instruction instead of vectorized (``intrinsic``: a
    given one at ``vec`` as it is, else the family's over ``vec`` cut into its lanes)."""
    writer = _place_epilogue(sch, main, epi, at, separate, cpu, cores)
    if epi is not None and writer == epi:
        if _body_size(sch, epi) > EXPENSIVE_EPILOGUE:
            # Copy the registers out (unrolled, constant indices: they stay registers) into a
            # small stack buffer and loop over the copy without unrolling: a fast_exp SiLU
            # epilogue unrolled per register doubled LLVM's compile time (YOLO, measured). Cheap
            # epilogues stay unrolled (the copy cost ResNet-50 10 %).
            acc = sch.get(main).writes[0].source
            index = next(n for n, r in enumerate(sch.get(epi).reads) if r.source.same_as(acc))
            writer = sch.cache_read(epi, index, "local")
            _vector_registers(sch, sch.get_loops(epi)[-1], cpu, unroll=False)
    sch.unroll(row)
    if dot is None:
        _vector_registers(sch, vec, cpu)
    init = sch.decompose_reduction(main, first_reduce)
    if dot is not None and intrinsic is not None:
        sch.tensorize(vec, intrinsic)
    elif dot is not None:
        from ..kernels import dot as dots

        step = dots.lanes(dot)
        if loop_extent(sch, vec) != step:
            outer, vec = sch.split(vec, [None, step])
            sch.unroll(outer)
        # the data: the 8-bit buffer read (the accumulator is int32, the packed weights 6-D)
        data = next(r.source for r in sch.get(main).reads if len(r.source.shape) != 6 and str(r.source.dtype) in ("int8", "uint8"))
        weights = next(r.source for r in sch.get(main).reads if len(r.source.shape) == 6)
        narrow = bool(int(sch.get(main).annotations.get("edgetune.dot_narrow", 0)))
        sch.tensorize(vec, dots.intrinsic(dot, str(data.dtype), int(weights.shape[-1]), narrow))
    for block in (init, writer):
        loops = sch.get_loops(block)
        if len(loops) > 1:
            sch.unroll(loops[-2])
        if block == writer:
            _vector_epilogue(sch, block, cpu)
        else:
            _vector_registers(sch, loops[-1], cpu)


def _place_epilogue(sch: Any, main: Any, epi: Any | None, at: Any, separate: bool, cpu: CpuFacts,
                    cores: int) -> Any:
    """Put a micro-kernel's output stage under ``at`` and return it: the epilogue from the
    registers (``main``'s accumulators made local); with ``separate``, or with no epilogue, a
    local copy of the accumulators written out there (a separate epilogue then a pass of its
    own, scheduled here)."""
    if epi is not None and not separate:
        sch.reverse_compute_at(epi, at, preserve_unit_loops=True)
        sch.set_scope(main, 0, "local")
        return epi
    writer = sch.cache_write(main, 0, "local")
    sch.reverse_compute_at(writer, at, preserve_unit_loops=True)
    if epi is not None:
        schedule_elementwise(sch, epi, cpu, cores)
    return writer


def _vector_epilogue(sch: Any, block: Any, cpu: CpuFacts) -> None:
    """Vectorize an epilogue ``block``'s inner loop (:func:`_byte_lanes` at a time where it
    stores bytes). A channel pad read in the epilogue (a residual padded 24 → 28 channels) is an
    if_then_else on the vector lane, which TVM cannot vectorize: it left the whole epilogue
    scalar (BlazeFace int8: 0.36 → 0.2 ms per layer, partitioned, measured). So the loop is cut
    where the condition flips, and after the whole registers of a piece (120 channels: 112 +
    8): each part vectorizes with the condition constant."""
    loop = sch.get_loops(block)[-1]
    lanes = _byte_lanes(sch, block, cpu)
    cuts = _lane_cuts(sch, block, loop, cpu, lanes)
    if not cuts:
        _vector_registers(sch, loop, cpu, lanes=lanes)
        return
    sizes = [b - a for a, b in zip([0, *cuts], cuts)]
    for part in sch.loop_partition(loop, [*sizes, None]):
        _vector_registers(sch, part, cpu, lanes=lanes)


def _byte_lanes(sch: Any, block: Any, cpu: CpuFacts) -> int | None:
    """16 where the epilogue ``block`` stores 8-bit values or looks values up in a table of
    ≤ 256 entries (an int8 epilogue's SiLU or hard-swish, a rescale:
    :class:`..passes.int8_elementwise.Int8Tables`; the result stored as int8 or dequantized) on
    AArch64, else None (the native register). Vectorized one q register of int32 at a time,
    NEON's ``tbl`` / ``tbx``, which look up 16 bytes at a time (:mod:`..codegen.lookups`), had 4
    useful lanes each (narrowed and padded to 16 bytes); and every 4 outputs were narrowed to
    bytes alone (``xtn``, ``uzp1``, a lane insert). 16 lanes are 4 q registers, narrowed by
    ``uzp1`` pairs. By the Pi estimate (A72 / A76 M cycles): a YOLOv8n-style detector 237.8 /
    78.3 → 211.6 / 64.6, an OCR classifier 69.5 / 28.5 → 52.2 / 19.6, MobileNetV3 74.1 / 31.3 →
    64.1 / 25.1, a ResNet-style bottleneck stack 234.0 / 67.1 → 229.2 / 64.0."""
    if not cpu.aarch64 or cpu.lanes >= 16:
        return None
    info = sch.get(block)
    if info.writes and str(info.writes[0].source.dtype) in ("int8", "uint8"):
        return 16
    for region in info.reads:
        # a table is read whole (its index is data); a per-channel bias at the block's channel
        shape = region.source.shape
        entries = getattr(shape[0], "value", None) if len(shape) == 1 else None
        read = getattr(region.region[0].extent, "value", None) if len(shape) == 1 else None
        if str(region.source.dtype) == "int32" and isinstance(entries, int) and 1 < entries <= 256 and read == entries:
            return 16
    return None


def _lane_cuts(sch: Any, block: Any, loop: Any, cpu: CpuFacts, lanes: int | None = None) -> list[int]:
    """Where to cut ``block``'s vector ``loop``: at a pad's edges, and each piece between them
    into :func:`register_pieces` of ``lanes`` (default: the native register). Ascending; none
    when the loop vectorizes as it is."""
    extent, lanes = loop_extent(sch, loop), lanes or cpu.lanes
    edges = select_edges(sch, block, extent)
    if not edges and extent % lanes == 0:
        return []
    cuts = set(edges)
    for a, b in zip([0, *edges], [*edges, extent]):
        pieces = register_pieces(b - a, lanes)
        if a and pieces and pieces[0] > lanes:
            # a part that does not start at 0 cannot be split into registers (TVM refuses: BlazeFace
            # int8's 28 → 32-channel residuals on NEON ran as plain loops): cut it at each register
            pieces = [lanes] * (pieces[0] // lanes) + pieces[1:]
        for width in pieces[:-1]:
            a += width
            cuts.add(a)
    return sorted(cuts)


def _pad_stages(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """A kernel's input pad stages (a pass of their own before the micro-kernel), parallel and
    vectorized one or two native registers at a time. A pad's value is a load under a condition
    (``if_then_else``): over three registers (24 channels on NEON: <12 x float>) LLVM built
    each vector lane by lane from scalar loads (MediaPipe pose landmark's 24-channel pad on the
    Pi 4 estimate: 0.66 M cycles; as 8 lanes, two `ldp`/`stp` pairs per pixel: 0.23 M; the
    model 125.9 → 125.4 M cycles, Pi 5 66.8 → 66.6)."""
    for block in child_blocks(sch):
        if block_name(sch, block) == "pad":
            schedule_elementwise(sch, block, cpu, cores, widths=(2 * cpu.lanes, cpu.lanes, 8, 4))


# Accumulators of an fp32 convolution tile over ≤ 4 input channels (a first layer) on AArch64.
# Its whole reduction (ky, kx, channel) is unrolled, and LLVM keeps several input values in
# flight for the by-element FMLAs: the 24 the model allows (8 pixels × 12 channels: BlazeFace's
# 5×5 3 → 24 layer) spilled to the stack inside the tile. At ≤ 20 (4 × 12), by the Pi estimate
# (A72 / A76 M cycles): that layer 1.82 → 1.14 on the A76, the face detector 11.3 / 6.4 →
# 10.7 / 5.7, MobileNetV3 65.8 / 35.3 → 65.5 / 35.0; SqueezeNet, YOLO-style, OCR classifier,
# VGG-style CNN unchanged. (The same cap on every layer made SqueezeNet 68.3 / 35.4 → 98.4 /
# 80.4; 16 measured as 20, 24 as before.)
FIRST_LAYER_ACCUMULATORS = 20

# IR nodes of an epilogue's computation: bias + activation 13-40, a GELU or a SiLU with fast_exp
# 370-470 (measured on BERT, YOLO, MobileNetV3, BlazeFace; host and Pi 5)
EXPENSIVE_EPILOGUE = 200
# output channels per step of the Pi 4 int8 kernel's epilogue once per pixel (_partial_lanes): at
# most this many unrolled (eight blocks; more than that, a loop over chunks of them: unrolled
# whole, hand landmark's 1,152 channels are an i-cache's worth of code)
EPILOGUE_CHANNELS = 128
# pixels per row tile of the NEON int8 depthwise kernel: 4 × 16 channels are 16 int32x4 accumulators
DEPTHWISE_INT8_ROWS = 4


def _body_size(sch: Any, block: Any) -> int:
    """Size of a block's computation: the IR nodes of its body."""
    return sum(1 for _ in ir_nodes(sch.get(block).body))


def _vector_registers(sch: Any, loop: Any, cpu: CpuFacts, unroll: bool = True, lanes: int | None = None) -> None:
    """Vectorize ``loop`` one native register at a time (the register copies unrolled), or
    ``lanes`` at a time: LLVM handles <16 x float> well and <48 x float> badly (measured 30×
    slower)."""
    ext = loop_extent(sch, loop)
    if lanes and ext > lanes and ext % lanes:
        # half of them where they divide it (24, 40, 72 channels: 8 lanes, two q registers)
        lanes = lanes // 2 if lanes // 2 > cpu.lanes and ext % (lanes // 2) == 0 else cpu.lanes
    lanes = lanes or cpu.lanes  # (a loop shorter than ``lanes`` is one vector)
    if ext > lanes and ext % lanes == 0:
        outer, loop = sch.split(loop, [None, lanes])
        if unroll:
            sch.unroll(outer)
    sch.vectorize(loop)


def accumulate_in_registers(sch: Any, main: Any, writer: Any, at: Any, row: Any, vec: Any, first_reduce: Any,
                            cpu: CpuFacts) -> None:
    """A register tile of ``main``: ``writer`` (the local accumulators' copy out, or a stage that
    reads them) placed under ``at``, the tile's ``row`` loop unrolled and ``vec`` in vector
    registers, the sums' init split off at ``first_reduce``; the init and the writer unrolled
    and vectorized the same way."""
    sch.reverse_compute_at(writer, at, preserve_unit_loops=True)
    sch.unroll(row)
    _vector_registers(sch, vec, cpu)
    init = sch.decompose_reduction(main, first_reduce)
    for block in (init, writer):
        loops = sch.get_loops(block)
        sch.unroll(loops[-2])
        _vector_registers(sch, loops[-1], cpu)


def schedule_conv2d_packed(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """The packed NHWC convolution micro-kernel (see module docstring); ``order`` 0 keeps a
    row of pixels fixed while output-channel blocks stream weights, 1 the reverse."""
    _pad_stages(sch, cpu, cores)
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
    _finish_microkernel(sch, main, epi, at, ry, xi, oi, cpu, cores, cropped)


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
    _pad_stages(sch, cpu, cores)
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
    at = po if _exists(sch, po) else fused
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
        from ..kernels import dot as dots

        group, four = sch.split(tp, [None, 4])
        sums = sch.decompose_reduction(total, group)
        dots.register()
        sch.tensorize(four, dots.LANES_SUM_F32)
        sch.unroll(group)
        _vector_registers(sch, sch.get_loops(sums)[-1], cpu)
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
    _pad_stages(sch, cpu, cores)
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
    from ..kernels import dot as dots

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
        dots.register()
        sch.unroll(og)
    else:
        inner, vec = [xi, ob, oi, rci], oi
    sch.unroll(ob)
    at = _tile_order(sch, lead, xo, oo, [ry, rx, rco], inner, ragged, order, cpu, cores)
    if unrolled_blocks and _exists(sch, oo):
        sch.unroll(oo)
    _finish_microkernel(sch, main, epi, at, ry, xi, vec, cpu, cores, dot=family, intrinsic=intrinsic)


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
    if at.same_as(xo) and order == 0 and not _exists(sch, at):
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
    from ..kernels import dot as dots

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
    _vector_registers(sch, sch.get_loops(sums)[-1], cpu)
    if pixel is not None:
        channels = sch.get_loops(epi)[-1]
        extent = loop_extent(sch, channels)
        if extent > EPILOGUE_CHANNELS:
            chunk = max(d for d in divisors(extent) if d % dots.BLOCK == 0 and d <= EPILOGUE_CHANNELS)
            sch.split(channels, [None, chunk])
    _vector_epilogue(sch, epi, cpu)


def _exists(sch: Any, loop: Any) -> bool:
    """Whether ``loop`` is still in the schedule (fusing removes the loops it fuses)."""
    try:
        sch.get(loop)
    except Exception:  # noqa: BLE001 — TVM raises a plain error for a removed loop
        return False
    return True


def depthwise_tile(channels: int, width: int, cpu: CpuFacts) -> tuple[int, int, int]:
    """(channel block, pixels per tile, most pixels a tile may hold) of a depthwise row: the
    widest block of whole registers, unless a narrower one lets the width's divisors fill a tile
    that keeps clearly more multiply-adds in flight per cycle (each pixel loads its own input
    vector; the weights are shared along the row). The widest block alone left a 7-pixel row
    (1152 channels, 4 zmm) one pixel per tile — a prime width has no divisor up to the 6 pixels
    4 vectors fit — at 54 GFLOP/s; as 3 zmm × 7 pixels 114 (measured in MediaPipe's hand
    landmark model). Small gains by the model are not taken: 64 channels at 56 pixels (stride
    2) as 2 zmm × 8 pixels instead of 4 × 4, 10 % better by it, measured 27 % slower."""
    best: tuple[float, int, int, int] | None = None
    widths = [w for w in reversed(vector_widths(cpu.lanes)) if w <= 4 * cpu.lanes and channels % w == 0]
    for cv in widths or [channels]:
        vectors = -(-cv // cpu.lanes)
        rows = min(8, max_rows(vectors, cpu))
        pixels = max(d for d in divisors(width) if d <= rows)
        fmas = pixels * vectors
        rate = fmas / (max(fmas / 2.0, (fmas + vectors) / 2.0, float(cpu.fma_latency)) + 1.0)
        if best is None or rate > best[0] * 1.25:
            best = (rate, cv, pixels, rows)
    return best[1], best[2], best[3]


def depthwise_row_tile(channels: int, width: int, kernel_width: int, stride: int, cpu: CpuFacts) -> tuple[int, int, int]:
    """(channel block, pixels per tile, most pixels a tile may hold) of an Arm fp32 depthwise
    row whose input is read once per kernel row into registers (:func:`_input_rows`): the
    most pixels up to 8 that divide the row and whose sums and input row — (P − 1)·stride + KW
    vectors — fit the registers, one channel register, or more where the tile's sums would
    not cover the FMLA's latency on every pipe (A72: 7 sums, A76: 8). By the Pi 4 estimate
    over ten MediaPipe-style layers (3×3 and 5×5, stride 1 and 2, 24–1152 channels) one
    register × up to 8 pixels is within 4 % of the best tile measured for each layer; on the
    Pi 5 two registers × 7 pixels beat one by 2–8 %."""
    def fits(pixels: int, vectors: int) -> bool:
        return pixels * vectors + (pixels - 1) * stride + kernel_width <= cpu.registers

    pixels = max([d for d in divisors(width) if d <= 8 and fits(d, 1)] or [1])
    if channels % cpu.lanes:
        return channels, pixels, 8  # (a block that is not whole registers: LLVM's choice)
    vectors = 1
    for v in (2, 3, 4):
        if pixels * vectors >= cpu.fma_latency * cpu.fma_pipes:
            break
        if channels % (v * cpu.lanes) == 0 and fits(pixels, v):
            vectors = v
    return vectors * cpu.lanes, pixels, 8


def _input_read(sch: Any, main: Any) -> tuple[int, Any]:
    """(index among ``main``'s reads, buffer) of the NHWC input a depthwise kernel's taps read:
    the 4-D buffer that is not its accumulator."""
    acc = sch.get(main).writes[0].source
    return next((n, r.source) for n, r in enumerate(sch.get(main).reads)
                if len(r.source.shape) == 4 and not r.source.same_as(acc))


def _input_stride(sch: Any, main: Any, ow: int, kw: int) -> int:
    """A depthwise layer's stride along x, from the width of the buffer its taps read (its input,
    or its own padded copy: ``(ow − 1)·stride + KW`` columns, or a few more), taken as
    dilation 1."""
    src = _input_read(sch, main)[1]
    return max(1, (int(src.shape[2]) - kw) // max(1, ow - 1))


def schedule_depthwise(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """Depthwise NHWC: a row of ``RW`` pixels × a channel vector block in registers."""
    tile = sch.get(main).annotations.get("edgetune.row_tile")
    if cpu.x86 and tile is None:
        _inline_pad(sch, main)
    else:
        _pad_stages(sch, cpu, cores)
    epi, separate = fold_epilogue(sch, main)
    b, y, x, c, ry, rx = sch.get_loops(main)
    channels = loop_extent(sch, c)
    # float32 or float16 (a --precision fp16 kernel): the float tiles; integers: a quantized layer's
    fp32 = all(str(p.dtype) in ("float32", "float16") for p in sch.mod["main"].params if hasattr(p, "shape"))
    if tile is not None:  # a symbolic width, computed as whole tiles of this many pixels
        cv = vector_factor(channels, cpu) or channels
        xo, xi = sch.split(x, [None, int(tile)])
    else:
        ow = loop_extent(sch, x)
        if fp32 and cpu.aarch64:
            kw = loop_extent(sch, rx)
            cv, default, rows = depthwise_row_tile(channels, ow, kw, _input_stride(sch, main, ow, kw), cpu)
        elif fp32:
            cv, default, rows = depthwise_tile(channels, ow, cpu)
        else:  # a quantized layer (integer tables, requantized per pixel): the narrower
            # block measured worse there (MobileNetV3 int8's 7-pixel layer, Pi 4 estimate: 1.84 ->
            # 2.58 M cycles)
            cv = vector_factor(channels, cpu) or channels
            rows = min(8, max_rows(-(-cv // cpu.lanes), cpu))
            default = max(d for d in divisors(ow) if d <= rows)
        xo, xi = sch.split(x, decide.tile(x, [ow // default, default], rows))
    co, ci = sch.split(c, [None, cv])
    # Channels rounded up to whole registers (kernels.cpu.depthwise_weights) are cropped by the
    # epilogue: once per row of pixels, after every channel block, its loop cut into register
    # pieces (as a pass of its own it cost a parallel region per layer). An epilogue that writes
    # beyond the sums (a channel pad) stays a pass of its own.
    per_row = separate and order == 0 and epi is not None and all(
        e <= m if isinstance(e, int) and isinstance(m, int) else isinstance(e, str) and isinstance(m, str)
        for e, m in zip(out_shape(sch, epi), out_shape(sch, main)))  # (a symbolic width: cropped, never wider)
    if order == 0:
        sch.reorder(b, y, xo, co, ry, rx, xi, ci)
        at, par = (xo if per_row else co), [b, y, xo]
    else:
        sch.reorder(b, y, co, xo, ry, rx, xi, ci)
        at, par = xo, [b, y, co]
    fused = parallel_outer(sch, par, cpu, cores)
    if at in par and not _exists(sch, at):  # fused into the parallel loop (few rows: a symbolic width)
        at = fused
    in_rows = cpu.aarch64 and fp32 and tile is None and cv % cpu.lanes == 0
    name = block_name(sch, main)
    if in_rows:
        ci = _input_rows(sch, main, rx, xi, ci, cpu)
    _finish_microkernel(sch, main, epi, at, ry, xi, ci, cpu, cores, separate and not per_row)
    if in_rows:  # the sums' initial values: every register
        init = sch.get_sblock(f"{name}_init")
        for loop in sch.get_loops(init)[-3:-1]:
            sch.unroll(loop)


def _inline_pad(sch: Any, main: Any) -> None:
    """x86: a depthwise layer reads its input where it is, a tap outside the image reading the
    pad value (a condition per pixel, the same for every channel of a vector), instead of a
    zero-padded copy made by a pass of its own. Memory-bound, the layer spent a third of its time
    on that pass: MobileNetV2's 3×3 layer on 192 × 28² 16.7 → 10.7 µs (AVX-512, 2 threads; as a
    copy per tile 14.1); untuned packages, alternating in one process, AVX-512 / AVX2: palm
    detector full 0.78 / 0.92 of before, MobileNetV2 0.79 / 0.87, its int8 QDQ 0.82 / 0.89, hand
    landmark full fp32 0.89 / 0.93, int8 0.83 / 0.94, the other MediaPipe landmark, detector and
    segmenter models 0.89–0.96, outputs bit for bit the same. (A symbolic width keeps the copy,
    whose width is whole tiles. Arm keeps it too: read in place there — fp32 without the input
    rows in registers of :func:`_input_rows`, int8 as well — the Pi estimate rose on all eight
    rows tried, iris and hand landmark full, fp32 and int8, Pi 4 and Pi 5: 0–15 %, hand
    landmark full int8 on the Pi 5 22.5 → 25.8 M cycles.)"""
    for block in sch.get_producers(main):
        if block_name(sch, block) == "pad":
            sch.compute_inline(block)


def _input_rows(sch: Any, main: Any, rx: Any, xi: Any, ci: Any, cpu: CpuFacts) -> Any:
    """A depthwise tile's input row in registers, one channel register at a time: under each
    kernel row the tile's pixels take the taps ``rx`` of ``(P − 1)·stride + KW`` input vectors,
    loaded once (a local copy) and reused by every tap and pixel that reads them, where each
    tap of each pixel loaded its own (LLVM merged none of the loads the unrolled taps share:
    on the A72, with one load a cycle, 20 loads per 16 FMLAs of a 3×3 layer). Returns the
    loop over one register's lanes."""
    cio, ci = sch.split(ci, [None, cpu.lanes])
    sch.reorder(cio, rx, xi, ci)
    cache = sch.cache_read(main, _input_read(sch, main)[0], "local")
    sch.compute_at(cache, cio, preserve_unit_loops=True)
    loops = sch.get_loops(cache)
    sch.vectorize(loops[-1])
    sch.unroll(loops[-2])
    sch.unroll(cio)
    sch.unroll(rx)
    return ci


def schedule_depthwise_int8(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """int8 depthwise on Arm NEON (:func:`..kernels.conv.depthwise_conv2d_nhwc_int8`): a row of
    ``RW`` pixels × 16 channels (8 where the channels are odd 8s) of int32 accumulators in
    registers — 4 q registers per pixel and 16 channels, 4 pixels —, the taps' pairs unrolled
    and each pair's products over the channel block vectorized whole (LLVM: ``smull``,
    ``smlal``, ``saddw``; cut into 4-lane pieces the int16 products would be 4 lanes too)."""
    _pad_stages(sch, cpu, cores)
    epi, separate = fold_epilogue(sch, main)
    b, y, x, c, p = sch.get_loops(main)
    channels, ow = loop_extent(sch, c), loop_extent(sch, x)
    cv = 16 if channels % 16 == 0 else 8
    default = max(d for d in divisors(ow) if d <= DEPTHWISE_INT8_ROWS)
    xo, xi = sch.split(x, decide.tile(x, [ow // default, default], 2 * DEPTHWISE_INT8_ROWS))
    co, ci = sch.split(c, [None, cv])
    if order == 0:
        sch.reorder(b, y, xo, co, p, xi, ci)
        par, at = [b, y, xo], co
    else:
        sch.reorder(b, y, co, xo, p, xi, ci)
        par, at = [b, y, co], xo
    parallel_outer(sch, par, cpu, cores)
    writer = _place_epilogue(sch, main, epi, at, separate, cpu, cores)
    sch.unroll(p)
    sch.unroll(xi)
    sch.vectorize(ci)
    init = sch.decompose_reduction(main, p)
    sch.unroll(sch.get_loops(init)[-2])
    _vector_registers(sch, sch.get_loops(init)[-1], cpu)
    sch.unroll(sch.get_loops(writer)[-2])
    _vector_epilogue(sch, writer, cpu)


def schedule_depthwise_sdot(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """int8 depthwise on the sdot family (:func:`..kernels.conv.depthwise_conv2d_nhwc_int8_sdot`):
    per output row (the parallel loop) its input columns' taps as channel quads (``cols``, a
    row of them in L1: :data:`..kernels.dot.DW_ROWS`), then tiles of ``RW`` pixels × 16
    channels of int32 accumulators in registers — 4 q registers per pixel, 4 pixels; a row of 7
    as the row × 8 channels (:func:`..kernels.dot.sdot_depthwise_tile`) —, one ``sdot`` per
    pixel, four channels, tap column and group of four taps along y
    (:data:`..kernels.dot.DW_SDOT`). One loop order."""
    from ..kernels import dot as dots

    if order:
        raise NoMatchError("one loop order")
    _pad_stages(sch, cpu, cores)
    epi, separate = fold_epilogue(sch, main)
    cols = next(b for b in child_blocks(sch) if block_name(sch, b) == "cols")
    b, y, x, c, g, rx, k = sch.get_loops(main)
    ow = loop_extent(sch, x)
    # (a width the pass does not route here — one-pixel tiles — would take 1 × 16 channels)
    default, quads = dots.sdot_depthwise_tile(ow) or (1, 4)
    xo, xi = sch.split(x, decide.tile(x, [ow // default, default], 2 * dots.DW_TILE_PIXELS))
    co, cqo, cq, c4 = sch.split(c, [None, 4 // quads, quads, 4])
    sch.reorder(b, y, xo, co, cqo, g, rx, xi, cq, c4, k)
    row = sch.fuse(b, y)
    sch.parallel(row)
    sch.compute_at(cols, row, preserve_unit_loops=True)
    writer = _place_epilogue(sch, main, epi, cqo, separate, cpu, cores)
    sch.unroll(rx)
    sch.unroll(xi)
    sch.unroll(cq)
    init = sch.decompose_reduction(main, g)
    dots.register()
    sch.tensorize(c4, dots.DW_SDOT)
    sch.unroll(sch.get_loops(init)[-2])
    _vector_registers(sch, sch.get_loops(init)[-1], cpu)
    *_, q, lane = sch.get_loops(cols)
    _qo, q4 = sch.split(q, [None, 4])
    sch.tensorize(q4, dots.DW_ROWS)
    sch.unroll(sch.get_loops(writer)[-2])
    _vector_epilogue(sch, writer, cpu)


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
    _finish_microkernel(sch, main, epi, at, rk, ri, ji, cpu, cores, cropped)


def schedule_winograd(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """Winograd F(m, 3): input transform per tile and channel vector (parallel over tiles), the
    α² GEMMs as register-tiled micro-kernels (tiles × output channels), output transform per
    tile, then crop + epilogue as one elementwise pass."""
    _pad_stages(sch, cpu, cores)
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
    """The first (row) pass of a separable transform, per channel block: its two tile loops
    unrolled, its channel loop vectorized."""
    first = sch.get_sblock(name)
    sch.compute_at(first, at)
    loops = sch.get_loops(first)
    sch.unroll(loops[-4])
    sch.unroll(loops[-3])
    sch.vectorize(loops[-1])
