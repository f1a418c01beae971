"""Dense-layer and matmul computes (TE): weights packed in blocks of NB output features, rows
padded to a multiple of the register tile where the row count has no good divisor."""

from __future__ import annotations

import math
from typing import Any

from .conv import crop


def _unravel(flat: Any, dims: list[int]) -> list[Any]:
    """Indices into ``dims`` of a row-major flat index."""
    out = []
    for d in reversed(dims):
        out.append(flat % d)
        flat = flat // d
    return list(reversed(out))


def dense_packed(data: Any, weights: Any, features: int, rows_to: int = 0) -> Any:
    """``data[..., K] @ W[K, N]`` with W packed as [Np/NB, K, NB] (N padded to a multiple of NB).

    With ``rows_to`` (> the rows of ``data``) the rows are flattened and computed as ``rows_to``
    rows, the ones past the end reading the last row again (no pad pass, no bounds test in the
    register tile: 197 tokens as 198 measured 4× faster than 197 rows one at a time); the
    crop drops them."""
    from tvm import te, tirx

    nbo, k, nb = (int(x) for x in weights.shape)
    lead = [int(x) for x in data.shape[:-1]]
    rk = te.reduce_axis((0, k), "rk")
    attrs = {"edgetune.kernel": "dense_packed"}
    rows = math.prod(lead)
    if rows_to <= rows:

        def value(*idx: Any) -> Any:
            *at, j = idx
            return te.sum(data[(*at, rk)] * weights[j // nb, rk, j % nb], axis=[rk])

        out = te.compute((*lead, nbo * nb), value, name="dense_packed", attrs=attrs)
        return crop(out, features)

    def padded(i: Any, j: Any) -> Any:
        at = _unravel(tirx.min(i, rows - 1), lead)
        return te.sum(data[(*at, rk)] * weights[j // nb, rk, j % nb], axis=[rk])

    out = te.compute((rows_to, nbo * nb), padded, name="dense_packed", attrs=attrs)
    strides = [1] * len(lead)
    for n in range(len(lead) - 2, -1, -1):
        strides[n] = strides[n + 1] * lead[n + 1]

    def cropped(*idx: Any) -> Any:
        *at, j = idx
        return out[sum((a * s for a, s in zip(at, strides)), tirx.const(0, "int32")), j]

    return te.compute((*lead, features), cropped, name="crop")


def matmul_packed(a: Any, b: Any, nb: int, rows_to: int) -> Any:
    """``a[..., M, K] @ b[..., K, N]`` of two computed tensors (attention's Q·Kᵀ and P·V), batch
    axes broadcast as ONNX MatMul does: ``b`` packed in the kernel as [..., Np/NB, K, NB] (the
    columns past N repeat the last one; a pass of its own), then the dense micro-kernel over
    ``rows_to`` ≥ M rows (past M: the last row again), cropped to [..., M, N]."""
    from tvm import te, tirx

    *abatch, m, k = (int(x) for x in a.shape)
    *bbatch, _k, n = (int(x) for x in b.shape)
    batch = max(len(abatch), len(bbatch))
    abatch = [1] * (batch - len(abatch)) + abatch
    bbatch = [1] * (batch - len(bbatch)) + bbatch
    out_batch = [max(x, y) for x, y in zip(abatch, bbatch)]
    nbo = -(-n // nb)
    lead_a, lead_b = len(a.shape) - 2, len(b.shape) - 2

    def pick(dims: list[int], idx: list[Any], lead: int) -> list[Any]:
        picked = [0 if d == 1 else i for d, i in zip(dims, idx)]
        return picked[batch - lead:]

    packed = te.compute((*bbatch, nbo, k, nb),
                        lambda *idx: b[(*idx[batch - lead_b:batch], idx[batch + 1],
                                        tirx.min(idx[batch] * nb + idx[batch + 2], n - 1))],
                        name="pack_b")
    rk = te.reduce_axis((0, k), "rk")

    def value(*idx: Any) -> Any:
        *at, i, j = idx
        row = tirx.min(i, m - 1) if rows_to > m else i
        return te.sum(a[(*pick(abatch, at, lead_a), row, rk)] * packed[(*pick(bbatch, at, batch), j // nb, rk, j % nb)],
                      axis=[rk])

    out = te.compute((*out_batch, max(rows_to, m), nbo * nb), value, name="matmul_packed",
                     attrs={"edgetune.kernel": "matmul_packed"})
    if rows_to <= m and nbo * nb == n:
        return out
    return te.compute((*out_batch, m, n), lambda *idx: out[idx], name="crop")
