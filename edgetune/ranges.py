"""Range packages: ``--input-shape input_ids=1,1..256`` builds one package for every length in
the range, verified at several lengths against the model's runtime. How the loader serves a
length: :mod:`edgetune_runtime.ranges`. One length is shared by every ranged input (a sequence
axis: tokens, frames, an image's width). Two ways to build one:

- **symbolic** (ONNX models, the default): one library whose kernels take the length at run
  time (TVM Relax's symbolic shapes; edgetune's dense, matmul and row kernels tile a symbolic
  extent, the last tile padded). Every length runs at its own size and nothing is padded, so it
  serves models without an attention mask too.
- **buckets** (``--buckets 64,128,256``, and TFLite models): a few fixed-length packages; a
  call is padded to the next bucket (exact only for models that mask padding: a model that
  padding changes fails the range's reference check when it is built).

Tuning records apply to both, as ``edgetune tune`` decides the same way: with a range and no
``--buckets`` it tunes the symbolic kernels, each timed at the ``--shape-weights`` lengths;
with ``--buckets`` each bucket's kernels (records are per length).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgetune_runtime.ranges import RANGE_REFERENCE

from . import reference
from .bundle import copy_loader
from .errors import PackageError, UsageError, VerificationError
from .importer import import_model

Dims = tuple[int | tuple[int, int], ...]
MAX_BUCKETS = 5
MIN_BUCKET = 8


@dataclass(frozen=True)
class LengthRange:
    """The length every ranged input shares: ``lo``..``hi`` on ``axes[name]`` of each."""

    lo: int
    hi: int
    axes: dict[str, int]
    dims: dict[str, Dims]

    def shapes_at(self, length: int, fixed: Mapping[str, Dims]) -> dict[str, tuple[int, ...]]:
        """Every ``--input-shape`` with the range replaced by ``length``."""
        shapes = {name: tuple(int(d) for d in dims) for name, dims in fixed.items()}  # type: ignore[arg-type]
        for name, dims in self.dims.items():
            shapes[name] = tuple(length if i == self.axes[name] else int(d) for i, d in enumerate(dims))  # type: ignore[arg-type]
        return shapes


def split(shapes: Mapping[str, Dims]) -> tuple[dict[str, Dims], LengthRange | None]:
    """The fixed shapes and the range (None: no input has one). UsageError for what range
    packages do not do yet: two ranged axes in one input, or ranges that differ."""
    fixed, ranged = {}, {}
    for name, dims in shapes.items():
        axes = [i for i, d in enumerate(dims) if isinstance(d, tuple)]
        if not axes:
            fixed[name] = dims
        elif len(axes) > 1:
            raise UsageError(f"--input-shape {name} has {len(axes)} ranged dimensions",
                             "a range package serves one length (a sequence axis): give one dimension a range")
        else:
            ranged[name] = (axes[0], dims[axes[0]])
    if not ranged:
        return fixed, None
    spans = {span for _axis, span in ranged.values()}
    if len(spans) > 1:
        raise UsageError(f"the inputs' ranges differ: {', '.join(f'{n}={a}..{b}' for n, (_x, (a, b)) in ranged.items())}",
                         "a range package serves one length shared by its ranged inputs: give them the same range")
    (lo, hi), = spans
    return fixed, LengthRange(lo, hi, {n: axis for n, (axis, _span) in ranged.items()},
                              {n: shapes[n] for n in ranged})


def default_buckets(lo: int, hi: int) -> list[int]:
    """The lengths compiled for ``lo..hi``: ``hi``, then halving (rounded up to a multiple of
    8) while that stays at or above ``lo`` and ``MIN_BUCKET``, at most ``MAX_BUCKETS``: a call
    pays for at most about twice its own length (below the smallest bucket, for that bucket)."""
    buckets = [hi]
    while len(buckets) < MAX_BUCKETS:
        half = -(-(buckets[0] // 2) // 8) * 8
        if half >= buckets[0] or half < max(lo, MIN_BUCKET):
            break
        buckets.insert(0, half)
    return buckets


def check_buckets(buckets: list[int], rng: LengthRange) -> list[int]:
    out = sorted(set(buckets))
    if not out or out[0] < 1 or out[-1] < rng.hi:
        raise UsageError(f"--buckets {','.join(map(str, buckets))} does not reach the range's end {rng.hi}",
                         f"end the buckets with {rng.hi} (or more)")
    return out


def check_shape_weights(weights: dict[int, float], rng: LengthRange) -> dict[int, float]:
    """``--shape-weights`` (length → weight), checked to lie in the range, by length."""
    outside = sorted(n for n in weights if not rng.lo <= n <= rng.hi)
    if outside:
        raise UsageError(f"--shape-weights length(s) {', '.join(map(str, outside))} outside the range {rng.lo}..{rng.hi}",
                         f"weigh lengths from {rng.lo} to {rng.hi}")
    return dict(sorted(weights.items()))


def check_lengths(rng: LengthRange, buckets: list[int]) -> list[int]:
    """Lengths the range's reference check runs: its ends and, where the range has one, a
    length between two buckets (padded: the middle pair's midpoint plus one)."""
    between = [(a + b) // 2 + 1 for a, b in zip(buckets, buckets[1:])]
    between = [n for n in between if rng.lo < n < rng.hi and n not in buckets]
    if not between and rng.hi - rng.lo > 1:
        between = [n for n in [(rng.lo + rng.hi) // 2] if n not in buckets]
    return sorted({rng.lo, rng.hi, *between[len(between) // 2:len(between) // 2 + 1]})


def symbolic_lengths(rng: LengthRange) -> list[int]:
    """Lengths a symbolic range package is checked at: its ends and an odd one between (a
    partial last tile)."""
    return sorted({rng.lo, rng.hi, *[n for n in [(rng.lo + rng.hi) // 2 | 1] if rng.lo < n < rng.hi]})


def is_symbolic(opts: Any) -> bool:
    """Whether a range package for ``opts`` is built as one symbolic-shape library: ONNX models
    unless ``--buckets`` asks for fixed lengths (``edgetune tune`` decides the same way, so its
    records are for the kernels the package builds)."""
    from .importer import detect_format

    return not opts.buckets and detect_format(opts.model) == "onnx"


def package_range(opts: Any, progress: Any) -> Any:
    """Build the range package ``opts`` asks for (``opts.input_shapes`` holds the range)."""
    from .devices import resolve_device
    from .package import PackageResult, _check_output, _install, package, remove_stale, run_check, write_manifest, write_tarball

    fixed, rng = split(opts.input_shapes)
    assert rng is not None
    symbolic = is_symbolic(opts)
    buckets = [rng.hi] if symbolic else check_buckets(list(opts.buckets), rng) if opts.buckets else \
        default_buckets(rng.lo, rng.hi)
    output = opts.output.resolve()
    _check_output(output, opts.force)
    profile = resolve_device(opts.device)  # an unknown device fails before anything is built
    output.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(output)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-{os.getpid()}-", dir=output.parent))
    start = time.perf_counter()
    try:
        subs = {}
        if symbolic:
            progress(f"one library for lengths {rng.lo}..{rng.hi} (symbolic shapes)")
            # checked below at several lengths; tuning records of its symbolic kernels apply
            sub = dataclasses.replace(opts, output=staging / SYMBOLIC_DIR, tar=False, force=False, verify=False,
                                      symbolic=True)
            subs[rng.hi] = package(sub, progress).manifest
            manifest = _symbolic_manifest(subs[rng.hi], rng)
        else:
            for b in buckets:
                progress(f"bucket {b} of {rng.lo}..{rng.hi} (buckets {', '.join(map(str, buckets))})")
                sub = dataclasses.replace(opts, input_shapes=rng.shapes_at(b, fixed), output=staging / f"b{b}",
                                          tar=False, force=False, buckets=())
                subs[b] = package(sub, progress).manifest
            manifest = _manifest(subs, rng, buckets)
        copy_loader(staging)
        if opts.verify:
            lengths = symbolic_lengths(rng) if symbolic else check_lengths(rng, buckets)
            progress(f"checking lengths {', '.join(map(str, lengths))} against the reference")
            pending = _write_reference(staging, opts, rng, fixed, lengths)
            if symbolic:  # (its library was not checked on its own)
                manifest["verification"] = pending
            else:
                manifest["verification"] = dict(subs[buckets[-1]]["verification"], status="pending")
                for key in ("outputs", "max_abs_error", "max_rel_error", "executed_on"):
                    manifest["verification"].pop(key, None)
            write_manifest(staging, manifest)
            result, where = run_check(staging, profile)
            _record_check(manifest, result, where, symbolic)
        else:
            manifest["verification"] = {"status": "skipped", "reason": "--no-verify"}
        manifest["build"] = {"total_s": round(time.perf_counter() - start, 3)}
        write_manifest(staging, manifest)
        _install(staging, output)
        tarball = write_tarball(output) if opts.tar else None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return PackageResult(output, manifest, tarball, {"total_s": manifest["build"]["total_s"]})


def _top_manifest(sub: dict[str, Any], *per_package: str) -> dict[str, Any]:
    """A copy of a sub-package's manifest as the range package's: ``kind: range``, less what
    belongs to that one package (its library, kernels, tuning, files, build times, ``per_package``)."""
    top = json.loads(json.dumps(sub))
    for key in ("library", "kernels", "tuning", "files", "build", *per_package):
        top.pop(key, None)
    top["kind"] = "range"
    return top


def _manifest(subs: dict[int, dict[str, Any]], rng: LengthRange, buckets: list[int]) -> dict[str, Any]:
    """The range package's manifest: the largest bucket's, less what is per bucket (library,
    kernels, tuning), with the range, the buckets and which axes follow the length."""
    top = _top_manifest(subs[buckets[-1]], "schedules")
    for spec in top["inputs"]:
        if spec["original_name"] in rng.axes:
            spec["range_axis"] = rng.axes[spec["original_name"]]
    for k, spec in enumerate(top["outputs"]):
        shapes = {b: tuple(subs[b]["outputs"][k]["shape"]) for b in buckets}
        moving = [i for i in range(len(spec["shape"])) if len({s[i] for s in shapes.values()}) > 1]
        if not moving:
            continue
        if len(moving) > 1 or any(s[moving[0]] != b for b, s in shapes.items()):
            raise PackageError(f"output {spec['original_name']!r} does not keep the input's length "
                               f"({ {b: list(s) for b, s in shapes.items()} }): range packages cut outputs back to the "
                               "input's length, and this one changes it", "package one length at a time for now")
        spec["range_axis"] = moving[0]
    top["range"] = {"min": rng.lo, "max": rng.hi, "buckets": buckets, "packages": {str(b): f"b{b}" for b in buckets},
                    "pad": {name: 0 for name in rng.axes},
                    "per_bucket": {str(b): {"tuning": (m.get("tuning") or {}).get("tuned_tasks", 0),
                                            "verification": m["verification"]["status"]} for b, m in subs.items()}}
    return top


SYMBOLIC_DIR = "symbolic"


def _symbolic_manifest(sub: dict[str, Any], rng: LengthRange) -> dict[str, Any]:
    """A symbolic range package's manifest: its library's, less what is per library, with the
    range; its one package serves every length, timed at the lengths buckets would have."""
    top = _top_manifest(sub)  # (its schedules are the range's: one library)
    top["tuning"], top["kernels"] = sub.get("tuning"), sub.get("kernels")  # (its one library's, the range's)
    top["range"] = {"min": rng.lo, "max": rng.hi, "symbolic": True, "buckets": [rng.hi],
                    "packages": {str(rng.hi): SYMBOLIC_DIR}, "pad": {}, "timed": default_buckets(rng.lo, rng.hi),
                    "per_bucket": {str(rng.hi): {"tuning": (sub.get("tuning") or {}).get("tuned_tasks", 0),
                                                 "verification": "range check"}}}
    return top


def _write_reference(root: Path, opts: Any, rng: LengthRange, fixed: Mapping[str, Dims],
                     lengths: list[int]) -> dict[str, Any]:
    """The model's runtime at each checked length, on deterministic inputs of that length;
    returns the check's pending record (reference, tolerance) for the longest."""
    from .importer import bindings_per_model
    from .package import pending_check

    binds = bindings_per_model([opts.model], [opts.model.stem], opts.bindings)[0]
    arrays: dict[str, np.ndarray] = {"lengths": np.array(json.dumps(lengths))}
    pending: dict[str, Any] = {}
    for length in lengths:
        model = import_model(opts.model, rng.shapes_at(length, fixed), binds)
        inputs = reference.make_inputs(model.inputs, opts.seed)
        outputs = reference.run_reference(model, inputs)
        arrays.update({f"{length}/input:{s.name}": a for s, a in zip(model.inputs, inputs)})
        arrays.update({f"{length}/output:{s.name}": a for s, a in zip(model.outputs, outputs)})
        pending = pending_check(model, opts, reference.reference_label(model))
    np.savez(root / RANGE_REFERENCE, **arrays)
    return pending


def _record_check(manifest: dict[str, Any], result: dict[str, Any] | None, where: str, symbolic: bool = False) -> None:
    from .package import record_check

    v = manifest["verification"]
    if result is None:
        v.update(status="skipped", reason=where)
        return
    record_check(v, result, where)
    v["lengths"] = result.get("lengths")
    if not result["passed"]:
        bad = [length for length, r in (result.get("lengths") or {}).items() if not r["passed"]]
        if symbolic:
            raise VerificationError(
                f"the range package disagrees with {v.get('reference', 'the reference')} at length(s) {', '.join(bad)}",
                "EDGETUNE_DEBUG=1 shows more; package with --buckets (fixed lengths) or one length at a time, and "
                "report the model")
        raise VerificationError(
            f"the range package disagrees with {v.get('reference', 'the reference')} at length(s) {', '.join(bad)}, "
            "where the input is padded to the next bucket: padding changes this model's outputs (no attention mask "
            "among its inputs, or one the model does not apply)",
            "leave out --buckets: a symbolic-shape package needs no padding")
