"""What FuseOps should (not) fuse: broadcasts kept apart, table lookups as elementwise."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import tvm
from .common import (
    BROADCAST,
    ELEMWISE,
    INJECTIVE,
    OPAQUE,
    OUT_EWISE_FUSABLE,
    bindings_of,
    const_array,
    is_tensor,
    module_pass,
    relabel,
    relax,
)


@module_pass(opt_level=0)
class BroadcastsApart:
    """A broadcast op that spreads a convolution's (or dense layer's) small output over a larger
    tensor — a squeeze-and-excitation gate times its feature map — is kept out of that kernel:
    FuseOps would fuse it as the kernel's epilogue, whose loops then run over the large shape and
    recompute every sum once per pixel (MobileNetV3's gates: 0.4–0.6 ms each, 1 GFLOP/s). The op is
    labelled injective for its call only (a copy of its PrimFunc), so it still fuses with what
    follows it."""

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        return relabel(mod, _broadcasts_apart_labels(mod))


def _broadcasts_apart_labels(mod: Any) -> dict[Any, tuple[Any, int, str]]:
    """The broadcast calls of ``main`` to relabel injective."""
    main = mod["main"]
    bound = bindings_of(main)
    call_tir = tvm().ir.Op.get("relax.call_tir")

    def pattern(value: Any) -> int | None:
        if not isinstance(value, relax.Call) or not value.op.same_as(call_tir):
            return None
        func = mod[value.args[0]]
        return int(func.attrs["op_pattern"]) if func.attrs is not None and "op_pattern" in func.attrs else None

    def from_reduction(var: Any) -> bool:
        """``var`` is a convolution's / dense layer's output, or elementwise work on one."""
        while var in bound:
            p = pattern(bound[var])
            if p == OUT_EWISE_FUSABLE:
                return True
            if p not in (ELEMWISE, BROADCAST):
                return False
            var = next((a for a in bound[var].args[1].fields if isinstance(a, relax.Var)), None)
        return False

    def shape(expr: Any) -> list[int] | None:
        if not is_tensor(expr) or expr.ty.shape is None:
            return None
        try:
            return [int(d) for d in expr.ty.shape.values]
        except TypeError:  # a symbolic dimension
            return None

    def spread(small: Any, out: list[int]) -> bool:
        """``small`` is broadcast to ``out`` (size-1 axes stretched), not merely smaller (a pad)."""
        dims = shape(small)
        if dims is None or len(dims) > len(out) or int(np.prod(dims)) >= int(np.prod(out)):
            return False
        return all(d in (1, o) for d, o in zip(reversed(dims), reversed(out)))

    labels = {}
    for var, value in bound.items():
        out = shape(value)
        if pattern(value) not in (ELEMWISE, BROADCAST) or out is None:
            continue
        if any(isinstance(a, relax.Var) and spread(a, out) and from_reduction(a) for a in value.args[1].fields):
            labels[var] = (value, INJECTIVE, "apart")
    return labels


@module_pass(opt_level=0)
class TableLookupsElementwise:
    """Lookups in a constant 1-D table (``take(table, index)``, :class:`.int8_elementwise.Int8Tables`)
    labelled elementwise, for their call only: TVM labels ``take`` injective (its output is not
    a function of the same element of its index in general), so FuseOps kept each lookup out of
    the convolution it follows — a kernel of its own, a pass over memory and a dispatch per
    table. Over a constant table indexed by a tensor of the output's shape it is elementwise."""

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        return relabel(mod, _table_lookups_elementwise_labels(mod))


def _table_lookups_elementwise_labels(mod: Any) -> dict[Any, tuple[Any, int, str]]:
    """The lookups of ``main`` to relabel elementwise."""
    main = mod["main"]
    call_tir = tvm().ir.Op.get("relax.call_tir")
    labels = {}
    for block in main.body.blocks:
        for b in block.bindings:
            value = b.value
            if not isinstance(value, relax.Call) or not value.op.same_as(call_tir):
                continue
            args = list(value.args[1].fields)
            func = mod[value.args[0]]
            if len(args) != 2 or not value.args[0].name_hint.startswith("take") or func.attrs is None:
                continue
            table = const_array(args[0])
            if (table is not None and table.ndim == 1 and int(func.attrs.get("op_pattern", ELEMWISE)) != ELEMWISE
                    and is_tensor(args[1]) and is_tensor(value)
                    and [int(d) for d in args[1].ty.shape.values] == [int(d) for d in value.ty.shape.values]):
                labels[b.var] = (value, ELEMWISE, "lookup")
    return labels


_CROPPED_KERNELS = ("dense_packed", "matmul_packed", "dense_int8")


@module_pass(opt_level=0)
class CroppedKernelsFusable:
    """A dense / matmul kernel that computes whole register tiles and crops them (rows padded to
    the tile: a symbolic length, 197 tokens) is labelled as fusable with its elementwise epilogue
    (bias, GELU, residual add) like the uncropped kernel: TVM's pattern analysis reads the crop's
    index remapping as opaque, so the epilogue ran as a pass of its own, a dispatch and a trip
    over memory per layer."""

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        from tvm import tirx

        updates = {}
        for gv, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc) and func.attrs is not None and \
                    int(func.attrs.get("op_pattern", -1)) == OPAQUE and _cropped_kernel(func):
                updates[gv] = func.with_attr("op_pattern", OUT_EWISE_FUSABLE)
        for gv, func in updates.items():
            mod[gv] = func
        return mod


def _cropped_kernel(func: Any) -> bool:
    """Whether ``func`` is one of edgetune's packed dense / matmul kernels followed by its crop only."""
    from tvm import s_tir

    from ..schedules.common import block_name, child_blocks

    if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
        return False  # written scheduled (a recurrent loop kernel): no blocks to read
    sch = s_tir.Schedule(func)
    blocks = child_blocks(sch)
    return (len(blocks) >= 2 and block_name(sch, blocks[-1]) == "crop"
            and str(sch.get(blocks[-2]).annotations.get("edgetune.kernel", "")) in _CROPPED_KERNELS)
