"""Tuning tasks: the kernels of a fused module as MetaSchedule workloads."""

from __future__ import annotations

from collections.abc import Mapping
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
    variant: str = ""  # "direct" | "winograd" for convolutions; "rows6" for symbolic rows (:func:`..dispatch.conv_variant`)
    rules: str = ""  # the schedule rules that tune it (for --list-tasks)
    # a kernel of symbolic shape (a range package's): the lengths it is timed at, each as
    # (weight, its arguments at that length: see :func:`sized_args`); its time is the weighted mean
    sizes: tuple[tuple[float, tuple[Any, ...]], ...] = ()
    lengths: tuple[tuple[Any, float], ...] = ()  # (point, weight) of each of ``sizes``: an int, the length; a tuple, several
    default_variant: str = ""  # the variant an untuned build uses ("": the target's convolution default)
    peak_factor: float = 1.0  # its peak over the device's fp32 one (:func:`peak_factor`)

    @property
    def symbolic(self) -> bool:
        return is_symbolic(self.mod)


def workload_hash(mod: Any) -> str:
    """The structural hash the JSON database files a workload under (as it writes it)."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(mod))


def extract_workloads(mod: Any, target: Any, lowering_key: str, conv_choice: Any = "auto",
                      lengths: Mapping[Any, float] | None = None,
                      variables: tuple[str, ...] = ("length",),
                      written: list[dict[str, Any]] | None = None) -> list[Workload]:
    """Lower and fuse ``mod`` exactly as the build will (``conv_choice``: direct or Winograd
    kernels for 3×3 stride-1 convolutions) and list its kernels. A module of symbolic shape (a
    range package's) has kernels of symbolic shape: each is timed at ``lengths`` (point →
    weight; a point gives ``variables`` their values: an int the one variable's, a tuple each
    one's), and its FLOPs are their weighted mean. Kernels written scheduled (a recurrent loop,
    a sparse convolution: nothing to tune) are not workloads; ``written``, when given, gets one
    ``{"kernel", "kind", "calls", "flops"}`` per such kernel (FLOPs as its generator counted
    them: its loops are data-dependent)."""

    from ..passes import pipeline
    from ..schedules import dispatch

    fused = pipeline.fuse(mod, target, LOWERINGS[lowering_key], conv_choice)
    cpu = target.kind.name == "llvm"
    out = []
    for task in meta_schedule().relax_integration.extract_tasks(fused, target):
        tir = task.dispatched[0]  # an IRModule holding the PrimFunc as "main"
        func = tir["main"]
        if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
            if written is not None:
                written.append({"kernel": str(task.task_name), "kind": str(func.attrs.get("edgetune.kind", "written")),
                                "calls": int(task.weight), "flops": float(func.attrs.get("edgetune.flops", 0.0))})
            continue
        sizes: tuple[tuple[float, tuple[Any, ...]], ...] = ()
        timed: tuple[tuple[int, float], ...] = ()
        if is_symbolic(tir) and lengths:
            values = {n: _values(n, variables) for n in lengths}
            at = {n: sized_args(tir, values[n]) for n in lengths}
            if all(a is not None for a in at.values()):  # (else a variable not the ranges': not timed)
                sizes = tuple((float(w), tuple(at[n])) for n, w in lengths.items())  # type: ignore[arg-type]
                timed = tuple((n, float(w)) for n, w in lengths.items())
            flops = _mean_flops(tir, {n: (values[n], w) for n, w in lengths.items()}) if sizes else 0.0
        else:
            flops = _flops(tir)
        kind = dispatch.classify(tir) if cpu else "gpu"
        sig, variant, default = dispatch.conv_variant(tir) if cpu else ("", "", "")
        family = dispatch.dot_family_of(tir) if cpu else None
        out.append(Workload(str(task.task_name), workload_hash(tir), int(task.weight), flops, tir, kind, sig, variant,
                            rule_family(kind, target, family), sizes, timed, default, peak_factor(family)))
    return out


def _flops(tir: Any) -> float:
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(tir))
    except Exception:  # noqa: BLE001 — data-dependent loops have no estimate
        return 0.0


def is_symbolic(tir: Any) -> bool:
    """Whether a kernel's arguments have a symbolic shape (it takes the length at run time)."""
    from tvm import ir

    func = tir["main"]
    return any(isinstance(p.ty, ir.PrimType) or not all(hasattr(d, "value") for d in p.shape) for p in func.params)


