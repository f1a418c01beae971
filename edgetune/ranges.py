"""Range packages: ``--input-shape input_ids=1,1..256`` builds one package for every length in
the range, verified at several lengths against the model's runtime. How the loader serves a
length: :mod:`edgetune_runtime.ranges`. One length is shared by every ranged input (a sequence
axis: tokens, frames, an image's width); several dimensions may have ranges of their own (batch
× length, height × width: ``--input-shape x=1,3,32..640,32..640``), built symbolic only — see
:func:`~edgetune.util.range_variables` for which axes share one. Two ways to build one:

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

from edgetune_runtime.ranges import RANGE_REFERENCE, label, point_values

from . import reference
from .bundle import copy_loader
from .errors import PackageError, UsageError, VerificationError
from .importer import import_model
from .util import range_variables

Dims = tuple[int | tuple[int, int], ...]
MAX_BUCKETS = 5
MIN_BUCKET = 8


Point = Any  # a value per range variable: an int for a range of one variable, else a tuple in its order


@dataclass(frozen=True)
class LengthRange:
    """The ranges of a range package: each variable's span (``lo``..``hi``), and per ranged
    input the axes that follow each (:func:`~edgetune.util.range_variables`). Most ranges
    are one variable (a sequence axis every ranged input shares: a *length*); a point is then
    an int, with several variables (batch × length, height × width) a tuple in their order."""

    spans: dict[str, tuple[int, int]]
    axes: dict[str, dict[int, str]]
    dims: dict[str, Dims]

    @property
    def multi(self) -> bool:
        return len(self.spans) > 1

    @property
    def lo(self) -> int:
        return self._one()[0]

    @property
    def hi(self) -> int:
        return self._one()[1]

    def _one(self) -> tuple[int, int]:
        if self.multi:
            raise UsageError(f"{self.describe()}: several ranges, where one length is needed",
                             "give one dimension a range (buckets and TFLite models take one)")
        return next(iter(self.spans.values()))

    def axis(self, name: str) -> int:
        """The one ranged axis of input ``name`` (a range of one variable)."""
        return next(iter(self.axes[name]))

    def values(self, point: Point) -> dict[str, int]:
        return dict(zip(self.spans, point_values(point)))

    def point(self, values: Mapping[str, int]) -> Point:
        out = tuple(int(values[v]) for v in self.spans)
        return out if self.multi else out[0]

    @property
    def end(self) -> Point:
        """Every variable at its largest."""
        return self.point({v: hi for v, (_lo, hi) in self.spans.items()})

    def describe(self) -> str:
        """``1..256``; with several variables ``length0 1..8 × length1 1..256``."""
        if not self.multi:
            return f"{self.lo}..{self.hi}"
        return " × ".join(f"{v} {lo}..{hi}" for v, (lo, hi) in self.spans.items())

    def shapes_at(self, point: Point, fixed: Mapping[str, Dims]) -> dict[str, tuple[int, ...]]:
        """Every ``--input-shape`` with the ranges at ``point``."""
        at = self.values(point)
        shapes = {name: tuple(int(d) for d in dims) for name, dims in fixed.items()}  # type: ignore[arg-type]
        for name, dims in self.dims.items():
            axes = self.axes[name]
            shapes[name] = tuple(at[axes[i]] if i in axes else int(d) for i, d in enumerate(dims))  # type: ignore[arg-type]
        return shapes

    def timed_points(self) -> list[Point]:
        """The points a symbolic package is tuned and timed at by default: every variable at its
        end, then halving together while their product stays ``MIN_BUCKET`` or more, at most
        ``MAX_BUCKETS`` (:func:`default_buckets` for one variable)."""
        if not self.multi:
            return list(default_buckets(self.lo, self.hi))
        out: list[Point] = []
        for k in range(MAX_BUCKETS):  # (while the point's size stays MIN_BUCKET or more)
            p = self.point({v: max(lo, -(-hi // (1 << k))) for v, (lo, hi) in self.spans.items()})
            if p in out or (out and int(np.prod(p)) < MIN_BUCKET):
                break
            out.insert(0, p)
        return out

    def check_points(self) -> list[Point]:
        """Points a symbolic range package is checked at: every variable at its start, at its
        end, at an odd value between (a partial last tile) and, with several, the two corners
        that mix starts and ends."""
        if not self.multi:
            return symbolic_lengths(self)
        spans = list(self.spans.values())
        mid = tuple(min(hi, max(lo, (lo + hi) // 2 | 1)) for lo, hi in spans)
        corners = [tuple(lo for lo, _hi in spans[:-1]) + (spans[-1][1],),
                   tuple(hi for _lo, hi in spans[:-1]) + (spans[-1][0],)]
        found = [tuple(lo for lo, _hi in spans), mid, *corners, tuple(hi for _lo, hi in spans)]
        return sorted(set(found), key=found.index)


def split(shapes: Mapping[str, Dims]) -> tuple[dict[str, Dims], LengthRange | None]:
    """The fixed shapes and the ranges (None: no input has one); see
    :func:`~edgetune.util.range_variables` for which axes share a variable."""
    fixed = {name: dims for name, dims in shapes.items() if not any(isinstance(d, tuple) for d in dims)}
    axes, spans = range_variables(shapes)
    if not spans:
        return fixed, None
    return fixed, LengthRange(spans, axes, {n: shapes[n] for n in axes})


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


def check_shape_weights(weights: dict[Any, float], rng: LengthRange) -> dict[Any, float]:
    """``--shape-weights`` (point → weight), checked to lie in the ranges, by point."""
    n = len(rng.spans)
    wrong = [p for p in weights if len(point_values(p)) != n]
    if wrong:
        raise UsageError(f"--shape-weights {label(wrong[0])} gives {len(point_values(wrong[0]))} value(s) for {n} "
                         f"range(s) ({rng.describe()})",
                         "one value per range, in their order: --shape-weights " + "x".join(str(hi) for _lo, hi in rng.spans.values()) + "=1")
    outside = [p for p in weights if not all(lo <= v <= hi for v, (lo, hi) in zip(point_values(p), rng.spans.values()))]
    if outside:
        raise UsageError(f"--shape-weights length(s) {', '.join(map(label, sorted(outside)))} outside the range "
                         f"{rng.describe()}", f"weigh lengths within {rng.describe()}")
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
    if rng.multi and not symbolic:
        raise UsageError(f"{rng.describe()}: several ranges are built as one symbolic-shape library, which "
                         + ("--buckets does not" if opts.buckets else "a TFLite model cannot be"),
                         "leave out --buckets (ONNX models), or give one dimension a range")
    buckets = [] if symbolic else check_buckets(list(opts.buckets), rng) if opts.buckets else \
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
            progress(f"one library for {'lengths ' if not rng.multi else ''}{rng.describe()} (symbolic shapes)")
            # checked below at several lengths; tuning records of its symbolic kernels apply
            sub = dataclasses.replace(opts, output=staging / SYMBOLIC_DIR, tar=False, force=False, verify=False,
                                      symbolic=True)
            built = package(sub, progress).manifest
            timed = check_shape_weights(dict(opts.shape_weights), rng) if opts.shape_weights else \
                _tuned_weights(opts, profile.name, built, rng) or {p: 1.0 for p in rng.timed_points()}
            manifest = _symbolic_manifest(built, rng, timed)
        else:
            for b in buckets:
                progress(f"bucket {b} of {rng.lo}..{rng.hi} (buckets {', '.join(map(str, buckets))})")
                sub = dataclasses.replace(opts, input_shapes=rng.shapes_at(b, fixed), output=staging / f"b{b}",
                                          tar=False, force=False, buckets=())
                subs[b] = package(sub, progress).manifest
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
    from .tuning.records import RecordStore, default_dir

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
    from .importer import bindings_per_model
    from .package import pending_check

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
