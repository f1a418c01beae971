"""Building a range package (``--input-shape input_ids=1,1..256``): one symbolic-shape library
checked at several lengths, or one fixed-length library per bucket (what a range is and how it is
built: :mod:`.ranges`), through the same stages as a fixed-shape package — each library built by
:func:`edgetune.package.package`'s own pipeline, the reference check (:mod:`.check`) run at
the range's lengths, the files installed (:mod:`.package_files`)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgetune_runtime.ranges import RANGE_REFERENCE, label, point_values

from . import reference
from .bundle import copy_loader
from .check import pending_check, record_check, run_check
from .devices import resolve_device
from .errors import PackageError, UsageError, VerificationError
from .importer import bindings_per_model, import_model
from .package_files import PackageResult, check_output, install, remove_stale, write_manifest, write_tarball
from .ranges import Dims, LengthRange, Point, check_buckets, check_lengths, check_shape_weights, default_buckets, is_symbolic, split
from .tuning.records import RecordStore, default_dir


def package_range(opts: Any, progress: Callable[[str], None], build: Callable[..., PackageResult]) -> PackageResult:
    """Build the range package ``opts`` (:class:`~edgetune.package.PackageOptions`) asks for
    (``opts.input_shapes`` holds the range); ``build`` builds each fixed-shape or symbolic
    library (:func:`edgetune.package.package`'s own stages, called with options and progress)."""

    fixed, rng = split(opts.input_shapes)
    assert rng is not None
    symbolic = is_symbolic(opts)
    if rng.multi and not symbolic:
        raise UsageError(f"{rng.describe()}: several ranges are built as one symbolic-shape library, which "
                         + ("--buckets does not" if opts.buckets else "a TFLite model cannot be"),
                         "leave out --buckets (ONNX models), or give one dimension a range")
    buckets = [] if symbolic else check_buckets(list(opts.buckets), rng) if opts.buckets else \
        default_buckets(rng.lo, rng.hi)
    output = opts.output.resolve()
    check_output(output, opts.force)
    profile = resolve_device(opts.device)  # an unknown device fails before anything is built
    output.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(output)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-{os.getpid()}-", dir=output.parent))
    start = time.perf_counter()
    try:
        subs = {}
        if symbolic:
            progress(f"one library for {'lengths ' if not rng.multi else ''}{rng.describe()} (symbolic shapes)")
            # checked below at several lengths; tuning records of its symbolic kernels apply
            sub = dataclasses.replace(opts, output=staging / SYMBOLIC_DIR, tar=False, force=False, verify=False,
                                      symbolic=True)
            built = build(sub, progress).manifest
            timed = check_shape_weights(dict(opts.shape_weights), rng) if opts.shape_weights else \
                _tuned_weights(opts, profile.name, built, rng) or {p: 1.0 for p in rng.timed_points()}
            manifest = _symbolic_manifest(built, rng, timed)
        else:
            for b in buckets:
                progress(f"bucket {b} of {rng.lo}..{rng.hi} (buckets {', '.join(map(str, buckets))})")
                sub = dataclasses.replace(opts, input_shapes=rng.shapes_at(b, fixed), output=staging / f"b{b}",
                                          tar=False, force=False, buckets=())
                subs[b] = build(sub, progress).manifest
            manifest = _manifest(subs, rng, buckets)
        copy_loader(staging)
        if opts.verify:
            lengths = rng.check_points() if symbolic else check_lengths(rng, buckets)
            progress(f"checking {'lengths' if not rng.multi else ' × '.join(rng.spans)} "
                     f"{', '.join(map(label, lengths))} against the reference")
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
        install(staging, output)
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
            spec["range_axis"] = rng.axis(spec["original_name"])
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


def _symbolic_manifest(sub: dict[str, Any], rng: LengthRange, timed: dict[Point, float]) -> dict[str, Any]:
    """A symbolic range package's manifest: its library's, less what is per library, with the
    range; its one package serves every length, timed at ``timed``'s points (point → weight:
    ``timed_weights``; by default the lengths buckets would have, equally)."""
    top = _top_manifest(sub)  # (its schedules are the range's: one library)
    top["tuning"], top["kernels"] = sub.get("tuning"), sub.get("kernels")  # (its one library's, the range's)
    end = label(rng.end)
    top["range"] = {**({"min": rng.lo, "max": rng.hi, "buckets": [rng.hi]} if not rng.multi else {}),
                    "vars": {v: [lo, hi] for v, (lo, hi) in rng.spans.items()}, "symbolic": True,
                    "packages": {end: SYMBOLIC_DIR}, "pad": {},
                    "timed": [list(point_values(p)) if rng.multi else p for p in timed],
                    "timed_weights": list(timed.values()),
                    "per_bucket": {end: {"tuning": (sub.get("tuning") or {}).get("tuned_tasks", 0),
                                         "verification": "range check"}}}
    return top


def _tuned_weights(opts: Any, device: str, built: dict[str, Any], rng: LengthRange) -> dict[Point, float]:
    """The points (and weights) the records a symbolic package applies were timed at, where
    they agree (``edgetune tune --shape-weights``): what ``bench`` then times it at; else {}."""
    tuned = {k.get("workload") for k in (built.get("kernels") or {}).values() if k.get("tuned")}
    if not tuned or not opts.use_records:
        return {}
    known = RecordStore(opts.records or default_dir(device), device).shape_weights()
    found = {json.dumps(w, sort_keys=True) for h, w in known.items() if h in tuned}
    if len(found) != 1:
        return {}
    weights = {point_values(p): float(w) for p, w in json.loads(found.pop()).items()}
    try:  # (records tuned for another range: their points may not be this one's)
        return check_shape_weights({v if rng.multi else v[0]: w for v, w in weights.items()}, rng)
    except UsageError:
        return {}


def _write_reference(root: Path, opts: Any, rng: LengthRange, fixed: Mapping[str, Dims],
                     lengths: list[Point]) -> dict[str, Any]:
    """The model's runtime at each checked length (point: ``4x64``), on deterministic inputs of
    that length; returns the check's pending record (reference, tolerance) for the longest."""
    binds = bindings_per_model([opts.model], [opts.model.stem], opts.bindings)[0]
    arrays: dict[str, np.ndarray] = {"lengths": np.array(json.dumps([label(p) if rng.multi else p for p in lengths]))}
    pending: dict[str, Any] = {}
    for length in lengths:
        model = import_model(opts.model, rng.shapes_at(length, fixed), binds)
        inputs = reference.make_inputs(model.inputs, opts.seed)
        outputs = reference.run_reference(model, inputs)
        arrays.update({f"{label(length)}/input:{s.name}": a for s, a in zip(model.inputs, inputs)})
        arrays.update({f"{label(length)}/output:{s.name}": a for s, a in zip(model.outputs, outputs)})
        pending = pending_check(model, opts, reference.reference_label(model), inputs, outputs)
    np.savez(root / RANGE_REFERENCE, **arrays)
    return pending


def _record_check(manifest: dict[str, Any], result: dict[str, Any] | None, where: str, symbolic: bool = False) -> None:
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
