"""Tuning tasks: the kernels of a fused module as MetaSchedule workloads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import tvm
from ..targets import LOWERINGS
from .base import meta_schedule


def tuning_module(mod: Any) -> Any:
    """The module records apply to and tasks come from: inference-decomposed, canonical, unfused.

    Handing ``compile_relax`` a fused module silently stops records from matching (TVM 0.27,
    measured: it fuses again, so its PrimFuncs no longer hash as the recorded workloads).
    """
    from tvm import relax

    seq = tvm().transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                      relax.transform.CanonicalizeBindings()])
    return seq(mod)


@dataclass(frozen=True)
class Workload:
    """One tunable kernel of a network: a fused TIR function and how often the network calls it."""

    name: str
    shash: str
    weight: int
    flops: float
    mod: Any  # the TIR IRModule MetaSchedule tunes
    kind: str = "naive"  # what the default schedule treats it as (conv2d, depthwise, dense, …)
    signature: str = ""  # a convolution's shape, shared by its direct and Winograd variants
    variant: str = ""  # "direct" | "winograd" for convolutions that have both
    rules: str = ""  # the schedule rules that tune it (for --list-tasks)


def workload_hash(mod: Any) -> str:
    """The structural hash the JSON database files a workload under (as it writes it)."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(mod))


def extract_workloads(mod: Any, target: Any, lowering_key: str, conv_choice: Any = "auto") -> list[Workload]:
    """Lower and fuse ``mod`` exactly as the build will (``conv_choice``: direct or Winograd
    kernels for 3×3 stride-1 convolutions) and list its kernels."""
    from tvm.s_tir.analysis import estimate_tir_flops

    from ..passes import pipeline
    from ..schedules import dispatch

    fused = pipeline.fuse(mod, target, LOWERINGS[lowering_key], conv_choice)
    cpu = target.kind.name == "llvm"
    out = []
    for task in meta_schedule().relax_integration.extract_tasks(fused, target):
        tir = task.dispatched[0]  # an IRModule holding the PrimFunc as "main"
        func = tir["main"]
        if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
            continue  # written scheduled (a recurrent loop kernel): nothing to tune
        try:
            flops = float(estimate_tir_flops(tir))
        except Exception:  # noqa: BLE001 — data-dependent loops have no estimate
            flops = 0.0
        kind = dispatch.classify(tir) if cpu else "gpu"
        sig, variant = dispatch.conv_variant(tir) if cpu else ("", "")
        out.append(Workload(str(task.task_name), workload_hash(tir), int(task.weight), flops, tir, kind, sig, variant,
                            rule_family(tir, kind, target)))
    return out


def rule_family(tir: Any, kind: str, target: Any) -> str:
    """The schedule rules a task is tuned with (``--list-tasks``): edgetune's micro-kernel
    sketch, with the int8 dot-product instruction it is tensorized with, or MetaSchedule's own
    rules for the target (CUDA: GPU thread tiling; CPU: multi-level tiling, parallel/vectorize)."""
    from ..kernels import dot
    from ..schedules import dispatch

    if target.kind.name == "cuda":
        return "MetaSchedule cuda"
    if kind not in dispatch.MICROKERNEL_KINDS:
        return "MetaSchedule llvm"
    family = dispatch.dot_family_of(tir)
    return f"micro-kernel, {dot.DESCRIPTIONS[family]}" if family else "micro-kernel"


def kernel_workloads(fused: Any) -> dict[str, str]:
    """Per PrimFunc of a fused module, the workload hash its records are filed under (what
    ``MetaScheduleApplyDatabase`` looks up): kernel names change with the build, hashes do not."""
    from tvm import tirx

    return {gv.name_hint: workload_hash(tvm().IRModule({"main": f.with_attr("global_symbol", "main")}))
            for gv, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)}