def sized_args(tir: Any, values: Mapping[str, int]) -> list[Any] | None:
    """A symbolic kernel's arguments with its variables at ``values`` (by name), in order: a
    tensor as ``["tensor", dtype, shape]``, a scalar parameter (the length itself) as ``["int",
    dtype, value]`` (what :func:`~.runner.sized_arguments` allocates). None when a shape depends
    on a variable ``values`` has no value for (it cannot be timed here)."""
    from tvm import ir

    from ..facts import value_at

    out: list[Any] = []
    for p in tir["main"].params:
        try:
            if isinstance(p.ty, ir.PrimType):
                out.append(["int", str(p.ty), value_at(p, values)])
            else:
                out.append(["tensor", str(p.dtype), [int(d) if hasattr(d, "value") else value_at(d, values)
                                                      for d in p.shape]])
        except TypeError:
            return None
    return out


def _values(point: Any, variables: tuple[str, ...]) -> dict[str, int]:
    """The variables' values at ``point`` (an int: the one variable's)."""
    values = tuple(point) if isinstance(point, (tuple, list)) else (point,)
    return {v: int(n) for v, n in zip(variables, values)}


def _mean_flops(tir: Any, points: Mapping[Any, tuple[dict[str, int], float]]) -> float:
    """A symbolic kernel's FLOPs, the weighted mean over ``points`` (each: the variables'
    values there and its weight)."""
    from tvm import ir

    func = tir["main"]
    total = sum(w for _values, w in points.values()) or 1.0
    out = 0.0
    for values, w in points.values():
        scalars = {p: values[p.name] for p in func.params if isinstance(p.ty, ir.PrimType) and p.name in values}
        fixed = func.specialize(scalars) if scalars else func
        out += w * _flops(tvm().IRModule({"main": fixed})) / total
    return out


def rule_family(kind: str, target: Any, family: str | None) -> str:
    """The schedule rules a task is tuned with (``--list-tasks``): edgetune's micro-kernel
    sketch, with the int8 dot-product instruction it is tensorized with (``family``,
    :func:`..schedules.dispatch.dot_family_of`), or MetaSchedule's own rules for the target
    (CUDA: GPU thread tiling; CPU: multi-level tiling, parallel/vectorize)."""
    from ..kernels import dot
    from ..schedules import dispatch

    if target.kind.name == "cuda":
        return "MetaSchedule cuda"
    if kind not in dispatch.MICROKERNEL_KINDS:
        return "MetaSchedule llvm"
    return f"micro-kernel, {dot.DESCRIPTIONS[family]}" if family else "micro-kernel"


def peak_factor(family: str | None) -> float:
    """A kernel's peak over the device's fp32 one, by the int8 dot-product instruction it is
    tensorized with (:func:`..schedules.dispatch.dot_family_of`): such a kernel multiplies
    faster (:data:`..kernels.dot.PEAK_FACTOR`); 1 for any other."""
    from ..kernels import dot

    return dot.PEAK_FACTOR.get(family or "", 1.0)


def kernel_workloads(fused: Any) -> dict[str, str]:
    """Per PrimFunc of a fused module, the workload hash its records are filed under (what
    ``MetaScheduleApplyDatabase`` looks up): kernel names change with the build, hashes do not."""
    from tvm import tirx

    return {gv.name_hint: workload_hash(tvm().IRModule({"main": f.with_attr("global_symbol", "main")}))
            for gv, f in fused.functions_items() if isinstance(f, tirx.PrimFunc)}
