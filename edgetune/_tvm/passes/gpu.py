"""Graph rewrites for GPU builds, where TVM's DLight schedules the kernels and nvcc compiles
them with ``--use_fast_math``: shapes of work that DLight's rules leave to its one-thread
fallback, made into shapes they schedule; operations fast math gets wrong, made into ones it
gets right."""

from __future__ import annotations

import math
from typing import Any

from .common import MutatorPass, const_array, module_pass, op_name, relax, static_shape

_REDUCTIONS = {"relax.max": relax.op.max, "relax.min": relax.op.min, "relax.sum": relax.op.sum,
               "relax.mean": relax.op.mean}
_MIN_COLUMNS = 256  # each row of the first step: one thread block's work
_MAX_ROWS = 1024  # what the second step reduces


def _split(n: int) -> tuple[int, int] | None:
    """(rows, columns) of ``n`` elements: rows × columns = n, columns the smallest divisor of
    ``n`` that leaves at most ``_MAX_ROWS`` rows of at least ``_MIN_COLUMNS``; None when none does."""
    low = max(_MIN_COLUMNS, math.ceil(n / _MAX_ROWS))
    for cols in range(low, n // 2 + 1):
        if n % cols == 0:
            return n // cols, cols
    return None


@relax.expr_functor.mutator
class _TwoStepReductions(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802 — TVM's visitor naming
        new = super().visit_call_(op)
        reduce = _REDUCTIONS.get(op_name(new))
        shape = static_shape(new.args[0]) if reduce else None
        if shape is None or math.prod(shape) < 4 * _MIN_COLUMNS:
            return new
        axes = new.attrs.axis
        if axes is not None and sorted(int(a) % len(shape) for a in axes) != list(range(len(shape))):
            return new  # a reduction that leaves spatial work: DLight's row rules take it
        split = _split(math.prod(shape))
        if split is None:
            return new
        rows = self.builder_.emit(reduce(relax.op.reshape(new.args[0], split), axis=[1]))
        out = reduce(rows, axis=None)
        return relax.op.reshape(out, [int(d) for d in static_shape(new)]) if new.attrs.keepdims else out


@module_pass(opt_level=0)
class TwoStepReductions(MutatorPass):
    """A reduction of a whole tensor to one value (``max``, ``min``, ``sum``, ``mean``: a
    dynamically quantized model's per-tensor range, ahead of every integer matmul) as rows
    reduced first, then the row results: DLight has no rule for a reduction without spatial
    work and gives it its fallback, one GPU thread looping over every element (measured on an
    H200: 0.2–1.0 ms per call on a 64 × 1024 tensor, 87 % of a small int8 BERT's time). Each
    row is then one thread block's work, under DLight's reduction rule. ``mean`` over equal rows
    is the mean of the row means."""

    mutator = _TwoStepReductions


@relax.expr_functor.mutator
class _IntegerPowers(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802 — TVM's visitor naming
        new = super().visit_call_(op)
        exponent = const_array(new.args[1]) if op_name(new) == "relax.power" else None
        if exponent is None or exponent.size != 1 or str(new.ty.dtype) not in ("float32", "float16"):
            return new
        e, x = float(exponent.reshape(())), new.args[0]
        if static_shape(new) != static_shape(x):
            return new  # the exponent broadcasts x: leave it
        if e == 2.0:
            return relax.op.multiply(x, x)
        if e == 3.0:
            return relax.op.multiply(self.builder_.emit(relax.op.multiply(x, x)), x)
        if e == 4.0:
            square = self.builder_.emit(relax.op.multiply(x, x))
            return relax.op.multiply(square, square)
        if e == 0.5:
            return relax.op.sqrt(x)
        return new


@module_pass(opt_level=0)
class IntegerPowersAsProducts(MutatorPass):
    """``x ** 2``, ``** 3``, ``** 4`` as products and ``x ** 0.5`` as ``sqrt``. TVM has nvcc compile
    with ``--use_fast_math``, which makes ``powf`` ``__powf`` — ``exp2(y · log2(x))``, NaN for
    every negative ``x``: the variance of a layer norm written out (``(x − mean)²``, BERT
    exports below opset 17), an RMS norm's ``x²``, the tanh GELU's ``x³`` all came out NaN on
    an H200. A product is also cheaper than ``powf``."""

    mutator = _IntegerPowers
