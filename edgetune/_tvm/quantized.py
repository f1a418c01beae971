"""int8 models: their quantization scheme (what ``edgetune inspect`` shows), and int8 layers
computed as the framework runtimes compute them — exact integer sums of convolutions and dense
layers; for TFLite also int8 ADDs in XNNPACK's fixed point.

TVM 0.27's frontends import an int8 layer as ``quantize(conv(dequantize(x), dequantize(W)) +
dequantize(b))``: float products of scaled values, summed in float, divided by the output scale
and rounded. The runtimes users compare with sum ``(x − zx)·w`` in int32, add the int32 bias,
multiply by one float scale per channel ``sx·sw/sy`` and round to nearest even (LiteRT's XNNPACK
kernels; onnxruntime's QLinearConv on MLAS, onto which it fuses QDQ Conv groups). Both are "the
same layer", yet the float path lands a step away wherever the sum sits near a rounding
boundary, and across a network's layers those steps compound (ai-edge-quantizer's int8 face
detector: 41 steps on an output).

This pass rewrites such chains — TFLite int8 files and QDQ ONNX files alike — so the sum is the
runtimes' integer sum, then applies the bias and the per-channel scale as they do:

* convolutions (full and depthwise, NHWC or NCHW) become int8 × int8 → int32 convolutions of the
  input padded with its zero point, plus ``bias − zx·Σw`` per channel (uint8 activations are
  shifted to int8 first: ``x − zx = (x − 128) − (zx − 128)``). The build gives them integer kernels
  tensorized with the CPU's dot-product instruction (:mod:`.dot`, :func:`.lowering.int8_convolutions`)
  — or fp32 kernels over the same small integers where the CPU has none, depthwise layers and
  GPUs alike (exact while every partial sum stays below 2²⁴: ``K · 255 · max|w| < 2²⁴``, checked
  per layer and counted).
* dense layers (a 2-D input, maybe flattened first) become 1×1 integer convolutions over their
  rows — the same kernels;
* convolutions behind a reshape or transpose, and dense layers over higher-rank inputs, keep
  fp32 kernels over ``x − zx`` and ``w`` held as small integers in float32 (Winograd excepted: its transforms are not exact;
  nor is a scale folded into such weights, :func:`.lowering.fold_affine_into_conv`).

Rescales from one int8 scale to another become a multiply by their ratio where that is exact
(:func:`int8_rescales`); other elementwise chains from one int8 tensor to a quantize (QDQ
activations such as hard-swish) become lookups in 256-entry tables computed at import
(:func:`int8_tables`); other QDQ
ops (pools, concatenations, adds of two int8 tensors in ONNX) keep the float path, as onnxruntime
runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .lowering import _const_array, _map_functions, _op_name

_TRANSFORMS = ("relax.reshape", "relax.permute_dims")
EXACT_LIMIT = 2**24  # float32 holds every integer up to here
QUANTIZED_COMPUTE = ("relax.nn.conv2d", "relax.nn.conv2d_transpose", "relax.matmul", "relax.nn.dense")
SCHEME_ATTR = "edgetune_quantization"  # the scheme as imported, before the int8 rewrites


def _transforms(bound: dict[Any, Any], expr: Any) -> tuple[Any, list[Any]]:
    """``expr`` with the reshapes / transposes in front of it peeled off: (inner, calls outermost
    first)."""
    from tvm import relax

    calls = []
    while True:
        while isinstance(expr, relax.Var) and expr in bound:
            expr = bound[expr]
        if _op_name(expr) not in _TRANSFORMS:
            return expr, calls
        calls.append(expr)
        expr = expr.args[0]


def _apply(array: np.ndarray, calls: list[Any]) -> np.ndarray:
    """The numpy value of ``calls`` (outermost first) applied to ``array``."""
    for call in reversed(calls):
        if _op_name(call) == "relax.reshape":
            array = array.reshape([int(d) for d in call.ty.shape.values])
        else:
            axes = call.attrs.axes
            array = array.transpose([int(a) for a in axes] if axes is not None else None)
    return array


def _dequantized_constant(bound: dict[Any, Any], expr: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For ``expr`` = transforms(dequantize(transforms(constant), scale, zero_point)): the integer
    constant, its scale and its zero point, each broadcast to the integer tensor's shape and
    carried through the same transforms (so per-channel scales follow their channels)."""
    outer, calls = _transforms(bound, expr)
    if _op_name(outer) != "relax.dequantize":
        return None
    inner, inner_calls = _transforms(bound, outer.args[0])
    data, scale, zero = _const_array(inner), _const_array(outer.args[1]), _const_array(outer.args[2])
    if data is None or scale is None or zero is None or data.dtype.kind not in "iu":
        return None
    data = _apply(data, inner_calls)
    axis = int(outer.attrs.axis) % data.ndim

    def spread(values: np.ndarray) -> np.ndarray:
        values = np.asarray(values).reshape(-1)
        if values.size == 1:
            return np.broadcast_to(values.reshape((1,) * data.ndim), data.shape)
        shape = [1] * data.ndim
        shape[axis] = values.size
        return np.broadcast_to(values.reshape(shape), data.shape)

    return _apply(data, calls), _apply(spread(scale), calls), _apply(spread(zero), calls)


