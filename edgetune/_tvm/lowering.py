"""Relax-level lowering for CPU targets: the graph edgetune's kernels are built from.

TVM 0.27 legalizes every operator into plain loops over the model's own layout (NCHW for ONNX)
and leaves weights as they are. Near-peak CPU kernels want something else (DESIGN §3, measured):

* **NHWC activations**: channels innermost, so a convolution's output channels fill vector
  registers and a pixel's inputs are contiguous. :func:`to_nhwc` rewrites NCHW convolutions,
  pools and the elementwise/concat/mean ops between them; any other op gets the tensor back in
  NCHW (a transpose the pass inserts only where needed).
* **Packed weights**: a convolution's constant OHWI weights are repacked at compile time into
  ``[OC/OCi, KH, KW, IC, OCi]`` (``OCi`` = the output-channel block one micro-kernel keeps in
  registers), depthwise weights into ``[KH, KW, C]`` and a dense layer's ``[K, N]`` into
  ``[N/NB, K, NB]``. The repacking runs in numpy here, so a cross build needs nothing on the host
  but the numbers.

The result is fused exactly like TVM's own pipeline (legalize, annotate, fold, fuse), so tuning
tasks and the build see the same kernels. :data:`LEGACY` is the lowering of edgetune ≤ 0.1
(TVM's legalization as it comes), kept because tuning records made with it only match it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import dot, tvm

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lowering:
    """How a model's graph is lowered before fusion; ``key`` is stamped on tuning records."""

    layout: str  # "nhwc" | "nchw" (the model's own)
    pack: bool  # repack constant weights for the micro-kernels

    @property
    def key(self) -> str:
        return f"{self.layout}{'-packed' if self.pack else ''}"


NATIVE = Lowering("nchw", False)  # TVM's own legalization: GPU targets, and edgetune 0.1's records
NHWC_PACKED = Lowering("nhwc", True)
LOWERINGS = {lw.key: lw for lw in (NATIVE, NHWC_PACKED)}


def lowering_for(target: Any, layout: str = "auto") -> Lowering:
    """The lowering for ``target`` and ``--layout``: NHWC with packed weights for CPUs (``auto``,
    ``nhwc``), TVM's own NCHW legalization for GPUs and with ``nchw`` (what edgetune 0.1 built
    and tuned: its records apply only to that)."""
    if target.kind.name != "llvm" or layout == "nchw":
        return NATIVE
    return NHWC_PACKED


# ---------------------------------------------------------------- small graph clean-ups


def drop_dropout(mod: Any) -> Any:
    """``TupleGetItem(dropout(x), 0) → x``. DecomposeOpsForInference leaves dropout's tuple,
    which trips layout passes (measured: "Expected nested to match tuple" on squeezenet)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class _Drop(relax.PyExprMutator):
        def visit_tuple_getitem_(self, op: Any) -> Any:  # noqa: N802 — TVM's visitor naming
            new = super().visit_tuple_getitem_(op)
            value = new.tuple_value
            if isinstance(value, relax.Var):
                bound = self.lookup_binding(value)
                value = value if bound is None else bound
            if new.index == 0 and _op_name(value) == "relax.nn.dropout":
                return value.args[0]
            return new

    return _map_functions(mod, lambda m, f: _Drop(m).visit_expr(f))


def sum_of_stack_to_add(mod: Any) -> Any:
    """ONNX ``Sum`` arrives as ``sum(stack([broadcast_to(a), broadcast_to(b)]), axis=0)``: a 5-D
    op nothing fuses with. Rewrite it to ``a + b`` (broadcasting as ``add`` does), so residual
    additions fuse into the convolution before them."""
    from tvm import relax

    @relax.expr_functor.mutator
    class _Sum(relax.PyExprMutator):
        def _bound(self, expr: Any) -> Any:
            if isinstance(expr, relax.Var):
                bound = self.lookup_binding(expr)
                return expr if bound is None else bound
            return expr

        def visit_call_(self, op: Any) -> Any:  # noqa: N802
            new = super().visit_call_(op)
            if _op_name(new) != "relax.sum" or new.attrs.keepdims or [int(a) for a in (new.attrs.axis or [])] != [0]:
                return new
            stack = self._bound(new.args[0])
            if _op_name(stack) != "relax.stack" or int(stack.attrs.axis) != 0:
                return new
            parts = list(getattr(self._bound(stack.args[0]), "fields", []))
            if len(parts) < 2:
                return new
            terms = []
            for part in parts:
                inner = self._bound(part)
                terms.append(inner.args[0] if _op_name(inner) == "relax.broadcast_to" else part)
            total = terms[0]
            for term in terms[1:]:
                total = self.builder_.emit(relax.op.add(total, term))
            want = [int(d) for d in new.ty.shape.values]
            if [int(d) for d in total.ty.shape.values] != want:
                total = relax.op.broadcast_to(total, want)
            return total

    return _map_functions(mod, lambda m, f: _Sum(m).visit_expr(f))


def nchw_conv2d_transpose(mod: Any) -> Any:
    """TVM 0.27 legalizes ``conv2d_transpose`` only in NCHW; the TFLite frontend emits it in NHWC
    (TRANSPOSE_CONV, MediaPipe's transposed conv), which then reaches codegen unlowered. Wrap
    such calls in transposes to NCHW and back (the layout passes fold them where they can)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class _Deconv(relax.PyExprMutator):
        def visit_call_(self, op: Any) -> Any:  # noqa: N802
            new = super().visit_call_(op)
            if _op_name(new) != "relax.nn.conv2d_transpose" or new.attrs.data_layout != "NHWC":
                return new
            a = new.attrs
            x = self.builder_.emit(relax.op.permute_dims(new.args[0], [0, 3, 1, 2]))
            y = self.builder_.emit(relax.op.nn.conv2d_transpose(
                x, new.args[1], strides=_ints(a.strides), padding=_ints(a.padding),
                output_padding=_ints(a.output_padding), dilation=_ints(a.dilation), groups=int(a.groups),
                data_layout="NCHW", kernel_layout=a.kernel_layout, out_layout="NCHW", out_dtype=a.out_dtype))
            return relax.op.permute_dims(y, [0, 2, 3, 1])

    return _map_functions(mod, lambda m, f: _Deconv(m).visit_expr(f))


_NUMPY_BINARY = {"relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply",
                 "relax.divide": "divide", "relax.power": "power", "relax.maximum": "maximum", "relax.minimum": "minimum"}
_NUMPY_UNARY = {"relax.sqrt": "sqrt", "relax.negative": "negative", "relax.exp": "exp", "relax.abs": "abs"}


def fold_constants_numpy(mod: Any) -> Any:
    """Evaluate the cheap constant arithmetic of decomposed batch norms and weight reshapes
    (``expand_dims``, ``sqrt(var + eps)``, ``permute_dims`` …) in numpy. TVM's FoldConstant
    compiles a kernel for every such call: 15 s of a ResNet-50 build, measured."""
    import numpy as np
    from tvm import relax

    def fold(call: Any) -> Any | None:
        name = _op_name(call)
        if not _is_tensor(call):  # shape- or tuple-valued calls (``shape_of``, ``split``) stay
            return None
        args = [_const_array(a) for a in call.args if _is_tensor(a)]
        if not args or any(a is None for a in args) or len(args) != sum(1 for a in call.args if _is_tensor(a)):
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
        elif name == "relax.permute_dims":
            axes = call.attrs.axes
            out = np.transpose(args[0], None if axes is None else [int(a) for a in axes])
        else:
            return None
        if str(out.dtype) != dtype:
            return None
        return relax.const(np.require(out, requirements="C"), dtype)  # ascontiguousarray makes a scalar 1-d

    @relax.expr_functor.mutator
    class _Fold(relax.PyExprMutator):
        def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
            value = self.visit_expr(binding.value)
            folded = fold(value) if isinstance(value, relax.Call) else None
            if folded is None:
                return super().visit_var_binding_(binding)
            self.set_var_remap(binding.var, self.builder_.emit(folded) if isinstance(binding.var, relax.DataflowVar)
                               else self.builder_.emit_output(folded))
            return None

        def _inline(self, new: Any) -> Any:
            bound = self.lookup_binding(new) if isinstance(new, relax.Var) else None
            return bound if bound is not None and _const_array(bound) is not None else new

        def visit_var_(self, op: Any) -> Any:  # noqa: N802 — constants inline into their users
            return self._inline(super().visit_var_(op))

        def visit_dataflow_var_(self, op: Any) -> Any:  # noqa: N802
            return self._inline(super().visit_dataflow_var_(op))

    return _map_functions(mod, lambda m, f: _Fold(m).visit_expr(f))


def _map_functions(mod: Any, fn: Callable[[Any, Any], Any]) -> Any:
    from tvm import relax

    out = mod.shallow_copy() if hasattr(mod, "shallow_copy") else tvm().IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out[gv] = fn(mod, func)
    return out


def _readers(func: Any) -> dict[Any, list[Any]]:
    """Each variable of ``func``'s body → the values of the bindings that read it (a call's
    arguments, call_tir's tuple of them included); ``None`` for the function's result."""
    from tvm import relax

    readers: dict[Any, list[Any]] = {}
    for block in func.body.blocks:
        for b in block.bindings:
            for arg in getattr(b.value, "args", []):
                for var in arg.fields if isinstance(arg, relax.Tuple) else [arg]:
                    if isinstance(var, relax.Var):
                        readers.setdefault(var, []).append(b.value)
    result = func.body.body
    for var in result.fields if isinstance(result, relax.Tuple) else [result]:
        readers.setdefault(var, []).append(None)
    return readers


def _op_name(expr: Any) -> str:
    from tvm import relax

    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm().ir.Op):
        return str(expr.op.name)
    return ""


