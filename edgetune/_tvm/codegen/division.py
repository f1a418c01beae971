"""Division by one value as an exact multiply: a pass of the ``edgetune`` TIR pipeline
(:mod:`.lookups`).

A quantize (``QuantizeLinear``, the ``DynamicQuantizeLinear`` of a dynamically quantized
transformer, the float → int8 input kernel of a QDQ model) divides every element by the scale:
``round(x / s)``, the quotient rounded to float32 first, as onnxruntime computes it. NEON's
``fdiv`` of four lanes is the slowest instruction the kernels have: by llvm-mca's core models 34
cycles on the Cortex-A72 (Pi 4) and 7 on the A76 (Pi 5), where the same kernel's other work is
1–2 cycles per four lanes (a scalar ``fdiv``: 17 and 7). On AArch64 a float32 divided by a
constant, or a vector divided by one value (a broadcast), is computed here as

    float32(float64(x) · r),   r = float64(1 / float64(s))

— ``fcvtl``, ``fmul`` and ``fcvtn`` of two lanes each, the reciprocal once per kernel (a
constant, or hoisted out of the loops by LLVM) — and it is the float32 quotient ``x / s``, bit
for bit, for every x and s whose quotient is a normal float32 (a subnormal one rounds to zero
in a quantize anyway):

* ``r`` and the product each round once in float64, so ``float64(x) · r`` is ``x / s`` within a
  relative 2⁻⁵² (plus 2⁻¹⁰⁶);
* the exact quotient of two float32 values is never a rounding boundary of float32 (a midpoint
  has 25 significant bits with the last set; ``x = m · s`` would make the odd part of ``x``'s
  significand the product of two odd integers, one ≥ 2²⁴), and is at least a relative 2⁻⁵⁰
  from every one: ``x − m · s`` is a non-zero multiple of the smaller of the two operands'
  last-bit units;
* so the float64 product lies strictly on the quotient's side of every boundary and rounds to
  the same float32 (infinities and NaN — a zero scale — come out as the division's).

x86 keeps the division (``vdivps``: one per 16 lanes, cheap beside the rest there).
"""

from __future__ import annotations

from typing import Any

from .common import aarch64_rewrite


def exact_reciprocals() -> Any:
    """The pass: on AArch64, each float32 division by a constant or (vectors) by a broadcast
    value as the float64 multiply by its reciprocal, rounded to float32."""
    return aarch64_rewrite("edgetune.ExactReciprocals", "Div", _by_reciprocal)


def _by_reciprocal(div: Any) -> Any | None:
    """``div`` = x / s, float32, as float32(float64(x) · 1 / s) where s is a constant (scalar
    code too: LLVM's loop vectorizer widens the conversions and the multiply, not an intrinsic)
    or a vector's broadcast value (the reciprocal per vector, hoisted by LLVM where s does not
    change in the loop); None for any other division."""
    import numpy as np
    from tvm import DataType, tirx

    dtype = DataType(str(div.ty.dtype))
    if str(dtype).split("x")[0] != "float32":
        return None
    scale = div.b.value if isinstance(div.b, tirx.Broadcast) else div.b
    if isinstance(scale, tirx.FloatImm):
        value = float(np.float32(scale.value))  # (a float32 immediate may hold an unrounded double)
        if value == 0.0:
            return None  # x / 0 stays the division
        reciprocal: Any = tirx.FloatImm("float64", 1.0 / value)
    elif dtype.lanes > 1 and isinstance(div.b, tirx.Broadcast):
        one = tirx.FloatImm("float64", 1.0)
        reciprocal = one / tirx.Cast("float64", scale)
    else:
        return None  # a scalar divided by a value that may change with each element
    if dtype.lanes == 1:
        return tirx.Cast("float32", tirx.Cast("float64", div.a) * reciprocal)
    wide = f"float64x{dtype.lanes}"
    return tirx.Cast(str(dtype), tirx.Cast(wide, div.a) * tirx.Broadcast(reciprocal, dtype.lanes))
