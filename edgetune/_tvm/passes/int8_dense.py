"""Dynamically quantized products on the integer kernels: ``MatMulInteger`` / ``ConvInteger``
(their int32 sums of 8-bit data and weights, as onnxruntime computes them) as dense layers and
convolutions on the CPU's dot-product instruction."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import dot
from ..kernels.conv import (
    conv2d_nhwc_int8,
    dense_int8,
)
from ..kernels.winograd import (
    conv_signature,
)
from .common import (
    bound_value,
    const_array,
    ints,
    module_pass,
    mutate_functions,
    op_name,
    relax,
    static_shape,
)


@relax.expr_functor.mutator
class _IntegerDense(relax.PyExprMutator):
    def __init__(self, module: Any, family: str | None):
        super().__init__(module)
        self.family = family  # the target's dot-product instruction (None: the fp32 kernel)

    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        if op_name(new) in ("relax.nn.conv1d", "relax.nn.conv2d") and str(new.ty.dtype) == "int32" \
                and self.family is not None:
            on_dots = _dot_conv(self, new, self.family)
            return new if on_dots is None else on_dots
        if op_name(new) != "relax.matmul" or str(new.ty.dtype) != "int32":
            return new
        x, w = new.args
        weights = _integer_constant(self, w)
        if weights is None or weights.ndim != 2 or str(x.ty.dtype) != "int32" or not _eight_bit(self, x):
            return new
        if self.family is not None:
            on_dots = _dot_dense(self, x, weights, self.family)
            if on_dots is not None:
                return on_dots
        if np.abs(weights.astype(np.int64)).sum(axis=0).max() * 255 >= 2 ** 24:
            return new  # a partial sum could pass 2²⁴: not exact in fp32
        floats = self.builder_.emit(relax.op.astype(x, "float32"))
        y = self.builder_.emit(relax.op.matmul(floats, relax.const(weights.astype(np.float32)), out_dtype="float32"))
        return relax.op.astype(y, "int32")


def _dot_dense(mutator: Any, x: Any, weights: Any, family: str) -> Any | None:
    """``x · weights`` (``x``: 8-bit activations widened to int32, less a zero point or not;
    ``weights``: constant K × N within int8) on the integer micro-kernel of ``family``
    (:func:`..kernels.conv.dense_int8`): the 8-bit tensor read as it is, Σx·w per row and column
    in int32, then less ``(zero ± 128)·Σw`` per column (the zero point, and the shift the kernel
    multiplies the data with: :func:`_less_zero`, one multiply-subtract per output, fused into
    the kernel's epilogue). Rows with no register-tile divisor near the tile's height (197 tokens, prime) are
    computed as whole tiles. None where the rows are not a constant count or a weight is outside
    int8 (uint8 weights less a zero point)."""
    shape, (data, zero) = static_shape(x), _data_and_zero(mutator, x)
    if shape is None or len(shape) < 2 or data is None or not dot.int8_weights(weights):
        return None
    (k, n), rows = weights.shape, shape[-2]
    b = mutator.builder_
    out = b.emit(b.call_te(dense_int8, data, relax.const(dot.packed_weights(weights.T.reshape(n, 1, 1, k), family)),
                           out_channels=n, family=family, narrow=dot.narrow_weights(weights),
                           rows_to=dot.dot_rows(family, rows, k), primfunc_name_hint="dense_int8"))
    return _less_zero(b, out, zero, dot.data_shift(str(data.ty.dtype), family), weights.sum(axis=0))


def _less_zero(b: Any, out: Any, zero: Any | None, shift: int, sums: Any) -> Any:
    """``out`` (an integer kernel's Σx'·w, x' = x + ``shift``) as Σ(x − ``zero``)·w: less
    ``(zero + shift)·Σw`` (``sums``: Σw per output channel, shaped to broadcast)."""
    if zero is None and not shift:
        return out
    taken = relax.const(np.int32(shift)) if zero is None else \
        b.emit(relax.op.add(zero, relax.const(np.int32(shift)))) if shift else zero
    return relax.op.subtract(out, relax.op.multiply(taken, relax.const(sums.astype(np.int64).astype(np.int32))))


def _dot_conv(mutator: Any, conv: Any, family: str) -> Any | None:
    """A dynamically quantized convolution (``ConvInteger``, 1-D over NCW or 2-D over NCHW: 8-bit
    activations less a zero point known at run time, constant int8 weights; Whisper's front
    end, a ViT's patch embedding) on the integer convolution micro-kernel of ``family`` in NHWC
    (1-D: height 1), transposed in and out: the 8-bit input padded with its zero point
    (``ConvInteger`` pads after taking it off: zeros there), then less ``(zero ± 128)·Σw`` per
    output channel, as :func:`_dot_dense`. They ran as generic int32 reductions (a Whisper-tiny
    encoder's int8 package slower than its fp32 one: 7.8 of 16.5 ms in its second convolution).
    None for a grouped or otherwise unfit one."""
    a = conv.attrs
    x, w = conv.args
    weights, shape = _integer_constant(mutator, w), static_shape(x)
    one_d = op_name(conv) == "relax.nn.conv1d"
    layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout))
    nhwc = layouts == ("NHWC", "OHWI", "NHWC")  # (ToNHWC's: its input a transpose of the NCHW one)
    if (weights is None or shape is None or int(a.groups) != 1 or not dot.int8_weights(weights)
            or not (nhwc or layouts == (("NCW", "OIW", "NCW") if one_d else ("NCHW", "OIHW", "NCHW")))):
        return None
    moved = bound_value(mutator, x) if nhwc else None
    if nhwc and op_name(moved) == "relax.permute_dims":
        data, zero = _data_and_zero(mutator, moved.args[0])
        data = None if data is None else mutator.builder_.emit(relax.op.permute_dims(data, moved.attrs.axes))
    else:
        data, zero = _data_and_zero(mutator, x)
    if data is None:
        return None
    fill: Any = 0
    if zero is not None and const_array(zero) is not None:
        fill = int(const_array(zero).reshape(-1)[0])
    elif zero is not None:
        fill = bound_value(mutator, zero)
        if op_name(fill) != "relax.astype" or str(fill.args[0].ty.dtype) != str(data.ty.dtype):
            return None
        fill = fill.args[0]  # the 8-bit zero point: what the input is padded with
    if one_d:  # as a height-1 2-D convolution
        shape, weights = [shape[0], shape[1], 1, shape[2]], weights[:, :, None, :]
        (left, right), strides, dilation = ints(a.padding), [1, *ints(a.strides)], [1, *ints(a.dilation)]
        padding = [0, left, 0, right]
    else:
        padding, strides, dilation = ints(a.padding), ints(a.strides), ints(a.dilation)
    n, c, h, width = (shape[0], shape[3], shape[1], shape[2]) if nhwc else shape
    ohwi = weights if nhwc else weights.transpose(0, 2, 3, 1)
    oc = ohwi.shape[0]
    geometry = dict(strides=strides, padding=padding, dilation=dilation)
    b = mutator.builder_
    image = data if nhwc else b.emit(relax.op.permute_dims(relax.op.reshape(data, (n, c, h, width)), [0, 2, 3, 1]))
    out = b.emit(b.call_te(conv2d_nhwc_int8, image, relax.const(dot.packed_weights(ohwi, family)), **geometry,
                           out_channels=oc, family=family, fill=fill, narrow=dot.narrow_weights(weights),
                           signature=conv_signature([n, h, width, c], ohwi.shape, **geometry),
                           primfunc_name_hint="conv2d_nhwc_int8"))
    if not nhwc:
        out = b.emit(relax.op.reshape(relax.op.permute_dims(out, [0, 3, 1, 2]), conv.ty.shape))
    sums = ohwi.astype(np.int64).sum(axis=(1, 2, 3))
    return _less_zero(b, out, zero, dot.data_shift(str(data.ty.dtype), family),
                      sums if nhwc else sums.reshape(oc, 1) if one_d else sums.reshape(oc, 1, 1))


def _data_and_zero(mutator: Any, x: Any) -> tuple[Any | None, Any | None]:
    """MatMulInteger's operand as TVM imports it, ``astype(q, int32)`` less a zero point or not:
    (``q``, the zero point: a scalar int32 expression, or None); (None, None) for anything
    else (a zero point per row or column)."""
    value, zero = bound_value(mutator, x), None
    if op_name(value) == "relax.subtract":
        zero = value.args[1]
        if any(int(getattr(d, "value", 0)) != 1 for d in getattr(zero.ty.shape, "values", [None])):
            return None, None
        value = bound_value(mutator, value.args[0])
    if op_name(value) != "relax.astype" or str(value.args[0].ty.dtype) not in ("uint8", "int8"):
        return None, None
    return value.args[0], zero


def _integer_constant(mutator: Any, expr: Any, depth: int = 3) -> Any | None:
    """The value of an integer constant as the importer leaves MatMulInteger's and ConvInteger's
    weights (the int8 constant widened, less its zero point, also widened; transposed), in
    numpy; None otherwise."""
    value = const_array(expr)
    if value is not None or depth == 0:
        return value
    call = bound_value(mutator, expr)
    name = op_name(call)
    if name == "relax.astype":
        inner = _integer_constant(mutator, call.args[0], depth - 1)
        return None if inner is None else inner.astype(str(call.attrs.dtype))
    if name == "relax.subtract":
        a, b = (_integer_constant(mutator, arg, depth - 1) for arg in call.args)
        return None if a is None or b is None else (a - b).astype(str(call.ty.dtype))
    if name == "relax.permute_dims":  # (ToNHWC's, of a convolution's weights)
        inner = _integer_constant(mutator, call.args[0], depth - 1)
        axes = None if call.attrs.axes is None else [int(v) for v in call.attrs.axes]
        return None if inner is None else inner.transpose(axes)
    return None


def _eight_bit(mutator: Any, x: Any) -> bool:
    """``x`` is an 8-bit tensor widened to int32, less a zero point or not (MatMulInteger's
    operand as TVM imports it): every value in [-255, 255]."""
    value = bound_value(mutator, x)
    if op_name(value) == "relax.subtract":
        value = bound_value(mutator, value.args[0])
    return op_name(value) == "relax.astype" and str(value.args[0].ty.dtype) in ("uint8", "int8")


@module_pass(opt_level=0)
class IntegerDense:
    """A dynamically quantized dense layer (``MatMulInteger``: 8-bit activations less their
    zero point, constant int8 weights, int32 sums) on the integer micro-kernel of the target's
    dot-product instruction (:func:`_dot_dense`), or where it has none on the fp32 packed dense
    kernel over the same integers, where fp32 is exact (every partial sum below 2²⁴: 255 × each
    column's Σ|w|) — TVM's int32 matmul ran as a generic reduction at 65–90 GFLOP/s, 7×
    onnxruntime's int8 MiniLM. A dynamically quantized convolution (``ConvInteger``) on the
    integer convolution kernel where the target has the instruction (:func:`_dot_conv`)."""

    def __init__(self, target: Any):
        self.family = dot.dot_family(target)

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        return relax.transform.DeadCodeElimination(["main"])(mutate_functions(mod, _IntegerDense(mod, self.family)))
