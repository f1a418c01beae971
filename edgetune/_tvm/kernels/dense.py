"""Dense-layer and matmul computes (TE): weights packed in blocks of NB output features, rows
padded to a multiple of the register tile where the row count has no good divisor."""

from __future__ import annotations

import math
from typing import Any

from .extents import crop, dims, row_variant, whole_tiles


def _unravel(flat: Any, dims: list[Any]) -> list[Any]:
    """Indices into ``dims`` of a row-major flat index (< their product); unit dimensions are 0,
    and the outermost one that is not takes what is left, without a division."""
    out = []
    wide = [n for n, d in enumerate(dims) if not (isinstance(d, int) and d == 1)]
    for n in reversed(range(len(dims))):
        if n not in wide:
            out.append(0)
        elif n == wide[0]:
            out.append(flat)
        else:
            out.append(flat % dims[n])
            flat = flat // dims[n]
    return list(reversed(out))


def dense_packed(data: Any, weights: Any, features: int, rows_to: int = 0, row_tile: int = 0,
                 rows: tuple[str, int] = ("", 0)) -> Any:
    """``data[..., K] @ W[K, N]`` with W packed as [Np/NB, K, NB] (N padded to a multiple of NB).

    With ``rows_to`` (> the rows of ``data``) the rows are flattened and computed as ``rows_to``
    rows, the ones past the end reading the last row again (no pad pass, no bounds test in the
    register tile: 197 tokens as 198 measured 4× faster than 197 rows one at a time); the
    crop drops them. Rows over several axes are flattened too (computed as they are). Rows of
    a symbolic count (a package for a range of lengths) are computed the same way, rounded up
    to a multiple of ``row_tile`` (recorded on the kernel for its schedule, with ``rows``: the
    kernel's signature and default height, :func:`row_variant`)."""
    from tvm import te, tirx

    nbo, k, nb = (int(x) for x in weights.shape)
    lead = dims(data.shape[:-1])
    rk = te.reduce_axis((0, k), "rk")
    attrs: dict[str, Any] = {"edgetune.kernel": "dense_packed"}
    count = math.prod(lead)
    if not isinstance(count, int):
        rows_to = whole_tiles(count, row_tile)
        attrs.update(row_variant(row_tile, rows))
    elif rows_to <= count and sum(1 for d in lead if d != 1) > 1:
        # Rows over several axes (a batch of sequences, a window-attention model's [windows,
        # tokens]): computed flat. Fused in the schedule they are tiled across the axes, and a
        # tile that does not divide the inner one (TinyViT's 16 × 49 tokens in tiles of 8)
        # defeats TVM's region analysis: the register tile's write-back covered the whole
        # inner axis, most of it never computed (wrong results, not slower ones).
        rows_to = count
    elif rows_to <= count:

        def value(*idx: Any) -> Any:
            *at, j = idx
            return te.sum(data[(*at, rk)] * weights[j // nb, rk, j % nb], axis=[rk])

        out = te.compute((*lead, nbo * nb), value, name="dense_packed", attrs=attrs)
        return crop(out, features)

    def padded(i: Any, j: Any) -> Any:
        at = _unravel(i if isinstance(count, int) and rows_to == count else tirx.min(i, count - 1), lead)
        return te.sum(data[(*at, rk)] * weights[j // nb, rk, j % nb], axis=[rk])

    out = te.compute((rows_to, nbo * nb), padded, name="dense_packed", attrs=attrs)
    strides = [1] * len(lead)
    for n in range(len(lead) - 2, -1, -1):
        strides[n] = strides[n + 1] * lead[n + 1]

    def cropped(*idx: Any) -> Any:
        *at, j = idx
        return out[sum((a * s for a, s in zip(at, strides) if not (isinstance(s, int) and s == 0)), at[0] * 0), j]

    return te.compute((*lead, features), cropped, name="crop")


def matmul_packed(a: Any, b: Any, nb: int, rows_to: Any, row_tile: int = 0, rows: tuple[str, int] = ("", 0)) -> Any:
    """``a[..., M, K] @ b[..., K, N]`` of two computed tensors (attention's Q·Kᵀ and P·V), batch
    axes broadcast as ONNX MatMul does: ``b`` packed in the kernel as [..., Np/NB, K, NB] (the
    columns past N repeat the last one; a pass of its own), then the dense micro-kernel over
    ``rows_to`` ≥ M rows (past M: the last row again), cropped to [..., M, N]. M, K and N may be
    symbolic (a range of lengths): then the rows are whole tiles of ``row_tile`` (recorded on
    the kernel for its schedule, with ``rows``: :func:`row_variant`)."""
    from tvm import te, tirx

    *abatch, m, k = dims(a.shape)
    *bbatch, _k, n = dims(b.shape)
    batch = max(len(abatch), len(bbatch))
    abatch = [1] * (batch - len(abatch)) + abatch
    bbatch = [1] * (batch - len(bbatch)) + bbatch
    out_batch = [max(x, y) for x, y in zip(abatch, bbatch)]
    nbo = -(-n // nb) if isinstance(n, int) else tirx.ceildiv(tirx.max(n, 1), nb)  # (as whole_tiles)
    lead_a, lead_b = len(a.shape) - 2, len(b.shape) - 2
    attrs: dict[str, Any] = {"edgetune.kernel": "matmul_packed"}
    symbolic_rows = not isinstance(m, int)
    if symbolic_rows:
        rows_to = whole_tiles(m, row_tile)
        attrs.update(row_variant(row_tile, rows))

    def pick(dims_: list[int], idx: list[Any], lead: int) -> list[Any]:
        picked = [0 if d == 1 else i for d, i in zip(dims_, idx)]
        return picked[batch - lead:]

    packed = te.compute((*bbatch, nbo, k, nb),
                        lambda *idx: b[(*idx[batch - lead_b:batch], idx[batch + 1],
                                        tirx.min(idx[batch] * nb + idx[batch + 2], n - 1))],
                        name="pack_b")
    rk = te.reduce_axis((0, k), "rk")
    padded_rows = symbolic_rows or rows_to > m

    def value(*idx: Any) -> Any:
        *at, i, j = idx
        row = tirx.min(i, m - 1) if padded_rows else i
        return te.sum(a[(*pick(abatch, at, lead_a), row, rk)] * packed[(*pick(bbatch, at, batch), j // nb, rk, j % nb)],
                      axis=[rk])

    out = te.compute((*out_batch, rows_to if padded_rows else m, nbo * nb), value, name="matmul_packed", attrs=attrs)
    if not padded_rows and isinstance(n, int) and nbo * nb == n:
        return out
    return te.compute((*out_batch, m, n), lambda *idx: out[idx], name="crop")