def quantization_scheme(mod: Any) -> dict[str, Any] | None:
    """How an imported model is quantized and how it runs, read from its Relax ``main``: per
    compute op (conv2d, matmul) whose weight is a dequantized constant, the weight's type and
    granularity (per channel: a vector scale) and symmetry (zero points all 0), and whether its
    activation input is dequantized (an int8 → int8 layer). None for a float model.

    ``exact``: the layers whose int8 sums are computed exactly and requantized as the runtime
    does (:func:`exact_int8_layers`); ``fixed_point_adds``: TFLite int8 ADDs in LiteRT's fixed
    point. The import stores the scheme on the module (these rewrites hide the pattern)."""
    import json

    if mod.attrs is not None and SCHEME_ATTR in mod.attrs:
        return json.loads(str(mod.attrs[SCHEME_ATTR]))
    bound = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}

    def dequantized(expr: Any) -> Any:
        inner, _ = _transforms(bound, expr)
        return inner if _op_name(inner) == "relax.dequantize" else None

    def const(expr: Any) -> np.ndarray | None:
        return _const_array(_transforms(bound, expr)[0])

    layers: dict[str, int] = {}
    weights: set[str] = set()
    activations: set[str] = set()
    for value, w, data in _quantized_computes(bound):
        scale, zero = const(w.args[1]), const(w.args[2])
        per_channel = scale is not None and scale.size > 1
        symmetric = zero is None or not np.any(zero)
        weights.add(f"{data.dtype} {'per-channel' if per_channel else 'per-tensor'} {'symmetric' if symmetric else 'asymmetric'}")
        x = dequantized(value.args[0])
        if x is not None:
            xz = const(x.args[2])
            activations.add(f"{x.args[0].ty.dtype} {'asymmetric' if xz is not None and np.any(xz) else 'symmetric'}")
        kind = _op_name(value).removeprefix("relax.").removeprefix("nn.")
        layers[kind] = layers.get(kind, 0) + 1
    if not layers:
        return None
    return {"weights": sorted(weights), "activations": sorted(activations) or [WEIGHT_ONLY],
            "layers": layers, "exact": 0, "exact_bounded": 0, "fixed_point_adds": 0,
            "runs_as": "dequantize → fp32 kernels → quantize"}


WEIGHT_ONLY = "float (weight-only quantization)"


def _quantized_computes(bound: dict[Any, Any]) -> Any:
    """(compute op, its weights' dequantize, the weights' stored values) for each convolution /
    matmul of ``bound`` (var → value) whose weights are a dequantized constant."""
    for value in bound.values():
        if _op_name(value) not in QUANTIZED_COMPUTE:
            continue
        w, _ = _transforms(bound, value.args[1])
        data = _const_array(_transforms(bound, w.args[0])[0]) if _op_name(w) == "relax.dequantize" else None
        if data is not None:
            yield value, w, data


