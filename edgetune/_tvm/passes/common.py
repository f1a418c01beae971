"""What the graph passes share: TVM's Relax (passes are imported by builds only, so they import
TVM when they load), the pass shapes edgetune's rewrites take, and readers of bindings and
constants."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core import copy_module, tvm, tvm_module

relax = tvm_module("relax")
module_pass = tvm().transform.module_pass

FLOATS = ("float32", "float16")  # what edgetune's float kernels compute in (float16: --precision fp16)

# TVM's OpPatternKind: what FuseOps reads in a PrimFunc's "op_pattern"
ELEMWISE, BROADCAST, INJECTIVE, OUT_EWISE_FUSABLE, OPAQUE = 0, 1, 2, 4, 8


def map_functions(mod: Any, fn: Callable[[Any, Any], Any]) -> Any:
    """``mod`` with every Relax function replaced by ``fn(mod, function)``."""
    out = copy_module(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out[gv] = fn(mod, func)
    return out


def mutate_functions(mod: Any, mutator: Any) -> Any:
    """The module of ``mutator``'s builder (a ``PyExprMutator`` made over ``mod``) with every
    Relax function of ``mod`` visited by it: the kernels its rewrites add (``call_te``) stay in
    the module, where :func:`map_functions` keeps only the rewritten functions."""
    for gv, func in [(gv, f) for gv, f in mod.functions_items() if isinstance(f, relax.Function)]:
        mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


class MutatorPass:
    """A module pass that runs ``mutator(mod)`` over every Relax function of the module.
    Subclasses set ``mutator`` (a ``PyExprMutator`` class) and are decorated with
    :func:`module_pass`."""

    mutator: Any

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        return map_functions(mod, lambda m, f: self.mutator(m).visit_expr(f))


def emit_like(builder: Any, var: Any, expr: Any) -> Any:
    """Bind ``expr`` as ``var`` was bound: an output of the dataflow block when ``var`` is one
    (a non-dataflow var inside a dataflow block), else a plain binding."""
    output = builder.current_block_is_dataflow() and not isinstance(var, relax.DataflowVar)
    return builder.emit_output(expr) if output else builder.emit(expr)


def bindings_of(func: Any) -> dict[Any, Any]:
    """Each variable bound in ``func``'s body → the value bound to it (every block's bindings)."""
    return {b.var: b.value for block in func.body.blocks for b in block.bindings}


def readers_of(func: Any) -> dict[Any, list[Any]]:
    """Each variable of ``func``'s body → the values of the bindings that read it (a call's
    arguments, call_tir's tuple of them included); ``None`` for the function's result."""
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


def wrapped_int32(values: Any) -> Any:
    """``values`` (integers, numpy) as int32 arithmetic holds them: modulo 2³², in [−2³¹, 2³¹).
    The runtimes fold ``bias − zx·Σw`` into their int32 accumulators so (XNNPACK computes it
    on ``uint32``; MLAS likewise), and every integer kernel here adds in int32: a sum that
    leaves int32 and comes back (a channel's −2³¹ bias plus its products) is theirs exactly."""
    import numpy as np

    return (np.asarray(values, np.int64) + 2**31) % 2**32 - 2**31


def op_name(expr: Any) -> str:
    """The operator ``expr`` calls (``relax.add``), or "" when it is not an operator call."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm().ir.Op):
        return str(expr.op.name)
    return ""


def const_array(expr: Any) -> Any | None:
    """The numpy value of a Relax constant, else None."""
    if isinstance(expr, tvm().ir.Constant) and isinstance(expr.value, tvm().runtime.Tensor):
        return expr.value.numpy()
    return None  # not a constant, or an immediate (IntImm, FloatImm)


def immediate(value: Any) -> float | None:
    """The number of an immediate (IntImm, FloatImm) or of a PrimValue holding one — a clip's
    bound —, else None."""
    while hasattr(value, "value"):
        value = value.value
    return float(value) if isinstance(value, (int, float)) else None


def is_tensor(expr: Any) -> bool:
    return isinstance(getattr(expr, "ty", None), relax.TensorType)


def const_size(expr: Any) -> int:
    """How many elements a constant holds (-1: not a constant)."""
    value = const_array(expr)
    return -1 if value is None else int(value.size)


def rank(expr: Any) -> int:
    return int(getattr(expr.ty, "ndim", -1))


def ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def static_shape(expr: Any) -> list[int] | None:
    """The shape of a tensor expression when every dimension is a constant, else None."""
    shape = getattr(expr.ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None or not all(hasattr(v, "value") for v in values):
        return None
    return [int(v.value) for v in values]


def last_dim(expr: Any) -> int | None:
    """The last dimension of a tensor expression when it is a constant (the others may be
    symbolic: a range of lengths), else None."""
    values = getattr(getattr(expr.ty, "shape", None), "values", None)
    if not values or not hasattr(values[-1], "value"):
        return None
    return int(values[-1].value)


def bound_value(mutator: Any, expr: Any) -> Any:
    """What a variable is bound to in the function ``mutator`` rewrites (``expr`` itself if not
    a variable or not bound there)."""
    if not isinstance(expr, relax.Var):
        return expr
    bound = mutator.lookup_binding(expr)
    return expr if bound is None else bound


@relax.expr_functor.mutator
class _Relabel(relax.PyExprMutator):
    """Each call_tir bound to a variable of ``labels`` calls a copy of its PrimFunc carrying
    another FuseOps pattern."""

    def __init__(self, mod: Any, labels: dict[Any, tuple[Any, int, str]]):
        super().__init__(mod)
        self.mod, self.labels = mod, labels

    def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802 — TVM's visitor naming
        if binding.var not in self.labels:
            return super().visit_var_binding_(binding)
        value, op_pattern, suffix = self.labels[binding.var]
        gv = value.args[0]
        copy = self.builder_.add_func(self.mod[gv].with_attr("op_pattern", op_pattern), f"{gv.name_hint}_{suffix}")
        new = relax.Call(value.op, [copy, *(self.visit_expr(a) for a in value.args[1:])], value.attrs, value.ty_args)
        self.set_var_remap(binding.var, emit_like(self.builder_, binding.var, new))
        return None


def relabel(mod: Any, labels: dict[Any, tuple[Any, int, str]]) -> Any:
    """``mod`` with the call_tir bound to each variable of ``labels`` calling a copy of its
    PrimFunc with another FuseOps pattern (``labels[var] = (value, pattern, suffix)``)."""
    if not labels:
        return mod
    mutator = _Relabel(mod, labels)
    mutator.builder_.update_func(mod.get_global_var("main"), mutator.visit_expr(mod["main"]))
    return mutator.builder_.get()
