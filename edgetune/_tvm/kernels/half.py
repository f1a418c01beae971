"""Float16 elementwise math (TE) for ``--precision fp16`` kernels: the exponential and the
sigmoid computed in float16 itself, 8 lanes a NEON register, where the float32 polynomials
(TOPI's fast_exp) need each value converted up and back (``fcvtl``/``fcvtl2``/``fcvtn``/``fcvtn2``)
and twice the vectors.

exp(x) = 2ⁿ · eʳ with n = ⌊x·log₂e + ½⌋ and r = x − n·ln 2 ∈ [−0.35, 0.35]: ln 2 in two parts
(the first, 0.6875, has 4 significant bits, so n·0.6875 is exact in float16 for |n| ≤ 16), eʳ
by its Taylor polynomial of degree 4 (truncation 4e-5 of eʳ, under float16's half-ulp of 2.4e-4),
then times 2ⁿ as two powers of two each built from its bits ``(k + 15) << 10`` (k = ⌊n/2⌋ and
n − k: 2¹⁶ has no float16, eˣ up to 65504 needs n = 16, and eˣ down to 6e-8 needs the
subnormals): the products round, overflow to inf and fall to the subnormals as IEEE arithmetic
has it. The sigmoid 1 / (1 + e⁻ˣ) keeps those ends: e⁻ˣ = inf gives 0, e⁻ˣ = 0 gives 1.
"""

from __future__ import annotations

from typing import Any

HALF = "float16"
LOG2E = 1.4426950408889634
LN2_HI, LN2_LO = 0.6875, 0.6931471805599453 - 0.6875
TAYLOR = (1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0)  # e^r ≈ (((r/24 + 1/6)·r + 1/2)·r + 1)·r + 1


def exp16(v: Any) -> Any:
    """eᵛ of a float16 expression (see the module docstring)."""
    from tvm import tirx

    def c(value: float) -> Any:
        return tirx.const(value, HALF)

    v = tirx.max(tirx.min(v, c(12.0)), c(-17.5))  # (n within [−25, 18]: 2ⁿ as two normal halves)
    n = tirx.floor(v * c(LOG2E) + c(0.5))
    r = (v - n * c(LN2_HI)) - n * c(LN2_LO)
    p = c(TAYLOR[0])
    for k in TAYLOR[1:]:
        p = p * r + c(k)
    k = n.astype("int16")
    half_k = k >> tirx.const(1, "int16")

    def power(e: Any) -> Any:
        return tirx.reinterpret(HALF, (e + tirx.const(15, "int16")) << tirx.const(10, "int16"))

    return p * power(half_k) * power(k - half_k)


def sigmoid16(x: Any) -> Any:
    """σ(x) of a float16 tensor, in float16 (:func:`exp16`)."""
    from tvm import te, tirx

    one = tirx.const(1.0, HALF)
    return te.compute(x.shape, lambda *i: one / (one + exp16(-x(*i))), name="fast_sigmoid")
