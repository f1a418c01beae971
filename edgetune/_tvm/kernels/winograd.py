"""Winograd convolutions: which layers, which tile, the weight transform and the compute."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .conv import conv_attrs, pad_nhwc
from .cpu import pad_axis

# Lavin & Gray's F(2×2, 3×3) and F(4×4, 3×3) (interpolation points 0, ±1, ±2, ∞): Y = Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A
WINOGRAD = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
         [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
         [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
    # F(6×6, 3×3), points 0, ±1, ±2, ±½, ∞ (what ncnn's winograd63 kernels use)
    6: ([[1, 0, -21 / 4, 0, 21 / 4, 0, -1, 0], [0, 1, 1, -17 / 4, -17 / 4, 1, 1, 0],
         [0, -1, 1, 17 / 4, -17 / 4, -1, 1, 0], [0, 1 / 2, 1 / 4, -5 / 2, -5 / 4, 2, 1, 0],
         [0, -1 / 2, 1 / 4, 5 / 2, -5 / 4, -2, 1, 0], [0, 2, 4, -5 / 2, -5, 1 / 2, 1, 0],
         [0, -2, 4, 5 / 2, -5, -1 / 2, 1, 0], [0, -1, 0, 21 / 4, 0, -21 / 4, 0, 1]],
        [[1, 0, 0], [-2 / 9, -2 / 9, -2 / 9], [-2 / 9, 2 / 9, -2 / 9], [1 / 90, 1 / 45, 2 / 45],
         [1 / 90, -1 / 45, 2 / 45], [32 / 45, 16 / 45, 8 / 45], [32 / 45, -16 / 45, 8 / 45], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 1 / 2, -1 / 2, 0], [0, 1, 1, 4, 4, 1 / 4, 1 / 4, 0],
         [0, 1, -1, 8, -8, 1 / 8, -1 / 8, 0], [0, 1, 1, 16, 16, 1 / 16, 1 / 16, 0],
         [0, 1, -1, 32, -32, 1 / 32, -1 / 32, 1]]),
}


# int8 dot-product families (:func:`.dot.dot_family`) whose eligible int8 layers are Winograd by
# default (:func:`int8_variant`; None: no exact int8 instruction)
INT8_WINOGRAD_FAMILIES: tuple[str | None, ...] = ("neon", None)

ConvChoice = str | Mapping[str, str]  # "auto" | "direct" | "winograd", or per conv signature


def conv_signature(data_shape: Sequence[int], weights_ohwi: Sequence[int], strides: Sequence[int],
                   padding: Sequence[int], dilation: Sequence[int]) -> str:
    """A convolution's shape, the key a direct/Winograd choice is made and remembered under."""
    _n, h, w, c = data_shape
    oc, kh, kw, _ic = weights_ohwi
    return (f"{h}x{w}x{c}>{oc} k{kh}x{kw} s{'x'.join(map(str, strides))} p{'.'.join(map(str, padding))} "
            f"d{'x'.join(map(str, dilation))}")


def winograd_eligible(kernel: tuple[int, int], strides: Sequence[int], dilation: Sequence[int], ic: int, oc: int) -> bool:
    """3×3, stride 1, no dilation, and enough channels for the transforms to pay."""
    return tuple(kernel) == (3, 3) and list(strides) == [1, 1] and list(dilation) == [1, 1] and ic >= 8 and oc >= 8


def default_conv_variant(target: Any) -> str:
    """The variant an eligible 3×3 convolution gets where nothing was measured: Winograd, on x86
    (measured here, AVX-512: 1.6–2.5× the direct kernel per layer, 1.3× on a YOLO-style model)
    and on Arm (the Raspberry Pi estimate, benchmarks/arm_estimate.py: 1.2–1.4× fewer Cortex-A72 /
    A76 cycles than the direct kernel on 16–24-channel layers, 1.6–3.1× on 32–512-channel ones;
    SqueezeNet for the Pi 4 0.72× the direct package's cycles). The estimate knows no caches:
    on a board the transforms' extra memory traffic counts too, and tuning measures both
    variants of every such layer there and keeps the faster
    (:func:`edgetune.tuning.tasks.choose_variants`). LLVM's AArch64 back end is slow on these
    kernels: Arm libraries with them are compiled at -O2 (:func:`..targets.codegen_target`)."""
    return "winograd"


def int8_variant(family: str | None) -> str:
    """The variant an eligible exact int8 layer (:mod:`..passes.int8_layers`) gets where nothing
    was measured, by the target's int8 dot-product family (:func:`.dot.dot_family`): Winograd in
    float32 over the same integers, its sums rounded back to integers (the integer kernel's
    wherever the transforms' rounding stays under a half: on the YOLOv8n-style and VGG block
    int8 models every output equals the integer kernels'), where the integer kernel multiplies
    at most twice as fast as fp32 — the Pi 4's NEON (``smull``: 8 lanes a cycle against
    FMLA's 4), CPUs without an exact int8 instruction (fp32 kernels over the integers) — else
    the integer kernel. Measured: Pi 4 estimate (A72 cycles), every eligible layer of
    SqueezeNet, the YOLOv8n-style detector and a ResNet-style bottleneck stack 0.62–0.89× its
    integer kernel's (VGG block 265.5 → 167.7 ms); on the Pi 5 (``sdot``) Winograd made the VGG
    block 41.9 → 54.9 ms and SqueezeNet 7.5 → 9.7; on this host with AVX-512 VNNI 6.9 → 11.0 ms
    and 4.3 → 6.3 (VGG block, YOLO-style); AVX2 code without VNNI 33 → 13 ms and 15 → 11."""
    return "winograd" if family in INT8_WINOGRAD_FAMILIES else "direct"


