"""Shapes and tiles the kernels share: a shape's dimensions (ints, or symbolic extents of a
range of lengths), symbolic extents rounded up to whole register tiles and the annotations of a
kernel over symbolic rows, and the crop of a packed kernel's padded channels."""

from __future__ import annotations

from typing import Any


def dims(shape: Any) -> list[Any]:
    """A TE shape's dimensions: ints where constant, the symbolic expressions as they are."""
    return [int(x) if hasattr(x, "value") or isinstance(x, int) else x for x in shape]


def whole_tiles(extent: Any, tile: int) -> Any:
    """A symbolic ``extent`` (a range of lengths) rounded up to whole tiles of ``tile``, counted
    as ``ceildiv(max(extent, 1), tile)``: TVM can then prove a tile exists and sizes the register
    tile's accumulators as a constant (with a plain ``ceildiv`` they were a run-time size, a
    workspace allocation per tile)."""
    from tvm import tirx

    return tile * tirx.ceildiv(tirx.max(extent, 1), tile)


def row_variant(row_tile: int, rows: tuple[str, int]) -> dict[str, Any]:
    """The annotations of a kernel over a symbolic row count: its register-tile height and, for
    tuning, which kernel it is (``rows[0]``: a signature shared by its variants of other
    heights) and the height an untuned build gives it (``rows[1]``). The height is part of the
    kernel (its rows are padded to whole tiles), so tuning measures each as a variant of the
    signature, as a convolution's direct and Winograd kernels."""
    out: dict[str, Any] = {"edgetune.row_tile": row_tile}
    if rows[0]:
        out.update({"edgetune.rows": rows[0], "edgetune.rows_default": rows[1]})
    return out


def crop(out: Any, channels: int) -> Any:
    """The first ``channels`` of the last axis (the packed kernels compute whole vector blocks)."""
    from tvm import te

    if int(out.shape[-1]) == channels:
        return out
    return te.compute((*out.shape[:-1], channels), lambda *idx: out[idx], name="crop")
