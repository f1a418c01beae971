"""``edgetune package``: import → compile → reference check → package directory (+ tarball).

Everything is written into a hidden staging directory beside the output and moved into place
only when it is complete and verified: an error at any stage leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from edgetune_runtime.loader import FORMAT_VERSION, STATE

from . import __version__, elf, reference
from .build import CompiledArtifact, check_precision, check_toolchain, compile_model, half_hint
from .bundle import copy_loader
from .check import verify, write_reference
from .devices import resolve_device
from .errors import PackageError
from .importer import bindings_per_model, detect_format, import_model, shapes_per_model
from .model import ImportedModel, save_state
from .package_files import PackageResult, check_output, install, remove_stale, write_manifest, write_tarball
from .profiles import Profile
from .range_package import package_range
from .ranges import split

log = logging.getLogger(__name__)

SCHEMA_URL = "edgetune package manifest, format 1 (see README: Package format)"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PackageOptions:
    """What ``edgetune package`` was asked to do."""

    model: Path
    device: str
    output: Path
    # a dimension may be a range (lo, hi): a range package (edgetune.ranges)
    input_shapes: Mapping[str, tuple[int | tuple[int, int], ...]] = field(default_factory=dict)
    bindings: Mapping[str, str] = field(default_factory=dict)  # --bind NAME=VALUE: inputs made constants
    verify: bool = True
    tar: bool = False
    force: bool = False
    rtol: float | None = None  # None: reference.RTOL (1e-3), with bounds measured on the model where they apply
    atol: float = 1e-5
    seed: int = 0
    records: Path | None = None  # None: the profile's default records directory
    use_records: bool = True
    layout: str = "auto"  # auto | nhwc | nchw (see edgetune._tvm.targets.lowering_for)
    precision: str = "fp32"  # fp32 | fp16: what the kernels compute in (fp16 where the board has it)
    buckets: tuple[int, ...] = ()  # a range package's compiled lengths (empty: one symbolic-shape library)
    symbolic: bool = False  # (edgetune.ranges) build the range's length as a symbolic extent, one library
    # without records: each convolution's variant by signature (direct | winograd), as a tuned
    # build chose them (the network check times kernels of the same variant); None: the target's
    conv_variants: Mapping[str, str] | None = None
    # a symbolic range package's timing points (bench, the tuner's network check): point → weight,
    # as ``edgetune tune --shape-weights`` weighs them; empty: the range's end and halvings, equally
    shape_weights: Mapping[Any, float] = field(default_factory=dict)


def build_manifest(model: ImportedModel, artifact: CompiledArtifact, profile: Profile) -> dict[str, Any]:
    """The manifest of a package (files and verification are filled in later)."""
    return {
        "format": FORMAT_VERSION,
        "schema": SCHEMA_URL,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "edgetune": __version__,
        "tvm": artifact.tvm_version,
        "runtime": {"loader": "edgetune_runtime", "tvm": artifact.tvm_version, "kind": profile.runtime,
                    "cuda_major": profile.toolchain.cuda_major, "cuda_archs": elf.cuda_archs(artifact.library)},
        "profile": {"name": profile.name, "description": profile.description, "source": profile.source},
        "target": artifact.target,
        "arch": artifact.arch,
        "model": {"file": model.source.name, "path": str(model.source.resolve()), "format": model.format,
                  "sha256": model.sha256, "notes": list(model.notes)},
        "library": artifact.library.name,
        "precision": artifact.precision,
        "weights": "embedded",
        "inputs": [t.to_json() for t in model.inputs],
        "bound_inputs": dict(model.bound),
        "outputs": [t.to_json() for t in model.outputs],
        "state": [s.to_json() for s in model.state],
        **({"length_range": list(model.length_range)} if model.length_range else {}),
        **({"ranges": {v: list(span) for v, span in model.ranges.items()}} if model.ranges else {}),
        "files": {},
        "verification": {"status": "pending"},
        "tuning": None,
    }


@dataclass(frozen=True)
class _Records:
    """The tuning records a build applies (a consistent snapshot of the store) and what they say."""

    directory: Path | None
    summary: dict[str, Any] | None
    notes: tuple[str, ...] = ()
    conv_choice: dict[str, str] = field(default_factory=dict)  # signature → direct | winograd, measured


@contextlib.contextmanager
def _records(model: ImportedModel, profile: Profile, opts: PackageOptions, lowering_key: str) -> Iterator[_Records]:
    """The records that apply to ``model``, read from a snapshot (a tune may be appending to the
    store meanwhile: readers never write to it). Records from another lowering (edgetune 0.1's
    NCHW kernels) do not match the kernels built now: that is reported, never silently skipped."""
    from . import _tvm
    from .tuning.records import LEGACY_LOWERING, RecordStore, default_dir
    from .tuning.tasks import choose_variants, task_rows

    store = RecordStore(opts.records or default_dir(profile.name), profile.name)
    if opts.records is not None and opts.use_records and not store.exists():
        raise PackageError(f"no tuning records in {opts.records}", "run `edgetune tune` first, or drop --records")
    if not opts.use_records or not store.exists():
        yield _Records(None, None)
        return
    vetoes = store.standing_vetoes()
    with store.snapshot() as snap, store.snapshot(leave_out=frozenset(vetoes)) as applied:
        stats = RecordStore(snap, profile.name).stats()
        every = task_rows(model, profile, stats, lowering_key)
        for r in every:  # a vetoed record is as good as none, also for the choice of a convolution's variant
            if r["workload"] in vetoes and r["best_ms"] is not None:
                r["vetoed"] = vetoes[r["workload"]].get("why") or "slower inside the network (tune's network check)"
                r["best_ms"] = None
        choice = choose_variants(every, _tvm.default_conv_variant(_tvm.make_target(profile.target_spec())))
        rows = _built_rows(every, choice)
        tuned = [r for r in rows if r["best_ms"] is not None]
        notes = []
        vetoed = [r for r in rows if "vetoed" in r]
        if vetoed:
            notes.append(f"{len(vetoed)} kernel(s) keep their default schedule: with their record they ran slower "
                         "inside the network when `edgetune tune` checked it")
        if lowering_key != LEGACY_LOWERING and LEGACY_LOWERING in store.lowerings():
            old = [r for r in task_rows(model, profile, stats, LEGACY_LOWERING) if r["best_ms"] is not None]
            if old:
                notes.append(f"{len(old)} kernel(s) of this model were tuned for TVM's NCHW kernels (edgetune 0.1, "
                             f"{sum(r['trials'] for r in old)} trials); they do not apply to the {lowering_key} kernels "
                             "built now — tune again, or package with --layout nchw to use them")
        if not tuned:
            yield _Records(None, None, tuple(notes), choice)
            return
        estimate = sum(r["calls"] * r["best_ms"] for r in tuned)
        summary = {"records": store.dir.name, "lowering": lowering_key, "tuned_tasks": len(tuned), "variants": choice,
                   "total_tasks": len(rows), "trials": sum(r["trials"] for r in rows),
                   "estimated_latency_ms": round(estimate, 6) if len(tuned) == len(rows) else None, "tasks": rows}
        yield _Records(applied, summary, tuple(notes), choice)


def _built_rows(rows: list[dict[str, Any]], choice: Mapping[str, str]) -> list[dict[str, Any]]:
    """The rows of kernels the build uses: of a convolution with two variants, the chosen one
    (``choice`` covers every such signature: see :func:`~edgetune.tuning.tasks.choose_variants`)."""
    variants: dict[str, set[str]] = {}
    for r in rows:
        if r["signature"]:
            variants.setdefault(r["signature"], set()).add(r["variant"])
    return [r for r in rows if len(variants.get(r["signature"], ())) < 2 or r["variant"] == choice[r["signature"]]]


def schedule_summary(kernels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """How the package's kernels were scheduled: counts per kind, and the kernels left as naive
    loops — with their share of the model's FLOPs and why no schedule rule fit each."""
    total = sum(k["calls"] * k["flops"] for k in kernels.values()) or 1.0
    kinds: dict[str, int] = {}
    for k in kernels.values():
        kinds[k["kind"]] = kinds.get(k["kind"], 0) + 1
    naive = sorted((name for name, k in kernels.items() if k["kind"] == "naive"),
                   key=lambda n: -kernels[n]["calls"] * kernels[n]["flops"])
    share = sum(kernels[n]["calls"] * kernels[n]["flops"] for n in naive) / total
    return {"kinds": kinds, "tuned": kinds.get("tuned", 0), "naive": naive, "naive_flops_share": round(share, 4),
            "naive_why": {n: kernels[n].get("why", "") for n in naive}}


