"""Building a library: edgetune's lowering and default schedules (CPU), tuning records applied,
TVM's pipeline with DLight (GPU); and saving / loading IRModules."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from ..errors import BuildError, ModelError, ToolchainError
from .core import last_line, tvm
from .cuda import CudaToolchain, cuda_compile_env
from .facts import kernel_table
from .targets import codegen_target, lowering_for


@dataclasses.dataclass(frozen=True)
class BuildInfo:
    """How a library was built: the lowering, and per kernel (fused function) how it was
    scheduled — ``tuned`` (a record applied), a default rule's kind, or ``naive`` (plain loops)."""

    lowering: str
    kernels: dict[str, dict[str, Any]]  # fused function → {"kind", "calls", "flops"}


def build(mod: Any, target: Any, out: Path, cc: str | None, cuda: "CudaToolchain | None" = None,
          records: Path | None = None, layout: str = "auto", conv_choice: Any = "auto",
          precision: str = "fp32") -> BuildInfo:
    """Compile ``mod`` for ``target`` and export a .so.

    CPU targets: edgetune's lowering (:mod:`.passes.pipeline`; ``conv_choice`` picks direct or Winograd
    kernels per 3×3 convolution), tuning ``records`` applied where they match, default
    schedules (:mod:`.schedules.dispatch`) for every other kernel. GPU targets: TVM's
    pipeline with DLight schedules (records applied first). ``cc`` is the cross compiler driver
    used to link (None: the host's); for CUDA, ``cuda`` supplies nvcc so kernels are embedded as
    a compiled fatbin, not source. ``precision`` "fp16": the graph computed in float16
    (:mod:`.passes.precision`; the library's inputs and outputs keep their dtypes).
    """
    tvm()
    from tvm.support import cc as tvm_cc

    ctx = cuda_compile_env(cuda) if cuda else contextlib.nullcontext()
    try:
        with ctx, target:
            exe, info = _compile(mod, target, records, lowering_for(target, layout, precision), conv_choice)
        fcompile = tvm_cc.cross_compiler(cc) if cc else None
        exe.export_library(str(out), fcompile=fcompile)
    except (ToolchainError, BuildError, ModelError):
        raise
    except Exception as err:
        if "No space left on device" in str(err):  # the linker's words, deep in TVM's message
            raise BuildError(f"no space left on the device while writing {out.parent}",
                             "free some space and run again") from err
        raise BuildError(
            f"TVM could not build for {target.kind.name}: {last_line(err)}",
            "EDGETUNE_DEBUG=1 shows TVM's traceback",
        ) from err
    return info


def _compile(mod: Any, target: Any, records: Path | None, lw: Any, conv_choice: Any) -> tuple[Any, BuildInfo]:
    from .passes import pipeline

    if target.kind.name != "llvm":
        mod = pipeline.for_gpu(mod, lw.half)
        if records is not None:
            from .metaschedule.database import compile_with_records

            return compile_with_records(mod, target, records), BuildInfo(lw.key, {})
        from .schedules.gpu import cuda_pipeline

        return tvm().compile(mod, target, relax_pipeline=cuda_pipeline(target)), BuildInfo(lw.key, {})
    fused = pipeline.fuse(mod, target, lw, conv_choice)
    from .metaschedule.database import apply_records
    from .metaschedule.tasks import kernel_workloads

    workloads = kernel_workloads(fused)
    if records is not None:
        fused = apply_records(fused, target, records)
    from .schedules.dispatch import apply_default_schedules

    table = kernel_table(fused)
    fused, kinds, why = apply_default_schedules(fused, target)
    _refuse_compiler_only_calls(fused)
    from .passes.padded_outputs import padded_outputs

    fused, renamed = padded_outputs(fused)
    if renamed:  # the kernels as the library has them: the padded ones, without the pads no longer called
        present = {gv.name_hint for gv in fused.get_global_vars()}
        for facts in (kinds, why, workloads, table):
            for old, new in renamed.items():
                if old in facts:
                    facts[new] = facts[old]
            for name in [n for n in facts if n not in present]:
                del facts[name]
    kernels = {name: {"kind": kind, "workload": workloads.get(name, ""), **table.get(name, {"calls": 0, "flops": 0.0}),
                      **({"why": why[name]} if name in why else {})}
               for name, kind in kinds.items()}
    from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

    from .codegen import lookups

    lookups.register()
    rest = tvm().transform.Sequential(cpu_pipeline.dataflow_lower_passes(target) + cpu_pipeline.finalize_passes(target))
    return (tvm().compile(fused, codegen_target(target, kinds), relax_pipeline=rest, tir_pipeline=lookups.PIPELINE),
            BuildInfo(lw.key, kernels))


# packed functions a kernel may call that live in TVM's compiler library, not in the runtime a
# board's loader has: TOPI's CPU topk / argsort / sort call them (an M-LSD line detector's TopK
# built and passed its check in the compiling process, then its library failed on the loader:
# "Cannot find function tvm.contrib.sort.topk")
COMPILER_ONLY = ("tvm.contrib.sort.",)


def _refuse_compiler_only_calls(mod: Any) -> None:
    """A ModelError naming the operator whose kernel calls into :data:`COMPILER_ONLY`."""
    from tvm import tirx

    from .schedules.common import has_root_block

    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc) or has_root_block(func):
            continue  # kernels under a root block compute everything themselves; an extern's block is its call
        text = func.script()
        called = next((prefix for prefix in COMPILER_ONLY if f'"{prefix}' in text), None)
        if called is not None:
            op = gv.name_hint.rstrip("0123456789")
            raise ModelError(f"'{op}' runs as TVM's {called.rstrip('.')} library call, which the runtime on the board "
                             "does not have (TopK, ArgSort and Sort on CPUs)",
                             "keep that step outside the model (e.g. the peak picking after a detector's map) "
                             "and package the rest")
