"""int8 convolution and dense layers computed as the framework runtimes compute them: exact
integer sums (the scheme is read in :mod:`.int8_scheme`, elementwise int8 layers are
:mod:`.int8_elementwise`'s).

TVM 0.27's frontends import an int8 layer as ``quantize(conv(dequantize(x), dequantize(W)) +
dequantize(b))``: float products of scaled values, summed in float, divided by the output scale
and rounded. The runtimes users compare with sum ``(x − zx)·w`` in int32, add the int32 bias,
multiply by one float scale per channel ``sx·sw/sy`` and round to nearest even (LiteRT's XNNPACK
kernels; onnxruntime's QLinearConv on MLAS, onto which it fuses QDQ Conv groups). Both are "the
same layer", yet the float path lands a step away wherever the sum sits near a rounding
boundary, and across a network's layers those steps compound (ai-edge-quantizer's int8 face
detector: 41 steps on an output).

:class:`ExactInt8Layers` rewrites such chains — TFLite int8 files and QDQ ONNX files alike — so the sum is the
runtimes' integer sum, then applies the bias and the per-channel scale as they do:

* convolutions (full and depthwise, NHWC or NCHW) become int8 × int8 → int32 convolutions of the
  input padded with its zero point, plus ``bias − zx·Σw`` per channel (uint8 activations are
  shifted to int8 first: ``x − zx = (x − 128) − (zx − 128)``). The build gives them integer kernels
  tensorized with the CPU's dot-product instruction (:mod:`..kernels.dot`, :class:`.int8_kernels.Int8Convolutions`)
  — or fp32 kernels over the same small integers where the CPU has none, depthwise layers and
  GPUs alike (exact while every partial sum stays below 2²⁴: ``K · 255 · max|w| < 2²⁴``, checked
  per layer and counted).
* dense layers (a 2-D input, maybe flattened first) become 1×1 integer convolutions over their
  rows — the same kernels;
* convolutions behind a reshape or transpose, and dense layers over higher-rank inputs, keep
  fp32 kernels over ``x − zx`` and ``w`` held as small integers in float32 (Winograd excepted: its transforms are not exact;
  nor is a scale folded into such weights, :class:`.layout.FoldAffineIntoConv`).

Rescales from one int8 scale to another become a multiply by their ratio where that is exact
(:class:`.int8_elementwise.Int8Rescales`); other elementwise chains from one int8 tensor to a quantize (QDQ
activations such as hard-swish) become lookups in 256-entry tables computed at import
(:class:`.int8_elementwise.Int8Tables`); other QDQ
ops (pools, concatenations, adds of two int8 tensors in ONNX) keep the float path, as onnxruntime
runs them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import const_array, map_functions, module_pass, op_name, relax, wrapped_int32
from .int8_scheme import EXACT_LIMIT, dequantized_constant, describe_layer, peel_transforms, per_channel


class _Lookup(dict):
    """The mutator's bindings as a mapping var → value (what the helpers walk)."""

    def __init__(self, mutator: Any):
        super().__init__()
        self.mutator = mutator

    def __contains__(self, var: Any) -> bool:
        return self.mutator.lookup_binding(var) is not None

    def __getitem__(self, var: Any) -> Any:
        return self.mutator.lookup_binding(var)


