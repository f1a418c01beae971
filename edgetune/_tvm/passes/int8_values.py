"""What an 8-bit tensor's elementwise chain computes, evaluated at build time: the float path's
value for each of the 256 values of its one int8 / uint8 source (dequantize, float ops as the
float path rounds them, quantize), which the int8 rewrites check themselves against and the
lookup tables hold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import tvm_module
from .common import (
    bound_value,
    const_array,
    op_name,
    relax,
)

tirx = tvm_module("tirx")


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


INT_RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


# How many calls back an elementwise chain is followed. Each level costs about five Python frames
# inside TVM's visitor (itself called back from C++): 256 levels overflowed Python's recursion
# limit on a PP-OCR-style detector quantized with QDQ (its FPN's chains of int8 resizes and adds).
# An activation's chain (dequantize, a few ops, quantize) is under 20; beyond the cap the chain's
# tensor so far is the table's source (a correct, shorter table).
MAX_CHAIN_DEPTH = 64


def chain_values(mutator: Any, expr: Any, source: list[Any], depth: int = 0) -> np.ndarray | None:
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
        return all_values(expr)
    return None


def _chain(mutator: Any, expr: Any, depth: int) -> tuple[np.ndarray | None, Any]:
    """(values, source) of ``expr`` found with no source preset, memoised on ``mutator``."""
    if isinstance(expr, (tirx.FloatImm, tirx.IntImm)):  # clip's bounds
        return np.asarray(expr.value), None
    constant = const_array(expr)
    if constant is not None:
        return (constant.reshape(()) if constant.size == 1 else None), None
    memo = mutator.__dict__.setdefault("_edgetune_chain_memo", {})
    if expr in memo:
        return memo[expr]
    result: tuple[np.ndarray | None, Any] = (None, None)
    call = bound_value(mutator, expr)
    if isinstance(call, relax.Call) and depth < MAX_CHAIN_DEPTH:
        source: list[Any] = []
        values = _call_values(mutator, call, source, depth + 1)
        if values is not None:
            result = (values, source[0] if source else None)
    if result[0] is None and _int8_var(expr):
        result = (all_values(expr), expr)
    memo[expr] = result
    return result


def _int8_var(expr: Any) -> bool:
    return isinstance(expr, relax.Var) and str(getattr(expr.ty, "dtype", "")) in INT_RANGE


def all_values(expr: Any) -> np.ndarray:
    dtype = str(expr.ty.dtype)
    low, high = INT_RANGE[dtype]
    return np.arange(low, high + 1, dtype=np.int32).astype(dtype)


def dequantized(values: np.ndarray, scale: Any, zero: Any) -> np.ndarray:
    """8-bit ``values`` dequantized as TVM computes it: float32(v − zero) · scale."""
    return (values.astype(np.int32) - np.asarray(zero).astype(np.int32)).astype(np.float32) * np.float32(scale)


def quantized(values: np.ndarray, scale: Any, zero: Any, dtype: str) -> np.ndarray:
    """float32 ``values`` quantized to ``dtype`` as TVM computes it: round(v / scale) + zero
    (ties to even), saturated."""
    low, high = INT_RANGE[dtype]
    rounded = np.round(values / np.float32(scale)) + np.float32(zero)
    return np.clip(rounded, np.float32(low), np.float32(high)).astype(dtype)


def _call_values(mutator: Any, call: Any, source: list[Any], depth: int) -> np.ndarray | None:
    """:func:`chain_values` of one call."""
    name = op_name(call)
    if name in ("relax.quantize", "relax.dequantize"):
        args = [chain_values(mutator, a, source, depth) for a in call.args]
        if any(a is None for a in args) or const_array(call.args[1]) is None or const_array(call.args[2]) is None:
            return None  # parameters: scalar constants (per-tensor)
        data, scale, zero = args
        if name == "relax.dequantize":
            return dequantized(data, scale, zero) if str(call.attrs.out_dtype) == "float32" else None
        out_dtype = str(call.attrs.out_dtype)
        if out_dtype not in INT_RANGE or data.dtype != np.float32:
            return None
        return quantized(data, scale, zero, out_dtype)
    if name == "relax.take":
        table, index = const_array(call.args[0]), chain_values(mutator, call.args[1], source, depth)
        if table is None or index is None or table.ndim != 1 or int(call.attrs.axis) != 0:
            return None
        return table[index.astype(np.int64)] if index.min() >= 0 and index.max() < table.size else None
    args = [chain_values(mutator, a, source, depth) for a in call.args]
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
