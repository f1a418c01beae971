"""Small graph clean-ups before the layout change: dropout, stacked sums, transposed
convolutions in NCHW and as stride-1 convolutions of their output phases, constant arithmetic
folded in numpy."""

from __future__ import annotations

from typing import Any

import numpy as np

from .common import (
    MutatorPass,
    bound_value,
    const_array,
    emit_like,
    ints,
    is_tensor,
    last_dim,
    module_pass,
    op_name,
    relax,
    static_shape,
)


@relax.expr_functor.mutator
class _DropDropout(relax.PyExprMutator):
    def visit_tuple_getitem_(self, op: Any) -> Any:  # noqa: N802 — TVM's visitor naming
        new = super().visit_tuple_getitem_(op)
        value = bound_value(self, new.tuple_value)
        if new.index == 0 and op_name(value) == "relax.nn.dropout":
            return value.args[0]
        return new


@module_pass(opt_level=0)
class DropDropout(MutatorPass):
    """``TupleGetItem(dropout(x), 0) → x``. DecomposeOpsForInference leaves dropout's tuple,
    which trips layout passes (measured: "Expected nested to match tuple" on squeezenet)."""

    mutator = _DropDropout


@relax.expr_functor.mutator
class _SumOfStack(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        if op_name(new) != "relax.sum" or new.attrs.keepdims or [int(a) for a in (new.attrs.axis or [])] != [0]:
            return new
        stack = bound_value(self, new.args[0])
        if op_name(stack) != "relax.stack" or int(stack.attrs.axis) != 0:
            return new
        parts = list(getattr(bound_value(self, stack.args[0]), "fields", []))
        if len(parts) < 2:
            return new
        terms = []
        for part in parts:
            inner = bound_value(self, part)
            terms.append(inner.args[0] if op_name(inner) == "relax.broadcast_to" else part)
        total = terms[0]
        for term in terms[1:]:
            total = self.builder_.emit(relax.op.add(total, term))
        want = [int(d) for d in new.ty.shape.values]
        if [int(d) for d in total.ty.shape.values] != want:
            total = relax.op.broadcast_to(total, want)
        return total


@module_pass(opt_level=0)
class SumOfStackToAdd(MutatorPass):
    """ONNX ``Sum`` arrives as ``sum(stack([broadcast_to(a), broadcast_to(b)]), axis=0)``: a 5-D
    op nothing fuses with. Rewrite it to ``a + b`` (broadcasting as ``add`` does), so residual
    additions fuse into the convolution before them."""

    mutator = _SumOfStack


WIDE_CONCAT = 16  # most pieces one concatenation kernel takes (more: a tree of concatenations)


@relax.expr_functor.mutator
class _WideConcat(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        if op_name(new) != "relax.concat" or not isinstance(new.args[0], relax.Tuple) \
                or len(new.args[0].fields) <= WIDE_CONCAT:
            return new
        pieces, axis = list(new.args[0].fields), new.attrs.axis
        while len(pieces) > WIDE_CONCAT:
            pieces = [self.builder_.emit(relax.op.concat(pieces[k:k + WIDE_CONCAT], axis))
                      for k in range(0, len(pieces), WIDE_CONCAT)]
        return relax.op.concat(pieces, axis)


@module_pass(opt_level=0)
class WideConcatsAsTrees(MutatorPass):
    """A concatenation of more than :data:`WIDE_CONCAT` tensors as a tree of concatenations of at
    most that many. One kernel selects each element's source through a chain of conditions as
    long as its pieces, and its schedule inlines each piece's producer, every inlining a pass
    over the whole function: a table recognizer's 501 decoding steps stacked into one output
    (PP-OCR's SLANet) took 70 s to schedule and 20 s in LLVM; the tree copies those small
    tensors two or three times instead."""

    mutator = _WideConcat


@relax.expr_functor.mutator
class _NCHWDeconv(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        if op_name(new) != "relax.nn.conv2d_transpose" or new.attrs.data_layout != "NHWC":
            return new
        a = new.attrs
        x = self.builder_.emit(relax.op.permute_dims(new.args[0], [0, 3, 1, 2]))
        y = self.builder_.emit(relax.op.nn.conv2d_transpose(
            x, new.args[1], strides=ints(a.strides), padding=ints(a.padding),
            output_padding=ints(a.output_padding), dilation=ints(a.dilation), groups=int(a.groups),
            data_layout="NCHW", kernel_layout=a.kernel_layout, out_layout="NCHW", out_dtype=a.out_dtype))
        return relax.op.permute_dims(y, [0, 2, 3, 1])


@module_pass(opt_level=0)
class NCHWConv2dTranspose(MutatorPass):
    """TVM 0.27 legalizes ``conv2d_transpose`` only in NCHW; the TFLite frontend emits it in NHWC
    (TRANSPOSE_CONV, MediaPipe's transposed conv), which then reaches codegen unlowered. Wrap
    such calls in transposes to NCHW and back (the layout passes fold them where they can)."""

    mutator = _NCHWDeconv


def phase_weights(w_iohw: np.ndarray, strides: tuple[int, int], taps: tuple[int, int]) -> np.ndarray:
    """A transposed convolution's weights ``[I, O, kh, kw]`` as the weights ``[sh·sw·O, I, Th, Tw]``
    of the stride-1 convolution computing its ``sh × sw`` output phases as channels (phase
    ``(rh, rw)``, channel ``oc`` at ``(rh·sw + rw)·O + oc``): phase ``r`` of output ``s·q + r`` sums
    ``x[q − m] · w[s·m + r]``, so tap ``j`` of the correlation over the input padded by ``T − 1``
    holds ``w[s·(T − 1 − j) + r]`` (zero past the kernel)."""
    (ic, oc, kh, kw), (sh, sw), (th, tw) = w_iohw.shape, strides, taps
    padded = np.zeros((ic, oc, sh * th, sw * tw), w_iohw.dtype)
    padded[:, :, :kh, :kw] = w_iohw
    # [I, O, Th, sh, Tw, sw] (tap m, phase r at s·m + r), taps reversed, to [sh, sw, O, I, Th, Tw]
    phases = padded.reshape(ic, oc, th, sh, tw, sw)[:, :, ::-1, :, ::-1, :]
    return np.ascontiguousarray(phases.transpose(3, 5, 1, 0, 2, 4).reshape(sh * sw * oc, ic, th, tw))


def _constant_weights(w: Any, bound: Any) -> np.ndarray | None:
    """A constant's value, or that of ``dequantize`` of constants (a QDQ layer kept in float:
    its weights int8 per channel, dequantized as TVM computes it); else None."""
    value = const_array(w)
    if value is not None or op_name(w) != "relax.dequantize":
        return value
    data, scale, zero = (const_array(bound(arg)) for arg in w.args)
    if data is None or scale is None or zero is None or str(w.attrs.out_dtype) != "float32":
        return None
    shape = [1] * data.ndim
    if scale.size > 1 or zero.size > 1:
        shape[int(w.attrs.axis) % data.ndim] = -1
    centred = data.astype(np.int32) - zero.astype(np.int32).reshape(shape)
    return centred.astype(np.float32) * scale.astype(np.float32).reshape(shape)


@relax.expr_functor.mutator
class _DeconvAsConv(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        if op_name(new) != "relax.nn.conv2d_transpose":
            return new
        a, (x, w) = new.attrs, new.args
        weights = _constant_weights(bound_value(self, w), lambda e: bound_value(self, e))
        shape, out = static_shape(x), static_shape(new)
        if (weights is None or shape is None or out is None or (a.data_layout, a.kernel_layout) != ("NCHW", "IOHW")
                or (a.out_layout or "NCHW") != "NCHW" or int(a.groups) != 1 or ints(a.dilation) != [1, 1]
                or not all(str(t.ty.dtype) == "float32" for t in (x, new)) or weights.dtype != np.float32):
            return new
        strides, (top, left, _, _) = ints(a.strides), ints(a.padding)
        (n, _, ih, iw), (_, oc, oh, ow), (kh, kw) = shape, out, weights.shape[2:]
        # per axis: taps T (≥ k / s), output rows skipped at the start as whole phases, and the
        # input padding that gives positions q = 0 … Q − 1 with s·Q ≥ the rows the crop keeps
        dims = []
        for i, o, k, s, before in ((ih, oh, kh, strides[0], top), (iw, ow, kw, strides[1], left)):
            taps = -(-k // s)
            skip = min(before // s, taps - 1)
            q = -(-(before - skip * s + o) // s)
            dims.append((taps, taps - 1 - skip, max(0, q - i + skip), q, before - skip * s))
        (th, pt, pb, qh, ch), (tw, pl, pr, qw, cw) = dims
        (sh, sw) = strides
        if th * tw * sh * sw > 4 * kh * kw:  # kernels far from a multiple of the stride waste the work
            return new
        phases = self.builder_.emit(relax.op.nn.conv2d(
            x, relax.const(phase_weights(weights, (sh, sw), (th, tw))), strides=(1, 1), padding=(pt, pl, pb, pr),
            data_layout="NCHW", kernel_layout="OIHW", out_dtype="float32"))
        hq, wq = static_shape(phases)[2:]
        y = self.builder_.emit(relax.op.reshape(phases, (n, sh, sw, oc, hq, wq)))
        y = self.builder_.emit(relax.op.permute_dims(y, [0, 3, 4, 1, 5, 2]))
        y = self.builder_.emit(relax.op.reshape(y, (n, oc, hq * sh, wq * sw)))
        if (ch, cw, hq * sh, wq * sw) == (0, 0, oh, ow):
            return y
        return relax.op.strided_slice(y, axes=[2, 3], begin=[ch, cw], end=[ch + oh, cw + ow])


@module_pass(opt_level=0)
class TransposedConvAsConv(MutatorPass):
    """A float ``conv2d_transpose`` (stride s, kernel k, constant weights, one group) as the
    stride-1 convolution that computes its s_h·s_w output phases as channels (taps ⌈k / s⌉),
    then the phases interleaved into pixels (depth to space) and cropped by the padding — the
    sub-pixel form. The convolution runs on the packed micro-kernels and the layout change like
    any other; TVM's own transposed convolution had no schedule (a MediaPipe segmenter's last
    layer: 40 % of the model at 17 GFLOP/s). A kernel much smaller than its stride (taps mostly
    zero) stays as it was."""

    mutator = _DeconvAsConv


@relax.expr_functor.mutator
class _Conv1d(relax.PyExprMutator):
    branches = 0

    def visit_if_(self, op: Any) -> Any:  # noqa: N802
        # a conv2d inside an If branch crashed the VM's allocator at run time (TVM 0.27: a
        # streaming VAD's per-sample-rate front ends, measured): branches keep TVM's conv1d
        self.branches += 1
        try:
            return super().visit_if_(op)
        finally:
            self.branches -= 1

    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        if op_name(new) != "relax.nn.conv1d" or self.branches:
            return new
        a = new.attrs
        if (a.data_layout, a.kernel_layout, a.out_layout or "NCW") != ("NCW", "OIW", "NCW") or any(
                str(t.ty.dtype) != "float32" or _static_but_width(t) is None for t in (new.args[0], new.args[1], new)):
            return new
        left, right = ints(a.padding)
        x = self.builder_.emit(relax.op.expand_dims(new.args[0], 2))
        w = self.builder_.emit(relax.op.expand_dims(new.args[1], 2))
        y = self.builder_.emit(relax.op.nn.conv2d(
            x, w, strides=(1, *ints(a.strides)), padding=(0, left, 0, right), dilation=(1, *ints(a.dilation)),
            groups=int(a.groups), out_dtype=a.out_dtype or "float32"))
        return relax.op.squeeze(y, [2])


def _static_but_width(t: Any) -> list[Any] | None:
    """The shape of an NCW tensor whose dimensions are constant but perhaps its width (a range of
    lengths: the packed kernel takes a symbolic width), else None."""
    values = getattr(getattr(t.ty, "shape", None), "values", None)
    if values is None or not all(hasattr(d, "value") for d in values[:-1]):
        return None
    return list(values)


@module_pass(opt_level=0)
class Conv1dAsConv2d(MutatorPass):
    """A float ``conv1d`` (NCW) as a ``conv2d`` of height 1: the layout change and the packed
    convolution micro-kernels know conv2d only (Whisper's stride-2 front end ran as a generic
    reduction at 39 GFLOP/s, a third of the encoder)."""

    mutator = _Conv1d


def _last_axis_mean(call: Any) -> Any | None:
    """The operand of ``mean(·, axis=-1, keepdims=True)``, else None."""
    if op_name(call) != "relax.mean" or not call.attrs.keepdims or call.attrs.axis is None:
        return None
    axes, rank = [int(a) for a in call.attrs.axis], len(call.args[0].ty.shape.values)
    return call.args[0] if [a % rank for a in axes] == [rank - 1] else None


def _mean_square_plus_eps(mutator: Any, std: Any) -> tuple[Any, float] | None:
    """``(x, ε)`` where ``std`` is bound to ``sqrt(mean(x², axis=-1) + ε)`` (``x²`` as a power
    of 2 or ``x · x``), else None."""
    sqrt = bound_value(mutator, std)
    plus = bound_value(mutator, sqrt.args[0]) if op_name(sqrt) == "relax.sqrt" else None
    if op_name(plus) != "relax.add":
        return None
    eps = [const_array(a) for a in plus.args]
    at = 1 if eps[1] is not None else 0 if eps[0] is not None else None
    if at is None or eps[at].size != 1:
        return None
    mean = bound_value(mutator, plus.args[1 - at])
    operand = _last_axis_mean(mean)
    square = bound_value(mutator, operand) if operand is not None else None
    if op_name(square) == "relax.power":
        two = const_array(square.args[1])
        if two is None or two.size != 1 or float(two.reshape(())) != 2.0:
            return None
        return square.args[0], float(eps[at].reshape(()))
    if op_name(square) == "relax.multiply" and square.args[0].same_as(square.args[1]):
        return square.args[0], float(eps[at].reshape(()))
    return None


@relax.expr_functor.mutator
class _DecomposedLayerNorm(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        if op_name(new) != "relax.divide" or str(new.ty.dtype) != "float32" or last_dim(new) is None:
            return new
        centred, std = new.args
        found = _mean_square_plus_eps(self, std)  # sqrt(mean((x − mean(x))²) + ε)
        sub = bound_value(self, centred)
        if found is None or not found[0].same_as(centred) or op_name(sub) != "relax.subtract":
            return new
        x, mean = sub.args
        of = _last_axis_mean(bound_value(self, mean))
        if of is None or not of.same_as(x):
            return new
        n = last_dim(new)
        ones, zeros = (relax.const(np.full(n, v, np.float32)) for v in (1.0, 0.0))
        return relax.op.nn.layer_norm(x, ones, zeros, axes=[-1], epsilon=found[1])


@module_pass(opt_level=0)
class DecomposedLayerNorm(MutatorPass):
    """Layer norm as exporters below opset 17 write it — ``(x − mean(x)) / sqrt(mean((x −
    mean(x))²) + ε)`` over the last axis — as ``layer_norm`` (γ = 1, β = 0; the exporter's γ and β
    stay the multiply and add after it), so it runs on the row kernel: its four generic kernels
    were 2–5 % of BERT-style encoders."""

    mutator = _DecomposedLayerNorm


@relax.expr_functor.mutator
class _DecomposedRMSNorm(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        name = op_name(new)
        if name not in ("relax.multiply", "relax.divide") or str(new.ty.dtype) != "float32" or last_dim(new) is None:
            return new
        pairs = [tuple(new.args)] if name == "relax.divide" else [tuple(new.args), tuple(reversed(new.args))]
        for x, other in pairs:
            # x / sqrt(mean(x²) + ε), or x · (1 / sqrt(mean(x²) + ε)) in either operand order
            root = other if name == "relax.divide" else self._reciprocal_of(other)
            found = _mean_square_plus_eps(self, root) if root is not None else None
            if found is not None and found[0].same_as(x):
                break
        else:
            return new
        ones = relax.const(np.ones(last_dim(new), np.float32))
        return relax.op.nn.rms_norm(x, ones, axes=[-1], epsilon=found[1])

    def _reciprocal_of(self, var: Any) -> Any | None:
        """``d`` where ``var`` is bound to ``1 / d``, else None."""
        value = bound_value(self, var)
        one = const_array(value.args[0]) if op_name(value) == "relax.divide" else None
        return value.args[1] if one is not None and one.size == 1 and float(one.reshape(())) == 1.0 else None


@module_pass(opt_level=0)
class DecomposedRMSNorm(MutatorPass):
    """RMS norm as exporters write it (T5's ``x · rsqrt(mean(x²) + ε)``: ``Pow``, ``ReduceMean``,
    ``Add``, ``Sqrt``, then a division or a reciprocal and a product, over the last axis) as
    ``rms_norm`` (γ = 1; the model's weight stays the multiply after it), so it runs on the row
    kernel (:func:`..kernels.rows.rms_norm_rows`): three generic kernels before. CPU builds
    only (the GPU path keeps TVM's pipeline as it is)."""

    mutator = _DecomposedRMSNorm


def _by_reciprocal(divide: Any) -> Any | None:
    """``x / c`` (float32, ``c`` one finite non-zero constant) as ``x · (1 / c)`` — within an
    ulp of the quotient —, else None."""
    if op_name(divide) != "relax.divide" or str(divide.ty.dtype) != "float32":
        return None
    divisor = const_array(divide.args[1])
    if divisor is None or divisor.size != 1 or not np.isfinite(divisor).all() or float(divisor.reshape(())) == 0.0:
        return None
    return relax.op.multiply(divide.args[0], relax.const(np.float32(1.0) / divisor.astype(np.float32)))


@relax.expr_functor.mutator
class _DivideAsMultiply(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        name = op_name(new)
        if name == "relax.divide" and self._clipped(new.args[0]):
            product = _by_reciprocal(new)
            return new if product is None else product
        if name == "relax.erf":
            scaled = self._scaled(new.args[0])
            return new if scaled is None else relax.op.erf(scaled)
        if name == "relax.nn.softmax":
            scaled = self._scaled(new.args[0])
            value = bound_value(self, new.args[0])
            if scaled is None and op_name(value) == "relax.add":  # (a score matrix's mask added)
                a, b = value.args
                scaled_a, scaled_b = self._scaled(a), self._scaled(b)
                if scaled_a is not None or scaled_b is not None:
                    scaled = relax.op.add(a if scaled_a is None else scaled_a, b if scaled_b is None else scaled_b)
            return new if scaled is None else relax.op.nn.softmax(scaled, axis=int(new.attrs.axis))
        return new

    def _scaled(self, arg: Any) -> Any | None:
        return _by_reciprocal(bound_value(self, arg))

    def _clipped(self, arg: Any) -> bool:
        """A clip, or a product with one (hard-swish as TVM's TFLite converter writes it:
        ``x · clip(x + 3, 0, 6) / 6``)."""
        value = bound_value(self, arg)
        if op_name(value) == "relax.multiply":
            return any(op_name(bound_value(self, a)) == "relax.clip" for a in value.args)
        return op_name(value) == "relax.clip"


@module_pass(opt_level=0)
class DivideAsMultiply(MutatorPass):
    """A division by a constant as a multiply by ``1 / c`` (within an ulp) where the ulp cannot
    matter:

    * ``clip(·) / c`` and ``(x · clip(·)) / c`` (hard-sigmoid and hard-swish written out, by an
      ONNX exporter or TVM's TFLite converter: ``x · clip(x + 3, 0, 6) / 6``): a vector divide
      in a convolution's epilogue took more cycles than the convolution's multiply-accumulates
      on the Cortex-A72 (the Pi 4 estimate of a MobileNetV3-style OCR classifier: 1×1 layers
      with it at 39–71 % of the FMA peak, 96 % without);
    * the argument of an ``erf`` (GELU's ``erf(x / √2)``) and a softmax's input (attention's
      ``softmax(Q·Kᵀ / √d + mask)``), which the kernels approximate to ~1e-6 anyway (fast erf
      and exp) — onnxruntime's fused GELU and attention multiply too. On AArch64 such a
      division had become the exact float64 multiply of :mod:`..codegen.division` (conversions
      to and from float64: 32 of the A72's cycles per 16 values where a multiply is 4).

    Other divides stay: a quantization scale's rounding must match the reference's."""

    mutator = _DivideAsMultiply


_NUMPY_BINARY = {"relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply",
                 "relax.divide": "divide", "relax.power": "power", "relax.maximum": "maximum", "relax.minimum": "minimum"}


_NUMPY_UNARY = {"relax.sqrt": "sqrt", "relax.negative": "negative", "relax.exp": "exp", "relax.abs": "abs"}


def _fold_call(call: Any) -> Any | None:
    """The constant a call on constants evaluates to, computed in numpy; None when it is not one
    of the cheap ops (or not on constants)."""
    name = op_name(call)
    if not is_tensor(call):  # shape- or tuple-valued calls (``shape_of``, ``split``) stay
        return None
    if name == "relax.shape_to_tensor":  # a static shape (ONNX Gather's bound for negative indices)
        values = getattr(call.args[0].ty, "values", None)
        if values is None or not all(hasattr(v, "value") for v in values):
            return None
        return relax.const(np.array([int(v.value) for v in values], dtype="int64"), "int64")
    args = [const_array(a) for a in call.args if is_tensor(a)]
    if not args or any(a is None for a in args) or len(args) != sum(1 for a in call.args if is_tensor(a)):
        return None
    dtype = str(call.ty.dtype)
    if name in _NUMPY_BINARY and len(args) == 2 and args[0].dtype == args[1].dtype:
        out = getattr(np, _NUMPY_BINARY[name])(args[0], args[1])
    elif name in _NUMPY_UNARY and len(args) == 1:
        out = getattr(np, _NUMPY_UNARY[name])(args[0])
    elif name == "relax.rsqrt":
        out = 1 / np.sqrt(args[0])
    elif name in ("relax.expand_dims", "relax.reshape", "relax.squeeze", "relax.broadcast_to"):
        shape = [int(d) for d in call.ty.shape.values]
        out = np.broadcast_to(args[0], shape) if name == "relax.broadcast_to" else args[0].reshape(shape)
    elif name == "relax.take" and len(args) == 2 and args[1].dtype.kind in "iu":
        axis = call.attrs.axis
        mode = "wrap" if call.attrs.mode == "wrap" else "clip"
        out = np.take(args[0], args[1], axis=None if axis is None else int(axis), mode=mode)
    elif name == "relax.permute_dims":
        axes = call.attrs.axes
        out = np.transpose(args[0], None if axes is None else [int(a) for a in axes])
    else:
        return None
    if str(out.dtype) != dtype:
        return None
    return relax.const(np.require(out, requirements="C"), dtype)  # ascontiguousarray makes a scalar 1-d


@relax.expr_functor.mutator
class _FoldNumpy(relax.PyExprMutator):
    def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
        value = self.visit_expr(binding.value)
        folded = _fold_call(value) if isinstance(value, relax.Call) else None
        if folded is None:
            return super().visit_var_binding_(binding)
        self.set_var_remap(binding.var, emit_like(self.builder_, binding.var, folded))
        return None

    def _inline(self, new: Any) -> Any:
        bound = self.lookup_binding(new) if isinstance(new, relax.Var) else None
        return bound if bound is not None and const_array(bound) is not None else new

    def visit_var_(self, op: Any) -> Any:  # noqa: N802 — constants inline into their users
        return self._inline(super().visit_var_(op))

    def visit_dataflow_var_(self, op: Any) -> Any:  # noqa: N802
        return self._inline(super().visit_dataflow_var_(op))


@module_pass(opt_level=0)
class FoldConstantsNumpy(MutatorPass):
    """Evaluate the cheap constant arithmetic of decomposed batch norms and weight reshapes
    (``expand_dims``, ``sqrt(var + eps)``, ``permute_dims`` …) in numpy. TVM's FoldConstant
    compiles a kernel for every such call: 15 s of a ResNet-50 build, measured."""

    mutator = _FoldNumpy


def _calls_on_constants(mod: Any) -> bool:
    found = []

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and not found:
            tensors = [a for a in expr.args if is_tensor(a)]
            if tensors and all(const_array(a) is not None for a in tensors):
                found.append(expr)

    for _gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return bool(found)


@module_pass(opt_level=0)
class FoldRest:
    """TVM's FoldConstant, only when calls on constants are left (e.g. a TFLite ``dequantize``
    of int8 weights): the pass spent seconds on ResNet-50 even with nothing to fold."""

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        return relax.transform.FoldConstant()(mod) if _calls_on_constants(mod) else mod
