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