def describe_layer(value: Any) -> str:
    """A quantized layer as a user can find it in the model: op, input and output shapes."""

    def shape(expr: Any) -> str:
        dims = expr.ty.shape.values if expr.ty.shape is not None else None
        return "×".join(str(int(d)) if hasattr(d, "value") else str(d) for d in dims) if dims is not None else "?"

    return f"{_op_name(value).removeprefix('relax.').removeprefix('nn.')} {shape(value.args[0])} → {shape(value)}"


def quantized_layers(mod: Any) -> list[str]:
    """:func:`describe_layer` of each quantized layer of ``mod`` (as :func:`quantization_scheme`
    counts them), before the int8 rewrites."""
    bound = {b.var: b.value for block in mod["main"].body.blocks for b in block.bindings}
    return [describe_layer(value) for value, _w, _data in _quantized_computes(bound)]


def _per_channel(values: np.ndarray, axis: int) -> np.ndarray | None:
    """One value per index of ``axis`` when ``values`` is constant along every other axis."""
    moved = np.moveaxis(values, axis, 0).reshape(values.shape[axis], -1)
    return moved[:, 0] if np.all(moved == moved[:, :1]) else None


def exact_int8_layers(mod: Any) -> tuple[Any, dict[str, Any]]:
    """``mod`` with its quantized convolution / dense chains computed exactly (module
    docstring), and counts: ``layers`` rewritten (``rewritten``: :func:`describe_layer` of each),
    ``bounded`` of them with every sum provably below 2²⁴."""
    from tvm import relax

    counts: dict[str, Any] = {"layers": 0, "bounded": 0, "integer": 0, "rewritten": []}

    @relax.expr_functor.mutator
    class _Exact(relax.PyExprMutator):
        def visit_call_(self, op: Any) -> Any:  # noqa: N802
            new = super().visit_call_(op)
            if _op_name(new) != "relax.quantize":
                return new
            rewritten = self._rewrite(new)
            return new if rewritten is None else rewritten

        def _rewrite(self, q: Any) -> Any | None:
            bound = _Lookup(self)
            sy, zy = _const_array(q.args[1]), _const_array(q.args[2])
            if sy is None or zy is None or sy.size != 1 or zy.size != 1:
                return None
            value, _ = _transforms(bound, q.args[0])
            bias = None
            if _op_name(value) == "relax.add":
                first, _ = _transforms(bound, value.args[0])
                second, _ = _transforms(bound, value.args[1])
                conv, bias = (first, value.args[1]) if _op_name(first) in COMPUTE else (second, value.args[0])
                value = conv
            if _op_name(value) not in COMPUTE:
                return None
            x, x_calls = _transforms(bound, value.args[0])  # e.g. Gemm's flatten of a dequantized tensor
            weights = _dequantized_constant(bound, value.args[1])
            if _op_name(x) != "relax.dequantize" or weights is None:
                return None
            sx, zx = _const_array(x.args[1]), _const_array(x.args[2])
            w, sw, zw = weights
            if sx is None or zx is None or sx.size != 1 or zx.size != 1 or np.any(zw) or w.dtype.itemsize != 1:
                return None
            out_axis, reduce_axes = COMPUTE[_op_name(value)](value, w.ndim)
            scale_w = _per_channel(sw, out_axis)
            if scale_w is None:
                return None
            channels = w.shape[out_axis]
            sum_b = None
            if bias is not None:
                b = _dequantized_constant(bound, bias)
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
            counts["layers"] += 1
            counts["rewritten"].append(describe_layer(value))
            counts["bounded"] += int(np.all(k * 255 * wmax + (np.abs(sum_b.astype(np.int64)).max() if sum_b is not None else 0)
                                            < EXACT_LIMIT))
            emit = self.builder_.emit
            out_rank = len(value.ty.shape.values)
            out_channel = COMPUTE_OUT[_op_name(value)](value, out_rank)
            shape = [1] * out_rank
            shape[out_channel] = channels
            if _op_name(value) == "relax.matmul":
                acc = self._integer_dense(x.args[0], x_calls, int(zx.reshape(())), w, sum_b, value)
            else:
                acc = self._integer_conv(x.args[0], int(zx.reshape(())), w, sum_b, value) if not x_calls else None
            if acc is not None:
                counts["integer"] += 1
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
            a = conv.attrs if _op_name(conv) == "relax.nn.conv2d" else None
            layout = str(a.data_layout) if a is not None else ""
            if layout not in ("NHWC", "NCHW") or str(a.out_layout or layout) != layout:
                return None
            c = layout.index("C")
            channels = int(x.ty.shape.values[c])
            if int(a.groups) != 1 and not int(a.groups) == channels == int(conv.ty.shape.values[c]):
                return None
            return self._integer_sum(x, zx, w, bias, layout, str(a.kernel_layout), a.strides, [int(p) for p in a.padding],
                                     a.dilation, int(a.groups))

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
            sums are bounded, see the caller). None for other data types or a fold beyond int32."""
            if str(x.ty.dtype) not in ("int8", "uint8") or w.dtype != np.int8:
                return None
            shift = 128 if str(x.ty.dtype) == "uint8" else 0  # x − zx = (x − 128) − (zx − 128): int8 data, exact
            axes = tuple(i for i, c in enumerate(kernel_layout) if c != "O")
            fold = (bias.astype(np.int64).reshape(-1) if bias is not None else 0) - (zx - shift) * w.astype(np.int64).sum(axis=axes)
            if np.any(np.abs(fold) >= 2**31):
                return None
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

    class _Lookup(dict):
        """The mutator's bindings as a mapping var → value (what the helpers walk)."""

        def __init__(self, mutator: Any):
            super().__init__()
            self.mutator = mutator

        def __contains__(self, var: Any) -> bool:
            return self.mutator.lookup_binding(var) is not None

        def __getitem__(self, var: Any) -> Any:
            return self.mutator.lookup_binding(var)

    out = _map_functions(mod, lambda m, f: _Exact(m).visit_expr(f))
    return out, counts


