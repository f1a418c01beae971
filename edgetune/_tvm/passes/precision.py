"""Half-precision packages: a float32 graph computed in float16 (``--precision fp16``).

:class:`InHalf` rewrites every float32 tensor of a Relax function as float16 — constants
(weights: half the library), every operator's result, the ``out_dtype`` of convolutions and
matmuls — with the function's inputs cast on entry and its outputs cast back on exit, so a
package keeps the model's own dtypes at its boundary. The kernels then compute in float16
(8 lanes a NEON register: ``fmla v.8h``; tensor cores' operands on CUDA).

Some operators lose too much in float16 (:data:`IN_FLOAT`, :data:`ROW_OPS`): sums over many
values (a global pooling's mean over 784 pixels carries each value's ~3 decimal digits through
every partial sum), variances, products, cumulative sums, softmax and the norms' statistics.
Where edgetune's kernel for such a call keeps its sums in float32 itself (``keeps_half``: the row
kernels of :mod:`..kernels.rows`, sums and means over float16 tensors) the call stays float16 —
no separate conversion pass over the tensor —, elsewhere it runs in float32 between casts.

Constants beyond float16's range (±65504: an attention mask of −3.4e38) are clipped to it, so
a mask stays a large negative number instead of −inf; a model whose values really leave the
range is caught by the reference check, which compares with the float32 reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .common import module_pass, op_name, relax

HALF, FLOAT = "float16", "float32"
HALF_MAX = float(np.finfo(np.float16).max)

# operators computed in float32 between casts (their inputs cast up, their result down)
IN_FLOAT = frozenset({
    "relax.mean", "relax.sum", "relax.variance", "relax.std", "relax.prod", "relax.cumsum", "relax.cumprod",
    "relax.nn.log_softmax", "relax.nn.group_norm", "relax.nn.instance_norm", "relax.nn.batch_norm",
    "relax.nn.adaptive_avg_pool1d", "relax.nn.adaptive_avg_pool2d", "relax.nn.adaptive_avg_pool3d",
})
# ... and these, which stay float16 where a kernel of edgetune's keeps its sums in float32 (``keeps_half``)
ROW_OPS = frozenset({"relax.nn.softmax", "relax.nn.layer_norm", "relax.nn.rms_norm"})
# attributes that name a result's dtype
DTYPE_ATTRS = ("out_dtype", "dtype")


def _is_float32(sinfo: Any) -> bool:
    return isinstance(sinfo, relax.TensorType) and str(sinfo.dtype) == FLOAT


def _half_const(value: Any) -> Any:
    array = value.value.numpy()
    return relax.const(np.clip(array, -HALF_MAX, HALF_MAX).astype(np.float16))


def _with_dtype(attrs: Any, dtype: str) -> Any:
    """``attrs`` with each dtype field that says float32 saying ``dtype`` instead."""
    from tvm import ir

    info = type(attrs).__tvm_ffi_type_info__
    fields = {f.name: getattr(attrs, f.name) for f in info.fields}
    fields = {k: (dtype if k in DTYPE_ATTRS and str(v) == FLOAT else v) for k, v in fields.items()}
    return ir.make_node(info.type_key, **fields)


def _names_float32(attrs: Any) -> bool:
    return attrs is not None and any(str(getattr(attrs, k, "")) == FLOAT for k in DTYPE_ATTRS if hasattr(attrs, k))


@relax.expr_functor.mutator
class _Half(relax.PyExprMutator):
    def __init__(self, mod: Any, keeps_half: Callable[[Any], bool]):
        super().__init__(mod)
        self.keeps_half = keeps_half
        self.params: dict[Any, Any] = {}  # a float32 parameter → its float16 cast (emitted once)
        self.pending: list[Any] = []
        self.count = 0

    def visit_function_(self, func: Any) -> Any:  # noqa: N802 — TVM's visitor naming
        self.pending = [p for p in func.params if _is_float32(p.ty)]
        self.params = {}
        return super().visit_function_(func)

    def _emit_param_casts(self) -> None:
        """The float16 casts of the function's float32 inputs, before its first binding (as
        block outputs, so every later block reads them)."""
        for p in self.pending:
            cast = relax.op.astype(p, HALF)
            self.params[p] = (self.builder_.emit_output(cast) if self.builder_.current_block_is_dataflow()
                              else self.builder_.emit(cast))
        self.pending = []

    def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
        self._emit_param_casts()
        super().visit_var_binding_(binding)

    def visit_match_cast_(self, binding: Any) -> None:  # noqa: N802
        self._emit_param_casts()
        super().visit_match_cast_(binding)

    def visit_var_(self, var: Any) -> Any:  # noqa: N802
        return self.params.get(var, super().visit_var_(var))

    def visit_generic_const_(self, const: Any) -> Any:  # noqa: N802
        return _half_const(const) if _is_float32(const.ty) else const

    def visit_call_(self, call: Any) -> Any:  # noqa: N802
        new = super().visit_call_(call)
        name = op_name(new)
        if not name:
            return new
        if name in ("relax.call_tir", "relax.call_dps_packed", "relax.call_pure_packed"):
            return self._float_kernel(new)
        if name == "relax.astype" and str(new.attrs.dtype) == FLOAT:
            source = new.args[0]
            if str(getattr(source.ty, "dtype", "")) == HALF:
                return source  # a float32 → float32 cast of the original: nothing now
            return relax.Call(new.op, new.args, _with_dtype(new.attrs, HALF), new.ty_args)
        if (name in IN_FLOAT or name in ROW_OPS) and not self.keeps_half(new):
            self.count += 1
            return self._in_float(new)
        if _names_float32(new.attrs):
            return relax.Call(new.op, new.args, _with_dtype(new.attrs, HALF), new.ty_args)
        return new

    def _up(self, arg: Any) -> Any:
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([self._up(f) for f in arg.fields])
        if isinstance(getattr(arg, "ty", None), relax.TensorType) and str(arg.ty.dtype) == HALF:
            return self.builder_.emit(relax.op.astype(arg, FLOAT))
        return arg

    def _in_float(self, call: Any) -> Any:
        """``call`` on float32 copies of its float16 arguments, its result cast back."""
        attrs = call.attrs
        out = self.builder_.emit(relax.Call(call.op, [self._up(a) for a in call.args], attrs, call.ty_args))
        return self._down(out)

    def _down(self, value: Any) -> Any:
        if _is_float32(value.ty):
            return relax.op.astype(value, HALF)
        if isinstance(value.ty, relax.TupleType):
            return relax.Tuple([self._down(self.builder_.emit(relax.TupleGetItem(value, i)))
                                for i in range(len(value.ty.fields))])
        return value

    def _float_kernel(self, call: Any) -> Any:
        """A kernel already lowered (its PrimFunc's dtypes are fixed) on float32 copies of its
        arguments, its float32 results cast to float16."""
        args = [call.args[0], self._up(call.args[1]), *call.args[2:]]
        return self._down(self.builder_.emit(relax.Call(call.op, args, call.attrs, call.ty_args)))


def _cast_outputs(func: Any, original: Any) -> Any:
    """``func`` (rewritten) returning float32 where ``original`` did: a last block of casts."""
    body = func.body
    result = body.body
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    wanted = list(original.ret_ty.fields) if isinstance(result, relax.Tuple) else [original.ret_ty]
    bindings, outs = [], []
    for n, (field, want) in enumerate(zip(fields, wanted)):
        if _is_float32(want) and str(getattr(field.ty, "dtype", "")) == HALF:
            var = relax.Var(f"output{n}", relax.TensorType(field.ty.shape, FLOAT))
            bindings.append(relax.VarBinding(var, relax.op.astype(field, FLOAT)))
            field = var
        outs.append(field)
    if not bindings:
        return func
    new_result = relax.Tuple(outs) if isinstance(result, relax.Tuple) else outs[0]
    seq = relax.SeqExpr([*body.blocks, relax.BindingBlock(bindings)], new_result)
    return relax.Function(func.params, seq, original.ret_ty, func.is_pure, func.attrs)


@module_pass(opt_level=0)
class InHalf:
    """The pass (see the module docstring). ``keeps_half(call)``: whether the kernel a sum-like
    call gets keeps its sums in float32 itself (the call then stays float16); ``count``:
    operators the last run computed in float32 between casts."""

    def __init__(self, keeps_half: Callable[[Any], bool] = lambda _call: False):
        self.keeps_half = keeps_half
        self.count = 0

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        mutator = _Half(mod, self.keeps_half)
        originals = {gv: f for gv, f in mod.functions_items() if isinstance(f, relax.Function)}
        for gv, func in originals.items():
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
        out = mutator.builder_.get()
        for gv, func in originals.items():
            out[gv] = _cast_outputs(out[gv], func)
        self.count = mutator.count
        return relax.transform.Normalize()(out)
