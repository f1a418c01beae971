"""Convolution computes (TE): packed NHWC direct, int8, depthwise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import dot
from .cpu import FLOAT_BIAS
from .extents import crop, dims, row_variant, whole_tiles


def pad_nhwc(data: Any, padding: Sequence[int], fill: int | float = 0, dtype: str | None = None,
              channels: int | None = None, width: Any = None) -> Any:
    """``data`` padded spatially with ``fill`` (an int8 layer's zero point; a tensor of one
    value: a zero point computed at run time), converted to
    ``dtype`` (an int8 input read by an fp32 kernel; ``"uint8"``: int8 shifted by 128 for
    unsigned dot products, ``"int8"``: uint8 shifted by −128 for signed ones, ``fill`` shifted
    too) and its channels zero-extended to ``channels``.
    ``width``: the padded width to compute where there is a stage, when not the padding's (a
    symbolic width's whole tiles read past its end: :func:`_pad_width`). One stage named
    ``pad``; ``data`` itself when there is nothing to do."""
    from tvm import te, tirx

    top, left, bottom, right = padding
    n, h, w, c = data.shape
    c = int(c)
    dtype = dtype or str(data.dtype)
    channels = channels or c
    if not any(padding) and dtype == str(data.dtype) and channels == c:
        return data
    convert, pad = _converter(data, fill, dtype)

    def value(b: Any, y: Any, x: Any, ch: Any) -> Any:
        bounds = [y >= top, y < h + top, x >= left, x < w + left] if any(padding) else []
        if channels != c:
            bounds.append(ch < c)
        raw = convert(data[b, y - top, x - left, ch if channels == c else tirx.min(ch, c - 1)])
        # (added channels meet zero weights: any value does)
        return tirx.if_then_else(tirx.all(*bounds), raw, pad) if bounds else raw

    width = w + left + right if width is None else width
    return te.compute((n, h + top + bottom, width, channels), value, name="pad")


def _converter(data: Any, fill: Any, dtype: str) -> tuple[Any, Any]:
    """(a function converting ``data``'s values to ``dtype``, the pad value ``fill`` as
    ``dtype``) for :func:`pad_nhwc` and :func:`tap_rows`: int8 ↔ uint8 by flipping the sign
    bit (``fill`` shifted too), other types cast; a ``fill`` tensor (a zero point known at run
    time) converted as the data is."""
    from tvm import tirx

    def convert(v: Any) -> Any:
        if {dtype, str(data.dtype)} == {"int8", "uint8"}:
            return dot.flip_sign(v, str(data.dtype))
        return v.astype(dtype) if dtype != str(data.dtype) else v

    if isinstance(fill, (int, float)):  # shifted as the data is (a zero point of int8 data)
        pad = tirx.const(fill + (128 if dtype == "uint8" and str(data.dtype) == "int8" else
                                 -128 if dtype == "int8" and str(data.dtype) == "uint8" else 0), dtype)
    else:
        pad = convert(fill[(0,) * len(fill.shape)])
    return convert, pad


def tap_rows(data: Any, padding: Sequence[int], fill: Any, dtype: str, length: int, pixel: int = dot.DEPTH) -> Any:
    """``data`` (NHWC, at most ``pixel`` channels) padded spatially with ``fill`` and each row
    flattened to ``length`` values of ``dtype``: a pixel's channels padded to ``pixel``, then
    the next pixel's — so the ``pixel · k`` values from a column on are k columns' channels
    together (a first layer's taps along x as one reduction step, :func:`conv2d_nhwc_int8`'s
    ``taps``). Values past the padded row, and padded channels, are ``fill`` too (their weights
    are zero). One stage named ``pad``."""
    from tvm import te, tirx

    top, left, bottom, _right = padding
    n, h, w, c = (int(x) for x in data.shape)
    convert, pad = _converter(data, fill, dtype)

    def value(b: Any, y: Any, j: Any) -> Any:
        x, ch = j // pixel - left, j % pixel
        inside = tirx.all(y >= top, y < h + top, x >= 0, x < w, ch < c)
        return tirx.if_then_else(inside, convert(data[b, y - top, x, tirx.min(ch, c - 1)]), pad)

    return te.compute((n, h + top + bottom, length), value, name="pad")


def out_size(size: int, k: int, stride: int, dil: int, before: int, after: int) -> int:
    return (size + before + after - (k - 1) * dil - 1) // stride + 1


def conv_attrs(kernel: str, signature: str, default_variant: str = "") -> dict[str, Any]:
    """A convolution kernel's block annotations: its kind, its signature (the key its direct and
    Winograd variants share) and, where it is not the target's, the variant an untuned build
    gives it (read by :func:`..schedules.dispatch.conv_variant`)."""
    attrs = {"edgetune.kernel": kernel, "edgetune.conv": signature}
    return {**attrs, "edgetune.conv_default": default_variant} if default_variant else attrs


def conv2d_nhwc_packed(data: Any, weights: Any, bias: Any = None, *, strides: Sequence[int], padding: Sequence[int],
                       dilation: Sequence[int], out_channels: int, signature: str = "", fill: int = 0,
                       out_dtype: str | None = None, row_tile: int = 0, rows: tuple[str, int] = ("", 0),
                       default_variant: str = "") -> Any:
    """NHWC convolution reading ``weights`` packed as [OCp/OCi, KH, KW, IC, OCi] (OCp: the
    output channels padded with zero filters to a multiple of OCi; the padding is cropped), plus
    ``bias`` per output channel. An int8 input (an exact int8 layer on a CPU without an integer
    dot product) is read as float32, padded with ``fill``, and the sums returned as ``out_dtype``
    (None: the weights' dtype, float32 or float16).
    A symbolic width (a range of lengths) is computed as whole tiles of ``row_tile`` pixels and
    cropped (:func:`_tiled_width`; ``rows``: :func:`.extents.row_variant`). ``default_variant``: as
    :func:`.winograd.conv2d_nhwc_winograd`'s."""
    from tvm import te


    n, h, w, ic = dims(data.shape)
    oco, kh, kw, _ic, oci = (int(x) for x in weights.shape)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    oh, ow = out_size(h, kh, sh, dh, top, bottom), out_size(w, kw, sw, dw, left, right)
    ry, rx, rc = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx"), te.reduce_axis((0, ic), "rc")
    attrs = conv_attrs("conv2d_nhwc_packed", signature, default_variant)
    width = _tiled_width(ow, row_tile, attrs, rows)
    src = pad_nhwc(data, padding, fill, str(weights.dtype), width=_pad_width(ow, width, sw, (kw - 1) * dw))
    pixel = _pixel(src is data, ow)

    def value(b: Any, y: Any, x: Any, o: Any) -> Any:
        x = pixel(x)
        return te.sum(src[b, y * sh + ry * dh, x * sw + rx * dw, rc] * weights[o // oci, ry, rx, rc, o % oci],
                      axis=[ry, rx, rc])

    out = te.compute((n, oh, width, oco * oci), value, name="conv2d_nhwc_packed", attrs=attrs)
    return _cast(_plus_channels(crop(_crop_width(out, (n, oh, ow, out_channels)), out_channels), bias), out_dtype)


def conv2d_nhwc_lanes(data: Any, weights: Any, bias: Any = None, *, strides: Sequence[int], padding: Sequence[int],
                      dilation: Sequence[int], lanes: int, signature: str = "", fill: int = 0) -> Any:
    """NHWC convolution to fewer output channels than a vector holds (a segmentation head's
    one channel), vectorized over the input channels instead: per output ``lanes`` partial sums
    over (ky, kx, ic / lanes), then one sum across them. ``weights`` [OC, KH, KW, IC], IC a
    multiple of ``lanes``. The packed kernel pads such a layer's channels to a register
    (:func:`conv2d_nhwc_packed`): MediaPipe pose landmark's 3×3 8 → 1 mask layer multiplied
    three zero filters per real one (5.8 M of the Pi 4's 121 M cycles). An int8 input (an exact
    int8 layer, float32 weights of its integers) is read as float32, padded with ``fill``."""
    from tvm import te


    n, h, w, ic = dims(data.shape)
    oc, kh, kw, _ic = (int(x) for x in weights.shape)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    oh, ow = out_size(h, kh, sh, dh, top, bottom), out_size(w, kw, sw, dw, left, right)
    ry, rx, rb = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx"), te.reduce_axis((0, ic // lanes), "rb")
    src = pad_nhwc(data, padding, fill, str(weights.dtype))

    def partial(b: Any, y: Any, p: Any, lane: Any) -> Any:  # p: a pixel's output channels, pixel by pixel
        x, o = p // oc, p % oc
        return te.sum(src[b, y * sh + ry * dh, x * sw + rx * dw, rb * lanes + lane]
                      * weights[o, ry, rx, rb * lanes + lane], axis=[ry, rx, rb])

    sums = te.compute((n, oh, ow * oc, lanes), partial, name="conv2d_nhwc_lanes",
                      attrs=conv_attrs("conv2d_nhwc_lanes", signature))
    rl = te.reduce_axis((0, lanes), "rl")
    total = te.compute((n, oh, ow * oc), lambda b, y, p: te.sum(sums[b, y, p, rl], axis=rl), name="lanes_sum")
    out = te.compute((n, oh, ow, oc), lambda b, y, x, o: total[b, y, x * oc + o], name="outputs")
    return _plus_channels(out, bias)


def _tiled_width(ow: Any, row_tile: int, attrs: dict[str, Any], rows: tuple[str, int] = ("", 0)) -> Any:
    """The width a convolution computes: a constant width as it is; a symbolic one (a range of
    lengths) as whole tiles of ``row_tile`` pixels, the tile recorded in ``attrs`` for the
    schedule (with ``rows``, for tuning: :func:`.extents.row_variant`). What the pixels past the
    end read: :func:`_pad_width`, :func:`_pixel`."""

    if isinstance(ow, int):
        return ow
    attrs.update(row_variant(row_tile, rows))
    return whole_tiles(ow, row_tile)


def _pad_width(ow: Any, width: Any, stride: int, reach: int) -> Any:
    """The padded input width a symbolic width's whole tiles read (``width`` pixels of
    ``stride``, each ``reach`` more): zeros past the input's end, in the pad stage where the
    input has one (:func:`pad_nhwc`); None for a constant width. Exactly the pixels read, so
    TVM sees the stage cover its reads."""
    return None if isinstance(ow, int) else (width - 1) * stride + reach + 1


def _pixel(unpadded: bool, ow: Any) -> Any:
    """The output pixel a computed pixel reads as: itself where the input has a pad stage (its
    pixels past the end are zeros: :func:`_pad_width`), else past a symbolic end the last pixel
    again (as the dense kernel's rows). Measured on a PP-OCR-style recognizer (160 px,
    AVX-512): the clamp in every load cost its depthwise layers 10-19 % (an address per row of
    the register tile, live across the reduction) and reading zeros from the pad stage took
    them back to a fixed width's time; a 1x1 convolution has no stage to widen (a copy of its
    input would cost what the clamp does) and keeps the clamp."""
    from tvm import tirx

    if isinstance(ow, int) or not unpadded:
        return lambda x: x
    return lambda x: tirx.min(x, ow - 1)


def _crop_width(out: Any, shape: tuple[Any, ...]) -> Any:
    """``out`` cut back to ``shape`` (its width ``ow`` pixels, its channels) where
    :func:`_tiled_width` tiled it."""
    from tvm import te

    if isinstance(shape[2], int):
        return out
    return te.compute(shape, lambda *idx: out[idx], name="crop")


def _cast(out: Any, dtype: str | None) -> Any:
    """``out`` as ``dtype`` (the int32 sums of an exact int8 layer computed in float32; None: as
    it is)."""
    from tvm import te

    if dtype is None or str(out.dtype) == dtype:
        return out
    return te.compute(out.shape, lambda *idx: out[idx].astype(dtype), name="cast")


def conv2d_nhwc_int8(data: Any, weights: Any, offset: Any = None, *, strides: Sequence[int], padding: Sequence[int],
                     dilation: Sequence[int], out_channels: int, family: str, fill: Any = 0,
                     narrow: bool = False, signature: str = "", default_variant: str = "",
                     float_sums: bool = False, taps: int = 0, unbias: Any = None, pairs: int = 0) -> Any:
    """int8 NHWC convolution summed in int32, weights packed [OCp/16, KH, KW, ICp/D, 16, D] (the
    dot-product instructions' operand order, D input channels a step: :func:`.dot.depth`; OCp,
    ICp: zero filters / channels appended), the
    input padded with ``fill`` (a number, or a tensor of one value: a zero point known at run
    time), plus ``offset`` per output channel (int32). The data is int8, or uint8 (dynamically
    quantized activations, ``ConvInteger``'s): for an unsigned-data family
    (:mod:`.dot`) int8 data is shifted to uint8, and ``offset`` includes the −128·Σw that takes
    the shift off; for a signed one uint8 data is shifted to int8 (``offset``: +128·Σw).
    ``narrow``: every weight is within ±127 (:mod:`.dot`'s NEON kernel then sums two products
    in int16). ``float_sums``: the sums returned as float32 by their bit pattern — ``offset``
    includes :data:`.cpu.FLOAT_BIAS_BITS`, so each sum s is held as the float 1.5 · 2²³ + s,
    and 1.5 · 2²³ is taken off in float (exact for |s| < 2²², which the caller checks): one
    vector add for a conversion that takes the A76 four times as long (:data:`.cpu.SLOW_CONVERTS`);
    ``unbias``: what is taken off instead, a float32 per channel (:func:`sums_as_floats`).
    ``pairs``: a 1×1 layer's pixel read as a row of pairs, ``pairs`` a call
    (:func:`.dot.pointwise_pairs`; weights packed as a first layer's, one tap), straight from
    its int8 input.
    ``taps``: the layer's kernel width, where its input has at most ``DEPTH`` channels and the
    weights are packed [OCp/B, KH, 1, S, B, D] — a row of taps as S steps of D values
    (:func:`.dot.tap_row`; B: 16, or 8 for a row of pairs, :func:`.dot.row_block`): the input
    read as rows (:func:`tap_rows`), a pixel's bytes from its
    first column on holding its taps along x, one step group of the family's row kernel per row
    of taps. On sdot (D = 4) a step is a kx's channels padded to a quad, the kernel
    :data:`.dot.SDOT_TAPS` (each tap took a broadcast load, ``ld1r``, and a step); on plain NEON
    (D = 2) the row's bytes, a pixel's channels unpadded, as pairs (:data:`.dot.NEON_PAIRS`).
    """
    from tvm import te, tirx

    n, h, w, ic = (int(x) for x in data.shape)
    oco, kh, kw, ico, block, depth = (int(x) for x in weights.shape)
    kw = taps or kw
    pixel_bytes = dot.row_pixel(depth, ic)  # a row's values per pixel (taps)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    oh, ow = out_size(h, kh, sh, dh, top, bottom), out_size(w, kw, sw, dw, left, right)
    # Data to pad (spatially, or to whole quads of channels) is converted in that pass; other
    # data is read as it is and, for an unsigned family, flipped in the register (a pass of its
    # own before a 1×1 convolution, ~10 % of a BlazeFace layer, measured)
    wanted = "uint8" if dot.unsigned_data(family) else "int8"
    flip = dot.unsigned_data(family) and str(data.dtype) == "int8" and not any(padding) and ic % depth == 0 \
        and not taps
    if pairs:  # a 1×1 layer's pixel: its channels, in groups that end within it
        src = data
    elif taps:  # a pixel reads 16 bytes (8: a NEON row of up to 4 pairs) from its first column on
        src = tap_rows(data, padding, fill, wanted, max((w + left + right) * pixel_bytes,
                                                        (ow - 1) * sw * pixel_bytes + dot.row_bytes(depth, ico)),
                       pixel_bytes)
    else:
        src = data if flip else pad_nhwc(data, padding, fill, wanted, ico * depth)
    # On x86 a width with no register-tile divisor near the tile's (13, 27: tiles of 1 and 3
    # pixels) is computed as the padded width that costs least (dot.dot_rows: 13 as 14 in tiles
    # of 7), the pixels past the end reading the last one again, cropped: SqueezeNet int8 0.99 →
    # 0.51 ms. On the Pi 5 (sdot) the same rule (55 as 56, 13 as 16, in tiles of 4) cost
    # SqueezeNet 18.8 → 20.2 M cycles by the A76 estimate, MobileNetV3 31.3 → 32.5: Arm keeps
    # the width
    width = dot.dot_rows(family, ow) if family == "vnni" else ow

    def pixel(b: Any, y: Any, x: Any, ry: Any, rx: Any, c: Any) -> Any:
        x = x if width == ow else tirx.min(x, ow - 1)
        if pairs:
            return src[b, y * sh + ry * dh, x * sw, c]
        if taps:
            return src[b, y * sh + ry * dh, x * sw * pixel_bytes + c]
        return src[b, y * sh + ry * dh, x * sw + rx * dw, c]

    row = {"edgetune.tap_steps": pairs or ico} if taps else {}
    out = _dot_sums((n, oh, width, oco * block), pixel, (kh, 1 if taps else kw), flip, weights, family,
                    {**conv_attrs("conv2d_nhwc_int8", signature, default_variant), "edgetune.dot": family,
                     "edgetune.dot_narrow": int(narrow), **row})
    if width != ow or oco * block != out_channels:
        out = te.compute((n, oh, ow, out_channels), lambda *idx: out[idx], name="crop")
    out = _plus_channels(out, offset)
    return sums_as_floats(out, unbias) if float_sums else out


def sums_as_floats(out: Any, unbias: Any = None) -> Any:
    """Integer sums ``out`` held as floats by their bit pattern (each sum s as the float
    1.5 · 2²³ + s: the kernel's offset includes :data:`.cpu.FLOAT_BIAS_BITS`) as float32: the
    pattern read as a float less 1.5 · 2²³, or less ``unbias`` (float32 per channel, its last
    axis) where given — a channel whose filter is all zeros and whose constant is too large for
    the pattern sums 0 and takes off 1.5 · 2²³ − float(constant) instead
    (:func:`..passes.int8_kernels._float_sums` checks that this is exact)."""
    from tvm import te, tirx

    def value(*idx: Any) -> Any:
        less = tirx.const(FLOAT_BIAS, "float32") if unbias is None else unbias[idx[-1]]
        return tirx.reinterpret("float32", out[idx]) - less

    return te.compute(out.shape, value, name="floats")


def dense_int8(data: Any, weights: Any, *, out_channels: int, family: str, narrow: bool = False,
               rows_to: int = 0) -> Any:
    """A dense layer of 8-bit rows (``data``: [..., rows, K], int8 or uint8) summed in int32 on
    the integer convolution micro-kernel, as a 1×1 convolution over the rows (weights packed as
    :func:`conv2d_nhwc_int8` takes them, [OCp/16, 1, 1, ICp/D, 16, D]; its schedule), its output
    of ``data``'s rank ([..., rows, out_channels]) so the elementwise epilogue after it (the
    scales of a dynamically quantized layer) fuses into the kernel. The data is multiplied as
    the family takes it: int8 data of an unsigned family flipped to uint8 in the register, uint8
    data of a signed one converted to int8 — each x ± 128, for the caller to take off
    (± 128·Σw). ``rows_to``: rows computed (a count with no good register-tile divisor: the
    rest zeros, cropped). Where the data must be converted or padded it is, in a stage of its
    own named ``pad``."""
    from tvm import te

    *lead, rows, k = (int(x) for x in data.shape)
    oco, kh, kw, ico, block, depth = (int(x) for x in weights.shape)
    rows_to = max(rows_to, rows)
    wanted = "uint8" if dot.unsigned_data(family) else "int8"
    flip = dot.unsigned_data(family) and str(data.dtype) == "int8" and k % depth == 0 and rows_to == rows
    src = data
    if not flip and (str(data.dtype) != wanted or ico * depth != k or rows_to != rows):
        src = te.compute((*lead, rows_to, ico * depth), lambda *i: _converted(data, i, rows, k, wanted), name="pad")
    def row(*idx: Any) -> Any:
        *at, _ry, _rx, c = idx
        return src[(*at, c)]

    out = _dot_sums((*lead, rows_to, oco * block), row, (kh, kw), flip, weights, family,
                    {"edgetune.kernel": "dense_int8", "edgetune.dot": family, "edgetune.dot_narrow": int(narrow)})
    if rows_to == rows and oco * block == out_channels:
        return out
    return te.compute((*lead, rows, out_channels), lambda *i: out[i], name="crop")


def _dot_sums(shape: tuple[Any, ...], read: Any, kernel: tuple[int, int], flip: bool, weights: Any, family: str,
              attrs: dict[str, Any]) -> Any:
    """The int32 sums ``Σ x·w`` over (ky, kx, input channel) of an output of ``shape`` (its last
    axis the output channels, packed ``weights``), ``read(*out_index[:-1], ky, kx, channel)``
    the 8-bit input value (its sign bit flipped in the register where ``flip``): the form the
    dot-product intrinsics of :mod:`.dot` are matched against. Where ``family`` keeps partial
    sums (:func:`.dot.partial_lanes`) the kernel computes :data:`.dot.LANES` of them per
    output, summed after it by a stage named ``lanes`` (a reduction the schedule places under
    the register tile, before the epilogue)."""
    from tvm import te

    (kh, kw), (*_, ico, block, depth) = kernel, (int(x) for x in weights.shape)
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")

    def product(at: Any, o: Any, channel: Any, step: Any, c: Any) -> Any:
        """Input ``channel`` (channel ``c`` of ``step`` in the packed weights) · its weight."""
        pixel = read(*at, ry, rx, channel)
        pixel = (dot.flip_sign(pixel) if flip else pixel).astype("int32")
        return pixel * weights[o // block, ry, rx, step, o % block, c].astype("int32")

    if not dot.partial_lanes(family, depth):
        rc = te.reduce_axis((0, ico * depth), "rc")

        def total(*idx: Any) -> Any:
            *at, o = idx
            return te.sum(product(at, o, rc, rc // depth, rc % depth), axis=[ry, rx, rc])

        return te.compute(shape, total, name="conv2d_nhwc_int8", attrs=attrs)
    rc, e = te.reduce_axis((0, ico), "rc"), te.reduce_axis((0, dot.lane_terms(depth)), "e")

    def partial(*idx: Any) -> Any:
        *at, o, lane = idx
        c = dot.lane_input(lane, e)
        return te.sum(product(at, o, rc * depth + c, rc, c), axis=[ry, rx, rc, e])

    sums = te.compute((*shape, dot.LANES), partial, name="conv2d_nhwc_int8", attrs={**attrs, "edgetune.dot_lanes": 1})
    lane = te.reduce_axis((0, dot.LANES), "lane")
    return te.compute(shape, lambda *idx: te.sum(sums[(*idx, lane)], axis=lane), name="lanes")


def _converted(data: Any, idx: tuple[Any, ...], rows: int, channels: int, dtype: str) -> Any:
    """``data``'s 8-bit value at ``idx`` as ``dtype`` (its sign bit flipped where the signs
    differ: x ∓ 128), zero past its ``rows`` and ``channels``."""
    from tvm import tirx

    *at, row, ch = idx
    v = data[(*at, tirx.min(row, rows - 1), tirx.min(ch, channels - 1))]
    v = dot.flip_sign(v, str(data.dtype)) if str(data.dtype) != dtype else v
    return tirx.if_then_else(tirx.all(row < rows, ch < channels), v, tirx.const(0, dtype))


def _plus_channels(out: Any, per_channel: Any) -> Any:
    """``out`` plus a constant per channel (its last axis), or ``out`` itself for None."""
    from tvm import te

    if per_channel is None:
        return out
    return te.compute(out.shape, lambda *idx: out[idx] + per_channel[idx[-1]], name="bias")


def depthwise_conv2d_nhwc_int8(data: Any, weights: Any, offset: Any = None, *, kernel: tuple[int, int],
                               strides: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                               fill: Any = 0, float_sums: bool = False, unbias: Any = None) -> Any:
    """An int8 depthwise layer's int32 sums ``Σ x·w`` (plus ``offset`` per channel) over its
    ``kernel``'s taps in pairs (weights ``[P, 2, C']`` int8, :func:`.dot.depthwise_pairs`: the
    taps row-major, a last odd tap's partner a zero weight; ``C'`` the channels rounded up to
    8): each pair's two products summed in int16 — exact for weights within ±127, |2 · 128 ·
    127| < 2¹⁵ — and widened once, which NEON issues as ``smull`` + ``smlal`` (8 products each)
    and ``saddw``, where the fp32 kernel's ``fmla`` takes 4 and reads its input converted to
    float. The input is padded with ``fill`` (the zero point) and its channels zero-extended to
    ``C'``; the sums are cropped to the input's channels. ``float_sums``, ``unbias``: the sums
    returned as float32 by their bit pattern (as :func:`conv2d_nhwc_int8`'s)."""
    from tvm import te, tirx


    n, h, w, c = dims(data.shape)
    pairs, _two, padded = (int(x) for x in weights.shape)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilation
    top, left, bottom, right = padding
    oh, ow = out_size(h, kh, sh, dh, top, bottom), out_size(w, kw, sw, dw, left, right)
    taps = kh * kw
    src = pad_nhwc(data, padding, fill, "int8", padded)
    p = te.reduce_axis((0, pairs), "p")

    def product(b: Any, y: Any, x: Any, ch: Any, tap: Any, k: int) -> Any:
        value = src[b, y * sh + tap // kw * dh, x * sw + tap % kw * dw, ch]
        return value.astype("int16") * weights[p, k, ch].astype("int16")

    def total(b: Any, y: Any, x: Any, ch: Any) -> Any:
        pair = product(b, y, x, ch, 2 * p, 0) + product(b, y, x, ch, tirx.min(2 * p + 1, taps - 1), 1)
        return te.sum(pair.astype("int32"), axis=p)

    out = te.compute((n, oh, ow, padded), total, name="depthwise_conv2d_nhwc_int8",
                     attrs={"edgetune.kernel": "depthwise_conv2d_nhwc_int8"})
    out = _plus_channels(crop(out, c), offset)
    return sums_as_floats(out, unbias) if float_sums else out


def depthwise_conv2d_nhwc_int8_sdot(data: Any, weights: Any, offset: Any = None, *, kernel: tuple[int, int],
                                    strides: Sequence[int], padding: Sequence[int], fill: Any = 0,
                                    float_sums: bool = False, unbias: Any = None) -> Any:
    """An int8 depthwise layer's int32 sums ``Σ x·w`` (plus ``offset`` per channel) on the sdot
    family (dilation 1): per output row, each padded input column's taps along y as channel
    quads (``cols``: four rows interleaved, :data:`.dot.DW_ROWS`; the rows past the kernel's
    read from extra rows of ``fill`` below the padding and met by zero weights), then per pixel,
    tap column and four channels one ``sdot`` (:data:`.dot.DW_SDOT`) with the weights' quads
    (``[G, KW, C'/4, 16]``, :func:`.dot.depthwise_quads`). ``float_sums``, ``unbias``: as
    :func:`depthwise_conv2d_nhwc_int8`."""
    from tvm import te


    n, h, w, c = dims(data.shape)
    groups, kw, quads, _sixteen = (int(x) for x in weights.shape)
    padded = quads * 4
    kh, _kw = kernel
    (sh, sw) = strides
    top, left, bottom, right = padding
    oh, ow = out_size(h, kh, sh, 1, top, bottom), out_size(w, kw, sw, 1, left, right)
    extra = max(0, (oh - 1) * sh + groups * dot.DW_TAPS - (h + top + bottom))
    src = pad_nhwc(data, (top, left, bottom + extra, right), fill, "int8", padded)
    cols = te.compute((n, oh, w + left + right, groups, quads, 16),
                      lambda b, y, x, g, q, lane: src[b, y * sh + g * dot.DW_TAPS + lane % dot.DW_TAPS, x,
                                                      q * 4 + lane // dot.DW_TAPS], name="cols")
    g = te.reduce_axis((0, groups), "g")
    rx = te.reduce_axis((0, kw), "rx")
    k = te.reduce_axis((0, dot.DW_TAPS), "k")

    def total(b: Any, y: Any, x: Any, ch: Any) -> Any:
        lane = ch % 4 * dot.DW_TAPS + k
        return te.sum(cols[b, y, x * sw + rx, g, ch // 4, lane].astype("int32")
                      * weights[g, rx, ch // 4, lane].astype("int32"), axis=[g, rx, k])

    out = te.compute((n, oh, ow, padded), total, name="depthwise_conv2d_nhwc_int8",
                     attrs={"edgetune.kernel": "depthwise_conv2d_nhwc_sdot"})
    out = _plus_channels(crop(out, c), offset)
    return sums_as_floats(out, unbias) if float_sums else out


def depthwise_conv2d_nhwc(data: Any, weights: Any, bias: Any = None, *, strides: Sequence[int], padding: Sequence[int],
                          dilation: Sequence[int], fill: int = 0, out_dtype: str | None = None, row_tile: int = 0,
                          rows: tuple[str, int] = ("", 0)) -> Any:
    """NHWC depthwise convolution (multiplier 1), weights [KH, KW, C'] (C' ≥ C: zero weights
    appended, :func:`depthwise_weights`; the input's channels zero-extended to match, the extra
    outputs cropped), plus ``bias`` per channel; an int8 input read as float32 and padded with
    ``fill``, the sums returned as ``out_dtype`` (as the packed kernel). A symbolic width: whole
    tiles of ``row_tile`` pixels, cropped (as :func:`conv2d_nhwc_packed`)."""
    from tvm import te


    n, h, w, c = dims(data.shape)
    kh, kw, padded = (int(x) for x in weights.shape)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    oh, ow = out_size(h, kh, sh, dh, top, bottom), out_size(w, kw, sw, dw, left, right)
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    attrs: dict[str, Any] = {"edgetune.kernel": "depthwise_conv2d_nhwc"}
    width = _tiled_width(ow, row_tile, attrs, rows)
    src = pad_nhwc(data, padding, fill, str(weights.dtype), padded, _pad_width(ow, width, sw, (kw - 1) * dw))
    pixel = _pixel(src is data, ow)

    def value(b: Any, y: Any, x: Any, ch: Any) -> Any:
        x = pixel(x)
        return te.sum(src[b, y * sh + ry * dh, x * sw + rx * dw, ch] * weights[ry, rx, ch], axis=[ry, rx])

    out = te.compute((n, oh, width, padded), value, name="depthwise_conv2d_nhwc", attrs=attrs)
    return _cast(_plus_channels(crop(_crop_width(out, (n, oh, ow, c)), c), bias), out_dtype)
