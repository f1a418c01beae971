"""Compile an imported model for a device profile into a shared library."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _tvm, elf, toolchain
from .errors import BuildError
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
                  layout: str = "auto", conv_choice: Any = "auto") -> CompiledArtifact:
    """Build ``model`` for ``profile`` into ``out_dir/model.so``: tuning ``records`` applied
    where they match, default schedules for every other kernel.

    Raises ToolchainError (missing compiler/nvcc, checked first), ProfileError (bad target) or
    BuildError.
    """
    cc, cuda = check_toolchain(profile)
    target = _tvm.make_target(profile.target_spec())
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / LIBRARY
    start = time.perf_counter()
    info = _tvm.build(model.mod, target, library, cc, cuda, records, layout, conv_choice)
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
    )