# ---------------------------------------------------------------- NHWC


_UNARY = frozenset(f"relax.{n}" for n in (
    "nn.relu", "nn.relu6", "nn.silu", "nn.gelu", "nn.gelu_tanh", "nn.leakyrelu", "nn.softplus", "nn.selu",
    "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "negative", "square", "erf", "round", "floor",
    "ceil", "sign", "sin", "cos", "clip", "astype", "hard_sigmoid", "hard_swish", "nn.hard_swish",
))
_BINARY = frozenset(f"relax.{n}" for n in (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "floor_divide", "floor_mod",
))
_POOLS = frozenset(("relax.nn.max_pool2d", "relax.nn.avg_pool2d"))
_QUANTIZE = frozenset(("relax.quantize", "relax.dequantize"))
_REDUCE = frozenset(("relax.mean", "relax.sum", "relax.max", "relax.min"))
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}  # NCHW axis → NHWC axis


def to_nhwc(mod: Any) -> Any:
    """Run NCHW convolutions (and the ops around them that do not care about layout) in NHWC
    with OHWI weights. Transposes appear only where an op needs NCHW (graph inputs/outputs,
    reshapes); constant operands are permuted once and folded later."""
    from tvm import relax

    @relax.expr_functor.mutator
    class _NHWC(relax.PyExprMutator):
        def __init__(self, mod: Any):
            super().__init__(mod)
            self.nhwc: dict[Any, Any] = {}  # new NCHW var → the same value in NHWC

        def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
            value = binding.value
            if not isinstance(value, relax.Call) or not isinstance(value.op, tvm().ir.Op):
                return super().visit_var_binding_(binding)
            call = self.visit_expr(value)
            converted = self._convert(call)
            if converted is None:
                return super().visit_var_binding_(binding)
            new_nhwc, plain = converted
            if plain:  # the result has no layout (e.g. mean over H, W without keepdims)
                self.set_var_remap(binding.var, self._emit(binding.var, new_nhwc))
                return None
            nhwc_var = self.builder_.emit(new_nhwc)
            back = self._emit(binding.var, relax.op.permute_dims(nhwc_var, TO_NCHW))
            self.nhwc[back] = nhwc_var
            self.set_var_remap(binding.var, back)
            return None

        def _emit(self, var: Any, expr: Any) -> Any:
            if isinstance(var, relax.DataflowVar):
                return self.builder_.emit(expr)
            return self.builder_.emit_output(expr)

        def _in_nhwc(self, arg: Any) -> Any:
            if arg in self.nhwc:
                return self.nhwc[arg]
            ty = arg.ty
            rank = getattr(ty, "ndim", -1)
            if not 0 <= rank <= 4:
                raise _NotConvertibleError
            value = _const_array(arg)
            if value is not None and value.size == 1:
                # rank 0: legalization makes it an immediate; as (1,1,1,1) it was a buffer the
                # kernel loads, under a bounds predicate a masked gather per vector (measured)
                return relax.const(value.reshape(()), str(ty.dtype))
            shape = [1] * (4 - rank) + [int(d) for d in ty.shape.values]  # broadcast: (C,1,1), (1,), ()
            if value is not None:  # permuted here: FoldConstant would compile a kernel per constant
                return relax.const(value.reshape(shape).transpose(TO_NHWC).copy(), str(ty.dtype))
            if rank < 4:
                arg = relax.op.reshape(arg, shape)
            return relax.op.permute_dims(arg, TO_NHWC)

        def _convert(self, call: Any) -> tuple[Any, bool] | None:
            name = str(call.op.name)
            tensors = [a for a in call.args if _is_tensor(a)]
            try:
                if name == "relax.nn.conv2d":
                    return self._conv(call)
                if name == "relax.concat":
                    return self._concat(call)
                if not any(a in self.nhwc for a in tensors):
                    return None
                if name in _POOLS and call.attrs.layout == "NCHW" and call.attrs.out_layout == "NCHW":
                    return _pool(call, self._in_nhwc(call.args[0])), False
                if name == "relax.nn.adaptive_avg_pool2d" and call.attrs.layout == "NCHW":
                    size = [int(s) for s in call.attrs.output_size] if call.attrs.output_size else None
                    return relax.op.nn.adaptive_avg_pool2d(self._in_nhwc(call.args[0]), size, layout="NHWC"), False
                if name in _UNARY or name in _BINARY:
                    if not all(_rank(a) <= 4 for a in tensors) or _rank(call) != 4:
                        return None
                    args = [self._in_nhwc(a) if _is_tensor(a) else a for a in call.args]
                    return relax.Call(call.op, args, call.attrs), False
                if name in _REDUCE and call.attrs.axis is not None and _rank(call.args[0]) == 4:
                    return self._reduce(call)
                if name == "relax.nn.pad" and _rank(call) == 4 and str(call.attrs.pad_mode) == "constant":
                    w = _ints(call.attrs.pad_width)  # (before, after) per NCHW axis
                    widths = [p for axis in TO_NHWC for p in w[2 * axis:2 * axis + 2]]
                    return relax.op.nn.pad(self._in_nhwc(call.args[0]), widths, pad_value=float(call.attrs.pad_value)), False
                if name == "relax.take" and _is_table(call) and _rank(call) == 4:  # a lookup per element
                    return relax.op.take(call.args[0], self._in_nhwc(call.args[1]), axis=0, mode=str(call.attrs.mode)), False
                if name in _QUANTIZE and _rank(call) == 4 and all(_rank(a) == 0 or _const_size(a) == 1 for a in call.args[1:]):
                    op = relax.op.quantize if name == "relax.quantize" else relax.op.dequantize  # per tensor: no axis to move
                    return op(self._in_nhwc(call.args[0]), *call.args[1:], axis=-1, out_dtype=str(call.attrs.out_dtype)), False
            except _NotConvertibleError:
                return None
            return None

        def _conv(self, call: Any) -> tuple[Any, bool] | None:
            a = call.attrs
            if not (a.data_layout == "NCHW" and a.kernel_layout == "OIHW" and a.out_layout == "NCHW"):
                return None
            value = _const_array(call.args[1])
            weight = (relax.op.permute_dims(call.args[1], TO_NHWC) if value is None  # OIHW → OHWI
                      else relax.const(value.transpose(TO_NHWC).copy(), str(call.args[1].ty.dtype)))
            out = relax.op.nn.conv2d(self._in_nhwc(call.args[0]), weight, strides=_ints(a.strides),
                                     padding=_ints(a.padding), dilation=_ints(a.dilation), groups=int(a.groups),
                                     data_layout="NHWC", kernel_layout="OHWI", out_layout="NHWC",
                                     out_dtype=a.out_dtype or None)
            return out, False

        def _concat(self, call: Any) -> tuple[Any, bool] | None:
            parts = call.args[0]
            fields = list(getattr(parts, "fields", []))
            if not fields or not any(f in self.nhwc for f in fields) or _rank(call) != 4:
                return None
            axis = _AXIS[int(call.attrs.axis) % 4]
            return relax.op.concat([self._in_nhwc(f) for f in fields], axis=axis), False

        def _reduce(self, call: Any) -> tuple[Any, bool] | None:
            axes = sorted(int(x) % 4 for x in call.attrs.axis)
            keep = bool(call.attrs.keepdims)
            if axes != [2, 3] or call.args[0] not in self.nhwc:
                return None
            op = {"relax.mean": relax.op.mean, "relax.sum": relax.op.sum,
                  "relax.max": relax.op.max, "relax.min": relax.op.min}[str(call.op.name)]
            return op(self.nhwc[call.args[0]], axis=[1, 2], keepdims=keep), not keep

    return _map_functions(mod, lambda m, f: _NHWC(m).visit_expr(f))


