"""Row kernels (TE): softmax and layer norm over the last axis, each row's reductions as
vector-wide partial results (lane ``l`` sums elements ``l, l + L, l + 2L, …``) then a short
scalar finish over the lanes and the row's tail — a reduction over the innermost axis that
vectorizes, with no bounds test inside the vector loop."""

from __future__ import annotations

from typing import Any

from .extents import dims

# stage names the schedule (:mod:`..schedules.rows`) finds the stages by
PARTIALS = ("softmax_partmax", "softmax_partsum", "ln_partsum", "ln_partsq")  # rows to vector-wide partials
OUTPUTS = ("softmax_norm", "ln_norm")  # the stage that writes the result
SHIFT = "softmax_shift"  # x − max, inlined into the exp
EXP = "T_fast_exp"  # the exponentials (TOPI's name): a row buffer, inlined where the row is symbolic


STATS = "float32"  # the dtype row statistics are kept in, whatever the tensor's (float16: --precision fp16)


def _up(v: Any) -> Any:
    """``v`` as :data:`STATS`: a float16 row's sums, squares and exponentials are float32's
    (a float16 sum of 384 values keeps ~2 of their 3 decimal digits)."""
    return v if str(v.dtype) == STATS else v.astype(STATS)


def row_lanes(n: Any, lanes: int) -> int:
    """Lanes of a row's partial results: a native register, or 4 for short rows (of 4 or more).
    A row of symbolic length (a range of lengths) takes a register: past its vectors, the tail
    loop covers the rest, a whole row when it is shorter."""
    return lanes if not isinstance(n, int) or n >= lanes else 4


def _row_total(part: Any, tail_of: Any, lanes: int, tail: int, combine: str, name: str) -> Any:
    """Per row: the ``lanes`` partial results and the ``tail`` elements past the last whole
    vector, combined (``sum`` or ``max``)."""
    from tvm import te, tirx

    rows = part.shape[:-1]
    if not isinstance(tail, int):
        return _row_total_symbolic(part, tail_of, lanes, tail, combine, name)
    u = te.reduce_axis((0, lanes + tail), "u")

    def value(*r: Any) -> Any:
        lane = part[(*r, tirx.min(u, lanes - 1))]
        extra = tail_of(r, tirx.max(u - lanes, 0))
        pick = tirx.Select(u < lanes, lane, extra)
        return te.max(pick, axis=[u]) if combine == "max" else te.sum(pick, axis=[u])

    return te.compute(rows, value, name=name)


def _row_total_symbolic(part: Any, tail_of: Any, lanes: int, tail: Any, combine: str, name: str) -> Any:
    """:func:`_row_total` for a row of symbolic length: the lanes and the tail reduced apart, then
    combined. (As one reduction, TVM bounded the partial results' reads by the whole ``lanes +
    tail`` loop — wider than the register, which it then could not vectorize.)"""
    from tvm import te, tirx

    rows = part.shape[:-1]
    u = te.reduce_axis((0, lanes), "u")
    t = te.reduce_axis((0, tail), "t")
    reduce = te.max if combine == "max" else te.sum
    lanes_total = te.compute(rows, lambda *r: reduce(part[(*r, u)], axis=[u]), name=f"{name}_lanes")
    tail_total = te.compute(rows, lambda *r: reduce(tail_of(r, t), axis=[t]), name=f"{name}_tail")
    both = tirx.max if combine == "max" else (lambda a, b: a + b)
    return te.compute(rows, lambda *r: both(lanes_total[r], tail_total[r]), name=name)