def _conv_axes(call: Any, ndim: int) -> tuple[int, list[int]]:
    layout = str(call.attrs.kernel_layout)
    out = layout.index("O")
    return out, [a for a in range(ndim) if a != out]


def _matmul_axes(call: Any, ndim: int) -> tuple[int, list[int]]:
    return ndim - 1, list(range(ndim - 1))  # weights (K, N): N out, K summed


COMPUTE = {"relax.nn.conv2d": _conv_axes, "relax.matmul": _matmul_axes}
COMPUTE_OUT = {
    "relax.nn.conv2d": lambda call, rank: str(call.attrs.out_layout or call.attrs.data_layout).index("C"),
    "relax.matmul": lambda call, rank: rank - 1,
}


def _bound_value(mutator: Any, expr: Any) -> Any:
    """What a variable is bound to in the function ``mutator`` rewrites (``expr`` itself if not
    a variable)."""
    from tvm import relax

    return mutator.lookup_binding(expr) if isinstance(expr, relax.Var) else expr


def xnnpack_int8_adds(mod: Any) -> tuple[Any, int]:
    """TFLite int8 ADDs (``quantize(dequantize(a) + dequantize(b))``) computed as LiteRT's
    XNNPACK kernel does, in int32 fixed point: each input's scale over the output's as a
    multiplier of 20 significant bits (the larger one in [2²⁰, 2²¹)), a rounding bias that
    also carries the zero points, then an arithmetic shift. The float path rounds a step away
    where the exact sum sits near a half — one step per residual block, compounding through
    the network. Returns the module and how many adds were rewritten."""
    from tvm import relax

    def rewrite(mutator: Any, q: Any) -> Any | None:
        add = _bound_value(mutator, q.args[0])
        if _op_name(add) != "relax.add":
            return None
        terms = []
        for arg in add.args:
            d = _bound_value(mutator, arg)
            if _op_name(d) != "relax.dequantize" or str(d.args[0].ty.dtype) != "int8":
                return None
            scale, zero = _const_array(d.args[1]), _const_array(d.args[2])
            if scale is None or zero is None or scale.size != 1 or zero.size != 1 or _const_array(d.args[0]) is not None:
                return None
            terms.append((d.args[0], np.float32(scale.reshape(())), int(zero.reshape(()))))
        sy, zy = _const_array(q.args[1]), _const_array(q.args[2])
        if sy is None or zy is None or sy.size != 1 or zy.size != 1:
            return None
        ratios = [np.float32(s / np.float32(sy.reshape(()))) for _x, s, _z in terms]
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
        out = emit(relax.op.add(shifted, relax.const(np.int32(zy.reshape(())), "int32")))
        return relax.op.astype(emit(relax.op.clip(out, -128, 127)), "int8")

    return _rewrite_quantizes(mod, rewrite)