def _is_table(call: Any) -> bool:
    """``call`` is ``take(table, index, axis=0)`` with a constant 1-D table: an elementwise
    lookup (:func:`.quantized.int8_tables`)."""
    table = _const_array(call.args[0])
    return table is not None and table.ndim == 1 and call.attrs.axis is not None and int(call.attrs.axis) == 0


class _NotConvertibleError(Exception):
    """An operand this pass cannot express in NHWC: keep the op in NCHW."""


def _is_tensor(expr: Any) -> bool:
    from tvm import relax

    return isinstance(getattr(expr, "ty", None), relax.TensorType)


def _const_size(expr: Any) -> int:
    """How many elements a constant holds (-1: not a constant)."""
    value = _const_array(expr)
    return -1 if value is None else int(value.size)


def _rank(expr: Any) -> int:
    return int(getattr(expr.ty, "ndim", -1))


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def _pool(call: Any, data: Any) -> Any:
    from tvm import relax

    a = call.attrs
    make = relax.op.nn.max_pool2d if str(call.op.name) == "relax.nn.max_pool2d" else relax.op.nn.avg_pool2d
    return make(data, pool_size=_ints(a.pool_size), strides=_ints(a.strides), padding=_ints(a.padding),
                dilation=_ints(a.dilation), ceil_mode=bool(a.ceil_mode), count_include_pad=bool(a.count_include_pad),
                layout="NHWC", out_layout="NHWC")


# ---------------------------------------------------------------- per-channel affine → weights

_AFFINE = frozenset(("relax.add", "relax.subtract", "relax.multiply", "relax.divide"))


def fold_affine_into_conv(mod: Any) -> Any:
    """``conv2d → (add | subtract | multiply | divide by per-channel constants)…`` becomes one
    conv2d with scaled weights plus one bias add: a decomposed batch norm's four passes over
    the output become one (NHWC convolutions with constant OHWI weights, each intermediate used
    only by the next op)."""
    from tvm import relax

    for gv, func in list(mod.functions_items()):
        if not isinstance(func, relax.Function):
            continue
        chains = _affine_chains(func)
        if chains:
            mod = _rewrite_affine(mod, gv, chains)
    return mod


def _affine_chains(func: Any) -> dict[Any, tuple[Any, Any, Any]]:
    """Chain end var → (conv call, folded weights, bias) for every foldable chain."""
    import numpy as np
    from tvm import relax

    bindings: dict[Any, Any] = {}
    uses: dict[Any, int] = {}
    order: list[Any] = []

    def count(expr: Any) -> None:
        if isinstance(expr, relax.Var):
            uses[expr] = uses.get(expr, 0) + 1

    for block in func.body.blocks:
        for b in block.bindings:
            if not isinstance(b, relax.VarBinding):
                continue
            bindings[b.var] = b.value
            order.append(b.var)
            relax.analysis.post_order_visit(b.value, count)
    relax.analysis.post_order_visit(func.body.body, count)
    consumer: dict[Any, Any] = {}
    for var in order:
        value = bindings[var]
        if _op_name(value) in _AFFINE and isinstance(value.args[0], relax.Var):
            consumer.setdefault(value.args[0], var)
    chains = {}
    for var in order:
        conv = bindings[var]
        if _op_name(conv) != "relax.nn.conv2d" or conv.attrs.kernel_layout != "OHWI" or conv.attrs.data_layout != "NHWC":
            continue
        weights = _const_array(conv.args[1])
        if weights is None or weights.dtype != np.float32 or np.array_equal(weights, np.round(weights)):
            continue  # integer weights: an exact int8 layer's float kernel, whose sums a folded scale would round
        oc = weights.shape[0]
        scale, bias = np.ones(oc, np.float32), np.zeros(oc, np.float32)
        end = var
        while uses.get(end, 0) == 1 and end in consumer:
            nxt = consumer[end]
            op = bindings[nxt]
            c = _channel_vector(op.args[1], oc)
            if c is None or not op.args[0].same_as(end):
                break
            name = _op_name(op)
            if name == "relax.multiply":
                scale, bias = scale * c, bias * c
            elif name == "relax.divide":
                scale, bias = scale / c, bias / c
            elif name == "relax.add":
                bias = bias + c
            else:
                bias = bias - c
            end = nxt
        if end is not var:
            chains[end] = (conv, (weights * scale[:, None, None, None]).astype(np.float32), bias.astype(np.float32))
    return chains


def _channel_vector(expr: Any, channels: int) -> Any | None:
    """A constant that broadcasts along the last (channel) axis only, as a [channels] vector."""
    import numpy as np

    value = _const_array(expr)
    if value is None or value.dtype != np.float32 or value.size not in (1, channels):
        return None
    if value.size == channels and (value.ndim == 0 or value.shape[-1] != channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)


def _rewrite_affine(mod: Any, gv: Any, chains: dict[Any, tuple[Any, Any, Any]]) -> Any:
    from tvm import relax

    @relax.expr_functor.mutator
    class _Fold(relax.PyExprMutator):
        def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
            if binding.var not in chains:
                return super().visit_var_binding_(binding)
            conv, weights, bias = chains[binding.var]
            a = conv.attrs
            new = relax.op.nn.conv2d(self.visit_expr(conv.args[0]), relax.const(weights), strides=_ints(a.strides),
                                     padding=_ints(a.padding), dilation=_ints(a.dilation), groups=int(a.groups),
                                     data_layout="NHWC", kernel_layout="OHWI", out_layout="NHWC",
                                     out_dtype=a.out_dtype or None)
            out = self.builder_.emit(new)
            value = relax.op.add(out, relax.const(bias.reshape(1, 1, 1, -1)))
            emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
            self.set_var_remap(binding.var, emit(value))
            return None

    out = mod.shallow_copy() if hasattr(mod, "shallow_copy") else tvm().IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    out[gv] = _Fold(mod).visit_expr(mod[gv])
    return relax.transform.DeadCodeElimination(["main"])(out)


# ---------------------------------------------------------------- int8 convolutions


