"""Targets: TVM ``Target`` objects from a profile's JSON form, the facts of the host CPU, and the
lowering a target's builds use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ProfileError
from .core import plain, tvm


def host_cpu() -> tuple[str, str]:
    """(LLVM triple, LLVM cpu name) of this machine."""
    tvm()
    from tvm.target import codegen

    return str(codegen.llvm_get_system_triple()), str(codegen.llvm_get_system_cpu())


def make_target(spec: Mapping[str, Any]) -> Any:
    """Build a ``tvm.target.Target`` from its JSON form; invalid keys become ProfileError."""
    tvm()
    from tvm.target import Target

    try:
        return Target(dict(spec))
    except (ValueError, RuntimeError) as err:
        first = str(err).strip().splitlines()[-1] if str(err).strip() else repr(err)
        raise ProfileError(f"invalid TVM target {dict(spec)}: {first}") from err


def target_to_json(target: Any) -> dict[str, Any]:
    """The full target as plain JSON data (TVM's Map/Array converted)."""
    return plain(target.export())


ARM_WINOGRAD_OPT_LEVEL = 2


def codegen_target(target: Any, kernels: Any) -> Any:
    """The target a library's machine code is generated for: ``target`` itself, except for an
    Arm library with Winograd kernels (names in ``kernels``), which LLVM compiles at -O2: its
    AArch64 back end at -O3 took 75 s for SqueezeNet's (5 s without them), at -O2 20 s, and
    the Pi 4 estimate of the library moved +2.5 % (benchmarks/arm_estimate.py; direct kernels
    alone: +1.5 %)."""
    arm = target.kind.name == "llvm" and str(target.attrs.get("mtriple", "")).startswith(("aarch64", "arm"))
    if not arm or not any("winograd" in str(name) for name in kernels) or "opt-level" in target.attrs:
        return target
    return make_target({**target_to_json(target), "opt-level": ARM_WINOGRAD_OPT_LEVEL})


PRECISIONS = ("fp32", "fp16")


@dataclass(frozen=True)
class Lowering:
    """How a model's graph is lowered before fusion; ``key`` is stamped on tuning records."""

    layout: str  # "nhwc" | "nchw" (the model's own)
    pack: bool  # repack constant weights for the micro-kernels
    precision: str = "fp32"  # "fp16": the float32 graph computed in float16 (:mod:`.passes.precision`)

    @property
    def key(self) -> str:
        return f"{self.layout}{'-packed' if self.pack else ''}{'' if self.precision == 'fp32' else '-' + self.precision}"

    @property
    def half(self) -> bool:
        return self.precision == "fp16"


NATIVE = Lowering("nchw", False)  # TVM's own legalization: GPU targets, and edgetune 0.1's records


NHWC_PACKED = Lowering("nhwc", True)


LOWERINGS = {lw.key: lw for base in (NATIVE, NHWC_PACKED) for lw in (base, replace(base, precision="fp16"))}


def lowering_for(target: Any, layout: str = "auto", precision: str = "fp32") -> Lowering:
    """The lowering for ``target``, ``--layout`` and ``--precision``: NHWC with packed weights
    for CPUs (``auto``, ``nhwc``), TVM's own NCHW legalization for GPUs and with ``nchw`` (what
    edgetune 0.1 built and tuned: its records apply only to that); float16 arithmetic with
    ``fp16`` (where the target has it: :func:`has_half`)."""
    base = NATIVE if target.kind.name != "llvm" or layout == "nchw" else NHWC_PACKED
    return replace(base, precision=precision)


def has_half(target: Any) -> bool:
    """Whether ``target`` computes in float16 at full rate: an Arm CPU with the v8.2 half-precision
    arithmetic (``+fullfp16``: the Cortex-A76 of the Pi 5, Orin's A78AE) or a CUDA GPU of compute
    capability 5.3 or more (every Jetson since the TX1)."""
    if target.kind.name == "cuda":
        arch = str(target.attrs.get("arch", ""))
        return arch.startswith("sm_") and int(arch[3:].rstrip("a")) >= 53
    if target.kind.name != "llvm" or not str(target.attrs.get("mtriple", "")).startswith("aarch64"):
        return False
    tvm()
    from tvm.target import codegen

    return bool(codegen.target_has_features("fullfp16", target))