def int8_relus(mod: Any) -> tuple[Any, int]:
    """TFLite int8 ReLUs (``quantize(relu(dequantize(v)))``) without the division TVM's
    ``quantize`` spends per element: ``round(max(v − z1, 0) · k) + z2`` with one float32 ``k``
    for ``s1/s2`` — kept only when it gives what the float path gives for every one of the 256
    int8 inputs (checked here in float32), so results do not change. Returns the module and how
    many ReLUs were rewritten."""

    def rewrite(mutator: Any, q: Any) -> Any | None:
        relu = _bound_value(mutator, q.args[0])
        if _op_name(relu) != "relax.nn.relu":
            return None
        return _affine_requantize(mutator, q, _bound_value(mutator, relu.args[0]), relu=True)

    return _rewrite_quantizes(mod, rewrite)


def int8_rescales(mod: Any) -> tuple[Any, int]:
    """``quantize(dequantize(v))`` from one scale and zero point to another (how QDQ graphs put
    a SqueezeNet Fire module's branches on the scale of their concatenation, after
    :func:`int8_concats`) as ``round((v − z1) · k) + z2``, saturated, with one float32 ``k`` for
    ``s1/s2`` — where that gives the float path's result for every one of the 256 int8 inputs,
    as :func:`int8_relus` checks; other rescales stay lookups (:func:`int8_tables`). A lookup in
    a vectorized epilogue is a scalar load per lane (TVM has no vector gather): on SqueezeNet's
    55×55×16 → 64 expand layer the epilogue's lookup took 0.17 ms, the arithmetic 0.09. Returns
    the module and how many rescales were rewritten."""

    def rewrite(mutator: Any, q: Any) -> Any | None:
        return _affine_requantize(mutator, q, _bound_value(mutator, q.args[0]), relu=False)

    return _rewrite_quantizes(mod, rewrite)


def _affine_requantize(mutator: Any, q: Any, d: Any, relu: bool) -> Any | None:
    """``q`` = ``quantize(relu?(d))``, ``d`` = ``dequantize(v)`` of an int8 ``v``, both per
    tensor, as ``clip(round(max?(v − z1, 0) · k) + z2)`` in float32 with ``k`` = ``s1/s2``;
    None where ``q`` is not that or this differs from the float path on any of the 256 inputs."""
    from tvm import relax

    if (_op_name(d) != "relax.dequantize" or str(d.args[0].ty.dtype) != "int8"
            or str(q.attrs.out_dtype) != "int8"):
        return None
    consts = [_const_array(e) for e in (d.args[1], d.args[2], q.args[1], q.args[2])]
    if any(c is None or c.size != 1 for c in consts):
        return None
    s1, z1, s2, z2 = (c.reshape(()) for c in consts)
    float_path = _chain_values(mutator, q, [d.args[0]])  # for v = −128…127
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