def default_min_channels(target: Any) -> int:
    """Input and output channels below which an eligible layer stays direct unless tuning chose
    Winograd for it: 16 on Arm, where the Pi 4 estimate of an 8-channel 64×64 layer was 1.26×
    the direct kernel's cycles (16 channels on 56×56: 0.72×, 24 on 40×40: 0.62×); 8 elsewhere."""
    triple = str(target.attrs.get("mtriple", "")) if target.kind.name == "llvm" else ""
    return 16 if triple.startswith(("aarch64", "arm")) else 8


def winograd_tile(sig: str, kernel: tuple[int, int], oh: int, ow: int, ic: int, oc: int, geometry: Mapping[str, Any],
                  choice: ConvChoice, default: str = "winograd", min_channels: int = 8, largest: int = 4) -> int:
    """The Winograd output tile for this convolution (0: direct). ``auto`` (and a signature the
    ``choice`` mapping leaves out) means ``default`` (see :func:`default_conv_variant`) for layers
    of at least ``min_channels`` input and output channels (:func:`default_min_channels`).
    Winograd is F(2,3) on a map smaller than 8, else F(4,3) — or with ``largest`` 6 F(6,3) where it
    multiplies less over the map (:func:`_multiplies`: 64 products per 36 outputs against F(4,3)'s
    36 per 16, the tiles' overhang counted). F(6,3)'s transforms have larger coefficients (up to
    32): float32 layers on AArch64 take it (by the Pi 5 estimate a VGG-style block 130.2 → 121.9 M
    cycles, error 8e-7 of the output's magnitude; on an AVX-512 host the block ran 7 % slower with
    it, so x86 keeps F(4,3)), float16 ones keep F(4,3) (the same block in float16:
    66.2 → 61.2 M cycles, but twice the error), and so do exact int8 layers (their sums must round
    back to the integers)."""
    wanted = choice.get(sig, "auto") if isinstance(choice, Mapping) else choice
    if wanted == "auto":
        wanted = default if min(ic, oc) >= min_channels else "direct"
    if wanted == "direct" or not winograd_eligible(kernel, geometry["strides"], geometry["dilation"], ic, oc):
        return 0
    if min(oh, ow) < 8:
        return 2
    return min((t for t in (4, 6) if t <= largest), key=lambda t: (_multiplies(t, oh, ow), t))


