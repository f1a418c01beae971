"""What an imported or fused module holds: its signature, FLOPs, kernels and quantization."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ModelError
from .core import tvm

log = logging.getLogger(__name__)


Signature = tuple[list[tuple[str, tuple[int, ...], str]], list[tuple[tuple[int, ...], str]]]


def relax_signature(mod: Any) -> Signature:
    """Inputs (name, shape, dtype) and outputs (shape, dtype) of ``main``. Symbolic dimensions (a
    range of lengths) are given at their upper bound, as recorded on ``main``;
    :func:`symbolic_axes` says which they are."""
    tvm()
    from tvm import relax

    func = mod["main"]
    upper = _bounds(func)
    inputs = [(p.name, *tensor_info(p.ty, upper)) for p in func.params]
    ret = func.ret_ty
    outs = ret.fields if isinstance(ret, relax.TupleType) else [ret]
    return inputs, [tensor_info(s, upper) for s in outs]


def symbolic_axes(mod: Any) -> tuple[list[dict[int, str]], list[dict[int, str]]]:
    """Per input and per output of ``main``, the axes whose extent is symbolic and what it is
    (a variable's name, or an expression of them: ``length * 2``)."""
    tvm()
    from tvm import relax

    func = mod["main"]
    ret = func.ret_ty
    outs = ret.fields if isinstance(ret, relax.TupleType) else [ret]

    def axes(sinfo: Any) -> dict[int, str]:
        return {i: str(d) for i, d in enumerate(sinfo.shape.values) if not hasattr(d, "value")}

    return [axes(p.ty) for p in func.params], [axes(s) for s in outs]


def _bounds(func: Any) -> dict[str, int]:
    attrs = func.attrs
    upper = attrs.get("tir_var_upper_bound") if attrs is not None else None
    return {str(k): int(v) for k, v in (upper or {}).items()}


def tensor_info(sinfo: Any, upper: dict[str, int] | None = None) -> tuple[tuple[int, ...], str]:
    """(shape, dtype) of a tensor type; symbolic dimensions at ``upper`` (their bounds)."""
    try:
        shape = tuple(int(d) if hasattr(d, "value") else value_at(d, upper or {}) for d in sinfo.shape.values)
    except (AttributeError, TypeError) as err:
        raise ModelError(
            f"model has a non-static tensor shape {sinfo}",
            "fix dynamic dimensions with --input-shape NAME=1,3,224,224",
        ) from err
    return shape, str(sinfo.dtype)


def value_at(expr: Any, values: Mapping[str, int]) -> int:
    """A symbolic extent's value with its variables at ``values`` (TypeError: one has none)."""
    from tvm import sym, tirx

    free = list(tirx.analysis.undefined_vars(expr))
    if not free or any(v.name not in values for v in free):
        raise TypeError(f"symbolic extent {expr}")
    analyzer = sym.Analyzer()
    for v in free:
        analyzer.bind(v, tirx.IntImm(str(v.ty), values[v.name]))
    out = analyzer.simplify(expr)
    if not hasattr(out, "value"):
        raise TypeError(f"symbolic extent {expr}")
    return int(out.value)


def estimate_flops(mod: Any) -> float:
    """Floating/integer operations of one inference, from the legalized TIR."""
    tvm()
    from tvm import relax
    from tvm.s_tir.analysis import estimate_tir_flops

    lowered = relax.transform.LegalizeOps()(mod)
    calls = count_call_tir(lowered["main"])
    total = 0.0
    for gv, func in lowered.functions_items():
        if gv.name_hint in calls and not isinstance(func, relax.Function):
            try:
                total += estimate_tir_flops(tvm().IRModule({"main": func})) * calls[gv.name_hint]
            except Exception:  # noqa: BLE001 — ops with data-dependent loops have no estimate
                log.debug("no FLOP estimate for %s", gv.name_hint)
    return total


# (op → how its reduction length follows from its operands' shapes)
_SUMS = {"relax.nn.conv1d": "weight", "relax.nn.conv2d": "weight", "relax.nn.conv3d": "weight",
         "relax.nn.conv1d_transpose": "transposed", "relax.nn.conv2d_transpose": "transposed", "relax.matmul": "matmul"}


def longest_sum(mod: Any) -> int:
    """The most products one output of a convolution or matrix product of ``main`` sums (1 where
    it has none): a convolution's input channels per group × its window, a matmul's inner length."""
    tvm()
    from tvm import relax

    longest = 1

    def visit(expr: Any) -> None:
        nonlocal longest
        if not isinstance(expr, relax.Call) or not hasattr(expr.op, "name") or expr.op.name not in _SUMS:
            return
        try:
            shapes = [[int(d) for d in a.ty.shape.values] for a in expr.args[:2]]
        except (AttributeError, TypeError):
            return  # a symbolic or unknown extent
        kind = _SUMS[expr.op.name]
        if kind == "weight":
            length = int(np.prod(shapes[1][1:]))
        elif kind == "transposed":
            length = shapes[1][0] * int(np.prod(shapes[1][2:])) // max(1, int(getattr(expr.attrs, "groups", 1)))
        else:
            length = shapes[0][-1]
        longest = max(longest, length)

    relax.analysis.post_order_visit(mod["main"], visit)
    return longest


def quantization_notes(mod: Any) -> list[str]:
    """The import note of an int8 model whose quantized layers are not all computed as the
    runtime's integer kernels do: those layers, named, stay on TVM's float path."""
    from .passes.int8_scheme import WEIGHT_ONLY

    scheme = quantization_scheme(mod)
    float_layers = (scheme or {}).get("float_layers", [])
    if not float_layers or scheme["activations"] == [WEIGHT_ONLY]:
        return []
    shown = "; ".join(float_layers[:8]) + (f"; and {len(float_layers) - 8} more" if len(float_layers) > 8 else "")
    return [f"int8: {len(float_layers)} quantized layer(s) keep TVM's float path (dequantize → fp32 kernel → "
            f"quantize; checked against the runtime like the rest, not integer kernels): {shown}"]


def quantization_scheme(mod: Any, target: Any = None) -> dict[str, Any] | None:
    """How an imported model is quantized and how it runs
    (:func:`.passes.int8_scheme.quantization_scheme`); with ``target``, how its exact int8
    layers run on that target (its dot-product instruction, or fp32 kernels)."""
    from .kernels.dot import dot_family
    from .passes.int8_scheme import integer_runs_as
    from .passes.int8_scheme import quantization_scheme as scheme

    found = scheme(mod)
    if found is not None and target is not None and found.get("exact"):
        found["runs_as"] = integer_runs_as(dot_family(target), gpu=target.kind.name != "llvm")
    return found


def kernel_table(fused: Any) -> dict[str, dict[str, Any]]:
    """Per PrimFunc of a fused module: how often ``main`` calls it and its FLOPs per call (a
    kernel's own count where it states one, ``edgetune.flops``: TVM's estimate cannot count the
    data-dependent loops of a sparse kernel)."""
    from tvm import tirx
    from tvm.s_tir.analysis import estimate_tir_flops

    calls = count_call_tir(fused["main"])
    out = {}
    for gv, func in fused.functions_items():
        if isinstance(func, tirx.PrimFunc) and gv.name_hint in calls:
            stated = func.attrs.get("edgetune.flops") if func.attrs is not None else None
            try:
                flops = float(stated) if stated is not None else float(estimate_tir_flops(tvm().IRModule({"main": func})))
            except Exception:  # noqa: BLE001 — data-dependent loops have no estimate
                flops = 0.0
            out[gv.name_hint] = {"calls": calls[gv.name_hint], "flops": flops}
    return out


def count_call_tir(func: Any) -> dict[str, int]:
    from tvm import relax

    counts: dict[str, int] = {}

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.call_tir":
            name = expr.args[0].name_hint
            counts[name] = counts.get(name, 0) + 1

    relax.analysis.post_order_visit(func.body, visit)
    return counts
