"""int8 elementwise layers: TFLite's fixed-point adds and ReLUs, rescales, concatenations,
and chains run as 256-entry table lookups."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import tvm_module
from ..kernels.resize import resize2d_nhwc_q11
from .common import (
    INJECTIVE,
    bound_value,
    const_array,
    immediate,
    map_functions,
    module_pass,
    mutate_functions,
    op_name,
    relax,
    static_shape,
)
from .int8_values import INT_RANGE, all_values, chain_values, dequantized, quantized

tirx = tvm_module("tirx")


class QuantizeRewrite:
    """The shape of the int8 elementwise passes: each ``quantize`` call to one of ``dtypes`` is
    replaced by ``rewrite(mutator, call)`` where that gives an expression (None: kept as is);
    ``count`` says, after a run, how many were replaced."""

    dtypes: tuple[str, ...] = ("int8",)

    def __init__(self) -> None:
        self.count = 0

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        raise NotImplementedError

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        return map_functions(mod, lambda m, f: _Quantizes(m, self).visit_expr(f))


@module_pass(opt_level=0)
class XnnpackInt8Adds(QuantizeRewrite):
    """TFLite int8 ADDs (``quantize(dequantize(a) + dequantize(b))``) computed as LiteRT's
    XNNPACK kernel does, in int32 fixed point: each input's scale over the output's as a
    multiplier of 20 significant bits (the larger one in [2²⁰, 2²¹)), a rounding bias that
    also carries the zero points, then an arithmetic shift. The float path rounds a step away
    where the exact sum sits near a half — one step per residual block, compounding through
    the network. An ADD with a fused activation (``quantize(clip(a + b, lo, hi))``, a ReLU:
    MediaPipe pose landmark's segmentation decoder, 256 × 256 × 8) clamps the result to the
    activation's bounds quantized as TFLite does (``zero + round(bound / scale)``, halves away
    from zero); in float it divided each value (float64 on AArch64: 4 M of the Pi 4's 94 M
    cycles in two such layers)."""

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        add, bounds = bound_value(mutator, q.args[0]), (-np.inf, np.inf)
        if op_name(add) == "relax.nn.relu":
            add, bounds = bound_value(mutator, add.args[0]), (0.0, np.inf)
        elif op_name(add) == "relax.clip":
            bounds = (immediate(add.args[1]), immediate(add.args[2]))
            add = bound_value(mutator, add.args[0])
            if None in bounds:
                return None
        if op_name(add) != "relax.add":
            return None
        terms = []
        for arg in add.args:
            d = bound_value(mutator, arg)
            if op_name(d) != "relax.dequantize" or str(d.args[0].ty.dtype) != "int8":
                return None
            params = _per_tensor(d)
            if params is None or const_array(d.args[0]) is not None:
                return None
            terms.append((d.args[0], *params))
        output = _per_tensor(q)
        if output is None:
            return None
        sy, zy = output
        ratios = [np.float32(s / sy) for _x, s, _z in terms]
        largest = max(ratios)
        if not all(2.0**-10 <= r < 2.0**8 for r in ratios):
            return None  # outside XNNPACK's range: it would not run this add either
        shift = 20 - (int(np.frombuffer(np.float32(largest).tobytes(), np.uint32)[0] >> 23) - 127)
        mults = [int(np.rint(np.float32(r) * np.float32(2.0**shift))) for r in ratios]
        bias = (1 << (shift - 1)) - sum(m * z for m, (_x, _s, z) in zip(mults, terms))
        emit = mutator.builder_.emit
        acc: Any = relax.const(np.int32(bias), "int32")
        for m, (x, _s, _z) in zip(mults, terms):
            wide = emit(relax.op.astype(x, "int32"))
            acc = emit(relax.op.add(acc, emit(relax.op.multiply(wide, relax.const(np.int32(m), "int32")))))
        shifted = emit(relax.op.right_shift(acc, relax.const(np.int32(shift), "int32")))
        out = emit(relax.op.add(shifted, relax.const(np.int32(zy), "int32")))
        low, high = (_tflite_quantized(b, sy, zy) for b in bounds)
        return relax.op.astype(emit(relax.op.clip(out, max(-128, low), min(127, high))), "int8")


def _tflite_quantized(value: float, scale: np.float32, zero: int) -> int:
    """An activation bound as TFLite quantizes it (``zero + round(value / scale)``, in float32,
    halves away from zero; ±inf: beyond int8)."""
    if not np.isfinite(value):
        return 1 << 20 if value > 0 else -(1 << 20)
    v = np.float32(np.float32(value) / scale)
    return zero + int(np.sign(v) * np.floor(np.abs(v) + np.float32(0.5)))


@module_pass(opt_level=0)
class XnnpackInt8Resizes(QuantizeRewrite):
    """TFLite int8 bilinear RESIZEs (``quantize(resize2d(dequantize(x)))``, one scale and zero
    point in and out, as TFLite requires) computed as LiteRT's XNNPACK kernel does, on the 8-bit
    values: each axis's source coordinate and its weight rounded to 11 bits (``q11``, the
    ``RESIZE_BILINEAR`` modes: half-pixel centres clamped into the image, align-corners, the
    legacy asymmetric one), then in int32 ``t = (tl << 11) + (tr − tl)·αx``, the same below,
    ``(t << 11) + (b − t)·αy``, rounded by ``+ 2²¹ >> 22`` — bit for bit XNNPACK's result.
    The float path dequantized into a float32 image, interpolated it and divided by the scale
    per element (float64 on AArch64); MediaPipe pose landmark's segmentation decoder upsamples
    five times, to 256 × 256 × 8: 2.7 M of the Pi 4's 84 M cycles in the last one alone."""

    dtypes = ("int8", "uint8")

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        found = _same_scale_bilinear(mutator, q)
        if found is None:
            return None
        d, resize = found
        shape, size = static_shape(d.args[0]), static_shape(resize)
        if shape is None or size is None:
            return None
        mode = str(resize.attrs.coordinate_transformation_mode)
        rows = np.stack(q11_axis(shape[1], size[1], mode), axis=1)
        cols = np.stack(q11_axis(shape[2], size[2], mode), axis=1)
        out = mutator.builder_.call_te(resize2d_nhwc_q11, d.args[0], relax.const(rows, "int32"),
                                       relax.const(cols, "int32"), primfunc_name_hint="resize2d_q11")
        gv = out.args[0]  # injective, as the float resize is: it fuses as that did
        mutator.builder_.update_func(gv, mutator.builder_.get()[gv].with_attr("op_pattern", INJECTIVE))
        return out

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        return mutate_functions(mod, _Quantizes(mod, self))  # (keeps the kernels it adds)


