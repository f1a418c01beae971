"""Depthwise convolution schedules: float and fp16 tiles (input rows in registers on Arm), the
int8 kernels on NEON tap pairs, and the Pi 5's sdot kernel over channel quads."""

from __future__ import annotations

from typing import Any

from ..kernels import dot as dots
from ..kernels.cpu import CpuFacts, divisors, max_rows, vector_widths
from ..kernels.dot_intrinsics import register as register_intrinsics
from .common import (
    NoMatchError,
    block_name,
    child_blocks,
    fold_epilogue,
    loop_extent,
    out_shape,
    parallel_outer,
    vector_factor,
)
from .registers import (
    Decider,
    finish_microkernel,
    loop_exists,
    pad_stages,
    place_epilogue,
    vector_epilogue,
    vector_registers,
)

# pixels per row tile of the NEON int8 depthwise kernel: 4 × 16 channels are 16 int32x4 accumulators
DEPTHWISE_INT8_ROWS = 4


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
        pad_stages(sch, cpu, cores)
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
    if at in par and not loop_exists(sch, at):  # fused into the parallel loop (few rows: a symbolic width)
        at = fused
    in_rows = cpu.aarch64 and fp32 and tile is None and cv % cpu.lanes == 0
    name = block_name(sch, main)
    if in_rows:
        ci = _input_rows(sch, main, rx, xi, ci, cpu)
    finish_microkernel(sch, main, epi, at, ry, xi, ci, cpu, cores, separate and not per_row)
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
    pad_stages(sch, cpu, cores)
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
    writer = place_epilogue(sch, main, epi, at, separate, cpu, cores)
    sch.unroll(p)
    sch.unroll(xi)
    sch.vectorize(ci)
    init = sch.decompose_reduction(main, p)
    sch.unroll(sch.get_loops(init)[-2])
    vector_registers(sch, sch.get_loops(init)[-1], cpu)
    sch.unroll(sch.get_loops(writer)[-2])
    vector_epilogue(sch, writer, cpu)


def schedule_depthwise_sdot(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """int8 depthwise on the sdot family (:func:`..kernels.conv.depthwise_conv2d_nhwc_int8_sdot`):
    per output row (the parallel loop) its input columns' taps as channel quads (``cols``, a
    row of them in L1: :data:`..kernels.dot.DW_ROWS`), then tiles of ``RW`` pixels × 16
    channels of int32 accumulators in registers — 4 q registers per pixel, 4 pixels; a row of 7
    as the row × 8 channels (:func:`..kernels.dot.sdot_depthwise_tile`) —, one ``sdot`` per
    pixel, four channels, tap column and group of four taps along y
    (:data:`..kernels.dot.DW_SDOT`). One loop order."""
    if order:
        raise NoMatchError("one loop order")
    pad_stages(sch, cpu, cores)
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
    writer = place_epilogue(sch, main, epi, cqo, separate, cpu, cores)
    sch.unroll(rx)
    sch.unroll(xi)
    sch.unroll(cq)
    init = sch.decompose_reduction(main, g)
    register_intrinsics()
    sch.tensorize(c4, dots.DW_SDOT)
    sch.unroll(sch.get_loops(init)[-2])
    vector_registers(sch, sch.get_loops(init)[-1], cpu)
    *_, q, lane = sch.get_loops(cols)
    _qo, q4 = sch.split(q, [None, 4])
    sch.tensorize(q4, dots.DW_ROWS)
    sch.unroll(sch.get_loops(writer)[-2])
    vector_epilogue(sch, writer, cpu)