def _partial(value_of: Any, rows: Any, n: Any, lanes: int, combine: str, name: str, kernel: str = "") -> Any:
    from tvm import te

    o = te.reduce_axis((0, n // lanes), "o")

    def value(*idx: Any) -> Any:
        *r, lane = idx
        v = value_of(r, o * lanes + lane)
        return te.max(v, axis=[o]) if combine == "max" else te.sum(v, axis=[o])

    attrs = {"edgetune.kernel": kernel} if kernel else {}
    return te.compute((*rows, lanes), value, name=name, attrs=attrs)


def softmax_rows(x: Any, lanes: int, valid: int = 0) -> Any:
    """Softmax over the last axis: row max, ``exp(x - max)`` (TOPI's fast_exp polynomial, as
    edgetune's exp), row sum, times its reciprocal. With ``valid`` (a constant row of more
    columns than that, in whole vectors: the fused attention kernel's keys padded to whole
    registers) the softmax is over the first ``valid`` columns; the max reads the whole padded
    row, the columns past ``valid`` as -inf, so the kernel's scores are computed, and
    vectorized, over whole registers (read over the valid columns alone, TVM computed them
    under a bounds predicate, scalar: ViT's 65 keys 20× slower)."""
    from tvm import te, tirx, topi

    *rows, n = x.shape
    (n,) = dims([n])  # an int where constant, a symbolic length as it is
    lanes = row_lanes(n, lanes)
    cols = valid or n
    full, tail = cols // lanes * lanes, cols - cols // lanes * lanes

    def at(src: Any) -> Any:
        return lambda r, i: src[(*r, i)]

    def tail_at(src: Any) -> Any:
        return lambda r, t: src[(*r, full + t)]

    if valid and valid < n:
        lowest = tirx.const(float("-inf"), x.dtype)
        part_max = _partial(lambda r, i: tirx.Select(i < valid, x[(*r, i)], lowest), rows, n, lanes, "max",
                            PARTIALS[0], kernel="softmax_rows")
        row_max = _row_total(part_max, tail_at(x), lanes, 0, "max", "softmax_max")
    else:
        part_max = _partial(at(x), rows, n, lanes, "max", PARTIALS[0], kernel="softmax_rows")
        row_max = _row_total(part_max, tail_at(x), lanes, tail, "max", "softmax_max")
    shifted = te.compute((*rows, cols), lambda *i: _up(x[i]) - _up(row_max[i[:-1]]), name=SHIFT)
    e = topi.fast_exp(shifted)
    part_sum = _partial(at(e), rows, cols, lanes, "sum", PARTIALS[1])
    row_sum = _row_total(part_sum, tail_at(e), lanes, tail, "sum", "softmax_sum")
    return te.compute(e.shape, lambda *i: (e[i] * (1.0 / row_sum[i[:-1]])).astype(x.dtype), name=OUTPUTS[0])


def layer_norm_rows(x: Any, gamma: Any, beta: Any, eps: float, lanes: int) -> Any:
    """Layer norm over the last axis, two passes over the row (mean, then the squared
    deviations: no cancellation of E[x²] − mean²), then ``(x − mean) · rstd · γ + β``."""
    from tvm import te, tirx

    *rows, n = x.shape
    (n,) = dims([n])  # an int where constant, a symbolic length as it is
    lanes = row_lanes(n, lanes)
    full, tail = n // lanes * lanes, n - n // lanes * lanes
    part = _partial(lambda r, i: _up(x[(*r, i)]), rows, n, lanes, "sum", PARTIALS[2], kernel="layer_norm_rows")
    mean = _row_total(part, lambda r, t: _up(x[(*r, full + t)]), lanes, tail, "sum", "ln_sum")

    def dev(r: Any, i: Any) -> Any:
        d = _up(x[(*r, i)]) - mean[tuple(r)] * (1.0 / n)
        return d * d

    part2 = _partial(dev, rows, n, lanes, "sum", PARTIALS[3])
    var = _row_total(part2, lambda r, t: dev(r, full + t), lanes, tail, "sum", "ln_sq")

    def value(*i: Any) -> Any:
        r, c = i[:-1], i[-1]
        rstd = 1.0 / tirx.sqrt(var[r] * (1.0 / n) + tirx.const(eps, STATS))
        out = (_up(x[i]) - mean[r] * (1.0 / n)) * rstd
        if gamma is not None:
            out = out * _up(gamma[c])
        if beta is not None:
            out = out + _up(beta[c])
        return out.astype(x.dtype)

    return te.compute(x.shape, value, name=OUTPUTS[1])


def rms_norm_rows(x: Any, gamma: Any, eps: float, lanes: int) -> Any:
    """RMS norm over the last axis (T5, LLaMA-style): one pass for the mean square, then
    ``x · rsqrt(mean(x²) + ε) · γ``. Its stages take the layer norm's names, so the row schedule
    (:mod:`..schedules.rows`) treats it as one."""
    from tvm import te, tirx

    *rows, n = x.shape
    (n,) = dims([n])
    lanes = row_lanes(n, lanes)
    full, tail = n // lanes * lanes, n - n // lanes * lanes

    def square(r: Any, i: Any) -> Any:
        v = _up(x[(*r, i)])
        return v * v

    part = _partial(square, rows, n, lanes, "sum", PARTIALS[3], kernel="rms_norm_rows")
    total = _row_total(part, lambda r, t: square(r, full + t), lanes, tail, "sum", "ln_sq")

    def value(*i: Any) -> Any:
        r, c = i[:-1], i[-1]
        out = _up(x[i]) * (1.0 / tirx.sqrt(total[r] * (1.0 / n) + tirx.const(eps, STATS)))
        return (out * _up(gamma[c]) if gamma is not None else out).astype(x.dtype)

    return te.compute(x.shape, value, name=OUTPUTS[1])


def sum_in_float32(x: Any, axes: list[int] | None, keepdims: bool, mean: bool) -> Any:
    """The sum (or mean) of ``x`` over ``axes`` (None: all) accumulated in :data:`STATS`, the
    result in ``x``'s dtype: a float16 tensor's global pooling reads it once, with no converted
    copy (a pass of its own over the tensor: 0.35 of MobileNetV3-style fp16's 17.4 M Pi 5 cycles)."""
    from tvm import te

    rank = len(x.shape)
    axes = sorted(a % rank for a in (range(rank) if axes is None else axes))
    reduce = [te.reduce_axis((0, x.shape[a]), f"r{a}") for a in axes]
    count = 1
    for a in axes:
        count *= int(x.shape[a])
    out_shape = [1 if a in axes else x.shape[a] for a in range(rank)] if keepdims else \
        [x.shape[a] for a in range(rank) if a not in axes]

    def value(*idx: Any) -> Any:
        kept = iter(idx if not keepdims else [i for a, i in enumerate(idx) if a not in axes])
        r = iter(reduce)
        at = [next(r) if a in axes else next(kept) for a in range(rank)]
        return te.sum(_up(x[tuple(at)]), axis=reduce)

    total = te.compute(out_shape, value, name="sum_f32")
    scale = 1.0 / count if mean else 1.0
    return te.compute(out_shape, lambda *i: (total[i] * scale).astype(x.dtype), name="sum_out")