@relax.expr_functor.mutator
class _Exact(relax.PyExprMutator):
    def __init__(self, mod: Any, counts: dict[str, Any]):
        super().__init__(mod)
        self.counts = counts

    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        if op_name(new) != "relax.quantize":
            return new
        rewritten = self._rewrite(new)
        return new if rewritten is None else rewritten

    def _rewrite(self, q: Any) -> Any | None:
        bound = _Lookup(self)
        sy, zy = const_array(q.args[1]), const_array(q.args[2])
        if sy is None or zy is None or sy.size != 1 or zy.size != 1:
            return None
        value, _ = peel_transforms(bound, q.args[0])
        bias = None
        if op_name(value) == "relax.add":
            first, _ = peel_transforms(bound, value.args[0])
            second, _ = peel_transforms(bound, value.args[1])
            conv, bias = (first, value.args[1]) if op_name(first) in COMPUTE else (second, value.args[0])
            value = conv
        if op_name(value) not in COMPUTE:
            return None
        x, x_calls = peel_transforms(bound, value.args[0])  # e.g. Gemm's flatten of a dequantized tensor
        weights = dequantized_constant(bound, value.args[1])
        if op_name(x) != "relax.dequantize" or weights is None:
            return None
        sx, zx = const_array(x.args[1]), const_array(x.args[2])
        w, sw, zw = weights
        if sx is None or zx is None or sx.size != 1 or zx.size != 1 or np.any(zw) or w.dtype.itemsize != 1:
            return None
        out_axis, reduce_axes = COMPUTE[op_name(value)](value, w.ndim)
        scale_w = per_channel(sw, out_axis)
        if scale_w is None:
            return None
        channels = w.shape[out_axis]
        sum_b = None
        if bias is not None:
            b = dequantized_constant(bound, bias)
            if b is None or np.any(b[2]) or b[0].size != channels:
                return None
            sb = b[1].reshape(-1)
            expected = np.float32(sx.reshape(())) * scale_w.astype(np.float32)
            if not np.allclose(sb, expected, rtol=1e-5, atol=0):
                return None  # a bias on another scale than sx·sw: the float path stays
            sum_b = b[0]
        # XNNPACK's and MLAS's per-channel scale, computed in float32 as they do
        scale = (np.float32(sx.reshape(())) * scale_w.astype(np.float32) / np.float32(sy.reshape(()))).astype(np.float32)
        k = int(np.prod([w.shape[a] for a in reduce_axes]))
        wmax = np.abs(w.astype(np.int64)).max(axis=tuple(reduce_axes)) if k else 0
        self.counts["layers"] += 1
        self.counts["rewritten"].append(describe_layer(value))
        self.counts["bounded"] += int(np.all(k * 255 * wmax + (np.abs(sum_b.astype(np.int64)).max() if sum_b is not None else 0)
                                        < EXACT_LIMIT))
        emit = self.builder_.emit
        out_rank = len(value.ty.shape.values)
        out_channel = COMPUTE_OUT[op_name(value)](value, out_rank)
        shape = [1] * out_rank
        shape[out_channel] = channels
        if op_name(value) == "relax.matmul":
            acc = self._integer_dense(x.args[0], x_calls, int(zx.reshape(())), w, sum_b, value)
        elif op_name(value) == "relax.nn.conv1d":
            acc = self._integer_conv1d(x.args[0], int(zx.reshape(())), w, sum_b, value) if not x_calls else None
        else:
            acc = self._integer_conv(x.args[0], int(zx.reshape(())), w, sum_b, value) if not x_calls else None
        if acc is not None:
            self.counts["integer"] += 1
        else:
            xi = emit(relax.op.astype(x.args[0], "float32"))
            xf = emit(relax.op.subtract(xi, relax.const(np.float32(zx.reshape(())), "float32"))) if np.any(zx) else xi
            for call in reversed(x_calls):  # the reshapes / transposes the float path applied, in order
                xf = emit(relax.Call(call.op, [xf, *call.args[1:]], call.attrs))
            acc = emit(relax.Call(value.op, [xf, relax.const(w.astype(np.float32))], value.attrs))
            if sum_b is not None:
                acc = emit(relax.op.add(acc, relax.const(sum_b.reshape(shape).astype(np.float32))))
        scaled = emit(relax.op.multiply(acc, relax.const(scale.reshape(shape))))
        rounded = emit(relax.op.round(scaled))
        info = np.iinfo(str(q.attrs.out_dtype))
        shifted = emit(relax.op.add(rounded, relax.const(np.float32(zy.reshape(())), "float32")))
        clipped = emit(relax.op.clip(shifted, float(info.min), float(info.max)))
        return relax.op.astype(clipped, str(q.attrs.out_dtype))

    def _integer_conv(self, x: Any, zx: int, w: np.ndarray, bias: np.ndarray | None, conv: Any) -> Any | None:
        """``Σ(x − zx)·w + bias`` of an int8 convolution (NHWC or NCHW, full or depthwise) as an
        integer convolution (:meth:`_integer_sum`). None when the layer is not such a convolution."""
        a = conv.attrs if op_name(conv) == "relax.nn.conv2d" else None
        layout = str(a.data_layout) if a is not None else ""
        if layout not in ("NHWC", "NCHW") or str(a.out_layout or layout) != layout:
            return None
        c = layout.index("C")
        channels = int(x.ty.shape.values[c])
        if int(a.groups) != 1 and not int(a.groups) == channels == int(conv.ty.shape.values[c]):
            return None
        return self._integer_sum(x, zx, w, bias, layout, str(a.kernel_layout), a.strides, [int(p) for p in a.padding],
                                 a.dilation, int(a.groups))

    def _integer_conv1d(self, x: Any, zx: int, w: np.ndarray, bias: np.ndarray | None, conv: Any) -> Any | None:
        """``Σ(x − zx)·w + bias`` of an int8 1-D convolution (NCW: Whisper's front end) as an
        integer 2-D convolution of height 1 (:meth:`_integer_sum`), so it gets the same kernels.
        None for other layouts and grouped ones."""
        a = conv.attrs
        if (str(a.data_layout), str(a.kernel_layout), str(a.out_layout or a.data_layout)) != ("NCW", "OIW", "NCW") \
                or int(a.groups) != 1 or len(x.ty.shape.values) != 3:
            return None
        left, right = (int(p) for p in a.padding)
        image = self.builder_.emit(relax.op.expand_dims(x, 2))
        acc = self._integer_sum(image, zx, w[:, :, None, :].copy(), bias, "NCHW", "OIHW", [1, int(a.strides[0])],
                                [0, left, 0, right], [1, int(a.dilation[0])], 1)
        return None if acc is None else self.builder_.emit(relax.op.squeeze(acc, [2]))

    def _integer_dense(self, x: Any, x_calls: list[Any], zx: int, w: np.ndarray, bias: np.ndarray | None,
                       matmul: Any) -> Any | None:
        """``Σ(x − zx)·w + bias`` of an int8 dense layer — ``(M, K) × (K, N)``, the input maybe
        flattened or transposed first (the same transforms, on the int8 tensor) — as a 1×1
        NHWC integer convolution over M pixels, so it gets the same kernels. None when the
        layer is not such a product."""
        if w.ndim != 2 or len(matmul.ty.shape.values) != 2:
            return None
        emit = self.builder_.emit
        for call in reversed(x_calls):
            x = emit(relax.Call(call.op, [x, *call.args[1:]], call.attrs))
        if len(x.ty.shape.values) != 2:
            return None
        m, k = (int(d) for d in x.ty.shape.values)
        n = w.shape[1]
        pixels = emit(relax.op.reshape(x, [m, 1, 1, k]))
        acc = self._integer_sum(pixels, zx, w.T.reshape(n, 1, 1, k).copy(), bias, "NHWC", "OHWI", [1, 1], [0, 0, 0, 0], [1, 1], 1)
        return None if acc is None else emit(relax.op.reshape(acc, [m, n]))

    def _integer_sum(self, x: Any, zx: int, w: np.ndarray, bias: np.ndarray | None, layout: str, kernel_layout: str,
                     strides: Any, padding: list[int], dilation: Any, groups: int) -> Any | None:
        """An int8 × int8 → int32 convolution — the input padded with its zero point first, so a
        padded tap adds nothing — plus ``bias − zx·Σw`` per channel, then float32 (exact: the
        sums are bounded, see the caller). None for other data types."""
        if str(x.ty.dtype) not in ("int8", "uint8") or w.dtype != np.int8:
            return None
        shift = 128 if str(x.ty.dtype) == "uint8" else 0  # x − zx = (x − 128) − (zx − 128): int8 data, exact
        axes = tuple(i for i, c in enumerate(kernel_layout) if c != "O")
        # in int32 as the runtimes' accumulators hold it (common.wrapped_int32): ai-edge-quantizer
        # saturates biases at −2³¹ (MediaPipe hand landmark: up to 741 channels of a layer, most
        # with all-zero filters — such layers ran as float convolutions of dequantized values
        # while a fold had to be within ±(2³¹ − 1) —, and one channel with a filter, whose fold
        # leaves int32: LiteRT's sums wrap, so its 1152 → 192 layer did not match them and ran
        # in float: the package's outputs were up to 6 steps off LiteRT's, now equal)
        fold = wrapped_int32((bias.astype(np.int64).reshape(-1) if bias is not None else 0)
                             - (zx - shift) * w.astype(np.int64).sum(axis=axes))
        emit = self.builder_.emit
        if shift:
            x = emit(relax.op.astype(emit(relax.op.subtract(emit(relax.op.astype(x, "int16")), relax.const(shift, "int16"))), "int8"))
        top, left, bottom, right = padding
        if top or left or bottom or right:
            widths = {"N": [0, 0], "C": [0, 0], "H": [top, bottom], "W": [left, right]}
            x = emit(relax.op.nn.pad(x, [p for axis in layout for p in widths[axis]], pad_value=float(zx - shift)))
        acc = emit(relax.op.nn.conv2d(x, relax.const(w), strides=strides, padding=0, dilation=dilation, groups=groups,
                                      data_layout=layout, kernel_layout=kernel_layout, out_layout=layout, out_dtype="int32"))
        per_channel = [-1] if layout.index("C") == 3 else [1, -1, 1, 1]  # broadcast along the channel axis
        acc = emit(relax.op.add(acc, relax.const(np.asarray(fold, np.int32).reshape(per_channel))))
        return emit(relax.op.astype(acc, "float32"))


