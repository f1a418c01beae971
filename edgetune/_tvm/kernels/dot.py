"""int8 dot-product instructions: which one a CPU target has, and the tensor intrinsics the
integer convolution micro-kernel is tensorized with.

Three families, chosen from the target's features (what LLVM says ``-mcpu``/``-mattr`` give):

* ``vnni`` — x86 AVX-512 VNNI ``vpdpbusd``: 16 int32 lanes, each += 4 u8 × s8 products. The
  activations are unsigned, so the kernel feeds ``x + 128`` (int8 → uint8 by flipping the sign
  bit) and subtracts ``128 · Σw`` per output channel: exact.
* ``sdot`` — Armv8.2 dot product (Cortex-A76: Pi 5): 4 int32 lanes, each += 4 s8 × s8.
* ``neon`` — plain Advanced SIMD (Cortex-A72: Pi 4): ``smull`` + pairwise adds. Over 16 input
  channels per step where a layer has them: per output channel a ``smull`` and a ``smull2`` of
  the 16 bytes, their pairs added into :data:`LANES` partial sums (``sadalp``), summed once
  after the reduction (:func:`partial_lanes`) — 3 vector instructions per 16 products where
  summing each step's four channels (an ``addp`` tree) took 5, measured by the Pi 4 estimate
  (benchmarks/arm_estimate.py). Where every weight of a layer is within ±127 (symmetric
  quantizers: onnxruntime's, TFLite's), two products fit an int16 lane exactly
  (|−128 · ±127| · 2 < 2¹⁵), so the high half is accumulated by ``smlal2`` onto the low half's
  ``smull`` and one ``sadalp`` widens both. Over 4 input channels (a layer with fewer): the
  quad twice in a d register, ``smull`` ×2, ``saddlp`` ×2, ``addp``, ``add`` per 16 products.

TVM ships intrinsics of these shapes, but they accumulate into global memory only (the micro-kernel
keeps its accumulators in registers: a ``local`` buffer) and its ``vpdpbusd`` call uses the operand
types LLVM had before version 21 (``<16 x i32>``; LLVM 22 verifies ``<64 x i8>`` and rejects it,
measured). Without one of these (x86 without VNNI — ``vpmaddubsw`` saturates its int16 pair sums,
so it is not exact —, 32-bit Arm) integer layers run as exact integer sums in fp32 kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .cpu import has_feature, pad_axis

BLOCK = 16  # output channels per micro-kernel block: one zmm of int32, or four NEON registers
DEPTH = 4  # input channels per dot-product step
WIDE_DEPTH = 16  # input channels per step of the NEON family's wide intrinsic
HALF_DEPTH = 8  # input channels per step of its half-wide one (a layer whose channels are odd 8s)

SINGLE_INSTRUCTION = {"vnni": "llvm.x86.avx512.vpdpbusd.512", "sdot": "llvm.aarch64.neon.sdot.v4i32.v16i8"}
INTRINSICS = {"vnni": "edgetune_dot_16x4_vnni", "sdot": "edgetune_dot_4x4_sdot", "neon": "edgetune_dot_4x4_neon"}
QUADS = 4  # input quads of one pixel the sdot family's quad intrinsic takes: 16 bytes, one load
LANES = 4  # partial sums per output channel of the NEON family's 16-channel step (an int32x4 each)
# the NEON family over 16 input channels into 4 partial sums per output channel, summed once after
# the reduction (``sadalp`` per channel, no ``addp`` tree per step: :func:`partial_lanes`)
NEON_LANES = "edgetune_dot_4x16_neon_lanes"
NEON_LANES_NARROW = "edgetune_dot_4x16_neon_lanes_narrow"
# the same over 8 input channels: per output channel one ``smull`` of the pixel's 8 bytes (a d
# register) and that channel's 8 weights, its pairs added into the partial sums (``sadalp``)
NEON_LANES_HALF = "edgetune_dot_4x8_neon_lanes"
# four output channels' partial sums summed: an ``addp`` tree (the partial-sum kernels' last step)
LANES_SUM = "edgetune_lanes_sum_4x4"
# the same over float32 partial sums (``faddp``): four pixels' one output channel of the
# few-outputs convolution (:func:`..conv.conv2d_nhwc_lanes`)
LANES_SUM_F32 = "edgetune_lanes_sum_4x4_f32"
# sdot over four consecutive input quads of one pixel: its 16 bytes loaded once (``ldr q``), each
# quad multiplied by lane (``sdot v.4s, v.16b, v.4b[j]``) instead of broadcast by ``ld1r`` first,
# which issues on the A76's vector pipes beside the sdots (5 vector µops per 4 sdots: 80 % at best)
SDOT_QUADS = "edgetune_dot_4x4x4_sdot"
# the same over 2 or 3 quads (a first layer's taps along x, :func:`..conv.conv2d_nhwc_int8`'s
# taps): 16 bytes loaded all the same, the last quads' lanes unused
SDOT_TAPS = {2: "edgetune_dot_4x4x2_sdot", 3: "edgetune_dot_4x4x3_sdot", QUADS: SDOT_QUADS}
# by element over two quads of a pixel's input, its 8 bytes loaded (``ldr d``): a layer whose
# channels are an odd number of 8s (24, 40, 56, 120, 200) — no whole groups of four quads — where
# each quad was broadcast by ``ld1r`` (80 % of the A76's sdot issue at best)
SDOT_PAIR = "edgetune_dot_4x4x2_sdot_d"
# The NEON family over a first layer's row of taps (:func:`..conv.conv2d_nhwc_int8`'s taps): the
# row's bytes — kx-major, a pixel's channels unpadded — as pairs, each pair broadcast to every
# 16-bit lane (``dup v.8h, v.h[j]``) and multiplied by eight output channels' weights for it, one
# q register (``smull``, ``smull2``: 16 products, adjacent ones a channel's), two pairs' products
# summed in int16 where the weights are within ±127 (``smlal``) and widened onto the accumulators
# (``sadalp``). Nothing is summed across lanes after the reduction, and no channel of a pixel is
# padded: a 3×3 RGB row is 9 bytes, 5 pairs, where the 4-deep step padded it to 12 bytes and
# summed each step's lanes. Keyed by the pairs a row takes (1 to 8: 16 bytes, one load), narrow
# or not
PAIR = 2  # input values per step of the pairs kernel
PAIR_CHANNELS = 8  # output channels per call of the pairs kernel: a pair's weights fill a q register
NEON_PAIRS = {(pairs, narrow): f"edgetune_dot_4x2x{pairs}_neon{'_narrow' if narrow else ''}"
              for pairs in range(1, 9) for narrow in (False, True)}
# vnni over int8 data read as it is, its sign bit flipped in the register (x + 128 as uint8): a
# convolution with no padding to apply needs no converted copy of its input
FLIPPED = "edgetune_dot_16x4_vnni_flip"
# int8 multiply-adds a family issues per fp32 multiply-add of the same core — its kernels' peak
# over the fp32 one (what a timing is checked against, and % of peak): AVX-512 VNNI's vpdpbusd 64
# an instruction against vfmadd's 16; the A76's two sdot pipes 32 a cycle against two FMLAs' 8;
# the A72's one integer-multiply pipe 8 (smull) a cycle against one FMLA's 4
PEAK_FACTOR = {"vnni": 4.0, "sdot": 4.0, "neon": 2.0}

DESCRIPTIONS = {
    "vnni": "x86 AVX-512 VNNI (vpdpbusd, u8×s8)",
    "sdot": "Arm dot product (sdot, s8×s8)",
    "neon": "Arm NEON (smull + pairwise add, s8×s8)",
}


def dot_family(target: Any) -> str | None:
    """The int8 dot-product family of a CPU target, or None (no exact integer instruction)."""
    if target.kind.name != "llvm":
        return None
    triple = str(target.attrs.get("mtriple", ""))

    def has(feature: str) -> bool:
        return has_feature(target, feature)

    if triple.startswith("x86_64"):
        return "vnni" if has("avx512vnni") and has("avx512bw") else None
    if triple.startswith("aarch64"):
        return "sdot" if has("dotprod") else "neon" if has("neon") else None
    return None


def integer_depthwise(family: str | None) -> bool:
    """Whether ``family``'s CPU runs int8 depthwise layers (weights within ±127) on the integer
    depthwise kernel, :func:`..conv.depthwise_conv2d_nhwc_int8`: Arm's (``smull`` / ``smlal``;
    ``sdot`` does not help a per-channel sum). Elsewhere the fp32 kernel over the integers."""
    return family in ("neon", "sdot")


def unsigned_data(family: str) -> bool:
    """Whether the family multiplies unsigned activations (the kernel shifts int8 by 128)."""
    return family == "vnni"


def blocks_per_tile(family: str, blocks: int) -> int:
    """Output-channel blocks one register tile computes by default: on x86 two (or three), so
    each broadcast input quad feeds that many ``vpdpbusd`` (one at a time measured 2× slower on
    a 56×56×64 layer, and on SqueezeNet's 1000-channel layer: 63 blocks, three at a time);
    on Arm one (four q registers per pixel and block)."""
    if family != "vnni":
        return 1
    return 2 if blocks % 2 == 0 else 3 if blocks % 3 == 0 else 1


def packed_weights(ohwi: Any, family: str, step: int = 0, block: int = BLOCK) -> Any:
    """Integer convolution weights ``[OC, KH, KW, IC]`` (int8 values) in the operand order of
    ``family``'s kernel, ``[OCp/B, KH, KW, ICp/D, B, D]`` (D: ``step``, else :func:`depth`; B:
    ``block``, 16 but for a row of pairs, :func:`row_block`; OCp, ICp: zero filters and
    channels appended), int8."""
    oc, kh, kw, ic = ohwi.shape
    step = step or depth(family, ic, kh * kw)
    blocks = padded_blocks(family, oc) if block == BLOCK else -(-oc // block)
    padded = pad_axis(pad_axis(ohwi, 0, block * blocks), 3, step)
    return (padded.reshape(-1, block, kh, kw, padded.shape[3] // step, step)
            .transpose(0, 2, 3, 4, 1, 5).astype(np.int8).copy())


def depthwise_pairs(ohwi: Any) -> Any:
    """Depthwise weights ``[C, KH, KW, 1]`` (int8 values within ±127) as the NEON depthwise
    kernel takes them (:func:`..conv.depthwise_conv2d_nhwc_int8`): ``[P, 2, C']``, the taps
    row-major in pairs (a last odd tap's partner zero), ``C'`` the channels rounded up to 8
    (zero weights)."""
    c, kh, kw, _one = ohwi.shape
    taps = pad_axis(ohwi.reshape(c, kh * kw).T, 0, 2)  # [T', C]
    return pad_axis(taps.reshape(-1, 2, c), 2, 8).astype(np.int8).copy()


DW_TILE_PIXELS = 4  # pixels of the sdot depthwise kernel's register tile (× 16 channels: 16 sums)


def sdot_depthwise_tile(width: int) -> tuple[int, int] | None:
    """(pixels, channel quads) of the sdot depthwise kernel's register tile over a row of
    ``width`` output pixels: the largest divisor up to :data:`DW_TILE_PIXELS` × 16 channels; a
    width with no divisor from 2 to 4 but at most twice that (7): the whole row × 8 channels;
    else None — one-pixel tiles, each weight quad loaded for one ``sdot``, measured slower than
    the ``smull`` pairs (MediaPipe hand landmark's 7² × 1152 5×5 layer, A76 M cycles: 0.72 →
    0.79 a pixel at a time, 0.59 as the row of 7)."""
    pixels = max(d for d in range(1, DW_TILE_PIXELS + 1) if width % d == 0)
    if pixels > 1:
        return pixels, 4
    return (width, 2) if width <= 2 * DW_TILE_PIXELS else None


def sdot_depthwise(channels: int, width: int) -> bool:
    """Whether an int8 depthwise layer of ``channels`` channels and ``width`` output pixels a row
    takes the sdot kernel (:func:`..conv.depthwise_conv2d_nhwc_int8_sdot`) on the sdot family:
    whole blocks of 16 channels (24 as 32 measured slower than the ``smull`` pairs: hand
    landmark's 112² × 24 layer 0.76 → 0.85 M A76 cycles) and a width it tiles
    (:func:`sdot_depthwise_tile`)."""
    return channels % WIDE_DEPTH == 0 and sdot_depthwise_tile(width) is not None


def depthwise_quads(ohwi: Any) -> Any:
    """Depthwise weights ``[C, KH, KW, 1]`` (int8) as the sdot depthwise kernel takes them
    (:func:`..conv.depthwise_conv2d_nhwc_int8_sdot`): ``[G, KW, C'/4, 16]``, per group ``g`` of
    four rows of taps (``G`` = ⌈KH/4⌉; the rows past KH zero weights) and column ``kx``, each
    four channels' quads — channel ``4q + i``'s taps ``(4g + k, kx)`` at ``4i + k`` —, ``C'`` the
    channels rounded up to 16 (zero weights)."""

    c, kh, kw, _one = ohwi.shape
    groups, padded = -(-kh // DW_TAPS), -(-c // WIDE_DEPTH) * WIDE_DEPTH
    rows = np.zeros((groups * DW_TAPS, kw, padded), np.int8)
    rows[:kh, :, :c] = ohwi[..., 0].transpose(1, 2, 0)
    quads = rows.reshape(groups, DW_TAPS, kw, padded // 4, 4).transpose(0, 2, 3, 4, 1)  # [g, kx, q, i, k]
    return quads.reshape(groups, kw, padded // 4, 16).copy()


def int8_weights(weights: Any) -> bool:
    """Whether integer ``weights`` (numpy) are all int8 values, as the kernels multiply them."""
    return int(weights.min(initial=0)) >= -128 and int(weights.max(initial=0)) <= 127


def narrow_weights(weights: Any) -> bool:
    """Whether int8 ``weights`` are all within ±127: two products then fit an int16 lane (the
    NEON family pairs them, ``smlal2``)."""
    return int(weights.min(initial=0)) > -128


def data_shift(data_dtype: str, family: str) -> int:
    """What ``family``'s kernel adds to each value of ``data_dtype`` data to multiply it (+128:
    int8 as uint8 for an unsigned family, −128: uint8 as int8 for a signed one; 0)."""
    unsigned = data_dtype == "uint8"
    return 0 if unsigned == unsigned_data(family) else -128 if unsigned else 128


def tile_rows(family: str) -> int:
    """Output pixels (rows) per register tile by default: 8 on x86 (a zmm per pixel and
    block), 4 on Arm (four q registers per pixel and block)."""
    return 8 if family == "vnni" else 4


def dot_rows(family: str, rows: int, channels: int = 0) -> int:
    """The rows a dense layer of ``rows`` rows computes on ``family``'s kernel: ``rows`` when
    they fit one register tile or a divisor of them makes at least half a tile (the schedule's
    tile height ``h``: the largest divisor up to the tile's), else the padded count that costs
    least, each tile costing a row more (its weight loads and epilogue: ``rows·(h + 1)/h``;
    197 tokens, prime, would take one row per tile). ViT-S's 17 tokens: 18 rows in tiles of 6
    on x86, 0.85× the time of 24 in tiles of 8; 122 tokens: 128 on x86 (124 in tiles of 4
    measured 1.08× slower), on Arm 122 in tiles of 2 (as 124 in tiles of 4: 1.03× the A72's
    cycles). A layer of ``channels`` input channels whose kernel keeps partial sums
    (:func:`partial_lanes`: the Pi 4 over 16 channels a step) computes one row per tile: its
    rows as they are (ViT-S's 17 tokens on the Pi 4: 50.8 ms as 18 rows, 42.1 as 17, by its
    estimate)."""
    if channels and partial_lanes(family, depth(family, channels)):
        return rows
    tile = tile_rows(family)

    def height(p: int) -> int:
        return max(d for d in range(1, tile + 1) if p % d == 0)

    if rows <= tile or 2 * height(rows) >= tile:
        return rows
    good = [p for p in range(rows + 1, rows + tile) if 2 * height(p) >= tile] + [-(-rows // tile) * tile]
    return min(good, key=lambda p: (p * (height(p) + 1) / height(p), -height(p)))


def padded_blocks(family: str, channels: int) -> int:
    """Blocks a layer's output channels are padded to: on x86 an odd count that three does not
    divide gets one more, so tiles of two cover it (MobileNetV3's 72, 112, 200 channels: 5, 7, 13
    blocks one at a time measured 1.08–1.35× slower than 6, 8, 14 two at a time)."""
    blocks = -(-channels // BLOCK)
    return blocks + 1 if family == "vnni" and blocks > 1 and blocks_per_tile(family, blocks) == 1 else blocks


def depth(family: str, channels: int, taps: int = 1) -> int:
    """Input channels per step of ``family``'s intrinsic for a layer of ``channels`` input
    channels (padded to a multiple of it) and ``taps`` kernel taps. On the NEON family: 16 where
    that pads at most an eighth more channels (48, 64, 88, 144); else 8 where 8 pads fewer and
    the reduction takes two steps of 8 or more (24, 36, 40, 56 channels; a 3×3 layer over 8);
    else 16 where that pads at most a quarter more (28, 42: as many as 8 would); else 4 (12
    channels; a 1×1 layer over 8)."""
    if family != "neon" or channels <= DEPTH:
        return DEPTH
    wide, half = (-(-channels // d) * d for d in (WIDE_DEPTH, HALF_DEPTH))
    if 8 * wide <= 9 * channels:
        return WIDE_DEPTH
    if half < wide and taps * half >= 2 * HALF_DEPTH:
        return HALF_DEPTH
    return WIDE_DEPTH if 4 * wide <= 5 * channels else DEPTH


def lanes(family: str) -> int:
    """Output channels one intrinsic call computes."""
    return 16 if family == "vnni" else 4


def intrinsic(family: str, data_dtype: str, step: int = DEPTH, narrow: bool = False) -> str:
    """The registered tensor intrinsic of ``family`` for data of ``data_dtype`` (int8 data for an
    unsigned family: flipped to uint8 in the register, :func:`flip_sign`) over ``step`` input
    channels (:func:`depth`); ``narrow``: the layer's weights are within ±127 (registered by
    :func:`.dot_intrinsics.register`)."""
    if partial_lanes(family, step):
        return NEON_LANES_HALF if step == HALF_DEPTH else NEON_LANES_NARROW if narrow else NEON_LANES
    return FLIPPED if unsigned_data(family) and data_dtype == "int8" else INTRINSICS[family]


def partial_lanes(family: str, step: int) -> bool:
    """Whether a kernel of ``family`` over ``step`` input channels a step keeps :data:`LANES`
    partial sums per output channel, summed after the reduction: the NEON family over 16 or 8
    channels. Its step's pairwise adds then accumulate (``sadalp``, one per channel and step)
    where the sum of each channel's lanes took three ``addp`` and an ``add`` per four channels
    and step — 8 µops beside the 8 multiplies on the A72's two vector pipes, 80 % of the
    multiply pipe at best (llvm-mca), 4 with the partial sums: 100 %. The accumulators are four
    times as many, so a register tile is one pixel × 16 channels."""
    return family == "neon" and step in (WIDE_DEPTH, HALF_DEPTH)


def lane_terms(step: int) -> int:
    """Products each partial sum of a step over ``step`` input channels adds (:func:`lane_input`)."""
    return step // LANES


def lane_input(lane: Any, e: Any) -> Any:
    """The input channel (of a step's 16, or 8) whose product lands in partial sum ``lane`` as
    its ``e``-th term (0–3, or 0–1: :func:`lane_terms`): ``smull`` multiplies channels i < 8,
    ``smull2``/``smlal2`` i + 8 into int16 lane i, and the pairwise add sums lanes 2l and 2l + 1
    — {2l, 2l + 1, 2l + 8, 2l + 9}."""
    return 2 * lane + e % 2 + 8 * (e // 2)


def quad_steps(family: str, step: int, steps: int, group: int = QUADS) -> bool:
    """Whether a kernel of ``family`` whose reduction takes ``steps`` steps of ``step`` input
    channels runs them ``group`` at a time on :data:`SDOT_TAPS` (the sdot family, whole groups
    of four quads: 16, 32, 48 … input channels after padding; a first layer's taps, 2 or 3)."""
    return family == "sdot" and step == DEPTH and group in SDOT_TAPS and steps % group == 0


def tap_row(family: str, kernel_width: int, channels: int) -> tuple[int, int] | None:
    """(steps, values per step) of a first layer's row of taps read as one step group of
    ``family``'s kernel — a layer of at most :data:`DEPTH` input ``channels`` and a kernel
    ``kernel_width`` wide — or None where the family has no such step: on sdot the row's kx
    quads, a pixel's channels padded to 4 (:data:`SDOT_TAPS`: 2 to 4 wide); on plain NEON its
    bytes as pairs (:data:`NEON_PAIRS`: up to 16 bytes)."""
    if channels > DEPTH:
        return None
    if family == "sdot" and kernel_width in SDOT_TAPS:
        return kernel_width, DEPTH
    if family == "neon" and kernel_width * channels <= 16:
        return -(-kernel_width * channels // PAIR), PAIR
    return None


def pointwise_pairs(family: str | None, channels: int) -> int | None:
    """Pairs per call of :data:`NEON_PAIRS` where a 1×1 layer of ``channels`` int8 input
    channels reads each pixel's channels as a row of pairs on plain NEON (16 bytes a call, or
    8: a call never reads past its pixel), or None where it keeps the partial-sum kernel: a
    layer over 8 or 16 channels, or over a count the 8-channel step takes (:func:`depth`: 24,
    40, 56). Per 4 input values × 8 output channels the row of pairs issues 4 multiplies
    (``smull``, ``smull2``, ``smlal``, ``smlal2``) and 2 ``sadalp`` and sums nothing across
    lanes afterwards; the partial sums take as many multiplies but an ``addp`` tree per 4 output
    channels and pixel, which a short reduction does not amortize (Pi 4 estimate, MobileNetV2
    int8: its 24 → 144 layer 5.88 → 3.63 M cycles; at 32 channels two layers 7-8 % slower)."""
    if family != "neon" or channels % HALF_DEPTH or (channels > WIDE_DEPTH and depth(family, channels) != HALF_DEPTH):
        return None
    pairs = channels // PAIR
    return 8 if pairs % 8 == 0 else 4


def row_pixel(step: int, channels: int) -> int:
    """Values per pixel of a first layer's rows (:func:`tap_row`'s ``step`` values a step, a
    layer of ``channels`` input channels): sdot's quads pad a pixel's channels to 4, a row of
    pairs keeps them as they are."""
    return channels if step == PAIR else DEPTH


def row_bytes(step: int, steps: int) -> int:
    """Bytes a row kernel loads per pixel over ``steps`` steps of ``step`` values: one q
    register, or a d register for a row of pairs that fits one (the data must extend that far)."""
    return 8 if step == PAIR and steps * step <= 8 else 16


def row_block(step: int, channels: int) -> int:
    """Output channels per block of a first layer's rows: 16, or for a row of pairs 8 where 16
    does not divide ``channels`` and 8 does (BlazeFace's 24: 16 would compute 32)."""
    if step == PAIR and channels % BLOCK and channels % PAIR_CHANNELS == 0:
        return PAIR_CHANNELS
    return BLOCK


def quad_group(family: str, step: int, steps: int, group: int) -> int:
    """Steps a kernel of ``family`` over ``steps`` steps of ``step`` input channels takes at a
    time: ``group`` (four quads of a pixel; a first layer's row of taps), or two quads on sdot
    where whole groups of four do not divide the reduction (:data:`SDOT_PAIR`)."""
    if family == "sdot" and step == DEPTH and group == QUADS and steps % QUADS and steps % 2 == 0:
        return 2
    return group


def row_intrinsic(family: str, step: int, steps: int, group: int, narrow: bool = False) -> str | None:
    """The intrinsic a kernel of ``family`` over ``steps`` steps of ``step`` values runs ``group``
    of them at a time with (:func:`quad_group`), ``narrow`` weights (within ±127):
    :data:`SDOT_TAPS` (:func:`quad_steps`), :data:`SDOT_PAIR`, :data:`NEON_PAIRS` (a first
    layer's row of pairs); else None."""
    if quad_steps(family, step, steps, group):
        return SDOT_TAPS[group]
    if group == 2 and quad_group(family, step, steps, QUADS) == 2:
        return SDOT_PAIR
    if family == "neon" and step == PAIR and steps % group == 0:
        return NEON_PAIRS.get((group, narrow))
    return None


def flip_sign(value: Any, dtype: str = "int8") -> Any:
    """An int8 value as the uint8 ``value + 128`` (its sign bit flipped), as the kernels of an
    unsigned family read their data; a uint8 value (``dtype``) as the int8 ``value − 128``, as a
    signed family's kernels read uint8 data."""
    from tvm import tirx

    if dtype == "uint8":
        return tirx.reinterpret("int8", value ^ tirx.const(128, "uint8"))
    return tirx.reinterpret("uint8", value ^ tirx.const(-128, "int8"))


# The sdot family's depthwise kernel (:func:`..conv.depthwise_conv2d_nhwc_int8_sdot`): a column's
# taps along y, four at a time, as each channel's quad — four channels' quads one q register
# (DW_ROWS interleaves four rows of 16 channels: eight zips) — times the same quads of weights:
# one ``sdot`` (DW_SDOT) per four channels, four taps and pixel, where NEON's ``smull`` pairs
# take 4 multiplies (the A76's one pipe for them) and 4 widening adds per 16 channels and two taps
DW_TAPS = 4
DW_SDOT = "edgetune_dw_4x4_sdot"
DW_ROWS = "edgetune_dw_rows_4x16"