_TABLE_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relax.nn.relu": lambda v: np.maximum(v, v.dtype.type(0)),
    "relax.sigmoid": lambda v: (1.0 / (1.0 + np.exp(-v.astype(np.float64)))).astype(v.dtype),
    "relax.tanh": lambda v: np.tanh(v.astype(np.float64)).astype(v.dtype),
    "relax.exp": lambda v: np.exp(v.astype(np.float64)).astype(v.dtype),
    "relax.negative": np.negative,
    "relax.abs": np.abs,
    "relax.round": np.round,
    "relax.floor": np.floor,
    "relax.ceil": np.ceil,
}
_TABLE_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "relax.add": np.add,
    "relax.subtract": np.subtract,
    "relax.multiply": np.multiply,
    "relax.divide": np.divide,
    "relax.maximum": np.maximum,
    "relax.minimum": np.minimum,
}
_INT_RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def int8_concats(mod: Any) -> tuple[Any, int]:
    """``quantize(concat(dequantize(a), dequantize(b), …))`` — how QDQ graphs join SqueezeNet's
    expand branches — as ``concat(a', b', …)`` of int8 tensors: an input on the output's scale
    and zero point is taken as it is, another requantized (``quantize(dequantize(x))``, which
    :func:`int8_tables` makes a lookup in the kernel that produces ``x``). The float path wrote
    each branch as float32 and ran a concat + quantize kernel over them (SqueezeNet: 0.1 ms per
    Fire module, a tenth of the model). Returns the module and how many were rewritten."""
    from tvm import relax

    def per_tensor(d: Any) -> tuple[np.float32, int] | None:
        scale, zero = _const_array(d.args[1]), _const_array(d.args[2])
        if scale is None or zero is None or scale.size != 1 or zero.size != 1:
            return None
        return np.float32(scale.reshape(())), int(zero.reshape(()))

    def rewrite(mutator: Any, q: Any) -> Any | None:
        concat = _bound_value(mutator, q.args[0])
        fields = _bound_value(mutator, concat.args[0]) if _op_name(concat) == "relax.concat" else None
        out = per_tensor(q)
        if not isinstance(fields, relax.Tuple) or out is None:
            return None
        parts = []
        for field in fields.fields:
            d = _bound_value(mutator, field)
            if _op_name(d) != "relax.dequantize" or str(d.args[0].ty.dtype) != str(q.attrs.out_dtype):
                return None
            params = per_tensor(d)
            if params is None:
                return None
            parts.append(d.args[0] if params == out else
                         mutator.builder_.emit(relax.op.quantize(field, q.args[1], q.args[2], axis=int(q.attrs.axis),
                                                                 out_dtype=str(q.attrs.out_dtype))))
        return relax.op.concat(parts, axis=int(concat.attrs.axis))

    return _rewrite_quantizes(mod, rewrite)


def int8_tables(mod: Any) -> tuple[Any, int]:
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
    scalar code; a plain rescale is now arithmetic, :func:`int8_rescales`). Tables follow tables: a chain
    through an already tabled quantize is evaluated through its table, so the whole chain
    becomes one lookup. Returns the module and how many quantizes were replaced."""
    from tvm import relax

    def rewrite(mutator: Any, q: Any) -> Any | None:
        source: list[Any] = []
        values = _chain_values(mutator, q, source)
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

    return _rewrite_quantizes(mod, rewrite, tuple(_INT_RANGE))


def _chain_values(mutator: Any, expr: Any, source: list[Any], depth: int = 0) -> np.ndarray | None:
    """The value of ``expr`` for each of the 256 values of the one 8-bit tensor it is an
    elementwise function of (set as ``source[0]``; a preset ``source`` must be that tensor), in
    that tensor's order (−128…127 or 0…255); None when ``expr`` is anything else. An 8-bit
    variable is seen through when its own value is such a function (an earlier table), else it
    is the source. Each expression is evaluated once per function (:func:`_chain`): shared
    sub-graphs are not walked again, so the analysis is linear in the function's size."""
    values, found = _chain(mutator, expr, depth)
    if values is not None and (found is None or not source or source[0].same_as(found)):
        if found is not None and not source:
            source[:] = [found]
        return values
    if source and source[0].same_as(expr) and _int8_var(expr):
        return _all_values(expr)
    return None


def _chain(mutator: Any, expr: Any, depth: int) -> tuple[np.ndarray | None, Any]:
    """(values, source) of ``expr`` found with no source preset, memoised on ``mutator``."""
    from tvm import relax

    if type(expr).__name__ in ("FloatImm", "IntImm"):  # clip's bounds
        return np.asarray(expr.value), None
    constant = _const_array(expr)
    if constant is not None:
        return (constant.reshape(()) if constant.size == 1 else None), None
    memo = mutator.__dict__.setdefault("_edgetune_chain_memo", {})
    if expr in memo:
        return memo[expr]
    result: tuple[np.ndarray | None, Any] = (None, None)
    call = _bound_value(mutator, expr)
    if isinstance(call, relax.Call) and depth < 256:
        source: list[Any] = []
        values = _call_values(mutator, call, source, depth + 1)
        if values is not None:
            result = (values, source[0] if source else None)
    if result[0] is None and _int8_var(expr):
        result = (_all_values(expr), expr)
    memo[expr] = result
    return result