def int8_convolutions(mod: Any, target: Any) -> Any:
    """int8 × int8 → int32 convolutions (exact int8 layers, :mod:`.quantized`) as edgetune's
    kernels, a zero-point pad in front of one absorbed into it (a pad of its own would be a
    separate pass over the input: FuseOps does not fuse producers into a convolution), and the
    per-channel constant added after it (``bias − zx·Σw``) taken in:

    * full convolutions: the integer micro-kernel tensorized with the target's dot-product
      instruction (:mod:`.dot`; the constant joins the ``128·Σw`` an unsigned one takes off: one
      add per vector), or the fp32 packed kernel over the same small integers on a CPU without
      one (exact: the sums stay below 2²⁴, checked at import);
    * depthwise ones: the fp32 depthwise kernel reading the int8 input directly (no integer
      instruction helps a 9-tap sum per channel).

    An fp32 kernel adds the constant in float where the sum stays exact, and hands the float on:
    the requantize after it converts to float anyway (an int32 round trip and an integer add per
    vector less, in epilogues as long as the 9-tap sums of a depthwise layer).

    Done before LegalizeOps because TVM's conv2d carries no pad value."""
    import numpy as np
    from tvm import relax

    family, cpu = dot.dot_family(target), CpuFacts.of(target)

    def kernel(mutator: Any, conv: Any, bias: Any) -> tuple[Any, bool, Any] | None:
        """(the call_te of an exact int8 convolution ``conv`` plus ``bias`` — int32 per output
        channel, or None —, whether it returns the sums in float32, the part of ``bias`` left to
        add in int32 after it: None, or all of it where float32 would round); None: not one."""
        weights = _integer_conv_weights(conv)
        a = conv.attrs
        if (weights is None or str(conv.args[0].ty.dtype) != "int8" or a.data_layout != "NHWC"
                or a.out_layout != "NHWC" or sorted(str(a.kernel_layout)) != sorted("OHWI")):
            return None
        weights = weights.transpose([str(a.kernel_layout).index(axis) for axis in "OHWI"])
        x, padding, fill = conv.args[0], _ints(a.padding), 0
        src = mutator.lookup_binding(x) if isinstance(x, relax.Var) else None
        if _op_name(src) == "relax.nn.pad" and not any(padding) and str(src.attrs.pad_mode) == "constant":
            widths = _ints(src.attrs.pad_width)
            if not any(widths[:2] + widths[6:]):
                x, fill = src.args[0], int(src.attrs.pad_value)
                padding = [widths[2], widths[4], widths[3], widths[5]]
        geometry = dict(strides=_ints(a.strides), padding=padding, dilation=_ints(a.dilation), fill=fill)
        oc, kh, kw, ic_g = weights.shape
        ic = int(x.ty.shape.values[3])
        sig = conv_signature(_ints(x.ty.shape.values), weights.shape, **{k: geometry[k] for k in ("strides", "padding", "dilation")})
        # float32 holds the sum plus the constant exactly while |x| ≤ 128 keeps them below 2²⁴
        exact = bias is None or (kh * kw * ic_g * 128 * int(np.abs(weights.astype(np.int64)).max(initial=0))
                                 + int(np.abs(bias.astype(np.int64)).max(initial=0)) < 2**24)
        fbias = [relax.const(bias.astype(np.float32))] if bias is not None and exact else []
        rest = None if exact else bias
        te = mutator.builder_.call_te
        if int(a.groups) == 1 and family is not None:
            padded = pad_axis(pad_axis(weights, 0, dot.BLOCK * dot.padded_blocks(family, oc)), 3, dot.DEPTH)
            packed = (padded.reshape(-1, dot.BLOCK, kh, kw, padded.shape[3] // dot.DEPTH, dot.DEPTH)
                      .transpose(0, 2, 3, 4, 1, 5).copy())
            offset = np.zeros(oc, np.int64) if bias is None else bias.astype(np.int64)
            if dot.unsigned_data(family):  # x + 128 as uint8: Σ(x + 128)·w − 128·Σw = Σx·w
                offset = offset - 128 * weights.astype(np.int64).sum(axis=(1, 2, 3))
            extra = [relax.const(offset.astype(np.int32))] if bias is not None or dot.unsigned_data(family) else []
            call = te(conv2d_nhwc_int8, x, relax.const(packed), *extra, **geometry, out_channels=oc, family=family,
                      signature=sig, primfunc_name_hint="conv2d_nhwc_int8")
            return call, False, None
        if int(a.groups) == 1:
            oci, _rw = register_tile(oc, int(conv.ty.shape.values[2]), cpu)
            padded = pad_axis(weights.astype(np.float32), 0, oci)
            packed = padded.reshape(-1, oci, kh, kw, ic).transpose(0, 2, 3, 4, 1).copy()
            call = te(conv2d_nhwc_packed, x, relax.const(packed), *fbias, **geometry, out_channels=oc, signature=sig,
                      out_dtype="float32", primfunc_name_hint="conv2d_nhwc")
            return call, True, rest
        if int(a.groups) == ic == oc and ic_g == 1:
            packed = depthwise_weights(weights.astype(np.float32), cpu)
            call = te(depthwise_conv2d_nhwc, x, relax.const(packed), *fbias, **geometry, out_dtype="float32",
                      primfunc_name_hint="depthwise_conv2d_nhwc")
            return call, True, rest
        return None

    def channel_constant(expr: Any, channels: int) -> Any | None:
        """An int32 constant of one value per channel along the last axis, flattened; else None."""
        value = _const_array(expr)
        if value is None or value.dtype != np.int32 or value.size != channels or value.shape[-1:] != (channels,):
            return None
        return value.reshape(-1)

    def biased(func: Any) -> set[Any]:
        """The convolutions whose only user adds an int32 constant per output channel to them."""
        readers = _readers(func)
        out = set()
        for block in func.body.blocks:
            for b in block.bindings:
                (user, *more) = readers.get(b.var, [None])
                if (_op_name(b.value) == "relax.nn.conv2d" and not more and _op_name(user) == "relax.add"
                        and user.args[0].same_as(b.var)
                        and channel_constant(user.args[1], int(b.var.ty.shape.values[-1])) is not None):
                    out.add(b.var)
        return out

    @relax.expr_functor.mutator
    class _Int8(relax.PyExprMutator):
        """Each convolution's bias add (its only user) becomes the kernel's; a float32 kernel's
        sums are cast to int32 for their users and the casts back to float32 dropped."""

        def __init__(self, module: Any, deferred: set[Any]):
            super().__init__(module)
            self.deferred = deferred  # convolutions made kernels at their bias add
            self.floats: set[Any] = set()  # int32 vars that are casts of a float32 kernel's integral sums

        def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
            new = None if binding.var in self.deferred else self._rewrite(self.visit_expr(binding.value))
            if new is None:
                super().visit_var_binding_(binding)
                return
            output = self.builder_.current_block_is_dataflow() and not isinstance(binding.var, relax.DataflowVar)
            emit = self.builder_.emit_output if output else self.builder_.emit
            call, is_float, rest = new
            out = emit(call)
            if is_float:
                out = emit(relax.op.astype(out, "int32"))
                self.floats.add(out)
            if rest is not None:
                out = emit(relax.op.add(out, relax.const(rest.astype(np.int32))))
            self.set_var_remap(binding.var, out)

        def _rewrite(self, value: Any) -> tuple[Any, bool, Any] | None:
            name = _op_name(value)
            if name == "relax.astype" and str(value.attrs.dtype) == "float32" and value.args[0] in self.floats:
                return self.lookup_binding(value.args[0]).args[0], False, None  # the float sums themselves
            if name == "relax.nn.conv2d":
                return kernel(self, value, None)
            if name == "relax.add" and isinstance(value.args[0], relax.Var):
                conv = self.lookup_binding(value.args[0])
                if _op_name(conv) == "relax.nn.conv2d" and _is_tensor(value):
                    return kernel(self, conv, channel_constant(value.args[1], int(value.ty.shape.values[-1])))
            return None

    functions = [(gv, func) for gv, func in mod.functions_items() if isinstance(func, relax.Function)]
    mutator = _Int8(mod, set().union(*(biased(func) for _gv, func in functions)))
    for gv, func in functions:
        mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return relax.transform.DeadCodeElimination(["main"])(mutator.builder_.get())


def _integer_conv_weights(call: Any) -> Any | None:
    """The int8 weights of an int8 × int8 → int32 convolution with constant weights (an exact
    int8 layer, :mod:`.quantized`), else None."""
    import numpy as np

    if _op_name(call) != "relax.nn.conv2d" or str(call.attrs.out_dtype) != "int32":
        return None
    weights = _const_array(call.args[1])
    return weights if weights is not None and weights.dtype == np.int8 else None


def int8_convolutions_in_float(mod: Any) -> Any:
    """For GPU targets: int8 × int8 → int32 convolutions as float32 convolutions of the same
    integers, cast back (exact: the sums stay below 2²⁴, checked at import) — the kernels TVM's
    GPU schedules handle, as before edgetune had integer kernels."""
    import numpy as np
    from tvm import relax

    @relax.expr_functor.mutator
    class _Float(relax.PyExprMutator):
        def visit_call_(self, op: Any) -> Any:  # noqa: N802
            new = super().visit_call_(op)
            weights = _integer_conv_weights(new)
            if weights is None:
                return new
            a = new.attrs
            x = self.builder_.emit(relax.op.astype(new.args[0], "float32"))
            conv = self.builder_.emit(relax.op.nn.conv2d(
                x, relax.const(weights.astype(np.float32)), strides=a.strides, padding=a.padding, dilation=a.dilation,
                groups=int(a.groups), data_layout=str(a.data_layout), kernel_layout=str(a.kernel_layout),
                out_layout=str(a.out_layout), out_dtype="float32"))
            return relax.op.astype(conv, "int32")

    return _map_functions(mod, lambda m, f: _Float(m).visit_expr(f))


# ---------------------------------------------------------------- fast math


def _fast_sigmoid(x: Any) -> Any:
    from tvm import te, topi

    e = topi.fast_exp(topi.negative(x))
    return te.compute(x.shape, lambda *i: 1.0 / (1.0 + e(*i)), name="fast_sigmoid")


def _round_vectorized(x: Any) -> Any:
    """Round half to even as ``tirx.round``: on LLVM targets it lowers to ``llvm.nearbyint``
    exactly as TOPI's ``round`` (``tirx.nearbyint``) does, but TVM's VectorizeLoop knows only
    the former. With ``nearbyint`` every requantizing int8 epilogue ran as a scalar loop that
    LLVM re-vectorized 8 wide with gathers (a 64×64×24 int8 layer: 0.25 ms, 0.06 without it)."""
    from tvm import te

    return te.compute(x.shape, lambda *i: te.round(x(*i)), name="round")


_FAST_MATH = {
    "relax.round": _round_vectorized,
    "relax.sigmoid": _fast_sigmoid,
    "relax.exp": lambda x: _topi().fast_exp(x),
    "relax.tanh": lambda x: _topi().fast_tanh(x),
    "relax.erf": lambda x: _topi().fast_erf(x),
}


def _topi() -> Any:
    from tvm import topi

    return topi


def _legalize_fast(fn: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    """exp/sigmoid/tanh/erf as vectorizable polynomials (TOPI's fast_*: ~1e-6 relative error)
    instead of libm calls that LLVM cannot vectorize (a SiLU epilogue cost 10–30 % of YOLO's
    convolutions, measured); round as the intrinsic TVM vectorizes (same result)."""

    def legalize(bb: Any, call: Any) -> Any:
        if str(call.ty.dtype) != "float32":
            return _default_legalize(bb, call)
        return bb.call_te(fn, call.args[0], primfunc_name_hint=call.op.name.removeprefix("relax."))

    return legalize


# ---------------------------------------------------------------- packed legalization


@dataclass(frozen=True)
class CpuFacts:
    """What a micro-kernel needs to know about the target CPU."""

    lanes: int  # fp32 lanes per vector register
    registers: int  # vector registers
    fma_latency: int  # cycles; with 2 pipes, 2 × latency independent accumulators keep them busy

    @classmethod
    def of(cls, target: Any) -> "CpuFacts":
        from tvm.target import codegen

        bits = int(codegen.llvm_get_vector_width(target)) if target.kind.name == "llvm" else 128
        bits = bits if bits > 0 else 128
        triple = str(target.attrs.get("mtriple", ""))
        arm = triple.startswith(("aarch64", "arm"))
        if arm:
            registers = 32 if triple.startswith("aarch64") else 16
        else:
            registers = 32 if bits >= 512 else 16
        # In-order-ish Cortex-A53/A55/A72 chain FMAs with ~7 cycles latency; A76+ and x86 ~4.
        slow_fma = str(target.attrs.get("mcpu", "")) in ("cortex-a53", "cortex-a55", "cortex-a72", "cortex-a73")
        return cls(lanes=max(bits // 32, 1), registers=registers, fma_latency=7 if slow_fma else 4)


def vector_widths(lanes: int) -> list[int]:
    """Vector-block widths LLVM turns into whole registers (others legalize badly: a <25 x
    float> conv measured 30× slower than <32 x float>): multiples of the native width and the
    narrower power-of-two registers (AVX's 8, SSE/NEON's 4)."""
    return sorted({lanes * k for k in (1, 2, 3, 4)} | {w for w in (4, 8) if w < lanes})


def tile_rate(rows: int, vectors: int, cpu: CpuFacts) -> float:
    """Estimated register-tile updates per cycle of a ``rows`` × ``vectors`` micro-kernel: two
    FMA pipes, two loads per cycle (``rows`` broadcasts + ``vectors`` weight loads per step),
    enough independent accumulators to cover the FMA latency, one cycle of loop overhead."""
    fmas, loads = rows * vectors, rows + vectors
    cycles = max(fmas / 2.0, loads / 2.0, float(cpu.fma_latency)) + 1.0
    return rows / cycles


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


def register_tile(oc: int, ow: int, cpu: CpuFacts) -> tuple[int, int]:
    """(OCi, RW): the output-channel block and output-pixel row of one micro-kernel.

    ``RW × ⌈OCi/lanes⌉`` accumulators stay in registers with the weight vectors and one
    broadcast; the estimate prefers tiles that keep both FMA pipes busy (enough independent
    accumulators) with few loads per FMA, and penalizes the zero channels that pad ``oc`` up to
    a multiple of ``OCi``. ``RW`` divides ``ow`` (no row has a tail).
    """
    best, best_score = (cpu.lanes, 1), -1.0
    for oci in vector_widths(cpu.lanes):
        padded = -(-oc // oci) * oci
        if oci > padded or (oci > oc and oci != min(w for w in vector_widths(cpu.lanes) if w >= oc)):
            continue
        vecs = -(-oci // cpu.lanes)
        max_rw = (cpu.registers - vecs - 1) // vecs
        for rw in _divisors(ow):
            if rw > max_rw or rw > 28:
                continue
            score = tile_rate(rw, vecs, cpu) * oci * oc / padded
            if score > best_score * 1.02 or (score >= best_score * 0.98 and oci > best[0]):
                best, best_score = (oci, rw), max(score, best_score)
    return best


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
    import numpy as np

    extra = -array.shape[axis] % multiple
    if not extra:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, extra)
    return np.pad(array, widths)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _const_array(expr: Any) -> Any | None:
    """The numpy value of a Relax constant, else None."""
    if type(expr).__name__ in ("GenericConst", "Constant") and hasattr(expr, "value"):
        return expr.value.numpy()
    return None


def packed_legalize_map(target: Any, choice: ConvChoice = "auto") -> dict[str, Callable[[Any, Any], Any]]:
    """Legalization overrides: convolutions and dense layers with constant weights become the
    packed kernels edgetune's schedules know (3×3 stride-1 convolutions as Winograd where
    ``choice`` says so); anything else falls back to TVM's own."""
    cpu = CpuFacts.of(target)
    default = default_conv_variant(target)
    custom: dict[str, Callable[[Any, Any], Any]] = {op: _legalize_fast(fn) for op, fn in _FAST_MATH.items()}
    custom["relax.nn.conv2d"] = lambda bb, call: _legalize_conv2d(bb, call, cpu, choice, default)
    custom["relax.matmul"] = lambda bb, call: _legalize_matmul(bb, call, cpu)
    return custom


def _default_legalize(bb: Any, call: Any) -> Any:
    return tvm().ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)


def _legalize_conv2d(bb: Any, call: Any, cpu: CpuFacts, choice: ConvChoice, default: str) -> Any:
    import numpy as np
    from tvm import relax

    a = call.attrs
    weights = _const_array(call.args[1])
    out_dtype = str(a.out_dtype) if a.out_dtype else str(call.ty.dtype)
    layout = str(a.kernel_layout)
    plain = (a.data_layout == "NHWC" and a.out_layout == "NHWC" and sorted(layout) == sorted("OHWI")
             and weights is not None and str(call.args[0].ty.dtype) == "float32" and out_dtype == "float32")
    if not plain:
        return _default_legalize(bb, call)
    weights = weights.transpose([layout.index(axis) for axis in "OHWI"])  # TFLite: HWIO / HWOI
    oc, kh, kw, ic_g = weights.shape
    ic = int(call.args[0].ty.shape.values[3])
    groups = int(a.groups)
    geometry = dict(strides=_ints(a.strides), padding=_ints(a.padding), dilation=_ints(a.dilation))
    if groups == 1:
        oh, ow = int(call.ty.shape.values[1]), int(call.ty.shape.values[2])
        sig = conv_signature(_ints(call.args[0].ty.shape.values), weights.shape, **geometry)
        # an int8 layer made exact (quantized.py) has small integer weights: Winograd's
        # transforms would round its sums, so it keeps the direct kernel
        exact = bool(np.all(np.abs(weights) <= 128) and np.array_equal(weights, np.round(weights)))
        tile = None if exact else winograd_tile(sig, oh, ow, ic, oc, geometry, choice, default)
        if tile:
            return _legalize_winograd(bb, call.args[0], weights, geometry, tile, sig, cpu)
        oci, _rw = register_tile(oc, ow, cpu)
        padded = pad_axis(weights, 0, oci)
        packed = padded.reshape(-1, oci, kh, kw, ic).transpose(0, 2, 3, 4, 1).copy()
        return bb.call_te(conv2d_nhwc_packed, call.args[0], relax.const(packed), **geometry, out_channels=oc,
                          signature=sig, primfunc_name_hint="conv2d_nhwc")
    if groups == ic == oc and ic_g == 1:
        packed = depthwise_weights(weights, cpu)
        return bb.call_te(depthwise_conv2d_nhwc, call.args[0], relax.const(packed), **geometry,
                          primfunc_name_hint="depthwise_conv2d_nhwc")
    return _default_legalize(bb, call)


def _legalize_matmul(bb: Any, call: Any, cpu: CpuFacts) -> Any:
    from tvm import relax

    weights = _const_array(call.args[1])
    x = call.args[0]
    if (weights is None or weights.ndim != 2 or _rank(x) < 2 or str(x.ty.dtype) != "float32"
            or str(call.ty.dtype) != "float32"):
        return _default_legalize(bb, call)
    k, n = weights.shape
    nb = dense_block(n, cpu)
    packed = pad_axis(weights, 1, nb).reshape(k, -1, nb).transpose(1, 0, 2).copy()
    return bb.call_te(dense_packed, x, relax.const(packed), n, primfunc_name_hint="dense")


# ---------------------------------------------------------------- TE computes


def _pad_nhwc(data: Any, padding: Sequence[int], fill: int | float = 0, dtype: str | None = None,
              channels: int | None = None) -> Any:
    """``data`` padded spatially with ``fill`` (an int8 layer's zero point), converted to
    ``dtype`` (an int8 input read by an fp32 kernel; ``"uint8"``: int8 shifted by 128 for
    unsigned dot products, ``fill`` shifted too) and its channels zero-extended to ``channels``.
    One stage named ``pad``; ``data`` itself when there is nothing to do."""
    from tvm import te, tirx

    top, left, bottom, right = padding
    n, h, w, c = data.shape
    c = int(c)
    dtype = dtype or str(data.dtype)
    channels = channels or c
    if not any(padding) and dtype == str(data.dtype) and channels == c:
        return data
    if dtype == "uint8" and str(data.dtype) == "int8":
        fill = int(fill) + 128

        def convert(v: Any) -> Any:
            return tirx.reinterpret("uint8", v ^ tirx.const(-128, "int8"))
    else:

        def convert(v: Any) -> Any:
            return v.astype(dtype) if dtype != str(data.dtype) else v

    def value(b: Any, y: Any, x: Any, ch: Any) -> Any:
        bounds = [y >= top, y < h + top, x >= left, x < w + left] if any(padding) else []
        if channels != c:
            bounds.append(ch < c)
        raw = convert(data[b, y - top, x - left, ch if channels == c else tirx.min(ch, c - 1)])
        # (added channels meet zero weights: any value does)
        return tirx.if_then_else(tirx.all(*bounds), raw, tirx.const(fill, dtype)) if bounds else raw

    return te.compute((n, h + top + bottom, w + left + right, channels), value, name="pad")


def _out_size(size: int, k: int, stride: int, dil: int, before: int, after: int) -> int:
    return (size + before + after - (k - 1) * dil - 1) // stride + 1


def _crop(out: Any, channels: int) -> Any:
    """The first ``channels`` of the last axis (the packed kernels compute whole vector blocks)."""
    from tvm import te

    if int(out.shape[-1]) == channels:
        return out
    return te.compute((*out.shape[:-1], channels), lambda *idx: out[idx], name="crop")


def conv2d_nhwc_packed(data: Any, weights: Any, bias: Any = None, *, strides: Sequence[int], padding: Sequence[int],
                       dilation: Sequence[int], out_channels: int, signature: str = "", fill: int = 0,
                       out_dtype: str = "float32") -> Any:
    """NHWC convolution reading ``weights`` packed as [OCp/OCi, KH, KW, IC, OCi] (OCp: the
    output channels padded with zero filters to a multiple of OCi; the padding is cropped), plus
    ``bias`` per output channel. An int8 input (an exact int8 layer on a CPU without an integer
    dot product) is read as float32, padded with ``fill``, and the sums returned as ``out_dtype``."""
    from tvm import te

    n, h, w, ic = (int(x) for x in data.shape)
    oco, kh, kw, _ic, oci = (int(x) for x in weights.shape)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    oh, ow = _out_size(h, kh, sh, dh, top, bottom), _out_size(w, kw, sw, dw, left, right)
    src = _pad_nhwc(data, padding, fill, str(weights.dtype))
    ry, rx, rc = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx"), te.reduce_axis((0, ic), "rc")

    def value(b: Any, y: Any, x: Any, o: Any) -> Any:
        return te.sum(src[b, y * sh + ry * dh, x * sw + rx * dw, rc] * weights[o // oci, ry, rx, rc, o % oci],
                      axis=[ry, rx, rc])

    out = te.compute((n, oh, ow, oco * oci), value, name="conv2d_nhwc_packed",
                     attrs={"edgetune.kernel": "conv2d_nhwc_packed", "edgetune.conv": signature})
    return _cast(_plus_channels(_crop(out, out_channels), bias), out_dtype)


def _cast(out: Any, dtype: str) -> Any:
    """``out`` as ``dtype`` (the int32 sums of an exact int8 layer computed in float32)."""
    from tvm import te

    if str(out.dtype) == dtype:
        return out
    return te.compute(out.shape, lambda *idx: out[idx].astype(dtype), name="cast")


def conv2d_nhwc_int8(data: Any, weights: Any, offset: Any = None, *, strides: Sequence[int], padding: Sequence[int],
                     dilation: Sequence[int], out_channels: int, family: str, fill: int = 0,
                     signature: str = "") -> Any:
    """int8 NHWC convolution summed in int32, weights packed [OCp/16, KH, KW, ICp/4, 16, 4] (the
    dot-product instructions' operand order; OCp, ICp: zero filters / channels appended), the
    input padded with ``fill``, plus ``offset`` per output channel (int32). For an unsigned-data
    family (:mod:`.dot`) the input is shifted to uint8, and ``offset`` includes the −128·Σw that
    takes the shift off."""
    from tvm import te

    n, h, w, ic = (int(x) for x in data.shape)
    oco, kh, kw, ico, block, depth = (int(x) for x in weights.shape)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    oh, ow = _out_size(h, kh, sh, dh, top, bottom), _out_size(w, kw, sw, dw, left, right)
    # Data to pad (spatially, or to whole quads of channels) is converted in that pass; other
    # data is read as it is and, for an unsigned family, flipped in the register (a pass of its
    # own before a 1×1 convolution, ~10 % of a BlazeFace layer, measured)
    flip = dot.unsigned_data(family) and not any(padding) and ic % depth == 0
    src = data if flip else _pad_nhwc(data, padding, fill, "uint8" if dot.unsigned_data(family) else "int8", ico * depth)
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    rc = te.reduce_axis((0, ico * depth), "rc")

    def acc(b: Any, y: Any, x: Any, o: Any) -> Any:
        pixel = src[b, y * sh + ry * dh, x * sw + rx * dw, rc]
        pixel = (dot.flip_sign(pixel) if flip else pixel).astype("int32")
        return te.sum(pixel * weights[o // block, ry, rx, rc // depth, o % block, rc % depth].astype("int32"),
                      axis=[ry, rx, rc])

    out = te.compute((n, oh, ow, oco * block), acc, name="conv2d_nhwc_int8",
                     attrs={"edgetune.kernel": "conv2d_nhwc_int8", "edgetune.conv": signature, "edgetune.dot": family})
    out = _crop(out, out_channels)
    return _plus_channels(out, offset)


def _plus_channels(out: Any, per_channel: Any) -> Any:
    """``out`` plus a constant per channel (its last axis), or ``out`` itself for None."""
    from tvm import te

    if per_channel is None:
        return out
    return te.compute(out.shape, lambda *idx: out[idx] + per_channel[idx[-1]], name="bias")


def depthwise_conv2d_nhwc(data: Any, weights: Any, bias: Any = None, *, strides: Sequence[int], padding: Sequence[int],
                          dilation: Sequence[int], fill: int = 0, out_dtype: str = "float32") -> Any:
    """NHWC depthwise convolution (multiplier 1), weights [KH, KW, C'] (C' ≥ C: zero weights
    appended, :func:`depthwise_weights`; the input's channels zero-extended to match, the extra
    outputs cropped), plus ``bias`` per channel; an int8 input read as float32 and padded with
    ``fill``, the sums returned as ``out_dtype`` (as the packed kernel)."""
    from tvm import te

    n, h, w, c = (int(x) for x in data.shape)
    kh, kw, padded = (int(x) for x in weights.shape)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    oh, ow = _out_size(h, kh, sh, dh, top, bottom), _out_size(w, kw, sw, dw, left, right)
    src = _pad_nhwc(data, padding, fill, str(weights.dtype), padded)
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")

    def value(b: Any, y: Any, x: Any, ch: Any) -> Any:
        return te.sum(src[b, y * sh + ry * dh, x * sw + rx * dw, ch] * weights[ry, rx, ch], axis=[ry, rx])

    out = te.compute((n, oh, ow, padded), value, name="depthwise_conv2d_nhwc",
                     attrs={"edgetune.kernel": "depthwise_conv2d_nhwc"})
    return _cast(_plus_channels(_crop(out, c), bias), out_dtype)


def dense_packed(data: Any, weights: Any, features: int) -> Any:
    """``data[..., K] @ W[K, N]`` with W packed as [Np/NB, K, NB] (N padded to a multiple of NB)."""
    from tvm import te

    nbo, k, nb = (int(x) for x in weights.shape)
    lead = [int(x) for x in data.shape[:-1]]
    rk = te.reduce_axis((0, k), "rk")

    def value(*idx: Any) -> Any:
        *rows, j = idx
        return te.sum(data[(*rows, rk)] * weights[j // nb, rk, j % nb], axis=[rk])

    out = te.compute((*lead, nbo * nb), value, name="dense_packed", attrs={"edgetune.kernel": "dense_packed"})
    return _crop(out, features)


# ---------------------------------------------------------------- Winograd

# Lavin & Gray's F(2×2, 3×3) and F(4×4, 3×3) (interpolation points 0, ±1, ±2, ∞): Y = Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A
_WINOGRAD = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
         [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
         [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}
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
    """The variant an eligible 3×3 convolution gets where nothing was measured: Winograd on x86
    (measured here, AVX-512: 1.6–2.5× the direct kernel per layer, 1.3× on a YOLO-style model)
    and direct on ARM. On ARM Winograd's speed is unmeasured (no board here) and its cost is
    known: LLVM's AArch64 backend took ~2–3 s per Winograd kernel (squeezenet 2 s → 28 s to
    compile) and the transformed weights are 4× the 3×3 ones. Tuning measures both variants of
    every such layer on the board and keeps the faster (:func:`edgetune.tuning.tasks.choose_variants`)."""
    triple = str(target.attrs.get("mtriple", "")) if target.kind.name == "llvm" else ""
    return "direct" if triple.startswith(("aarch64", "arm")) else "winograd"


def winograd_tile(sig: str, oh: int, ow: int, ic: int, oc: int, geometry: Mapping[str, Any], choice: ConvChoice,
                  default: str = "winograd") -> int:
    """The Winograd output tile for this convolution (0: direct). ``auto`` (and a signature the
    ``choice`` mapping leaves out) means ``default``: see :func:`default_conv_variant`. Winograd
    is F(4,3) unless the map is smaller than 8, then F(2,3)."""
    wanted = choice.get(sig, "auto") if isinstance(choice, Mapping) else choice
    wanted = default if wanted == "auto" else wanted
    kernel = tuple(int(x) for x in sig.split(" k")[1].split(" ")[0].split("x"))
    if wanted == "direct" or not winograd_eligible(kernel, geometry["strides"], geometry["dilation"], ic, oc):
        return 0
    return 4 if min(oh, ow) >= 8 else 2


def winograd_weights(weights_ohwi: Any, tile: int, oci: int) -> Any:
    """U = G g Gᵀ for every (output, input) channel pair, packed [α², OCp/OCi, IC, OCi]."""
    import numpy as np

    g = np.array(_WINOGRAD[tile][1], np.float64)
    alpha = tile + 2
    u = np.einsum("ak,okjc,bj->abco", g, weights_ohwi.astype(np.float64), g)
    u = pad_axis(u.reshape(alpha * alpha, weights_ohwi.shape[3], weights_ohwi.shape[0]), 2, oci)
    return u.reshape(alpha * alpha, u.shape[1], -1, oci).transpose(0, 2, 1, 3).astype(np.float32).copy()


def _legalize_winograd(bb: Any, data: Any, weights: Any, geometry: Mapping[str, Any], tile: int, sig: str,
                       cpu: CpuFacts) -> Any:
    from tvm import relax

    oc = weights.shape[0]
    top, left, bottom, right = geometry["padding"]
    oh = int(data.ty.shape.values[1]) + top + bottom - 2
    ow = int(data.ty.shape.values[2]) + left + right - 2
    tiles = int(data.ty.shape.values[0]) * -(-oh // tile) * -(-ow // tile)
    oci, _rw = register_tile(oc, tiles, cpu)
    packed = winograd_weights(weights, tile, oci)
    return bb.call_te(conv2d_nhwc_winograd, data, relax.const(packed), padding=geometry["padding"], tile=tile,
                      out_channels=oc, signature=sig, primfunc_name_hint="conv2d_winograd")


def _switch(index: Any, values: list[Any]) -> Any:
    """``values[index]`` for a loop index the schedule unrolls (the selects then fold away)."""
    from tvm import tirx

    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = tirx.Select(index == k, values[k], out)
    return out


def _row_sums(matrix: Any, term: Callable[[int], Any]) -> list[Any]:
    """Per row of a constant matrix, Σ_k matrix[row][k] · term(k) over its non-zero entries."""
    rows = []
    for row in matrix:
        parts = [float(c) * term(k) for k, c in enumerate(row) if c != 0]
        rows.append(sum(parts[1:], parts[0]))
    return rows


def conv2d_nhwc_winograd(data: Any, weights: Any, padding: Sequence[int], tile: int, out_channels: int,
                         signature: str = "") -> Any:
    """3×3 stride-1 NHWC convolution as Winograd F(tile, 3): input tiles transformed (Bᵀ d B,
    separably), α² GEMMs over input channels against the transformed weights (packed like the
    direct kernel's), output tiles transformed back (Aᵀ m A), then cropped to the output."""
    from tvm import te

    bt, _g, at = _WINOGRAD[tile]
    alpha = tile + 2
    n, h, w, c = (int(x) for x in data.shape)
    _a2, oco, _c, oci = (int(x) for x in weights.shape)
    top, left, bottom, right = padding
    oh, ow = h + top + bottom - 2, w + left + right - 2
    nh, nw = -(-oh // tile), -(-ow // tile)
    tiles = n * nh * nw
    src = _pad_nhwc(data, (top, left, nh * tile + 2 - h - top, nw * tile + 2 - w - left))

    def corner(p: Any) -> tuple[Any, Any, Any]:
        return p // (nh * nw), (p % (nh * nw)) // nw * tile, p % nw * tile

    def input1(xi: Any, r2: Any, p: Any, ch: Any) -> Any:
        b, y0, x0 = corner(p)
        return _switch(xi, _row_sums(bt, lambda r1: src[b, y0 + r1, x0 + r2, ch]))

    t1 = te.compute((alpha, alpha, tiles, c), input1, name="winograd_input1")
    v = te.compute((alpha * alpha, tiles, c),
                   lambda e, p, ch: _switch(e % alpha, _row_sums(bt, lambda r2: t1[e // alpha, r2, p, ch])),
                   name="winograd_input")
    rc = te.reduce_axis((0, c), "rc")
    gemm = te.compute((alpha * alpha, tiles, oco * oci),
                      lambda e, p, o: te.sum(v[e, p, rc] * weights[e, o // oci, rc, o % oci], axis=[rc]),
                      name="winograd_gemm", attrs={"edgetune.kernel": "winograd_gemm", "edgetune.conv": signature})
    o1 = te.compute((tile, alpha, tiles, oco * oci),
                    lambda i, nu, p, o: _switch(i, _row_sums(at, lambda xi: gemm[xi * alpha + nu, p, o])),
                    name="winograd_output1")
    out_tiles = te.compute((tiles, tile, tile, oco * oci),
                           lambda p, i, j, o: _switch(j, _row_sums(at, lambda nu: o1[i, nu, p, o])),
                           name="winograd_output")

    def crop(b: Any, y: Any, x: Any, o: Any) -> Any:
        return out_tiles[(b * nh + y // tile) * nw + x // tile, y % tile, x % tile, o]

    return te.compute((n, oh, ow, out_channels), crop, name="winograd_crop")


# ---------------------------------------------------------------- the pipeline


def prepare(mod: Any, target: Any, lowering: Lowering) -> Any:
    """Inference decomposition and the layout change: the unfused graph of this lowering."""
    from tvm import relax

    steps = [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
    mod = nchw_conv2d_transpose(tvm().transform.Sequential(steps)(mod))
    if target.kind.name != "llvm":
        mod = int8_convolutions_in_float(mod)
    if lowering == NATIVE:
        return mod
    mod = fold_constants_numpy(sum_of_stack_to_add(drop_dropout(mod)))
    mod = relax.transform.CanonicalizeBindings()(mod)  # to_nhwc follows values through calls only
    if lowering.layout == "nhwc":
        mod = fold_constants_numpy(to_nhwc(mod))
        # transposes to NCHW that nothing uses would count as uses of the conv outputs
        mod = fold_affine_into_conv(relax.transform.DeadCodeElimination(["main"])(mod))
    if target.kind.name == "llvm":
        mod = int8_convolutions(mod, target)
    mod = narrowing_round_trips_dropped(mod)
    return _fold_rest(tvm().transform.Sequential([relax.transform.CanonicalizeBindings(),
                                                  relax.transform.DeadCodeElimination(["main"])])(mod))


_ELEMWISE, _BROADCAST, _INJECTIVE, _OUT_EWISE_FUSABLE = 0, 1, 2, 4  # TVM's OpPatternKind


def broadcasts_apart(mod: Any) -> Any:
    """A broadcast op that spreads a convolution's (or dense layer's) small output over a larger
    tensor — a squeeze-and-excitation gate times its feature map — is kept out of that kernel:
    FuseOps would fuse it as the kernel's epilogue, whose loops then run over the large shape and
    recompute every sum once per pixel (MobileNetV3's gates: 0.4–0.6 ms each, 1 GFLOP/s). The op is
    labelled injective for its call only (a copy of its PrimFunc), so it still fuses with what
    follows it."""
    import numpy as np
    from tvm import relax

    main = mod["main"]
    bound = {b.var: b.value for block in main.body.blocks for b in block.bindings}
    call_tir = tvm().ir.Op.get("relax.call_tir")

    def pattern(value: Any) -> int | None:
        if not isinstance(value, relax.Call) or not value.op.same_as(call_tir):
            return None
        func = mod[value.args[0]]
        return int(func.attrs["op_pattern"]) if func.attrs is not None and "op_pattern" in func.attrs else None

    def from_reduction(var: Any) -> bool:
        """``var`` is a convolution's / dense layer's output, or elementwise work on one."""
        while var in bound:
            p = pattern(bound[var])
            if p == _OUT_EWISE_FUSABLE:
                return True
            if p not in (_ELEMWISE, _BROADCAST):
                return False
            var = next((a for a in bound[var].args[1].fields if isinstance(a, relax.Var)), None)
        return False

    def shape(expr: Any) -> list[int] | None:
        if not _is_tensor(expr) or expr.ty.shape is None:
            return None
        try:
            return [int(d) for d in expr.ty.shape.values]
        except TypeError:  # a symbolic dimension
            return None

    def spread(small: Any, out: list[int]) -> bool:
        """``small`` is broadcast to ``out`` (size-1 axes stretched), not merely smaller (a pad)."""
        dims = shape(small)
        if dims is None or len(dims) > len(out) or int(np.prod(dims)) >= int(np.prod(out)):
            return False
        return all(d in (1, o) for d, o in zip(reversed(dims), reversed(out)))

    relabel = {}
    for var, value in bound.items():
        out = shape(value)
        if pattern(value) not in (_ELEMWISE, _BROADCAST) or out is None:
            continue
        if any(isinstance(a, relax.Var) and spread(a, out) and from_reduction(a) for a in value.args[1].fields):
            relabel[var] = (value, _INJECTIVE, "apart")
    return _relabel(mod, relabel)


def table_lookups_elementwise(mod: Any) -> Any:
    """Lookups in a constant 1-D table (``take(table, index)``, :func:`.quantized.int8_tables`)
    labelled elementwise, for their call only: TVM labels ``take`` injective (its output is not
    a function of the same element of its index in general), so FuseOps kept each lookup out of
    the convolution it follows — a kernel of its own, a pass over memory and a dispatch per
    table. Over a constant table indexed by a tensor of the output's shape it is elementwise."""
    from tvm import relax

    main = mod["main"]
    call_tir = tvm().ir.Op.get("relax.call_tir")
    relabel = {}
    for block in main.body.blocks:
        for b in block.bindings:
            value = b.value
            if not isinstance(value, relax.Call) or not value.op.same_as(call_tir):
                continue
            args = list(value.args[1].fields)
            func = mod[value.args[0]]
            if len(args) != 2 or not value.args[0].name_hint.startswith("take") or func.attrs is None:
                continue
            table = _const_array(args[0])
            if (table is not None and table.ndim == 1 and int(func.attrs.get("op_pattern", _ELEMWISE)) != _ELEMWISE
                    and _is_tensor(args[1]) and _is_tensor(value)
                    and [int(d) for d in args[1].ty.shape.values] == [int(d) for d in value.ty.shape.values]):
                relabel[b.var] = (value, _ELEMWISE, "lookup")
    return _relabel(mod, relabel)


def _relabel(mod: Any, relabel: dict[Any, tuple[Any, int, str]]) -> Any:
    """``mod`` with the call_tir bound to each variable of ``relabel`` calling a copy of its
    PrimFunc with another FuseOps pattern (``relabel[var] = (value, pattern, suffix)``)."""
    from tvm import relax

    if not relabel:
        return mod

    @relax.expr_functor.mutator
    class _Relabel(relax.PyExprMutator):
        def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
            if binding.var not in relabel:
                return super().visit_var_binding_(binding)
            value, op_pattern, suffix = relabel[binding.var]
            gv = value.args[0]
            copy = self.builder_.add_func(mod[gv].with_attr("op_pattern", op_pattern), f"{gv.name_hint}_{suffix}")
            new = relax.Call(value.op, [copy, *(self.visit_expr(a) for a in value.args[1:])], value.attrs, value.ty_args)
            emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
            self.set_var_remap(binding.var, emit(new))
            return None

    mutator = _Relabel(mod)
    mutator.builder_.update_func(mod.get_global_var("main"), mutator.visit_expr(mod["main"]))
    return mutator.builder_.get()


_FUSES_AFTER = {"relax.add", "relax.subtract", "relax.multiply", "relax.maximum", "relax.minimum", "relax.clip",
                "relax.right_shift", "relax.left_shift", "relax.astype", "relax.take"}


def narrowing_round_trips_dropped(mod: Any) -> Any:
    """``astype(astype(clip(x, lo, hi), int8), int32)`` as ``astype(clip(x, lo, hi), int32)``
    where ``[lo, hi]`` lies inside the narrow type, so the narrow cast cannot wrap: the same
    values. Requantized int8 tensors that an XNNPACK add, an int8 ReLU or a lookup widens again
    are this (a cast down and up per element in every such epilogue, ~13 % of a 64×64×24 int8
    layer's time). Only where the clipped and the int8 tensor have no other reader and the
    widened one feeds elementwise arithmetic, i.e. where both casts land in one kernel: else the
    producing kernel hands over the float tensor (4× the bytes) to a cast kernel of its own
    (seen on BlazeFace, whose int8 residuals are also cast again for the next block)."""
    import numpy as np
    from tvm import relax

    def bound(value: Any) -> float | None:  # clip's bound: a PrimValue or an immediate
        while hasattr(value, "value"):
            value = value.value
        return float(value) if isinstance(value, (int, float)) else None

    def dropped(func: Any) -> dict[Any, Any]:
        """var → the clipped float var its widening cast reads instead."""
        values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
        users = {var: [_op_name(v) if v is not None else "return" for v in readers]
                 for var, readers in _readers(func).items()}
        out = {}
        for var, value in values.items():
            narrow = values.get(value.args[0]) if _op_name(value) == "relax.astype" else None
            clip = values.get(narrow.args[0]) if _op_name(narrow) == "relax.astype" else None
            if _op_name(clip) != "relax.clip" or not users.get(value.args[0]) == users.get(narrow.args[0]) == ["relax.astype"]:
                continue
            if not users.get(var) or not set(users[var]) <= _FUSES_AFTER:
                continue
            wide, small = str(value.ty.dtype), str(narrow.ty.dtype)
            if small not in ("int8", "uint8", "int16") or wide not in ("int16", "int32", "int64"):
                continue
            lo, hi, info, into = bound(clip.args[1]), bound(clip.args[2]), np.iinfo(small), np.iinfo(wide)
            if lo is not None and hi is not None and info.min <= lo <= hi <= info.max and into.min <= info.min and into.max >= info.max:
                out[var] = narrow.args[0]
        return out

    def rewrite(_mod: Any, func: Any) -> Any:
        drop = dropped(func)
        if not drop:
            return func

        @relax.expr_functor.mutator
        class _RoundTrips(relax.PyExprMutator):
            def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
                if binding.var not in drop:
                    return super().visit_var_binding_(binding)
                new = relax.op.astype(self.visit_expr(drop[binding.var]), str(binding.value.ty.dtype))
                emit = self.builder_.emit if isinstance(binding.var, relax.DataflowVar) else self.builder_.emit_output
                self.set_var_remap(binding.var, emit(new))
                return None

        return _RoundTrips(_mod).visit_expr(func)

    return _map_functions(mod, rewrite)


def _fold_rest(mod: Any) -> Any:
    """TVM's FoldConstant, only when calls on constants are left (e.g. a TFLite ``dequantize``
    of int8 weights): the pass spent seconds on ResNet-50 even with nothing to fold."""
    from tvm import relax

    found = []

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and not found:
            tensors = [a for a in expr.args if _is_tensor(a)]
            if tensors and all(_const_array(a) is not None for a in tensors):
                found.append(expr)

    for _gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return relax.transform.FoldConstant()(mod) if found else mod


def fuse(mod: Any, target: Any, lowering: Lowering, conv_choice: ConvChoice = "auto") -> Any:
    """The fused module of ``lowering``: what tuning extracts tasks from and what the build
    schedules (records apply to exactly these PrimFuncs). ``conv_choice`` picks direct or
    Winograd kernels for 3×3 stride-1 convolutions (see :func:`winograd_tile`)."""
    from tvm import relax

    prepared = prepare(mod, target, lowering)
    custom = packed_legalize_map(target, conv_choice) if lowering.pack else None
    with target:
        legal = tvm().transform.Sequential([
            relax.backend.DispatchSampling(),
            relax.backend.DispatchSortScan(),
            relax.transform.LegalizeOps(customize_legalize_map=custom),
            relax.transform.AnnotateTIROpPattern(),
        ])(prepared)
        if lowering == NATIVE:  # exactly TVM's zero pipeline: records made with it must match
            legal = relax.transform.FoldConstant()(legal)
        else:
            legal = _fold_rest(broadcasts_apart(table_lookups_elementwise(legal)))
        return tvm().transform.Sequential([relax.transform.FuseOps(), relax.transform.FuseTIR()])(legal)