def _multiplies(tile: int, oh: int, ow: int) -> float:
    """Multiplies per output pixel and channel pair of F(tile, 3) over an oh × ow map: (tile + 2)²
    per tile², times the tiles' overhang of the map."""
    covered = (-(-oh // tile) * tile) * (-(-ow // tile) * tile)
    return (tile + 2) ** 2 / tile ** 2 * covered / (oh * ow)


def winograd_weights(weights_ohwi: Any, tile: int, oci: int) -> Any:
    """U = G g Gᵀ for every (output, input) channel pair, packed [α², OCp/OCi, IC, OCi]: float16
    for float16 weights (a float16 kernel's), float32 otherwise (an int8 layer's integers too)."""

    g = np.array(WINOGRAD[tile][1], np.float64)
    alpha = tile + 2
    u = np.einsum("ak,okjc,bj->abco", g, weights_ohwi.astype(np.float64), g)
    u = pad_axis(u.reshape(alpha * alpha, weights_ohwi.shape[3], weights_ohwi.shape[0]), 2, oci)
    dtype = np.float16 if weights_ohwi.dtype == np.float16 else np.float32
    return u.reshape(alpha * alpha, u.shape[1], -1, oci).transpose(0, 2, 1, 3).astype(dtype).copy()


def _switch(index: Any, values: list[Any]) -> Any:
    """``values[index]`` for a loop index the schedule unrolls (the selects then fold away)."""
    from tvm import tirx

    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = tirx.Select(index == k, values[k], out)
    return out


def _row_sums(matrix: Any, term: Callable[[int], Any], dtype: str) -> list[Any]:
    """Per row of a constant matrix, Σ_k matrix[row][k] · term(k) over its non-zero entries, in
    ``dtype``, the terms' (a Python float would make a float16 term float32) — factored as
    ncnn's transforms are: where two columns j, j' hold ±the same values in every row (Aᵀ's
    points ±p), each row takes c · (t_j + t_j') or c · (t_j − t_j'), computed once; where two
    rows are a ± b over one split of their columns (Bᵀ's), both are formed from a and b. The
    unrolled transform's LLVM then shares those sums between the rows."""
    from tvm import tirx

    def times(c: float, value: Any) -> Any:
        return value if c == 1 else -value if c == -1 else value * tirx.const(c, dtype)

    def total(parts: list[Any]) -> Any:
        return sum(parts[1:], parts[0])

    m = [[float(c) for c in row] for row in matrix]
    cols = range(len(m[0]))
    pairs, used = [], set()
    for j in cols:
        for k in cols:
            if k > j and not {j, k} & used and any(r[j] for r in m) and all(abs(r[j]) == abs(r[k]) for r in m) \
                    and {r[j] == r[k] for r in m if r[j]} == {True, False}:
                pairs.append((j, k))
                used |= {j, k}
    if pairs:
        sums = {(j, k): (term(j) + term(k), term(j) - term(k)) for j, k in pairs}
        rows = []
        for r in m:
            parts = [times(r[j], sums[j, k][0 if r[j] == r[k] else 1]) for j, k in pairs if r[j]]
            parts += [times(c, term(k)) for k, c in enumerate(r) if c and k not in used]
            rows.append(total(parts))
        return rows
    rows: list[Any] = [None] * len(m)
    for i, r in enumerate(m):
        for i2 in range(i + 1, len(m)):
            s = m[i2]
            same = [k for k in cols if r[k] and s[k] == r[k]]
            flipped = [k for k in cols if r[k] and s[k] == -r[k]]
            if rows[i] is None and rows[i2] is None and same and flipped and \
                    len(same) + len(flipped) == sum(1 for k in cols if r[k]) == sum(1 for k in cols if s[k]):
                a = total([times(r[k], term(k)) for k in same])
                b = total([times(r[k], term(k)) for k in flipped])
                rows[i], rows[i2] = a + b, a - b
        if rows[i] is None:
            rows[i] = total([times(c, term(k)) for k, c in enumerate(r) if c])
    return rows


def conv2d_nhwc_winograd(data: Any, weights: Any, padding: Sequence[int], tile: int, out_channels: int,
                         signature: str = "", fill: int = 0, default_variant: str = "") -> Any:
    """3×3 stride-1 NHWC convolution as Winograd F(tile, 3): input tiles transformed (Bᵀ d B,
    separably), α² GEMMs over input channels against the transformed weights (packed like the
    direct kernel's), output tiles transformed back (Aᵀ m A), then cropped to the output.
    ``data`` may be int8 (an exact int8 layer's input, :func:`int8_variant`): read as float32,
    padded with ``fill`` (its zero point). ``default_variant``: the variant an untuned build
    gives this layer where it is not the target's (annotated for tuning's choice)."""
    from tvm import te

    bt, _g, at = WINOGRAD[tile]
    alpha = tile + 2
    n, h, w, c = (int(x) for x in data.shape)
    _a2, oco, _c, oci = (int(x) for x in weights.shape)
    top, left, bottom, right = padding
    oh, ow = h + top + bottom - 2, w + left + right - 2
    nh, nw = -(-oh // tile), -(-ow // tile)
    tiles = n * nh * nw
    dtype = str(weights.dtype)
    src = pad_nhwc(data, (top, left, nh * tile + 2 - h - top, nw * tile + 2 - w - left), fill, dtype)

    def corner(p: Any) -> tuple[Any, Any, Any]:
        return p // (nh * nw), (p % (nh * nw)) // nw * tile, p % nw * tile

    def input1(xi: Any, r2: Any, p: Any, ch: Any) -> Any:
        b, y0, x0 = corner(p)
        return _switch(xi, _row_sums(bt, lambda r1: src[b, y0 + r1, x0 + r2, ch], dtype))

    t1 = te.compute((alpha, alpha, tiles, c), input1, name="winograd_input1")
    v = te.compute((alpha * alpha, tiles, c),
                   lambda e, p, ch: _switch(e % alpha, _row_sums(bt, lambda r2: t1[e // alpha, r2, p, ch], dtype)),
                   name="winograd_input")
    rc = te.reduce_axis((0, c), "rc")
    gemm = te.compute((alpha * alpha, tiles, oco * oci),
                      lambda e, p, o: te.sum(v[e, p, rc] * weights[e, o // oci, rc, o % oci], axis=[rc]),
                      name="winograd_gemm", attrs=conv_attrs("winograd_gemm", signature, default_variant))
    o1 = te.compute((tile, alpha, tiles, oco * oci),
                    lambda i, nu, p, o: _switch(i, _row_sums(at, lambda xi: gemm[xi * alpha + nu, p, o], dtype)),
                    name="winograd_output1")
    out_tiles = te.compute((tiles, tile, tile, oco * oci),
                           lambda p, i, j, o: _switch(j, _row_sums(at, lambda nu: o1[i, nu, p, o], dtype)),
                           name="winograd_output")

    def crop(b: Any, y: Any, x: Any, o: Any) -> Any:
        return out_tiles[(b * nh + y // tile) * nw + x // tile, y % tile, x % tile, o]

    return te.compute((n, oh, ow, out_channels), crop, name="winograd_crop")