def _int8_var(expr: Any) -> bool:
    from tvm import relax

    return isinstance(expr, relax.Var) and str(getattr(expr.ty, "dtype", "")) in _INT_RANGE


def _all_values(expr: Any) -> np.ndarray:
    dtype = str(expr.ty.dtype)
    low, high = _INT_RANGE[dtype]
    return np.arange(low, high + 1, dtype=np.int32).astype(dtype)


def _call_values(mutator: Any, call: Any, source: list[Any], depth: int) -> np.ndarray | None:
    """:func:`_chain_values` of one call."""
    name = _op_name(call)
    if name in ("relax.quantize", "relax.dequantize"):
        args = [_chain_values(mutator, a, source, depth) for a in call.args]
        if any(a is None for a in args) or _const_array(call.args[1]) is None or _const_array(call.args[2]) is None:
            return None  # parameters: scalar constants (per-tensor)
        data, scale, zero = args
        if name == "relax.dequantize":
            if str(call.attrs.out_dtype) != "float32":
                return None
            return (data.astype(np.int32) - zero.astype(np.int32)).astype(np.float32) * np.float32(scale)
        out_dtype = str(call.attrs.out_dtype)
        if out_dtype not in _INT_RANGE or data.dtype != np.float32:
            return None
        low, high = _INT_RANGE[out_dtype]
        rounded = np.round(data / np.float32(scale)) + np.float32(zero)
        return np.clip(rounded, np.float32(low), np.float32(high)).astype(out_dtype)
    if name == "relax.take":
        table, index = _const_array(call.args[0]), _chain_values(mutator, call.args[1], source, depth)
        if table is None or index is None or table.ndim != 1 or int(call.attrs.axis) != 0:
            return None
        return table[index.astype(np.int64)] if index.min() >= 0 and index.max() < table.size else None
    args = [_chain_values(mutator, a, source, depth) for a in call.args]
    if any(a is None for a in args):
        return None
    dtype = np.dtype(str(call.ty.dtype)) if hasattr(call.ty, "dtype") else None
    if dtype is None:
        return None
    with np.errstate(all="ignore"):
        if name == "relax.astype":
            value = args[0]
            if dtype.kind in "iu" and value.dtype.kind == "f":
                info = np.iinfo(dtype)
                if not np.all((value > info.min - 1) & (value < info.max + 1)):
                    return None  # an overflowing cast: target-defined
            return value.astype(dtype)
        if name in _TABLE_UNARY and len(args) == 1 and dtype.kind == "f":
            return _TABLE_UNARY[name](args[0].astype(dtype)).astype(dtype)
        if name == "relax.clip" and len(args) == 3:
            return np.clip(args[0].astype(dtype), dtype.type(args[1]), dtype.type(args[2])).astype(dtype)
        if name in _TABLE_BINARY and len(args) == 2 and (dtype.kind == "f" or name != "relax.divide"):
            return _TABLE_BINARY[name](args[0].astype(dtype), args[1].astype(dtype)).astype(dtype)
    return None


def _rewrite_quantizes(mod: Any, rewrite: Callable[[Any, Any], Any | None],
                       dtypes: tuple[str, ...] = ("int8",)) -> tuple[Any, int]:
    """``mod`` with each ``quantize`` call to one of ``dtypes`` replaced by
    ``rewrite(mutator, call)`` where that gives an expression (None: kept), and how many were
    replaced."""
    from tvm import relax

    done = [0]

    @relax.expr_functor.mutator
    class _Rewrite(relax.PyExprMutator):
        def visit_call_(self, op: Any) -> Any:  # noqa: N802
            new = super().visit_call_(op)
            if _op_name(new) != "relax.quantize" or str(new.attrs.out_dtype) not in dtypes:
                return new
            rewritten = rewrite(self, new)
            if rewritten is None:
                return new
            done[0] += 1
            return rewritten

    return _map_functions(mod, lambda m, f: _Rewrite(m).visit_expr(f)), done[0]
