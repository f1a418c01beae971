"""Targets: TVM ``Target`` objects from a profile's JSON form, the facts of the host CPU, and the
lowering a target's builds use."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Lowering:
    """How a model's graph is lowered before fusion; ``key`` is stamped on tuning records."""

    layout: str  # "nhwc" | "nchw" (the model's own)
    pack: bool  # repack constant weights for the micro-kernels

    @property
    def key(self) -> str:
        return f"{self.layout}{'-packed' if self.pack else ''}"


NATIVE = Lowering("nchw", False)  # TVM's own legalization: GPU targets, and edgetune 0.1's records


NHWC_PACKED = Lowering("nhwc", True)


LOWERINGS = {lw.key: lw for lw in (NATIVE, NHWC_PACKED)}


def lowering_for(target: Any, layout: str = "auto") -> Lowering:
    """The lowering for ``target`` and ``--layout``: NHWC with packed weights for CPUs (``auto``,
    ``nhwc``), TVM's own NCHW legalization for GPUs and with ``nchw`` (what edgetune 0.1 built
    and tuned: its records apply only to that)."""
    if target.kind.name != "llvm" or layout == "nchw":
        return NATIVE
    return NHWC_PACKED
