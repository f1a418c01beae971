"""Range packages: ``--input-shape input_ids=1,1..256`` builds one package for every length in
the range — a few fixed-length packages (buckets) in one directory, verified at lengths that are
not buckets. How the loader serves a length: :mod:`edgetune_runtime.ranges`.

What is built so far: one length shared by every ranged input (a sequence axis: tokens, frames),
served by padding to the next bucket. That is exact for models that mask padding (text encoders
with an ``attention_mask``); a model that padding changes fails the range's reference check when
it is built, with that said. Symbolic-shape kernels (no padding) are not built yet.
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


def check_lengths(rng: LengthRange, buckets: list[int]) -> list[int]:
    """Lengths the range's reference check runs: its ends and, where the range has one, a
    length between two buckets (padded: the middle pair's midpoint plus one)."""
    between = [(a + b) // 2 + 1 for a, b in zip(buckets, buckets[1:])]
    between = [n for n in between if rng.lo < n < rng.hi and n not in buckets]
    if not between and rng.hi - rng.lo > 1:
        between = [n for n in [(rng.lo + rng.hi) // 2] if n not in buckets]
    return sorted({rng.lo, rng.hi, *between[len(between) // 2:len(between) // 2 + 1]})


def package_range(opts: Any, progress: Any) -> Any:
    """Build the range package ``opts`` asks for (``opts.input_shapes`` holds the range)."""
    from .devices import resolve_device
    from .package import PackageResult, _check_output, _install, package, remove_stale, run_check, write_manifest, write_tarball

    fixed, rng = split(opts.input_shapes)
    assert rng is not None
    buckets = check_buckets(list(opts.buckets), rng) if opts.buckets else default_buckets(rng.lo, rng.hi)
    output = opts.output.resolve()
    _check_output(output, opts.force)
    profile = resolve_device(opts.device)  # an unknown device fails before anything is built
    output.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(output)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-{os.getpid()}-", dir=output.parent))
    start = time.perf_counter()
    try:
        subs = {}
        for b in buckets:
            progress(f"bucket {b} of {rng.lo}..{rng.hi} (buckets {', '.join(map(str, buckets))})")
            sub = dataclasses.replace(opts, input_shapes=rng.shapes_at(b, fixed), output=staging / f"b{b}", tar=False,
                                      force=False, buckets=())
            subs[b] = package(sub, progress).manifest
        manifest = _manifest(subs, rng, buckets)
        copy_loader(staging)
        if opts.verify:
            lengths = check_lengths(rng, buckets)
            progress(f"checking lengths {', '.join(map(str, lengths))} against the reference")
            _write_reference(staging, opts, rng, fixed, lengths)
            manifest["verification"] = dict(subs[buckets[-1]]["verification"], status="pending")
            for key in ("outputs", "max_abs_error", "max_rel_error", "executed_on"):
                manifest["verification"].pop(key, None)
            write_manifest(staging, manifest)
            result, where = run_check(staging, profile)
            _record_check(manifest, result, where)
        else:
            manifest["verification"] = {"status": "skipped", "reason": "--no-verify"}
        manifest["build"] = {"total_s": round(time.perf_counter() - start, 3)}
        write_manifest(staging, manifest)
        _install(staging, output)
        tarball = write_tarball(output) if opts.tar else None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return PackageResult(output, manifest, tarball, {"total_s": manifest["build"]["total_s"]})


def _manifest(subs: dict[int, dict[str, Any]], rng: LengthRange, buckets: list[int]) -> dict[str, Any]:
    """The range package's manifest: the largest bucket's, less what is per bucket (library,
    kernels, tuning), with the range, the buckets and which axes follow the length."""
    top = json.loads(json.dumps(subs[buckets[-1]]))
    for key in ("library", "kernels", "tuning", "schedules", "files", "build"):
        top.pop(key, None)
    top["kind"] = "range"
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


def _write_reference(root: Path, opts: Any, rng: LengthRange, fixed: Mapping[str, Dims], lengths: list[int]) -> None:
    """The model's runtime at each checked length, on deterministic inputs of that length."""
    from .importer import bindings_per_model

    binds = bindings_per_model([opts.model], [opts.model.stem], opts.bindings)[0]
    arrays: dict[str, np.ndarray] = {"lengths": np.array(json.dumps(lengths))}
    for length in lengths:
        model = import_model(opts.model, rng.shapes_at(length, fixed), binds)
        inputs = reference.make_inputs(model.inputs, opts.seed)
        outputs = reference.run_reference(model, inputs)
        arrays.update({f"{length}/input:{s.name}": a for s, a in zip(model.inputs, inputs)})
        arrays.update({f"{length}/output:{s.name}": a for s, a in zip(model.outputs, outputs)})
    np.savez(root / RANGE_REFERENCE, **arrays)


def _record_check(manifest: dict[str, Any], result: dict[str, Any] | None, where: str) -> None:
    from .package import record_check

    v = manifest["verification"]
    if result is None:
        v.update(status="skipped", reason=where)
        return
    record_check(v, result, where)
    v["lengths"] = result.get("lengths")
    if not result["passed"]:
        bad = [length for length, r in (result.get("lengths") or {}).items() if not r["passed"]]
        raise VerificationError(
            f"the range package disagrees with {v.get('reference', 'the reference')} at length(s) {', '.join(bad)}, "
            "where the input is padded to the next bucket: padding changes this model's outputs (no attention mask "
            "among its inputs, or one the model does not apply)",
            "package the lengths you need one at a time (--input-shape NAME=...,LENGTH); symbolic-shape packages, "
            "which need no padding, are not built yet")
