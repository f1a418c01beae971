"""Facts of a CPU target the kernels and their schedules are shaped by."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CpuFacts:
    """What a micro-kernel needs to know about the target CPU."""

    lanes: int  # fp32 lanes per vector register
    registers: int  # vector registers
    fma_latency: int  # cycles; with 2 pipes, 2 × latency independent accumulators keep them busy
    aarch64: bool = False
    # a vector float division many times an FMA's cost (Cortex-A72: 34 cycles per 4 lanes by
    # llvm-mca's model; the A76's 7 are less than a Newton reciprocal's 10 multiply-adds)
    slow_divide: bool = False
    # 128-bit (or wider) FMA pipes: the Cortex-A53/A55/A72/A73 issue one vector FMLA a cycle,
    # the A76 and later (and x86 cores) two
    fma_pipes: int = 2
    # float <-> int32 vector conversions (scvtf, fcvtns) on one pipe as two micro-ops: the
    # Cortex-A76 / Neoverse-N1 (llvm-mca's neoverse-n1 model: 2 cycles per 4 lanes, against
    # 0.5 for an add), where integers move to float and back by their bit patterns instead
    # (:data:`FLOAT_BIAS`)
    slow_converts: bool = False
    x86: bool = False
    elem_bits: int = 32  # the element ``lanes`` counts: 32 (float32, int32), 16 (a float16 kernel's)
    reserved: int = 0  # vector registers a register tile leaves free beyond its weights and one broadcast

    @property
    def tile_registers(self) -> int:
        """Vector registers a register tile's accumulators, weights and broadcast may take."""
        return self.registers - self.reserved

    def in_dtype(self, dtype: str) -> "CpuFacts":
        """These facts for a kernel computing in ``dtype``: its lanes a register (8 float16 on
        NEON where 4 float32). Any other dtype than float16 counts as 32-bit lanes, as before."""
        bits = 16 if str(dtype) == "float16" else 32
        if bits == self.elem_bits:
            return self
        reserved = HALF_BY_ELEMENT_RESERVE if bits == 16 and self.aarch64 else 0
        return replace(self, lanes=self.lanes * self.elem_bits // bits, elem_bits=bits, reserved=reserved)

    @classmethod
    def of(cls, target: Any) -> "CpuFacts":
        triple = str(target.attrs.get("mtriple", "")) if target.kind.name == "llvm" else ""
        arm, x86 = triple.startswith(("aarch64", "arm")), triple.startswith("x86_64")
        if x86:
            # TVM's llvm_get_vector_width says 512 for every x86 CPU (AVX2-only Zen 3 and Haswell
            # included), so the width comes from the target's features.
            bits = 512 if has_feature(target, "avx512f") else 256 if has_feature(target, "avx") else 128
        else:
            bits = 128
        if arm:
            registers = 32 if triple.startswith("aarch64") else 16
        else:
            registers = 32 if bits >= 512 else 16
        # In-order-ish Cortex-A53/A55/A72 chain FMAs with ~7 cycles latency, and divide slowly;
        # A76+ and x86 ~4.
        slow = str(target.attrs.get("mcpu", "")) in ("cortex-a53", "cortex-a55", "cortex-a72", "cortex-a73")
        return cls(lanes=max(bits // 32, 1), registers=registers, fma_latency=7 if slow else 4,
                   aarch64=triple.startswith("aarch64"), slow_divide=slow and arm, fma_pipes=1 if slow else 2,
                   slow_converts=arm and str(target.attrs.get("mcpu", "")) in SLOW_CONVERTS,
                   x86=x86)


# Registers a float16 register tile leaves free on AArch64. An FMLA by element of halves takes its
# element from v0–v15 only (the fp32 form from any register), so a tile whose accumulators fill
# the low registers makes LLVM shuffle them (mov chains) and spill: MobileNetV3-style's 1×1 layer
# 480 → 112 on 14² as 14 pixels × 16 channels (28 accumulators) ran at 34 % of the A76's FMLA
# slots. By the Pi 5 estimate of the whole model (M cycles): 0 left free 19.41, 4 18.36, 8 18.70.
HALF_BY_ELEMENT_RESERVE = 4

# Cores whose vector int <-> float conversions take one pipe two cycles per 4 lanes (the Cortex-A76
# and its server twin; llvm-mca's neoverse-n1 model, the Pi 5's estimate). The Cortex-A72 converts
# as fast as it adds in q form: there the bit-pattern forms measured slower (llvm-mca, cortex-a72).
SLOW_CONVERTS = ("cortex-a76", "neoverse-n1")
# 1.5 · 2²³ as float32, and its bit pattern: an integer s with |s| < 2²² added to the pattern is
# the float 1.5 · 2²³ + s (exact: that binade's spacing is 1), and a float v with |v| < 2²²
# added to 1.5 · 2²³ rounds v to the nearest integer, ties to even, in the low bits
FLOAT_BIAS = 12582912.0
FLOAT_BIAS_BITS = 0x4B400000
FLOAT_BIAS_LIMIT = 2**22


def has_feature(target: Any, feature: str) -> bool:
    """Whether an LLVM CPU target has an LLVM feature (``avx2``, ``dotprod``, ...)."""
    from tvm.target import codegen

    return target.kind.name == "llvm" and bool(codegen.target_has_features(feature, target))


def vector_widths(lanes: int) -> list[int]:
    """Vector-block widths LLVM turns into whole registers (others legalize badly: a <25 x
    float> conv measured 30× slower than <32 x float>): multiples of the native width and the
    narrower power-of-two registers (AVX's 8, SSE/NEON's 4)."""
    return sorted({lanes * k for k in (1, 2, 3, 4)} | {w for w in (4, 8) if w < lanes})


def few_outputs_lanes(oc: int, ic: int, cpu: CpuFacts) -> int:
    """The vector width a convolution of ``oc`` output channels over ``ic`` input channels is
    summed in across its input channels (:func:`.conv.conv2d_nhwc_lanes`): the widest of the
    target's vectors (4 floats or more) that divides ``ic``, where ``oc`` is below the narrowest
    — the packed kernel would pad its channels to a register; 0 otherwise."""
    if oc >= min(vector_widths(cpu.lanes)):
        return 0
    return max((w for w in vector_widths(cpu.lanes) if w <= cpu.lanes and ic % w == 0), default=0)


def tile_rate(rows: int, vectors: int, cpu: CpuFacts, weight_cost: float = 1.0) -> float:
    """Estimated register-tile updates per cycle of a ``rows`` × ``vectors`` micro-kernel: two
    FMA pipes, two loads per cycle (``rows`` broadcasts + ``vectors`` weight loads per step, each
    weight load ``weight_cost`` loads: 4 where a dense layer's weight panel streams from L2),
    enough independent accumulators to cover the FMA latency, one cycle of loop overhead."""
    fmas, loads = rows * vectors, rows + vectors * weight_cost
    cycles = max(fmas / 2.0, loads / 2.0, float(cpu.fma_latency)) + 1.0
    return rows / cycles


# A dense layer's packed weight panel (K × NB: 384 × 64 floats, 96 kB) does not stay in L1: its
# vector loads cost as 4. Fitted on 197/122/128-row dense layers on AVX-512 (2, 4, 6 rows per
# tile: 215, 410, 480 GFLOP/s; the L1-resident model predicted 0.4 : 0.44 : 0.46).
STREAMED = 4.0


def max_rows(vectors: int, cpu: CpuFacts) -> int:
    """Most output rows a register tile of ``vectors`` vector columns can hold."""
    return max(1, min(28, (cpu.tile_registers - vectors - 1) // max(vectors, 1)))


def symbolic_height(limit: int, vectors: int, cpu: CpuFacts, weight_cost: float = 1.0) -> int:
    """The register-tile height (up to ``limit``) for a symbolic extent (a range of lengths): the
    lowest within 10 % of the best rate, since the last tile is computed whole whatever the
    length (a tall tile would cost a short sequence most)."""
    heights = range(1, limit + 1)
    best = max(tile_rate(rw, vectors, cpu, weight_cost) for rw in heights)
    return min(rw for rw in heights if tile_rate(rw, vectors, cpu, weight_cost) >= 0.9 * best)


# The register-tile height of every kernel over a symbolic extent on AArch64, measured: by the
# Raspberry Pi estimate (benchmarks/ranges.py --estimate pi4|pi5 --rows 4; instructions counted
# under qemu, cycles by llvm-mca), 4-row tiles ran a MiniLM-like encoder's range package at 0.99 /
# 0.98 / 1.04 (A72) and 0.92 / 0.98 / 1.02 (A76) of a package built for 16 / 64 / 256 tokens,
# where the modelled heights (5–8: :func:`symbolic_height`) ran at 1.21 / 0.99 / 1.04 and
# 1.13 / 0.98 / 1.03; a speech encoder (A76, 100 / 250 frames) 1.01 / 1.01 against 1.03 / 1.04,
# a PP-OCR-style recognizer (160 / 640 px) 1.07 / 1.06 against 1.09 / 1.07. (On AVX-512 4 rows
# measured slower: 1.25 / 1.17 at 64 / 128 tokens, against 0.96 / 1.00.)
ARM_SYMBOLIC_ROWS = 4


def symbolic_default(default: int, limit: int, cpu: CpuFacts) -> int:
    """The height an untuned build gives a kernel over a symbolic extent: ``default`` (the
    model's), on AArch64 :data:`ARM_SYMBOLIC_ROWS` where the registers hold it."""
    return ARM_SYMBOLIC_ROWS if cpu.aarch64 and limit >= ARM_SYMBOLIC_ROWS else default


# Lengths a range package typically serves (the default timing points of a 1..256 range): what
# a dense / matmul tile height over a symbolic row count is chosen for.
TYPICAL_LENGTHS = (16, 32, 64, 128, 256)


def best_rows(vectors: int, cpu: CpuFacts, weight_cost: float = STREAMED, limit: int | None = None) -> int:
    """The register-tile height of a dense / matmul over a symbolic row count: the least
    modelled time over :data:`TYPICAL_LENGTHS`, each length's rows padded to whole tiles and
    counted relative to its own (a short length pays most for its last tile). Measured on this
    AVX-512 host against :func:`symbolic_height`'s rule (the lowest height within 10 % of the
    best rate: 5 rows for a 384-wide encoder's dense layers, now 6), a MiniLM-like encoder's
    range package ran at 1.00 / 1.08 / 1.05 / 1.04 of fixed packages for 16 / 40 / 64 / 256
    tokens instead of 1.11 / 1.09 / 1.08 / 1.07 (``benchmarks/ranges.py --rows 6``)."""
    limit = limit or max_rows(vectors, cpu)

    def cost(rows: int) -> float:
        return sum(-(-n // rows) * rows / n for n in TYPICAL_LENGTHS) / tile_rate(rows, vectors, cpu, weight_cost)
    return min(range(1, limit + 1), key=lambda rows: (cost(rows), rows))


def padded_rows(rows: int, vectors: int, cpu: CpuFacts) -> int:
    """The rows a dense / matmul kernel computes: ``rows`` itself when one of its divisors makes
    a good register tile, else rows rounded up to the tile that pays best after the wasted rows
    (197 tokens are prime: one row per tile ran dense layers at 116 GFLOP/s, 197 as 198 in
    tiles of 6 at ~4× that — measured on ViT-S)."""
    limit = max_rows(vectors, cpu)
    exact = max(tile_rate(rw, vectors, cpu, STREAMED) for rw in divisors(rows) if rw <= limit)
    padded = {rw: -(-rows // rw) * rw for rw in range(2, limit + 1)}
    rate = {rw: tile_rate(rw, vectors, cpu, STREAMED) * rows / padded[rw] for rw in padded}
    best = max(rate, key=lambda rw: (rate[rw], -padded[rw]), default=None)
    # a clear gain only: the crop is a pass of its own
    return padded[best] if best is not None and rate[best] > 1.15 * exact else rows


def depthwise_weights(weights_ohwi: Any, cpu: CpuFacts) -> Any:
    """Depthwise weights ``[C, KH, KW, 1]`` as ``[KH, KW, C']``: ``C'`` the channels rounded up
    to a multiple of 8 (4 and 8 for fewer; zero weights after ``C``). The kernel computes ``C'``
    channels and keeps ``C``: BlazeFace's 28, 36 and 42 channels had run in 4-, 4- and 42-lane
    vectors (one that wide legalizes badly: 14 GFLOP/s); as 32, 40 and 48 they are whole ymm /
    zmm registers (1.3–3.2× per layer, measured). Rounding 24 → 32 for whole zmm measured
    slower (0.82×) than 24 as three ymm."""
    c, kh, kw, _one = weights_ohwi.shape
    packed = weights_ohwi.reshape(c, kh, kw).transpose(1, 2, 0)
    multiple = min(8, cpu.lanes) if c > 8 else min(w for w in (4, 8) if w >= c) if c > 1 else 1
    return pad_axis(packed, 2, multiple).copy()


def packed_weights(weights_ohwi: Any, oci: int) -> Any:
    """Convolution weights ``[OC, KH, KW, IC]`` packed for the direct micro-kernel as
    ``[OCp/OCi, KH, KW, IC, OCi]``: output channels in blocks of ``OCi`` (zero filters after
    ``OC``), each block's channels contiguous for a vector load."""
    oc, kh, kw, ic = weights_ohwi.shape
    padded = pad_axis(weights_ohwi, 0, oci)
    return padded.reshape(-1, oci, kh, kw, ic).transpose(0, 2, 3, 4, 1).copy()


def register_tile(oc: int, ow: int | None, cpu: CpuFacts) -> tuple[int, int]:
    """(OCi, RW): the output-channel block and output-pixel row of one micro-kernel.

    ``RW × ⌈OCi/lanes⌉`` accumulators stay in registers with the weight vectors and one
    broadcast; the estimate prefers tiles that keep both FMA pipes busy (enough independent
    accumulators) with few loads per FMA, and penalizes the zero channels that pad ``oc`` up to
    a multiple of ``OCi``. ``RW`` divides ``ow`` (no row has a tail); a symbolic width (None) is
    computed as whole tiles: :func:`_symbolic_rows`.
    """
    best, best_score = (cpu.lanes, 1), -1.0
    for oci in vector_widths(cpu.lanes):
        padded = -(-oc // oci) * oci
        if oci > padded or (oci > oc and oci != min(w for w in vector_widths(cpu.lanes) if w >= oc)):
            continue
        vecs = -(-oci // cpu.lanes)
        max_rw = (cpu.tile_registers - vecs - 1) // vecs
        limit = min(max_rw, 28)
        heights = [_symbolic_rows(limit, vecs, cpu)] if ow is None else divisors(ow)
        for rw in heights:
            if rw > max_rw or rw > 28:
                continue
            score = tile_rate(rw, vecs, cpu) * oci * oc / padded
            if score > best_score * 1.02 or (score >= best_score * 0.98 and oci > best[0]):
                best, best_score = (oci, rw), max(score, best_score)
    return best


def _symbolic_rows(limit: int, vectors: int, cpu: CpuFacts) -> int:
    """The tile height a convolution's output-channel block is chosen with over a symbolic width
    (computed as whole tiles): on x86 the least modelled time over typical widths
    (:func:`best_rows`; a PP-OCR-style recognizer's 1x1 layers took 8-16 rows where they took
    3-6: 1.14 / 1.13 / 1.11 of fixed packages at 160 / 320 / 640 px → 1.12 / 1.12 / 1.08 and
    1.13 / 1.13 / 1.11 in two runs, inside this host's noise but not against it), on
    AArch64 the lowest within 10 % of the best rate (:func:`symbolic_height`; the height itself
    is :data:`ARM_SYMBOLIC_ROWS` there). The block chosen at that height instead, or at
    :func:`best_rows`' height, measured worse on the Pi estimates (the same model at 160 px:
    9.12 / 9.07 M cycles on the A72 against 8.99: 16-channel blocks where 12 fit 72 exactly)."""
    if cpu.aarch64:
        return symbolic_height(limit, vectors, cpu)
    return best_rows(vectors, cpu, 1.0, limit)


def dense_block(n: int, cpu: CpuFacts) -> int:
    """NB: the output-feature block of a packed dense layer (features padded to a multiple)."""
    best, best_score = cpu.lanes, -1.0
    for nb in vector_widths(cpu.lanes):
        padded = -(-n // nb) * nb
        score = min(nb, 4 * cpu.lanes) * n / padded
        if score > best_score:
            best, best_score = nb, score
    return best


def pad_axis(array: Any, axis: int, multiple: int) -> Any:
    """``array`` with zeros appended along ``axis`` up to a multiple of ``multiple``."""

    extra = -array.shape[axis] % multiple
    if not extra:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, extra)
    return np.pad(array, widths)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
