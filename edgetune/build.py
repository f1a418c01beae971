"""Compile an imported model for a device profile into a shared library."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _tvm, elf, toolchain
from .errors import BuildError, ProfileError, UsageError
from .model import ImportedModel, TensorSpec
from .profiles import Profile

LIBRARY = "model.so"


@dataclass(frozen=True)
class CompiledArtifact:
    """A built library and what it was built for."""

    library: Path
    profile: str
    arch: str
    runtime: str
    target: dict[str, Any]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    model_sha256: str
    tvm_version: str
    build_seconds: float
    lowering: str = ""
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)  # fused function → kind, calls, flops
    precision: str = "fp32"  # what the kernels compute in: fp32, or fp16 (inputs and outputs keep their dtypes)


def half_profiles() -> list[str]:
    """The profiles whose boards compute in float16 (:func:`edgetune._tvm.has_half`)."""
    from .profiles import load_profiles

    return [name for name, p in load_profiles().items() if _tvm.has_half(_tvm.make_target(p.target_spec()))]


def check_precision(profile: Profile, precision: str) -> None:
    """Refuse a precision the profile's board cannot compute in: UsageError for an unknown one,
    ProfileError naming the boards that have float16 arithmetic for fp16 on one without."""
    if precision not in _tvm.PRECISIONS:
        raise UsageError(f"unknown precision '{precision}'", f"choose one of {', '.join(_tvm.PRECISIONS)}")
    if precision == "fp16" and not _tvm.has_half(_tvm.make_target(profile.target_spec())):
        raise ProfileError(f"profile '{profile.name}' ({profile.description}) has no float16 arithmetic",
                           f"--precision fp16 needs a board that has it: {', '.join(half_profiles())}; "
                           f"for {profile.name} package in fp32 (the default)")


def half_hint(profile: Profile, precision: str) -> str | None:
    """What a user packaging in float32 for a board with float16 arithmetic should know (None
    elsewhere): ``--precision fp16`` exists there, and what it gains and costs."""
    if precision != "fp32" or not _tvm.has_half(_tvm.make_target(profile.target_spec())):
        return None
    if profile.runtime == "cuda":
        return (f"{profile.name} computes in float16 too: --precision fp16 gives the matmul rules float16 operands "
                "(tensor cores take no others) and halves the weights; the reference check measures its error")
    return (f"{profile.name} computes in float16 too: --precision fp16 (8 lanes a NEON register where float32 has 4; "
            "weights half the size) runs in about 0.5-0.7x the cycles of float32 by the Pi 5 estimate, within a "
            "tolerance the reference check measures on the model")


def check_toolchain(profile: Profile) -> tuple[str | None, Any]:
    """Resolve the profile's compiler (and nvcc for CUDA) before any work; ToolchainError if missing."""
    cc = toolchain.cross_compiler(profile)
    cuda = toolchain.find_cuda(profile) if profile.runtime == "cuda" else None
    return cc, cuda


def _check_library(library: Path, profile: Profile) -> None:
    """Guard against silent wrong output: another ELF machine, or CUDA source instead of a cubin."""
    got = elf.machine(library)
    if got != profile.arch:
        raise BuildError(f"the built library is {got}, profile '{profile.name}' needs {profile.arch}",
                         "check the profile's [toolchain] cc and target mtriple")
    if profile.runtime == "cuda":
        want = str(profile.target.get("arch", ""))
        archs = elf.cuda_archs(library)
        if archs != [want]:
            raise BuildError(
                f"the library's GPU code is {archs or 'CUDA source, not a compiled binary'}, expected {want}",
                "nvcc was not used for the kernels; EDGETUNE_DEBUG=1 shows why",
            )


def compile_model(model: ImportedModel, profile: Profile, out_dir: Path, records: Path | None = None,
                  layout: str = "auto", conv_choice: Any = "auto", precision: str = "fp32") -> CompiledArtifact:
    """Build ``model`` for ``profile`` into ``out_dir/model.so``: tuning ``records`` applied
    where they match, default schedules for every other kernel; ``precision`` "fp16" computes
    in float16 (:func:`check_precision` first).

    Raises ToolchainError (missing compiler/nvcc, checked first), ProfileError (bad target) or
    BuildError.
    """
    cc, cuda = check_toolchain(profile)
    target = _tvm.make_target(profile.target_spec())
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / LIBRARY
    start = time.perf_counter()
    info = _tvm.build(model.mod, target, library, cc, cuda, records, layout, conv_choice, precision)
    _check_library(library, profile)
    return CompiledArtifact(
        library=library,
        profile=profile.name,
        arch=profile.arch,
        runtime=profile.runtime,
        target=_tvm.target_to_json(target),
        inputs=model.inputs,
        outputs=model.outputs,
        model_sha256=model.sha256,
        tvm_version=_tvm.version(),
        build_seconds=round(time.perf_counter() - start, 3),
        lowering=info.lowering,
        kernels=dict(info.kernels),
        precision=precision,
    )
