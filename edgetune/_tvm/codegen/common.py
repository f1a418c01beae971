"""What the passes of the ``edgetune`` TIR pipeline (:mod:`.lookups`) share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def aarch64_rewrite(name: str, node: str, replace: Callable[[Any], Any | None]) -> Any:
    """A pass that, in each function for an AArch64 target, replaces every TIR node of the
    ``tvm.tirx`` class ``node`` by ``replace(node)`` where that is not None (children first);
    functions for other targets stay as they are."""
    import tvm_ffi
    from tvm import tirx

    kind = getattr(tirx, node)

    @tirx.transform.prim_func_pass(opt_level=0, name=name)
    def rewrite(func: Any, _mod: Any, _ctx: Any) -> Any:
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is None or not str(target.attrs.get("mtriple", "")).startswith("aarch64"):
            return func

        def on_node(expr: Any) -> Any:
            replaced = replace(expr)
            return expr if replaced is None else replaced

        return tvm_ffi.structural_map(func, [(kind, on_node)], order="post")

    return rewrite


def vector_dtype(expr: Any) -> Any:
    """The TVM data type (lanes included) of a TIR expression."""
    from tvm import DataType

    return DataType(str(expr.ty.dtype))


def vector_lanes(vec: Any, start: int, count: int, width: int) -> Any:
    """Lanes ``start … start+count`` of ``vec`` as a ``width``-lane vector (the last repeated)."""
    from tvm import tirx

    if start == 0 and count == width == vector_dtype(vec).lanes:
        return vec
    picks = [start + min(i, count - 1) for i in range(width)]
    copies = -(-width // vector_dtype(vec).lanes)  # a shuffle gives at most the lanes it is given
    return tirx.Shuffle([vec] * copies, [tirx.const(i, "int32") for i in picks])


def concat_lanes(parts: list[Any], counts: list[int]) -> Any:
    """The first ``counts[k]`` lanes of each ``parts[k]``, in order, as one vector."""
    from tvm import tirx

    if len(parts) == 1 and counts[0] == vector_dtype(parts[0]).lanes:
        return parts[0]
    picks, offset = [], 0
    for part, count in zip(parts, counts, strict=True):
        picks += [offset + i for i in range(count)]
        offset += vector_dtype(part).lanes
    return tirx.Shuffle(parts, [tirx.const(i, "int32") for i in picks])


def in_chunks(index: Any, width: int, body: Any) -> Any:
    """``body(chunk_index, count)`` for each ``width`` lanes of ``index`` (bound once), joined."""
    from tvm import tirx

    lanes = vector_dtype(index).lanes
    var = tirx.Var("lookup_index", str(index.ty.dtype))
    parts, counts = [], []
    for start in range(0, lanes, width):
        count = min(width, lanes - start)
        parts.append(body(vector_lanes(var, start, count, width), count))
        counts.append(count)
    return tirx.Let(var, index, concat_lanes(parts, counts))
