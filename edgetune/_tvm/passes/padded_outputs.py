"""Zero pads written by the kernel before them.

A MediaPipe network pads a layer's output explicitly before each strided depthwise layer
(``PAD`` then a ``VALID`` convolution): legalized, that is a kernel of its own — a pass over the
whole tensor that copies it into a larger one (pose landmark's 128² × 64 and 64² × 144 pads:
0.71 of its 62.4 M A76 cycles). After scheduling, where a pad's input is a scheduled kernel's
output used by nothing else, that kernel writes into the padded tensor instead: its output
buffer becomes a strided view of the padded one (offset to the interior), and the border is
zeroed first. The kernel's schedule is untouched, so tuning records (which match the kernel as
fused) still apply; a kernel that reads its output's memory through another buffer (a flat
alias, as the sparse kernel's) is left alone, and so is a pad on the batch or channel axis.
"""

from __future__ import annotations

import re
from typing import Any

from ..core import tvm
from ..kernels.sparse import zero_border
from .common import relax

_READ = re.compile(r"T\.reads\((\w+)\[([^\]]*)\]\)")
_OFFSET = re.compile(r"^\s*v_\w+(?:\s*-\s*T\.int64\((\d+)\))?\s*$")


def _pad_widths(pad: Any) -> tuple[int, ...] | None:
    """Per axis, the zeros a legalized constant-zero pad puts before its input (from the index
    its one block reads at), or None where ``pad`` is no such function."""
    src = "\n".join(line for line in pad.script().splitlines() if not line.lstrip().startswith("#"))
    if src.count("T.sblock(") != 1 or 'T.sblock("PadInput")' not in src or "T.if_then_else(" not in src:
        return None
    if not re.search(r",\s*T\.float(32|16)\(0(\.0)?\)\)\s*$", src.strip()):
        return None  # a pad value other than zero
    read = _READ.search(src)
    if read is None:
        return None
    before = []
    for index in read.group(2).split(","):
        m = _OFFSET.match(index)
        if m is None:
            return None
        before.append(int(m.group(1) or 0))
    return tuple(before)


def _shape(var: Any) -> list[int] | None:
    """A Relax tensor variable's static shape (None where it has none)."""
    try:
        return [int(d) for d in var.ty.shape.values]
    except (AttributeError, TypeError):
        return None


def _writing_padded(kernel: Any, padded: list[int], before: tuple[int, ...]) -> Any | None:
    """``kernel`` (a scheduled PrimFunc) writing its output into the interior of a zero-padded
    tensor of shape ``padded`` (NHWC, pads on H and W): the border zeroed, then its own body on
    a strided view. None where its output's memory is reached another way."""
    from tvm.script import from_source

    src = kernel.script()
    out = kernel.params[-1].name
    if f"{out}.data" in src or "metadata[" in src:
        return None
    lines = src.splitlines()
    at = next((k for k, line in enumerate(lines) if line.startswith("def main(")), None)
    if at is None:
        return None
    n, hp, wp, c = padded
    shape = [int(d) for d in kernel.params[-1].shape]
    dtype = str(kernel.params[-1].dtype)
    dims = lambda values: "(" + ", ".join(f"T.int64({v})" for v in values) + ")"  # noqa: E731
    declared = f'{out}: T.Buffer({dims(shape)}, "{dtype}")'
    if declared not in lines[at]:
        return None
    top, left = before[1], before[2]
    h, w = shape[1], shape[2]
    bottom, right = hp - top - h, wp - left - w
    p = f"{out}_padded"
    body = [f'    {out} = T.decl_buffer({dims(shape)}, "{dtype}", data={p}.data, '
            f"strides={dims([hp * wp * c, wp * c, c, 1])}, elem_offset=T.int64({(top * wp + left) * c}))"]
    body += zero_border(p, (n, hp, wp, c), (top, bottom, left, right), "    ", dtype)
    attrs = at + 1 if lines[at + 1].strip().startswith("T.func_attr(") else at
    lines[at] = lines[at].replace(declared, f'{p}: T.Buffer({dims(padded)}, "{dtype}")')
    try:
        return from_source("\n".join(lines[:attrs + 1] + body + lines[attrs + 1:]))
    except Exception:  # noqa: BLE001 — a kernel this rewrite cannot express keeps its separate pad
        return None


def padded_outputs(mod: Any) -> tuple[Any, dict[str, str]]:
    """``mod`` (scheduled) with each zero pad of a kernel's only use written by that kernel,
    and the kernels that now write padded outputs (old name → new name). A kernel or pad called
    elsewhere too stays in the module for those calls."""
    tirx = tvm().tirx
    main = mod["main"]
    uses: dict[Any, int] = {}

    def count(node: Any) -> None:
        if isinstance(node, relax.Var):
            uses[node] = uses.get(node, 0) + 1

    relax.analysis.post_order_visit(main.body, count)
    call_tir = tvm().ir.Op.get("relax.call_tir")
    builder = relax.BlockBuilder(mod)
    blocks, renamed = [], {}
    widths: dict[str, tuple[int, ...] | None] = {}  # per function: a network calls each kernel many times

    def pad_widths(gv: Any) -> tuple[int, ...] | None:
        if gv.name_hint not in widths:
            func = mod[gv]
            widths[gv.name_hint] = _pad_widths(func) if isinstance(func, tirx.PrimFunc) else None
        return widths[gv.name_hint]

    for block in main.body.blocks:
        producers = {b.var: b for b in block.bindings if isinstance(b, relax.VarBinding)}
        dropped, bindings = set(), []
        for binding in block.bindings:
            value = getattr(binding, "value", None)
            if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                source = value.args[1].fields[0] if len(value.args[1].fields) == 1 else None
                before = pad_widths(value.args[0])
                made = producers.get(source) if before is not None else None
                if made is not None and uses.get(source, 0) == 1 and isinstance(made.value, relax.Call) \
                        and made.value.op.same_as(call_tir) and len(before) == 4 and before[0] == before[3] == 0:
                    kernel = mod[made.value.args[0]]
                    padded = _shape(binding.var)
                    inner = _shape(made.var)
                    if padded and inner and padded[0] == inner[0] and padded[3] == inner[3] \
                            and str(binding.var.ty.dtype) in ("float32", "float16") and isinstance(kernel, tirx.PrimFunc) \
                            and kernel.attrs is not None and kernel.attrs.get("tirx.is_scheduled"):
                        fused = _writing_padded(kernel, padded, before)
                        if fused is not None:
                            gv = builder.add_func(fused, f"{made.value.args[0].name_hint}_padded")
                            renamed[made.value.args[0].name_hint] = gv.name_hint
                            new = relax.Call(call_tir, [gv, *made.value.args[1:]], made.value.attrs, value.ty_args)
                            bindings.append(relax.VarBinding(binding.var, new))
                            dropped.add(made.var)
                            continue
            bindings.append(binding)
        bindings = [b for b in bindings if b.var not in dropped]
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock) else relax.BindingBlock(bindings))
    if not renamed:
        return mod, {}
    mod = builder.get()
    mod["main"] = relax.Function(main.params, relax.SeqExpr(blocks, main.body.body), main.ret_ty, main.is_pure,
                                 main.attrs, main.span)
    return relax.transform.DeadCodeElimination(["main"])(mod), renamed
