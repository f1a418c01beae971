"""NHWC activations, and per-channel affine chains folded into convolution weights."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import copy_module
from .common import (
    MutatorPass,
    const_array,
    const_size,
    emit_like,
    ints,
    is_tensor,
    module_pass,
    mutate_functions,
    op_name,
    rank,
    readers_of,
    relax,
)

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


@relax.expr_functor.mutator
class _NHWC(relax.PyExprMutator):
    def __init__(self, mod: Any):
        super().__init__(mod)
        self.nhwc: dict[Any, Any] = {}  # new NCHW var → the same value in NHWC

    def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
        value = binding.value
        if not op_name(value):
            return super().visit_var_binding_(binding)
        call = self.visit_expr(value)
        converted = self._convert(call)
        if converted is None:
            return super().visit_var_binding_(binding)
        new_nhwc, plain = converted
        if plain:  # the result has no layout (e.g. mean over H, W without keepdims)
            self.set_var_remap(binding.var, emit_like(self.builder_, binding.var, new_nhwc))
            return None
        nhwc_var = self.builder_.emit(new_nhwc)
        back = emit_like(self.builder_, binding.var, relax.op.permute_dims(nhwc_var, TO_NCHW))
        self.nhwc[back] = nhwc_var
        self.set_var_remap(binding.var, back)
        return None

    def _in_nhwc(self, arg: Any) -> Any:
        if arg in self.nhwc:
            return self.nhwc[arg]
        ty = arg.ty
        rank = getattr(ty, "ndim", -1)
        if not 0 <= rank <= 4:
            raise _NotConvertibleError
        value = const_array(arg)
        if value is not None and value.size == 1:
            # rank 0: legalization makes it an immediate; as (1,1,1,1) it was a buffer the
            # kernel loads, under a bounds predicate a masked gather per vector (measured)
            return relax.const(value.reshape(()), str(ty.dtype))
        # broadcast: (C,1,1), (1,), (); a symbolic extent (a range of lengths) as it is
        shape = [1] * (4 - rank) + [int(d) if hasattr(d, "value") else d for d in ty.shape.values]
        if value is not None:  # permuted here: FoldConstant would compile a kernel per constant
            return relax.const(value.reshape(shape).transpose(TO_NHWC).copy(), str(ty.dtype))
        if rank < 4:
            arg = relax.op.reshape(arg, shape)
        return relax.op.permute_dims(arg, TO_NHWC)

    def _convert(self, call: Any) -> tuple[Any, bool] | None:
        name = str(call.op.name)
        tensors = [a for a in call.args if is_tensor(a)]
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
                if not all(rank(a) <= 4 for a in tensors) or rank(call) != 4:
                    return None
                args = [self._in_nhwc(a) if is_tensor(a) else a for a in call.args]
                return relax.Call(call.op, args, call.attrs), False
            if name in _REDUCE and call.attrs.axis is not None and rank(call.args[0]) == 4:
                return self._reduce(call)
            if name == "relax.nn.pad" and rank(call) == 4 and str(call.attrs.pad_mode) == "constant":
                w = ints(call.attrs.pad_width)  # (before, after) per NCHW axis
                widths = [p for axis in TO_NHWC for p in w[2 * axis:2 * axis + 2]]
                return relax.op.nn.pad(self._in_nhwc(call.args[0]), widths, pad_value=float(call.attrs.pad_value)), False
            if name == "relax.take" and is_table(call) and rank(call) == 4:  # a lookup per element
                return relax.op.take(call.args[0], self._in_nhwc(call.args[1]), axis=0, mode=str(call.attrs.mode)), False
            if name in _QUANTIZE and rank(call) == 4 and all(rank(a) == 0 or const_size(a) == 1 for a in call.args[1:]):
                op = relax.op.quantize if name == "relax.quantize" else relax.op.dequantize  # per tensor: no axis to move
                return op(self._in_nhwc(call.args[0]), *call.args[1:], axis=-1, out_dtype=str(call.attrs.out_dtype)), False
        except _NotConvertibleError:
            return None
        return None

    def _conv(self, call: Any) -> tuple[Any, bool] | None:
        a = call.attrs
        if not (a.data_layout == "NCHW" and a.kernel_layout == "OIHW" and a.out_layout == "NCHW"):
            return None
        value = const_array(call.args[1])
        weight = (relax.op.permute_dims(call.args[1], TO_NHWC) if value is None  # OIHW → OHWI
                  else relax.const(value.transpose(TO_NHWC).copy(), str(call.args[1].ty.dtype)))
        out = relax.op.nn.conv2d(self._in_nhwc(call.args[0]), weight, strides=ints(a.strides),
                                 padding=ints(a.padding), dilation=ints(a.dilation), groups=int(a.groups),
                                 data_layout="NHWC", kernel_layout="OHWI", out_layout="NHWC",
                                 out_dtype=a.out_dtype or None)
        return out, False

    def _concat(self, call: Any) -> tuple[Any, bool] | None:
        parts = call.args[0]
        fields = list(getattr(parts, "fields", []))
        if not fields or not any(f in self.nhwc for f in fields) or rank(call) != 4:
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


@module_pass(opt_level=0)
class ToNHWC(MutatorPass):
    """Run NCHW convolutions (and the ops around them that do not care about layout) in NHWC
    with OHWI weights. Transposes appear only where an op needs NCHW (graph inputs/outputs,
    reshapes); constant operands are permuted once and folded later."""

    mutator = _NHWC


def is_table(call: Any) -> bool:
    """``call`` is ``take(table, index, axis=0)`` with a constant 1-D table: an elementwise
    lookup (:class:`.int8_elementwise.Int8Tables`)."""
    table = const_array(call.args[0])
    return table is not None and table.ndim == 1 and call.attrs.axis is not None and int(call.attrs.axis) == 0


class _NotConvertibleError(Exception):
    """An operand this pass cannot express in NHWC: keep the op in NCHW."""


def _pool(call: Any, data: Any) -> Any:
    a = call.attrs
    make = relax.op.nn.max_pool2d if str(call.op.name) == "relax.nn.max_pool2d" else relax.op.nn.avg_pool2d
    return make(data, pool_size=ints(a.pool_size), strides=ints(a.strides), padding=ints(a.padding),
                dilation=ints(a.dilation), ceil_mode=bool(a.ceil_mode), count_include_pad=bool(a.count_include_pad),
                layout="NHWC", out_layout="NHWC")


_AFFINE = frozenset(("relax.add", "relax.subtract", "relax.multiply", "relax.divide"))


def _affine_chains(func: Any) -> dict[Any, tuple[Any, Any, Any]]:
    """Chain end var → (conv call, folded weights, bias) for every foldable chain."""
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
        if op_name(value) in _AFFINE and isinstance(value.args[0], relax.Var):
            consumer.setdefault(value.args[0], var)
    chains = {}
    for var in order:
        conv = bindings[var]
        if op_name(conv) != "relax.nn.conv2d" or conv.attrs.kernel_layout != "OHWI" or conv.attrs.data_layout != "NHWC":
            continue
        weights = const_array(conv.args[1])
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
            name = op_name(op)
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

    value = const_array(expr)
    if value is None or value.dtype != np.float32 or value.size not in (1, channels):
        return None
    if value.size == channels and (value.ndim == 0 or value.shape[-1] != channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float32)


@relax.expr_functor.mutator
class _FoldAffine(relax.PyExprMutator):
    def __init__(self, mod: Any, chains: dict[Any, tuple[Any, Any, Any]]):
        super().__init__(mod)
        self.chains = chains

    def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
        if binding.var not in self.chains:
            return super().visit_var_binding_(binding)
        conv, weights, bias = self.chains[binding.var]
        a = conv.attrs
        new = relax.op.nn.conv2d(self.visit_expr(conv.args[0]), relax.const(weights), strides=ints(a.strides),
                                 padding=ints(a.padding), dilation=ints(a.dilation), groups=int(a.groups),
                                 data_layout="NHWC", kernel_layout="OHWI", out_layout="NHWC",
                                 out_dtype=a.out_dtype or None)
        out = self.builder_.emit(new)
        value = relax.op.add(out, relax.const(bias.reshape(1, 1, 1, -1)))
        self.set_var_remap(binding.var, emit_like(self.builder_, binding.var, value))
        return None


@module_pass(opt_level=0)
class FoldAffineIntoConv:
    """``conv2d → (add | subtract | multiply | divide by per-channel constants)…`` becomes one
    conv2d with scaled weights plus one bias add: a decomposed batch norm's four passes over
    the output become one (NHWC convolutions with constant OHWI weights, each intermediate used
    only by the next op)."""

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function):
                continue
            chains = _affine_chains(func)
            if chains:
                out = copy_module(mod)
                out[gv] = _FoldAffine(mod, chains).visit_expr(mod[gv])
                mod = relax.transform.DeadCodeElimination(["main"])(out)
        return mod


@relax.expr_functor.mutator
class _PadsApart(relax.PyExprMutator):
    def __init__(self, mod: Any, single: set[Any]):
        super().__init__(mod)
        self.single, self.count = single, 0

    def visit_call_(self, op: Any) -> Any:  # noqa: N802 — TVM's visitor naming
        new = super().visit_call_(op)
        if op_name(new) != "relax.nn.conv2d" or op.args[0] not in self.single:
            return new
        a = new.attrs
        x = new.args[0]
        shape = getattr(getattr(x.ty, "shape", None), "values", None)
        if (a.data_layout != "NHWC" or not any(int(p) for p in a.padding) or shape is None or len(shape) != 4
                or not hasattr(shape[3], "value") or str(x.ty.dtype) not in ("float32", "float16")
                or const_array(new.args[1]) is None):
            return new
        channels = int(shape[3].value)
        depthwise = int(a.groups) == channels > 1
        if not depthwise and not (int(a.groups) == 1 and channels <= FIRST_LAYER_CHANNELS):
            return new
        top, left, bottom, right = (int(p) for p in a.padding)
        padded = self.builder_.emit(relax.op.nn.pad(x, [0, 0, top, bottom, left, right, 0, 0]))
        self.count += 1
        return relax.op.nn.conv2d(padded, new.args[1], strides=a.strides, padding=[0, 0, 0, 0], dilation=a.dilation,
                                  groups=a.groups, data_layout=a.data_layout, kernel_layout=a.kernel_layout,
                                  out_layout=a.out_layout, out_dtype=a.out_dtype)


# a convolution over at most this many channels (an image's first layer) pads apart too
FIRST_LAYER_CHANNELS = 4


@module_pass(opt_level=0)
class PadsApart:
    """A depthwise convolution's zero padding, and a first layer's (≤ 4 input channels), as a
    pad of its own where its input is another kernel's output read by nothing else: after
    scheduling, that kernel writes its output into the padded tensor (:mod:`.padded_outputs`),
    where the convolution made a padded copy of it in a pass of its own (AArch64: the Arm
    schedules read a padded copy). By the Pi 5 estimate, a 3×3 stride-2 depthwise layer over
    112² × 64 in float16 spent 0.15 of its 0.36 M cycles copying; MobileNetV3-style fp16
    18.15 → 17.71 M cycles."""

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        main = mod["main"]
        single = {var for var, readers in readers_of(main).items()
                  if len(readers) == 1 and None not in readers and var not in set(main.params)}
        mutator = _PadsApart(mod, single)
        return mutate_functions(mod, mutator)