Q11_MODES = ("half_pixel", "align_corners", "asymmetric")


def _same_scale_bilinear(mutator: Any, q: Any) -> tuple[Any, Any] | None:
    """(the dequantize, the resize) of ``q`` = ``quantize(resize2d(dequantize(x)))``, a linear
    NHWC resize of an 8-bit ``x`` in one of TFLite's modes on the same per-tensor scale and zero
    point in and out; else None."""
    resize = bound_value(mutator, q.args[0])
    if op_name(resize) != "relax.image.resize2d":
        return None
    a, d = resize.attrs, bound_value(mutator, resize.args[0])
    if (op_name(d) != "relax.dequantize" or str(d.args[0].ty.dtype) != str(q.attrs.out_dtype)
            or str(a.method) != "linear" or str(a.layout) != "NHWC"
            or str(a.coordinate_transformation_mode) not in Q11_MODES):
        return None
    params = _per_tensor(d)
    return (d, resize) if params is not None and params == _per_tensor(q) else None


def q11_axis(image: int, target: int, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One axis of XNNPACK's 8-bit bilinear resize (its ``q11`` indirection): per output index
    the first and second source index and the second's weight in 1/2048, computed in float32
    as XNNPACK computes them (the weight rounded half to even, as ``lrintf``)."""
    f32 = np.float32
    adjust = 1 if mode == "align_corners" and target != 1 else 0
    scale = f32(f32(image - adjust) / f32(target - adjust))
    index = np.arange(target, dtype=np.int32).astype(f32)
    if mode == "half_pixel":
        offset = f32(f32(0.5) * scale - f32(0.5))
        source = np.clip((index * scale).astype(f32) + offset, f32(0), f32(image - 1)).astype(f32)
    else:  # align corners, or TensorFlow's legacy asymmetric mapping
        source = (index * scale).astype(f32)
    first = source.astype(np.int32)  # truncation, as the C cast: the source is never negative
    second = np.minimum(first + 1, image - 1).astype(np.int32)
    weight = np.rint((source - first.astype(f32)) * f32(2048)).astype(np.int32)
    return first, second, weight


@module_pass(opt_level=0)
class Int8Relus(QuantizeRewrite):
    """TFLite int8 ReLUs (``quantize(relu(dequantize(v)))``) without the division TVM's
    ``quantize`` spends per element: ``round(max(v − z1, 0) · k) + z2`` with one float32 ``k``
    for ``s1/s2`` — kept only when it gives what the float path gives for every one of the 256
    int8 inputs (checked here in float32), so results do not change."""

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        relu = bound_value(mutator, q.args[0])
        if op_name(relu) != "relax.nn.relu":
            return None
        return _affine_requantize(mutator, q, bound_value(mutator, relu.args[0]), relu=True)


@module_pass(opt_level=0)
class Int8Prelus(QuantizeRewrite):
    """TFLite int8 PRELUs (``quantize(prelu(dequantize(v), α))``, a slope per channel: after
    nearly every convolution of MediaPipe's face and iris landmark models) without the float
    path's division: ``round((v − z1) · k) + z2``, saturated, with ``k`` = ``s1/s2`` where
    v ≥ z1 and ``s1·α_c/s2`` below, float32 — kept only when it gives what the float path gives
    for every channel and every one of the 256 int8 inputs (checked here), so results do not
    change. The float path's quantize divides each value in float64 on AArch64 (exact, and
    ~24 instructions per 16 values: :mod:`..codegen.division`): in the iris landmark model's
    1×1 layers the epilogue took twice the cycles of the multiply-accumulates."""

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        parts = _prelu(mutator, bound_value(mutator, q.args[0]))
        if parts is None or str(q.attrs.out_dtype) != "int8":
            return None
        d, slope = parts
        inward, outward = _per_tensor(d), _per_tensor(q)
        if inward is None or outward is None:
            return None
        (s1, z1), (s2, z2) = inward, outward
        v = np.arange(-128, 128, dtype=np.int32)
        x = dequantized(v, s1, z1)  # the float path, per channel (rows) and input (columns)
        expected = quantized(np.where(x > 0, x, x * slope[:, None]), s2, z2, "int8")
        k_up, k_down = np.float32(s1 / s2), (np.float32(s1) * slope / np.float32(s2)).astype(np.float32)
        steps = (v - np.int32(z1)).astype(np.float32)
        cheap = np.clip(np.round(steps * np.where(steps >= 0, k_up, k_down[:, None])) + np.float32(z2), -128, 127)
        if not np.array_equal(expected, cheap.astype(np.int8)):
            return None
        emit = mutator.builder_.emit
        wide = emit(relax.op.subtract(emit(relax.op.astype(d.args[0], "int32")), relax.const(np.int32(z1), "int32")))
        k = emit(relax.op.where(emit(relax.op.greater_equal(wide, relax.const(np.int32(0), "int32"))),
                                relax.const(k_up, "float32"), relax.const(k_down, "float32")))
        scaled = emit(relax.op.multiply(emit(relax.op.astype(wide, "float32")), k))
        shifted = emit(relax.op.add(emit(relax.op.round(scaled)), relax.const(np.float32(z2), "float32")))
        return relax.op.astype(emit(relax.op.clip(shifted, -128.0, 127.0)), "int8")


def _prelu(mutator: Any, call: Any) -> tuple[Any, np.ndarray] | None:
    """(the ``dequantize`` of an int8 tensor, the slope: float32, one value or one per channel
    of the last axis) of a PRELU on it — ``nn.prelu`` over the last axis, or how the TFLite
    converter writes other slope shapes, ``where(x >= 0, x, x · α)`` —, else None."""
    name = op_name(call)
    if name == "relax.nn.prelu":
        x, slope = bound_value(mutator, call.args[0]), _constant(mutator, call.args[1])
        rank = len(call.ty.shape.values)
        if int(call.attrs.axis) % rank != rank - 1:
            return None
    elif name == "relax.where":
        test, kept, scaled = (bound_value(mutator, a) for a in call.args)
        if (op_name(test) != "relax.greater_equal" or op_name(scaled) != "relax.multiply"
                or not (test.args[0].same_as(call.args[1]) and scaled.args[0].same_as(call.args[1]))
                or const_array(test.args[1]) is None or const_array(test.args[1]).any()):
            return None
        x, slope = kept, _constant(mutator, scaled.args[1], trailing=True)
    else:
        return None
    if op_name(x) != "relax.dequantize" or str(x.args[0].ty.dtype) != "int8" or slope is None:
        return None
    channels = int(x.ty.shape.values[-1])
    return (x, slope) if slope.dtype == np.float32 and slope.size in (1, channels) else None


def _constant(mutator: Any, expr: Any, trailing: bool = False) -> np.ndarray | None:
    """The value of a constant, or of a reshape of one (how TVM's TFLite converter passes a
    PRELU's slope), flattened; with ``trailing``, only a constant that varies along the last axis
    at most (its other dimensions 1). Else None."""
    value = bound_value(mutator, expr)
    if op_name(value) == "relax.reshape":
        value = bound_value(mutator, value.args[0])
    array = const_array(value)
    if array is None or (trailing and any(d != 1 for d in array.shape[:-1])):
        return None
    return array.reshape(-1)


@module_pass(opt_level=0)
class Int8Rescales(QuantizeRewrite):
    """``quantize(dequantize(v))`` from one scale and zero point to another (how QDQ graphs put
    a SqueezeNet Fire module's branches on the scale of their concatenation, after
    :class:`Int8Concats`) as ``round((v − z1) · k) + z2``, saturated, with one float32 ``k`` for
    ``s1/s2`` — where that gives the float path's result for every one of the 256 int8 inputs,
    as :class:`Int8Relus` checks; other rescales stay lookups (:class:`Int8Tables`). A lookup in
    a vectorized epilogue is a scalar load per lane (TVM has no vector gather): on SqueezeNet's
    55×55×16 → 64 expand layer the epilogue's lookup took 0.17 ms, the arithmetic 0.09."""

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        return _affine_requantize(mutator, q, bound_value(mutator, q.args[0]), relu=False)


def _affine_requantize(mutator: Any, q: Any, d: Any, relu: bool) -> Any | None:
    """``q`` = ``quantize(relu?(d))``, ``d`` = ``dequantize(v)`` of an int8 ``v``, both per
    tensor, as ``clip(round(max?(v − z1, 0) · k) + z2)`` in float32 with ``k`` = ``s1/s2``;
    None where ``q`` is not that or this differs from the float path on any of the 256 inputs."""
    if (op_name(d) != "relax.dequantize" or str(d.args[0].ty.dtype) != "int8"
            or str(q.attrs.out_dtype) != "int8"):
        return None
    consts = [const_array(e) for e in (d.args[1], d.args[2], q.args[1], q.args[2])]
    if any(c is None or c.size != 1 for c in consts):
        return None
    s1, z1, s2, z2 = (c.reshape(()) for c in consts)
    float_path = chain_values(mutator, q, [d.args[0]])  # for v = −128…127
    v = np.arange(-128, 128, dtype=np.int32) - np.int32(z1)
    k = np.float32(np.float32(s1) / np.float32(s2))
    cheap = np.clip(np.round((np.maximum(v, 0) if relu else v).astype(np.float32) * k) + np.float32(z2), -128, 127)
    if float_path is None or not np.array_equal(float_path, cheap):
        return None
    emit = mutator.builder_.emit
    wide = emit(relax.op.subtract(emit(relax.op.astype(d.args[0], "int32")), relax.const(np.int32(z1), "int32")))
    if relu:
        wide = emit(relax.op.maximum(wide, relax.const(np.int32(0), "int32")))
    scaled = emit(relax.op.multiply(emit(relax.op.astype(wide, "float32")), relax.const(k, "float32")))
    shifted = emit(relax.op.add(emit(relax.op.round(scaled)), relax.const(np.float32(z2), "float32")))
    return relax.op.astype(emit(relax.op.clip(shifted, -128.0, 127.0)), "int8")


def _per_tensor(d: Any) -> tuple[np.float32, int] | None:
    """(scale, zero point) of a per-tensor ``quantize`` / ``dequantize`` call, else None."""
    scale, zero = const_array(d.args[1]), const_array(d.args[2])
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return None
    return np.float32(scale.reshape(())), int(zero.reshape(()))


@module_pass(opt_level=0)
class Int8MaxPools(QuantizeRewrite):
    """``quantize(max_pool(dequantize(x)))`` — a QDQ graph's max pool (SqueezeNet's, ResNet's
    stem) — as the max pool of the 8-bit ``x`` itself, then a rescale where the quantize's
    scale or zero point differ (:class:`Int8Rescales`): exact, since dequantizing (scale > 0)
    and rounding are monotone, so the largest input stays the largest. The float path made the
    convolution before it write float32 (its epilogue dequantizing per element: a third of
    SqueezeNet's first layer on the Pi 5 estimate) and pooled four times the bytes."""

    dtypes = ("int8", "uint8")

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        pool = bound_value(mutator, q.args[0])
        if op_name(pool) != "relax.nn.max_pool2d":
            return None
        d = bound_value(mutator, pool.args[0])
        dtype = str(q.attrs.out_dtype)
        if op_name(d) != "relax.dequantize" or str(d.args[0].ty.dtype) != dtype:
            return None
        params, out = _per_tensor(d), _per_tensor(q)
        if params is None or out is None or params[0] <= 0:
            return None
        a = pool.attrs
        pooled = relax.op.nn.max_pool2d(d.args[0], pool_size=a.pool_size, strides=a.strides, padding=a.padding,
                                        dilation=a.dilation, ceil_mode=bool(a.ceil_mode),
                                        count_include_pad=bool(a.count_include_pad), layout=str(a.layout),
                                        out_layout=str(a.out_layout))
        return _on_scale_of(mutator, pooled, d, q) if params != out else pooled


LAYOUT_OPS = ("relax.reshape", "relax.permute_dims", "relax.expand_dims", "relax.squeeze", "relax.flatten")


@module_pass(opt_level=0)
class Int8LayoutMoves(QuantizeRewrite):
    """``quantize(L(dequantize(x)))`` with ``L`` a chain of layout ops (reshape, transpose,
    expand / squeeze dims, nearest-neighbour resizes) — how QDQ graphs move 8-bit tensors, a
    YOLO head's outputs to channels-first, its neck's upsamplings — as ``L(x)`` on the 8-bit
    tensor, then a rescale where the parameters differ (:class:`Int8Rescales`). Exact: on the
    same scale and zero point ``round((x − z)·s / s) + z`` is ``x`` for every 8-bit ``x``
    (float32 is off by far less than half a step). The float path moved float32 (four times
    the bytes) and divided by the scale per element: a YOLOv8n-style int8 head's output kernel
    was 7 % of the model on the Pi 5 estimate; its neck's two upsamplings 1.0 → 0.56 M cycles."""

    dtypes = ("int8", "uint8")

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        moves, expr = [], bound_value(mutator, q.args[0])
        while op_name(expr) in LAYOUT_OPS or _nearest_resize(expr):
            moves.append(expr)
            expr = bound_value(mutator, expr.args[0])
        dtype = str(q.attrs.out_dtype)
        if not moves or op_name(expr) != "relax.dequantize" or str(expr.args[0].ty.dtype) != dtype:
            return None
        params, out = _per_tensor(expr), _per_tensor(q)
        if params is None or out is None or params[0] <= 0:
            return None
        moved = expr.args[0]
        for move in reversed(moves):
            if _nearest_resize(move):  # (its output type is an attribute: the 8-bit input's now)
                a = move.attrs
                call = relax.op.image.resize2d(moved, move.args[1], [float(v) for v in a.roi], str(a.layout),
                                               str(a.method), str(a.coordinate_transformation_mode),
                                               str(a.rounding_method), float(a.cubic_alpha), int(a.cubic_exclude),
                                               float(a.extrapolation_value))
            else:
                call = relax.Call(move.op, [moved, *move.args[1:]], move.attrs, move.ty_args)
            moved = mutator.builder_.emit(call)
        return _on_scale_of(mutator, moved, expr, q) if params != out else moved


def _nearest_resize(expr: Any) -> bool:
    """A nearest-neighbour resize: each output element one input element, a move as well."""
    return op_name(expr) == "relax.image.resize2d" and str(expr.attrs.method) == "nearest_neighbor"


def _on_scale_of(mutator: Any, x: Any, d: Any, q: Any) -> Any:
    """The 8-bit ``x``, on the scale and zero point of ``d`` (a ``dequantize``), rescaled to
    those of ``q`` (a ``quantize``): ``quantize(dequantize(x))``, which :class:`Int8Rescales`
    makes arithmetic or a lookup."""
    emit = mutator.builder_.emit
    back = emit(relax.op.dequantize(x if isinstance(x, relax.Var) else emit(x), d.args[1], d.args[2],
                                    axis=int(d.attrs.axis)))
    return relax.op.quantize(back, q.args[1], q.args[2], axis=int(q.attrs.axis), out_dtype=str(q.attrs.out_dtype))


@module_pass(opt_level=0)
class Int8Concats(QuantizeRewrite):
    """``quantize(concat(dequantize(a), dequantize(b), …))`` — how QDQ graphs join SqueezeNet's
    expand branches — as ``concat(a', b', …)`` of int8 tensors: an input on the output's scale
    and zero point is taken as it is, another requantized (``quantize(dequantize(x))``, which
    :class:`Int8Tables` makes a lookup in the kernel that produces ``x``). The float path wrote
    each branch as float32 and ran a concat + quantize kernel over them (SqueezeNet: 0.1 ms per
    Fire module, a tenth of the model)."""

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        concat = bound_value(mutator, q.args[0])
        fields = bound_value(mutator, concat.args[0]) if op_name(concat) == "relax.concat" else None
        out = _per_tensor(q)
        if not isinstance(fields, relax.Tuple) or out is None:
            return None
        parts = []
        for field in fields.fields:
            d = bound_value(mutator, field)
            if op_name(d) != "relax.dequantize" or str(d.args[0].ty.dtype) != str(q.attrs.out_dtype):
                return None
            params = _per_tensor(d)
            if params is None:
                return None
            parts.append(d.args[0] if params == out else
                         mutator.builder_.emit(relax.op.quantize(field, q.args[1], q.args[2], axis=int(q.attrs.axis),
                                                                 out_dtype=str(q.attrs.out_dtype))))
        return relax.op.concat(parts, axis=int(concat.attrs.axis))


@module_pass(opt_level=0)
class Int8SumsWithoutDivide(QuantizeRewrite):
    """``quantize(dequantize(a) ⊕ dequantize(b))`` — a QDQ graph's residual add or gating
    multiply of two 8-bit tensors, per tensor — with its result multiplied by ``1/s`` where
    ``quantize`` divides by its scale ``s``, kept only when that gives the float path's result
    for every one of the 65,536 input pairs (checked here in float32, as TVM computes them). It
    runs after :class:`Int8Tables`, which takes the products of one source (hard-swish's
    ``x · hardsigmoid(x)``) as one lookup.
    A vector divide in a convolution's epilogue costs more than the rest of it (a ResNet-style
    int8 block's 1×1 convolutions with the residual add in their epilogue filled 24 % of the Pi 5's
    dot-product slots, those without it 47 %)."""

    dtypes = ("int8", "uint8")

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        combine = bound_value(mutator, q.args[0])
        ufunc = {"relax.add": np.add, "relax.multiply": np.multiply}.get(op_name(combine))
        if ufunc is None:
            return None
        ds = [bound_value(mutator, arg) for arg in combine.args]
        if any(op_name(d) != "relax.dequantize" or str(d.args[0].ty.dtype) not in INT_RANGE for d in ds):
            return None
        params, out = [_per_tensor(d) for d in ds], _per_tensor(q)
        if any(p is None for p in params) or out is None or out[0] <= 0:
            return None
        (a, b), (scale, zero) = (dequantized(all_values(d.args[0]), *p) for d, p in zip(ds, params)), out
        x = ufunc.outer(a, b)  # float32, as the kernel computes it
        dtype = str(q.attrs.out_dtype)
        lo, hi = INT_RANGE[dtype]
        ratio = np.float32(np.float32(1) / scale)
        multiplied = np.clip(np.round(x * ratio) + np.float32(zero), lo, hi).astype(dtype)
        if not np.array_equal(quantized(x, scale, zero, dtype), multiplied):
            return None
        emit = mutator.builder_.emit
        scaled = emit(relax.op.multiply(q.args[0], relax.const(ratio, "float32")))
        shifted = emit(relax.op.add(emit(relax.op.round(scaled)), relax.const(np.float32(zero), "float32")))
        return relax.op.astype(emit(relax.op.clip(shifted, float(lo), float(hi))), dtype)


@module_pass(opt_level=0)
class Int8Tables(QuantizeRewrite):
    """Chains of elementwise float ops between one 8-bit tensor and a quantize —
    ``quantize(f(dequantize(x)))`` with per-tensor parameters and scalar constants, such as
    MobileNetV3's hard-swish in QDQ form (dequantize → hard-sigmoid → quantize → dequantize →
    multiply → quantize) or a rescale from one scale to another — replaced by a lookup in a
    256-entry table of that chain's results, computed here in float32 on every one of the 256
    inputs as the float path computes them (round half to even, saturating; exp / sigmoid / tanh
    in float64, rounded to float32, where the build uses fast approximations). Each quantize in
    the float path divides per element; the lookup is one gather (the division-free float
    spelling of the same chain measured slower than the gather in MobileNetV3's depthwise
    epilogues, 0.43 against 0.27 ms on a 14×14×672 layer — while those epilogues were still
    scalar code; a plain rescale is now arithmetic, :class:`Int8Rescales`). Tables follow tables: a chain
    through an already tabled quantize is evaluated through its table, so the whole chain
    becomes one lookup."""

    dtypes = tuple(INT_RANGE)

    def rewrite(self, mutator: Any, q: Any) -> Any | None:
        source: list[Any] = []
        values = chain_values(mutator, q, source)
        if values is None or not source:
            return None
        x = source[0]
        if [int(d) for d in x.ty.shape.values] != [int(d) for d in q.ty.shape.values]:
            return None  # a constant broadcast the chain to another shape
        emit = mutator.builder_.emit
        index = emit(relax.op.astype(x, "int32"))
        if str(x.ty.dtype) == "int8":
            index = emit(relax.op.add(index, relax.const(np.int32(128), "int32")))
        table = relax.const(values.astype(np.int32), "int32")
        # "clip": the index is in range by construction; "fast" would print a warning per table
        return relax.op.astype(emit(relax.op.take(table, index, axis=0, mode="clip")), str(q.attrs.out_dtype))


@relax.expr_functor.mutator
class _Quantizes(relax.PyExprMutator):
    """Each ``quantize`` to one of the pass's dtypes replaced by what its ``rewrite`` makes of it."""

    def __init__(self, mod: Any, rewriter: QuantizeRewrite):
        super().__init__(mod)
        self.rewriter = rewriter

    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        if op_name(new) != "relax.quantize" or str(new.attrs.out_dtype) not in self.rewriter.dtypes:
            return new
        rewritten = self.rewriter.rewrite(self, new)
        if rewritten is None:
            return new
        self.rewriter.count += 1
        return rewritten
