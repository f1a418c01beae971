"""Building candidates: edgetune's builder, a MetaSchedule ``PyBuilder`` (kernels compiled without
MetaSchedule's tensor intrinsic import, linked for the board), on a pool of workers that stay.
Importing this module imports TVM (the builder class derives from MetaSchedule's)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..cuda import cuda_compile_env
from .base import classes, derived_object, meta_schedule
from .pool import shielded_pool

TIMING_FILE = "timing.json"


def build_candidate(mod: Any, target: Any, cuda: Any = None) -> Any:
    """Build one candidate (runs in a builder worker). Unlike MetaSchedule's default it does not
    import ``tvm.s_tir.tensor_intrin`` (≈23 s per fresh worker, which times every build out).
    With ``cuda`` (a CudaToolchain) GPU kernels are compiled by nvcc into a cubin."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    if cuda is not None:
        with cuda_compile_env(cuda), target:
            built = tvm_build(mod, target=target)
    else:  # a CPU: table lookups as vector code (:mod:`..codegen.lookups`), as the package is built
        from ..codegen import lookups
        from ..targets import codegen_target

        lookups.register()
        # a Winograd candidate for Arm at -O2, as the package builds it (LLVM's AArch64 back end is slow at -O3)
        kernels = ["winograd"] if "winograd" in mod.script(show_meta=False) else []
        built = tvm_build(mod, target=codegen_target(target, kernels), pipeline=lookups.PIPELINE)
    return built


def export_candidate(rt_mod: Any, lower_s: float, cc: str | None, workdir: str | None = None) -> str:
    """Link a candidate into a shared library for the board (runs in a builder worker), in a
    directory under ``workdir`` (the tuning run's, removed with it even when a worker is killed
    mid-build); the lowering (``lower_s``), compile and link times go into ``timing.json``
    beside it."""
    import time

    from tvm.support import cc as tvm_cc

    start = time.perf_counter()
    directory = tempfile.mkdtemp(prefix="cand-", dir=workdir)
    path = os.path.join(directory, "candidate.so")
    link = tvm_cc.cross_compiler(cc) if cc else tvm_cc.create_shared
    linking = [0.0]

    def timed_link(output: str, objects: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return link(output, objects, **kwargs)
        finally:
            linking[0] += time.perf_counter() - t0

    timed_link.output_format = getattr(link, "output_format", "so")  # type: ignore[attr-defined]
    rt_mod.export_library(path, fcompile=timed_link)
    total = time.perf_counter() - start
    # export_library runs LLVM's code generation (object file), then the linker
    timing = {"lower_s": lower_s, "codegen_s": total - linking[0], "link_s": linking[0]}
    with open(os.path.join(directory, TIMING_FILE), "w") as fh:
        json.dump(timing, fh)
    return path


def artifact_timing(path: str | None) -> dict[str, float]:
    """Compile and link seconds of a built candidate (empty if unknown)."""

    if not path:
        return {}
    try:
        with open(os.path.join(os.path.dirname(path), TIMING_FILE)) as fh:
            return {k: float(v) for k, v in json.load(fh).items()}
    except (OSError, ValueError):
        return {}


def build_and_export(build: Callable[[Any, Any], Any], export: Callable[[Any, float], str], mod: Any,
                     target: Any) -> str:
    """One candidate from schedule to shared library (runs in a builder worker): ``build`` it,
    timed, and ``export`` it with that time."""
    import time

    start = time.perf_counter()
    rt_mod = build(mod, target)
    return export(rt_mod, time.perf_counter() - start)


def make_builder(cc: str | None, workers: int, timeout: float, cuda: Any = None, workdir: Path | None = None) -> Any:
    """A parallel host builder whose candidates are shared libraries for the board's arch."""
    return PooledBuilder(workers, timeout, functools.partial(build_candidate, cuda=cuda),
                         functools.partial(export_candidate, cc=cc, workdir=str(workdir) if workdir else None))


@derived_object
class PooledBuilder(classes().builder.PyBuilder):
    """MetaSchedule's ``LocalBuilder`` without its new process pool per batch: the workers stay
    (each imports TVM once, ~0.7 s of CPU that LocalBuilder paid per worker and batch) and are
    recycled after ``uses`` builds, which bounds the slow leak LocalBuilder restarts them for.
    A candidate that fails or times out is a result with its error, not an exception."""

    def __init__(self, workers: int, timeout: float, f_build: Callable[..., Any], f_export: Callable[..., Any],
                 uses: int = 256):
        super().__init__()
        self.timeout, self.f_build, self.f_export = timeout, f_build, f_export
        self.pool = shielded_pool(workers, timeout, uses)

    def build(self, build_inputs: Sequence[Any]) -> list[Any]:
        from tvm.support.popen_pool import StatusKind

        jobs = [(self.f_build, self.f_export, i.mod, i.target) for i in build_inputs]
        out = []
        for res in self.pool.map_with_error_catching(lambda job: build_and_export(*job), jobs):
            if res.status == StatusKind.COMPLETE:
                out.append(meta_schedule().builder.BuilderResult(res.value, None))
            elif res.status == StatusKind.TIMEOUT:
                out.append(meta_schedule().builder.BuilderResult(None, f"build timed out after {self.timeout:.0f} s"))
            else:
                out.append(meta_schedule().builder.BuilderResult(None, f"build failed: {res.value}"))
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pool.shutdown()


def remove_artifact(path: str | None) -> None:
    if path:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def builder_input(candidate: Any, target: Any) -> Any:
    return meta_schedule().builder.BuilderInput(candidate.sch.mod, target)