def kernel_facts(kernels: dict[str, dict[str, Any]], tuning: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per kernel of the library, what a profile on the board joins its times with: kind (the
    default schedule's, or ``tuned``), calls and FLOPs per inference call, trials spent on it."""
    trials = {r["workload"]: r["trials"] for r in (tuning or {}).get("tasks", [])}  # joined by workload hash
    return {name: {"kind": k["kind"], "calls": k["calls"], "flops": k["flops"], "tuned": k["kind"] == "tuned",
                   "trials": trials.get(k.get("workload", ""), 0), "workload": k.get("workload", "")}
            for name, k in kernels.items()}


def lowering_key(profile: Profile, layout: str, precision: str = "fp32") -> str:
    """The lowering a build for ``profile`` uses with ``--layout`` and ``--precision``."""
    from . import _tvm

    return _tvm.lowering_for(_tvm.make_target(profile.target_spec()), layout, precision).key


def package(opts: PackageOptions, progress: Progress = lambda _msg: None) -> PackageResult:
    """Build a verified package for ``opts.device``; see the module docstring. The stages run in
    a child process (:mod:`.isolation`), so a crash inside TVM is a CrashError, not the end of
    the caller.

    Raises ProfileError, ToolchainError, ModelError (and subclasses), BuildError,
    VerificationError, PackageError or CrashError. Nothing is left at ``opts.output`` on failure.
    """
    from .errors import CrashError
    from .isolation import isolated

    try:
        result = isolated("packaging", opts.model.name, _package, opts, progress=progress)
    except CrashError:
        remove_stale(opts.output.resolve())  # the crashed stage's staging directory (its process is gone)
        raise
    if hint := half_hint(resolve_device(opts.device), opts.precision):
        result.hints.append(hint)
    return result


def _package(opts: PackageOptions, progress: Progress = lambda _msg: None) -> PackageResult:
    if split(opts.input_shapes)[1] is not None and not opts.symbolic:
        return package_range(opts, progress, _package)
    profile = resolve_device(opts.device)
    detect_format(opts.model)
    output = opts.output.resolve()
    check_output(output, opts.force)
    check_precision(profile, opts.precision)
    check_toolchain(profile)
    timings: dict[str, float] = {}
    output.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(output)
    # A fresh name per build: dlopen caches libraries by path, so a reused staging path would
    # make the in-process reference check run the previously loaded library.
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-{os.getpid()}-", dir=output.parent))
    installed = False
    try:
        t0 = time.perf_counter()
        progress(f"importing {opts.model.name}")
        shapes = shapes_per_model([opts.model], [opts.model.stem], opts.input_shapes)[0]
        binds = bindings_per_model([opts.model], [opts.model.stem], opts.bindings)[0]
        model = import_model(opts.model, shapes, binds)
        timings["import_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        key = lowering_key(profile, opts.layout, opts.precision)
        with _records(model, profile, opts, key) as recs:
            progress(f"compiling for {profile.name} ({profile.arch}, {profile.runtime})"
                     + (f" with {recs.summary['tuned_tasks']} tuned kernel(s)" if recs.summary else
                        ", untuned (default schedules)"))
            artifact = compile_model(model, profile, staging, recs.directory, opts.layout,
                                     recs.conv_choice or dict(opts.conv_variants or {}) or "auto", opts.precision)
        timings["compile_s"] = time.perf_counter() - t0
        copy_loader(staging)
        if model.state:  # a stateful model's initial state, whether or not the package is verified
            save_state(staging / STATE, model.state)
        manifest = build_manifest(model, artifact, profile)
        manifest["tuning"] = recs.summary
        manifest["schedules"] = dict(schedule_summary(artifact.kernels), lowering=artifact.lowering,
                                     notes=list(recs.notes))
        manifest["kernels"] = kernel_facts(artifact.kernels, recs.summary)
        if opts.verify:
            t0 = time.perf_counter()
            progress(f"computing reference outputs ({reference.runtime_label(model.format)})")
            label = write_reference(staging, model, opts.seed)
            progress("checking the package against the reference")
            verify(staging, profile, manifest, label, opts, model)
            timings["verify_s"] = time.perf_counter() - t0
        else:
            manifest["verification"] = {"status": "skipped", "reason": "--no-verify"}
        manifest["build"] = {k: round(v, 3) for k, v in timings.items()}
        write_manifest(staging, manifest)
        install(staging, output)
        installed = True
        tarball = write_tarball(output) if opts.tar else None
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            if installed:
                raise PackageError(f"no space left on the device for {output.name}.tar.gz; the package itself is "
                                   f"complete at {output}", "free some space and run again with --tar") from err
            raise PackageError(f"no space left on the device while writing the package in {output.parent}",
                               f"free some space and run again; {output} was left as it was") from err
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return PackageResult(output, manifest, tarball, timings)


