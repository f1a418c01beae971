"""An ONNX ``Loop`` that stays a loop: its trip count or its exit is decided by the data (loops
with a trip count that is constant once shapes are fixed are unrolled at import,
:mod:`edgetune.importer.onnx_loops`). TVM 0.27's frontend has no ``Loop``; Relax has no loop
construct either, but its VM runs recursion, so the loop becomes two Relax functions beside
``main``, as ``If`` stays a ``relax.If``:

* ``body``: the loop body, converted by TVM's importer like a branch — parameters the iteration
  number, the condition, the carried values and every outer tensor the body reads; returns the
  new condition and the new carried values;
* ``loop(i, m, cond, carried…, outer…)``: ``if i < m and cond: loop(i + 1, m, body(…))`` else
  the carried values — which ``main`` calls once.

Scan outputs (a value per iteration, stacked) have no fixed shape when the iteration count is
decided at run time: such a loop is refused, naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

INT64_MAX = np.iinfo(np.int64).max


def convert_loop(importer: Any, inputs: list[Any], attrs: dict[str, Any]) -> Any:
    """The call of ``main`` into the loop function for one ONNX ``Loop`` node (names from
    ``attrs["tvm_custom"]``); NotImplementedError for a loop with scan outputs."""
    from tvm import relax

    body = attrs["body"]
    name = _name(attrs)
    trip, cond, initial = inputs[0], inputs[1], list(inputs[2:])
    carried = len(initial)
    if len(body.output) != 1 + carried:
        raise NotImplementedError("a loop whose trip count is decided at run time cannot have scan outputs (no fixed "
                                  "shape): export it with a fixed number of steps")
    bb = importer.bb
    scalar_i64 = relax.TensorType((), "int64")
    scalar_bool = relax.TensorType((), "bool")
    m = _scalar(bb, trip, "int64") if trip is not None else relax.const(INT64_MAX, "int64")
    c = _scalar(bb, cond, "bool") if cond is not None else relax.const(True, "bool")
    initial = [bb.normalize(v) for v in initial]
    outer = _captures(importer, body)
    body_gv = _body_function(importer, body, name, [v.ty for v in initial], outer)
    params = [relax.Var("i", scalar_i64), relax.Var("m", scalar_i64), relax.Var("cond", scalar_bool)]
    params += [relax.Var(f"v{k}", v.ty) for k, v in enumerate(initial)]
    params += [relax.Var(f"outer{k}", bb.normalize(value).ty) for k, (_n, value) in enumerate(outer)]
    result_ty = relax.TupleType([v.ty for v in initial])
    placeholder = relax.Function(params, relax.SeqExpr([], relax.Tuple(params[3:3 + carried])), result_ty)
    loop_gv = bb.add_func(placeholder, f"{name}_loop")
    bb.update_func(loop_gv, bb.normalize(_loop_function(params, carried, body_gv, loop_gv, result_ty)))
    args = [relax.const(0, "int64"), m, c, *initial, *(value for _n, value in outer)]
    out = bb.normalize(relax.Call(loop_gv, args))
    return relax.Tuple([relax.TupleGetItem(out, k) for k in range(carried)]) if carried != 1 else relax.TupleGetItem(out, 0)


def _name(attrs: dict[str, Any]) -> str:
    import re

    raw = str(attrs.get("tvm_custom", {}).get("name") or "loop")
    return re.sub(r"\W", "_", raw) or "loop"


def _scalar(bb: Any, expr: Any, dtype: str) -> Any:
    from tvm import relax

    value = bb.normalize(expr)
    if str(value.ty.dtype) != dtype:
        value = bb.normalize(relax.op.astype(value, dtype))
    if len(value.ty.shape.values):
        value = bb.normalize(relax.op.reshape(value, []))
    return value


def _captures(importer: Any, body: Any) -> list[tuple[str, Any]]:
    """The outer tensors the body reads that ``main`` computes, in a fixed order: they become
    parameters (a function cannot see ``main``'s bindings). Constants stay constants in the body
    (a Reshape's shape, a weight), as the frontend's converters need them."""
    from tvm import ir

    from ...onnx_proto import outer_names

    return [(n, importer._nodes[n]) for n in sorted(outer_names(body))
            if n in importer._nodes and not isinstance(importer._nodes[n], ir.expr.Constant)]


def _body_function(importer: Any, body: Any, name: str, carried_types: list[Any], outer: list[tuple[str, Any]]) -> Any:
    """Convert the body graph into a Relax function of its own (TVM's importer, on a block
    builder of its own for the duration); returns its GlobalVar in ``main``'s module."""
    from tvm import relax

    main_bb, saved = importer.bb, dict(importer._nodes)
    fb = relax.BlockBuilder()
    params = [relax.Var("iteration", relax.TensorType((), "int64")), relax.Var("cond", relax.TensorType((), "bool"))]
    params += [relax.Var(f"v{k}", ty) for k, ty in enumerate(carried_types)]
    params += [relax.Var(f"outer{k}", main_bb.normalize(value).ty) for k, (_n, value) in enumerate(outer)]
    try:
        importer.bb = fb
        with fb.function("body", params):
            values = _shaped_inputs(fb, body, params[:2 + len(carried_types)])
            values.update({n: p for (n, _v), p in zip(outer, params[2 + len(carried_types):])})
            importer._nodes.update(values)
            result = importer._convert_subgraph(fb, body)
            fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
            cond = _scalar(fb, fields[0], "bool")
            fb.emit_func_output(relax.Tuple([cond, *fields[1:]]))
    finally:
        importer.bb, importer._nodes = main_bb, saved
    built = fb.get()
    for gv, func in built.functions_items():  # the body's own kernels (converters may add TIR functions)
        if gv.name_hint != "body":
            main_bb.add_func(func, gv.name_hint)
    return main_bb.add_func(built["body"], f"{name}_body")


def _shaped_inputs(fb: Any, body: Any, params: list[Any]) -> dict[str, Any]:
    """Body input name → parameter, the iteration number and condition reshaped to what the
    body declares (scalars, or ``[1]`` as some exporters write them)."""
    from tvm import relax

    out = {}
    for value_info, param in zip(body.input, params):
        dims = value_info.type.tensor_type.shape.dim
        out[value_info.name] = fb.emit(relax.op.reshape(param, [1])) if len(dims) == 1 else param
    return out


def _loop_function(params: list[Any], carried: int, body_gv: Any, loop_gv: Any, result_ty: Any) -> Any:
    """``if i < m and cond: loop(i + 1, m, *body(i, cond, carried…, outer…), outer…) else carried``."""
    from tvm import relax

    i, m, cond = params[:3]
    values, outer = params[3:3 + carried], params[3 + carried:]
    keep = relax.Var("keep", relax.TensorType((), "bool"))
    step_ty = relax.TupleType([relax.TensorType((), "bool"), *(v.ty for v in values)])
    step = relax.Var("step", step_ty)
    following = relax.Var("following", relax.TensorType((), "int64"))
    again = relax.Var("again", result_ty)
    parts = [relax.Var(f"next{k}", ty) for k, ty in enumerate(step_ty.fields)]
    then_block = relax.BindingBlock([
        relax.VarBinding(step, relax.Call(body_gv, [i, cond, *values, *outer])),
        *(relax.VarBinding(part, relax.TupleGetItem(step, k)) for k, part in enumerate(parts)),
        relax.VarBinding(following, relax.op.add(i, relax.const(1, "int64"))),
        relax.VarBinding(again, relax.Call(loop_gv, [following, m, *parts, *outer])),
    ])
    branch = relax.If(keep, relax.SeqExpr([then_block], again), relax.SeqExpr([], relax.Tuple(values)))
    out = relax.Var("out", result_ty)
    block = relax.BindingBlock([
        relax.VarBinding(keep, relax.op.logical_and(relax.op.less(i, m), cond)),
        relax.VarBinding(out, branch),
    ])
    return relax.Function(params, relax.SeqExpr([block], out), result_ty)
