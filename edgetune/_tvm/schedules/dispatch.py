"""Which schedule a kernel gets: its micro-kernel rule, a generic rule, or none (plain loops)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from ..core import last_line
from ..kernels.cpu import CpuFacts
from .attention import schedule_attention
from .common import NoMatchError, child_blocks, is_reduction, kernel_of
from .depthwise import schedule_depthwise, schedule_depthwise_int8, schedule_depthwise_sdot
from .microkernels import (
    schedule_conv2d_int8,
    schedule_conv2d_lanes,
    schedule_conv2d_packed,
    schedule_dense,
    schedule_matmul,
    schedule_winograd,
)
from .registers import Decider
from .rows import schedule_rows
from .rules import schedule_blockwise, schedule_injective, schedule_reduction

log = logging.getLogger(__name__)


MICROKERNELS: dict[str, tuple[str, Callable[..., None]]] = {
    "conv2d_nhwc_packed": ("conv2d", schedule_conv2d_packed),
    "conv2d_nhwc_lanes": ("conv2d-lanes", schedule_conv2d_lanes),
    "conv2d_nhwc_int8": ("conv2d-int8", schedule_conv2d_int8),
    "dense_int8": ("dense-int8", schedule_conv2d_int8),  # a 1×1 convolution over rows (kernels.conv.dense_int8)
    "depthwise_conv2d_nhwc": ("depthwise", schedule_depthwise),
    "depthwise_conv2d_nhwc_int8": ("depthwise-int8", schedule_depthwise_int8),
    "depthwise_conv2d_nhwc_sdot": ("depthwise-sdot", schedule_depthwise_sdot),
    "dense_packed": ("dense", schedule_dense),
    "matmul_packed": ("matmul", schedule_matmul),
    "softmax_rows": ("softmax", schedule_rows),
    "layer_norm_rows": ("layer-norm", schedule_rows),
    "rms_norm_rows": ("rms-norm", schedule_rows),
    "winograd_gemm": ("winograd", schedule_winograd),
    "attention_fused": ("attention", schedule_attention),
}


def _main_microkernel(sch: Any) -> tuple[Any, str, Callable[..., None]] | None:
    for block in child_blocks(sch):
        kernel = kernel_of(sch, block)
        if kernel in MICROKERNELS:
            kind, fn = MICROKERNELS[kernel]
            return block, kind, fn
    return None


def conv_variant(func: Any) -> tuple[str, str, str]:
    """A kernel that has variants (tuning measures each, the build takes the faster): (its
    signature, this variant, the variant an untuned build uses — "" for the target's default).
    A convolution's are "direct" and "winograd" (an int8 layer's default may not be the
    target's: annotated ``edgetune.conv_default``); a dense, matmul, convolution or depthwise
    kernel over a symbolic row count or width (a range of lengths) has one per register-tile
    height, "rows6" (its default height in its annotations). ("", "", "") for any other kernel."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    for block in child_blocks(sch):
        ann = sch.get(block).annotations
        if "edgetune.conv" in ann and str(ann["edgetune.conv"]):
            variant = "winograd" if kernel_of(sch, block) == "winograd_gemm" else "direct"
            return str(ann["edgetune.conv"]), variant, str(ann.get("edgetune.conv_default", ""))
        if "edgetune.rows" in ann:
            return (str(ann["edgetune.rows"]), f"rows{int(ann['edgetune.row_tile'])}",
                    f"rows{int(ann['edgetune.rows_default'])}")
    return "", "", ""


def dot_family_of(func: Any) -> str | None:
    """The int8 dot-product family an integer convolution kernel is tensorized with, else None."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    for block in child_blocks(sch):
        ann = sch.get(block).annotations
        if "edgetune.dot" in ann:
            return str(ann["edgetune.dot"])
    return None


def classify(func: Any) -> str:
    """The kernel kind a function gets a default schedule as (``naive`` when none applies)."""
    from tvm import s_tir

    probe = s_tir.Schedule(func)
    found = _main_microkernel(probe)
    if found is not None:
        return found[1]
    reductions = sum(is_reduction(probe, b) for b in child_blocks(probe))
    return "elementwise" if reductions == 0 else "reduction"


# The loop order an untuned kernel takes (0: pixel / row tiles outermost, 1: blocks of output
# channels; tuning measures both). A dense layer goes over its weights once, each block reused
# by every row tile from L1, where rows first streamed all the weights once per row tile (and
# split the few row tiles of a short sequence unevenly between the cores). On this AVX-512 VNNI
# host (packages timed alternately, fresh processes, medians): int8 — ViT-S at 17 tokens
# 1.27-1.36 -> 1.08 ms, at 122 tokens 5.7-6.5 -> 5.3-5.8, BERT-base at 128 tokens 17.9-18.5 ->
# 16.7-17.2, MiniLM at 256 tokens the same (6.89 vs 6.77); fp32 — MiniLM at 16 tokens 2.28 ->
# 1.27, ViT-S at 17 tokens 4.57 -> 3.41, MiniLM at 128 tokens 8.64 -> 8.30, Whisper-tiny at
# 256 frames the same (12.22 vs 12.30)
DEFAULT_ORDER = {"dense_int8": 1, "dense_packed": 1}

MICROKERNEL_KINDS = frozenset(kind for kind, _fn in MICROKERNELS.values())
# kinds whose schedule has one loop order (``order`` unused): one sketch, not two of the same
ONE_ORDER = frozenset({"softmax", "layer-norm", "rms-norm", "attention", "depthwise-sdot"})


def schedule_microkernel(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """The default (first) sketch of a micro-kernel task, decisions at their defaults."""
    block, _kind, fn = _main_microkernel(sch)  # type: ignore[misc]
    fn(sch, block, cpu, cores, Decider(sch, False), DEFAULT_ORDER.get(kernel_of(sch, block), 0))


def kernel_facts(func: Any, target: Any) -> CpuFacts:
    """The CPU facts a kernel is scheduled with: a kernel reading or writing float16 (a
    ``--precision fp16`` package's) counts float16 lanes (8 a NEON register), any other float32's."""
    func = func if hasattr(func, "params") else func["main"]  # (a PrimFunc, or a task's module of one)
    half = any(str(getattr(p, "dtype", "")) == "float16" for p in func.params if hasattr(p, "shape"))
    return CpuFacts.of(target).in_dtype("float16" if half else "float32")


def design_space(sch: Any, target: Any) -> list[Any]:
    """The tunable sketches of a micro-kernel task (MetaSchedule ``ScheduleFn``): one per loop
    order, tile sizes sampled. Empty when no micro-kernel rule applies."""
    cpu, cores = kernel_facts(sch.mod["main"], target), int(target.attrs.get("num-cores", 1))
    found = _main_microkernel(sch)
    if found is None:
        return []
    out = []
    for order in (0,) if found[1] in ONE_ORDER else (0, 1):
        variant = sch.copy()
        variant.seed(sch.fork_seed())
        block, kind, fn = _main_microkernel(variant)  # type: ignore[misc]
        try:
            fn(variant, block, cpu, cores, Decider(variant, True), order)
        except Exception as err:  # noqa: BLE001 — a variant that does not apply is skipped
            log.debug("sketch %d of %s failed: %s", order, kind, err)
            continue
        out.append(variant)
    return out


class DefaultSchedule(NamedTuple):
    """A PrimFunc's default schedule: ``sch`` (an ``s_tir.Schedule`` with its trace) or None,
    the ``kind`` it was scheduled as (``naive``: plain loops), and ``why`` no rule fit."""

    sch: Any
    kind: str
    why: str = ""


def default_schedule(func: Any, target: Any, name: str = "kernel") -> DefaultSchedule:
    """The default schedule of one PrimFunc. Every rule that could fit is tried in turn; one that
    does not match or fails falls through, and ``naive`` means plain loops — with the rules'
    reasons in ``why``, and a warning where a rule failed (not merely did not match): that is a
    bug in the rule, and the kernel runs slower for it."""
    from tvm import s_tir

    cpu, cores = kernel_facts(func, target), int(target.attrs.get("num-cores", 1))
    kind = classify(func)
    rules: list[tuple[str, Callable[..., None]]]
    if kind in MICROKERNEL_KINDS:
        rules = [(kind, schedule_microkernel)]
    elif kind == "elementwise":
        rules = [("elementwise", schedule_injective)]
    else:
        rules = [("reduction", schedule_reduction), ("reduction", schedule_blockwise)]
    reasons, failed = [], False
    for label, rule in rules:
        sch = s_tir.Schedule(func)
        try:
            rule(sch, cpu, cores)
        except NoMatchError as err:
            reasons.append(f"{rule.__name__}: {err or 'does not match'}")
            continue
        except Exception as err:  # noqa: BLE001 — TVM's schedule errors are many types; the next rule is tried
            reasons.append(f"{rule.__name__} failed: {last_line(err)}")
            failed = True
            log.debug("%s rule failed", label, exc_info=True)
            continue
        return DefaultSchedule(sch, label)
    why = "; ".join(reasons) or "no rule for this kernel"
    if failed:
        log.warning("%s runs as plain loops: %s", name, why)
    return DefaultSchedule(None, "naive", why)


def apply_default_schedules(mod: Any, target: Any) -> tuple[Any, dict[str, str], dict[str, str]]:
    """Schedule every PrimFunc of a fused module that is not scheduled yet (tuning records are
    applied first). Returns the module, the kind each function got (``naive``: none), and why
    each naive one got no schedule."""
    from tvm import tirx

    kinds: dict[str, str] = {}
    why: dict[str, str] = {}
    updates = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
            # written scheduled (a recurrent loop kernel) or a tuning record applied
            kinds[gv.name_hint] = str(func.attrs.get("edgetune.kind", "tuned"))
            continue
        found = default_schedule(func, target, gv.name_hint)
        kinds[gv.name_hint] = found.kind
        if found.sch is None:
            why[gv.name_hint] = found.why
        else:
            updates[gv] = found.sch.mod["main"].with_attr("tirx.is_scheduled", True)
    for gv, func in updates.items():
        mod[gv] = func
    return mod, kinds, why
