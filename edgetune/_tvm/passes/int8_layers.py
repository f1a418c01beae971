"""int8 convolution and dense layers computed as the runtimes compute them."""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import const_array, map_functions, op_name
from .int8_scheme import EXACT_LIMIT, dequantized_constant, describe_layer, peel_transforms, per_channel


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
            counts["layers"] += 1
            counts["rewritten"].append(describe_layer(value))
            counts["bounded"] += int(np.all(k * 255 * wmax + (np.abs(sum_b.astype(np.int64)).max() if sum_b is not None else 0)
                                            < EXACT_LIMIT))
            emit = self.builder_.emit
            out_rank = len(value.ty.shape.values)
            out_channel = COMPUTE_OUT[op_name(value)](value, out_rank)
            shape = [1] * out_rank
            shape[out_channel] = channels
            if op_name(value) == "relax.matmul":
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

    out = map_functions(mod, lambda m, f: _Exact(m).visit_expr(f))
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