@module_pass(opt_level=0)
class ExactInt8Layers:
    """Quantized convolution / dense chains — ``quantize(conv(dequantize(x), dequantized
    weights) + dequantized bias)`` — computed as the runtimes compute them: the integer sum
    ``Σ(x − zx)·w + bias`` (an int8 convolution where the layer is one, else exact in float32),
    scaled by ``sx·sw/sy`` per channel in float32, rounded half to even, shifted by ``zy`` and
    saturated. After a run, ``counts`` holds ``layers`` rewritten (``rewritten``:
    :func:`.int8_scheme.describe_layer` of each), ``bounded`` — of them with every sum provably
    below 2²⁴ — and ``integer`` (as integer convolutions)."""

    def __init__(self) -> None:
        self.counts: dict[str, Any] = {"layers": 0, "bounded": 0, "integer": 0, "rewritten": []}

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        return map_functions(mod, lambda m, f: _Exact(m, self.counts).visit_expr(f))




def _conv_axes(call: Any, ndim: int) -> tuple[int, list[int]]:
    layout = str(call.attrs.kernel_layout)
    out = layout.index("O")
    return out, [a for a in range(ndim) if a != out]


def _matmul_axes(call: Any, ndim: int) -> tuple[int, list[int]]:
    return ndim - 1, list(range(ndim - 1))  # weights (K, N): N out, K summed


COMPUTE = {"relax.nn.conv1d": _conv_axes, "relax.nn.conv2d": _conv_axes, "relax.matmul": _matmul_axes}


def _conv_out(call: Any, rank: int) -> int:
    return str(call.attrs.out_layout or call.attrs.data_layout).index("C")


COMPUTE_OUT = {"relax.nn.conv1d": _conv_out, "relax.nn.conv2d": _conv_out, "relax.matmul": lambda call, rank: rank - 1}
