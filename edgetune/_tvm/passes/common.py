"""What the graph passes share: walking a module's functions, reading bindings and constants."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core import tvm


def map_functions(mod: Any, fn: Callable[[Any, Any], Any]) -> Any:
    from tvm import relax

    out = mod.shallow_copy() if hasattr(mod, "shallow_copy") else tvm().IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out[gv] = fn(mod, func)
    return out


def readers_of(func: Any) -> dict[Any, list[Any]]:
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


def op_name(expr: Any) -> str:
    from tvm import relax

    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm().ir.Op):
        return str(expr.op.name)
    return ""


def const_array(expr: Any) -> Any | None:
    """The numpy value of a Relax constant, else None."""
    if type(expr).__name__ in ("GenericConst", "Constant") and hasattr(expr, "value"):
        return expr.value.numpy()
    return None


def is_tensor(expr: Any) -> bool:
    from tvm import relax

    return isinstance(getattr(expr, "ty", None), relax.TensorType)


def const_size(expr: Any) -> int:
    """How many elements a constant holds (-1: not a constant)."""
    value = const_array(expr)
    return -1 if value is None else int(value.size)


def rank(expr: Any) -> int:
    return int(getattr(expr.ty, "ndim", -1))


def ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def bound_value(mutator: Any, expr: Any) -> Any:
    """What a variable is bound to in the function ``mutator`` rewrites (``expr`` itself if not
    a variable)."""
    from tvm import relax

    return mutator.lookup_binding(expr) if isinstance(expr, relax.Var) else expr


def relabel(mod: Any, relabel: dict[Any, tuple[Any, int, str]]) -> Any:
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
