"""Range packages: one package that serves every length in a range of a sequence axis.

``edgetune package MODEL --input-shape input_ids=1,1..256 --input-shape attention_mask=1,1..256``
builds, by default for ONNX models, one symbolic-shape package (``range.symbolic``, in the
``symbolic/`` directory): a call at length L runs at L, nothing padded, outputs as long as the
model makes them. With ``--buckets`` it builds a few fixed-length packages (buckets) inside one
directory, each verified at its own length. A call at length L runs the smallest bucket ≥ L: the ranged inputs are padded to the
bucket's length (with 0: the attention mask's 0 masks the padding out), the outputs whose axis
follows the length are cut back to L. The package's own reference check runs lengths that are
not buckets (the smallest, one in between, the largest) against the model's runtime at exactly
that length, so a model that padding changes (no mask) fails it when it is built.

Several dimensions may have ranges of their own (batch × length, height × width): always one
symbolic-shape package, the ranges its variables (``range.vars``: ``length0``, ``length1``, …),
a call's *point* their values in that order (written ``4x64``).

The manifest (``kind: range``) records the range, the buckets and their sub-directories, the
pad values, and per output the axis that follows the length (``range_axes``: per tensor, each
axis that follows a range and which).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .compare import compare, tolerance, validate_files
from .errors import InputError, LoaderError

RANGE_REFERENCE = "range_reference.npz"


def point_values(point: Any) -> tuple[int, ...]:
    """A point (one value per range) as a tuple: an int is a one-range point, ``"4x64"`` a label."""
    if isinstance(point, str):
        return tuple(int(v) for v in point.split("x"))
    return tuple(int(v) for v in point) if isinstance(point, (tuple, list)) else (int(point),)


def label(point: Any) -> str:
    """A point as manifests, records and reference files write it: ``64``, ``4x64``."""
    return "x".join(map(str, point_values(point)))


def manifest_ranges(manifest: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """A symbolic-shape package's ranges, variable → (min, max) (a package from before several
    ranges: its one ``length_range``, the variable ``length``)."""
    ranges = manifest.get("ranges") or (manifest.get("range") or {}).get("vars")
    if ranges:
        return {str(v): (int(span[0]), int(span[1])) for v, span in ranges.items()}
    span = manifest.get("length_range")
    if not span and "min" in (manifest.get("range") or {}):  # a range package of buckets
        span = manifest["range"]["min"], manifest["range"]["max"]
    return {"length": (int(span[0]), int(span[1]))} if span else {}


def range_axes(spec: dict[str, Any], ranges: dict[str, tuple[int, int]]) -> dict[int, str]:
    """A tensor's axes that take one of ``ranges`` at run time: axis → variable."""
    axes = spec.get("range_axes")
    if axes is not None:
        return {int(axis): var for axis, var in axes.items() if var in ranges}
    axis = spec.get("range_axis")
    return {int(axis): next(iter(ranges))} if axis is not None and len(ranges) == 1 else {}


def symbol(var: str) -> str:
    """How messages name a range's variable: ``L`` for the one length."""
    return "L" if var == "length" else var


def point_of(specs: list[dict[str, Any]], arrays: Any, ranges: dict[str, tuple[int, int]]) -> Any:
    """The point the inputs (``arrays``: per spec, or by name) are at: an int for one range, a
    tuple for several. InputError where inputs disagree on a range, or leave it."""
    seen: dict[str, dict[str, int]] = {v: {} for v in ranges}

    def what(var: str) -> str:  # a range as messages name it (built on an error only: calls stay cheap)
        if var == "length":
            return var
        return f"{var} (" + ", ".join(f"{s['original_name']} axis {axis}" for s in specs
                                      for axis, v in range_axes(s, ranges).items() if v == var) + ")"

    for k, spec in enumerate(specs):
        value = arrays.get(spec["original_name"], arrays.get(spec["name"])) if isinstance(arrays, dict) else arrays[k]
        if value is None:
            continue
        if value.ndim != len(spec["shape"]):
            raise InputError(f"input '{spec['original_name']}' needs {len(spec['shape'])} dimensions, got shape {value.shape}")
        for axis, var in range_axes(spec, ranges).items():
            seen[var][spec["original_name"]] = int(value.shape[axis])
    values = []
    for var, (lo, hi) in ranges.items():
        found = seen[var]
        if not found:
            raise InputError(f"none of the inputs with the range of {what(var)} was given",
                             f"inputs are {[s['original_name'] for s in specs]}")
        if len(set(found.values())) > 1:
            raise InputError(f"the inputs' {'lengths' if var == 'length' else var} differ: {found}",
                             "pass the same length for every ranged input" if var == "length" else
                             f"the axes of {var} take one value in a call")
        n = next(iter(found.values()))
        if not lo <= n <= hi:
            raise InputError(f"{what(var)} {n} is outside the package's range {lo}..{hi}",
                             f"package the model again with a range that holds it (--input-shape NAME=...,{lo}..{n})"
                             if n > hi else "pad the input up to the range's start")
        values.append(n)
    return values[0] if len(values) == 1 else tuple(values)


def is_range(manifest: dict[str, Any]) -> bool:
    return manifest.get("kind") == "range"


def validate(manifest: dict[str, Any]) -> None:
    """Refuse a range manifest whose files, range, buckets or axes are not what ``edgetune package`` writes."""
    def bad(what: str) -> LoaderError:
        return LoaderError(f"the range package's manifest is malformed: {what}", "package the model again")

    validate_files(manifest)
    rng = manifest.get("range")
    if not isinstance(rng, dict):
        raise bad("no 'range'")
    spans = rng.get("vars") or {"length": [rng.get("min"), rng.get("max")]}
    if not (isinstance(spans, dict) and all(isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) for x in span)
                                            and 0 < span[0] <= span[1] for span in spans.values())):
        raise bad("its range is not min <= max")
    dirs = rng.get("packages")
    files = manifest.get("files") or {}
    if rng.get("symbolic"):
        keys = list(dirs) if isinstance(dirs, dict) else []
        if len(keys) != 1:
            raise bad("a symbolic range package has one library")
    else:
        hi, buckets = rng.get("max"), rng.get("buckets")
        if len(spans) != 1:
            raise bad("buckets serve one range")
        if not (isinstance(buckets, list) and buckets and all(isinstance(b, int) for b in buckets)
                and buckets == sorted(set(buckets)) and buckets[-1] >= hi):
            raise bad("its buckets are not increasing lengths reaching the range's end")
        keys = [str(b) for b in buckets]
    for key in keys:
        sub = dirs.get(key) if isinstance(dirs, dict) else None
        if not isinstance(sub, str) or "/" in sub or sub in ("", ".", "..") or f"{sub}/manifest.json" not in files:
            raise bad(f"bucket {key} has no package among the files it checks")
    for spec in manifest.get("inputs", []):
        axes = spec.get("range_axes") or ({spec["range_axis"]: "length"} if spec.get("range_axis") is not None else {})
        if not all(str(a).isdigit() and 0 <= int(a) < len(spec.get("shape", [])) for a in axes):
            raise bad(f"input {spec.get('original_name')!r} has a range axis outside its shape")


class RangeModel:
    """A range package: :meth:`run` at any length in the range; :meth:`check` and
    :meth:`measure` as a fixed-shape :class:`~edgetune_runtime.loader.Model` has them."""

    def __init__(self, root: Path, manifest: dict[str, Any], load_bucket: Any):
        self.root, self.manifest = root, manifest
        self.inputs: list[dict[str, Any]] = manifest["inputs"]
        self.outputs: list[dict[str, Any]] = manifest["outputs"]
        rng = manifest["range"]
        self.ranges = manifest_ranges(manifest)  # variable → (min, max)
        self.min, self.max = next(iter(self.ranges.values()))  # (the one range's; buckets have one)
        self.buckets = [int(b) for b in rng.get("buckets") or []]
        self._dirs = dict(rng["packages"])
        self._pad = dict(rng.get("pad") or {})
        # one symbolic-shape library serves every length at its own size (no padding)
        self.symbolic = bool(rng.get("symbolic"))
        timed = rng.get("timed") or self.buckets
        self.timed = [tuple(int(v) for v in p) if isinstance(p, list) else int(p) for p in timed]
        self._load_bucket = load_bucket
        self._loaded: dict[Any, Any] = {}

    def bucket_length(self, length: int) -> int:
        """The length a call of ``length`` runs at: the smallest bucket at least as long (a
        symbolic package: ``length`` itself)."""
        return length if self.symbolic else next(b for b in self.buckets if b >= length)

    def bucket(self, length: Any) -> Any:
        """The package that serves ``length`` (loaded on first use)."""
        key = next(iter(self._dirs)) if self.symbolic else str(self.bucket_length(length))
        if key not in self._loaded:
            self._loaded[key] = self._load_bucket(self.root / self._dirs[key])
        return self._loaded[key]

    def _named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        if args and kwargs:
            raise InputError("pass inputs either by position or by name, not both")
        if args:
            if len(args) != len(self.inputs):
                raise InputError(f"model takes {len(self.inputs)} input(s), got {len(args)}",
                                 f"inputs are {[s['original_name'] for s in self.inputs]}")
            return {s["original_name"]: np.asarray(a) for s, a in zip(self.inputs, args)}
        return {k: np.asarray(v) for k, v in kwargs.items()}

    def length_of(self, named: dict[str, np.ndarray]) -> Any:
        """The length the ranged inputs have (a tuple: the point, with several ranges;
        InputError when they disagree or leave the range)."""
        return point_of(self.inputs, named, self.ranges)

    def run(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """One inference at the inputs' own length; outputs cut back to it."""
        if self.symbolic:  # every length at its own size, the library's loader checks the ranges
            return self.bucket(None).run(*args, **kwargs)
        named = self._named(args, kwargs)
        length = self.length_of(named)
        model, size = self.bucket(length), self.bucket_length(length)
        padded = {}
        for spec in self.inputs:
            key = spec["original_name"] if spec["original_name"] in named else spec["name"]
            value = named.get(key)
            axis = spec.get("range_axis")
            if value is not None and axis is not None and value.shape[axis] < size:
                widths = [(0, 0)] * value.ndim
                widths[axis] = (0, size - value.shape[axis])
                value = np.pad(value, widths, constant_values=np.asarray(self._pad.get(spec["original_name"], 0),
                                                                           dtype=value.dtype))
            if value is not None:
                padded[key] = value
        out = model.run(**padded)
        for spec in self.outputs:
            axis = spec.get("range_axis")
            if axis is not None:
                index = [slice(None)] * out[spec["original_name"]].ndim
                index[axis] = slice(0, length)
                out[spec["original_name"]] = out[spec["original_name"]][tuple(index)]
        return out

    def check(self, rtol: float | None = None, atol: float | None = None) -> dict[str, Any]:
        """Run the stored inputs at each checked length and compare with the runtime's outputs
        at that length; ``lengths`` holds each one's comparison."""
        tol = tolerance(self.manifest, rtol, atol)
        path = self.root / RANGE_REFERENCE
        if not path.is_file():
            raise LoaderError("package has no reference data", "it was built with --no-verify")
        lengths: dict[str, Any] = {}
        with np.load(path) as data:
            for length in map(label, json.loads(str(data["lengths"]))):
                inputs = {s["original_name"]: data[f"{length}/input:{s['name']}"] for s in self.inputs}
                expected = {s["original_name"]: data[f"{length}/output:{s['name']}"] for s in self.outputs}
                lengths[length] = compare(expected, self.run(**inputs), **tol)
        outputs: dict[str, Any] = {}
        for result in lengths.values():  # per output, the worst length: a failed one, else the largest error
            for name, o in result["outputs"].items():
                cur = outputs.get(name)
                if cur is None or (cur["passed"] and (not o["passed"] or
                                                      o.get("max_abs_error", 0.0) > cur.get("max_abs_error", 0.0))):
                    outputs[name] = o
        return {"passed": all(r["passed"] for r in lengths.values()), **tol, "outputs": outputs, "lengths": lengths}

    def measure(self, **kwargs: Any) -> dict[str, Any]:
        """Each bucket's timing (its own reference inputs, at its full length); a symbolic
        package's at each of its ``timed`` lengths."""
        if self.symbolic:
            per = {label(n): self.bucket(n).measure(**kwargs, length=n) for n in self.timed}
        else:
            per = {str(b): self.bucket(b).measure(**kwargs) for b in self.buckets}
        first, last = per[next(iter(per))], per[list(per)[-1]]
        return {"system": first["system"], "warnings": first["warnings"], "threads": first["threads"],
                "latency": last["latency"], "buckets": per}

    def reference_inputs(self) -> list[np.ndarray]:
        if not self.symbolic:
            return self.bucket(self.max).reference_inputs()
        path = self.root / RANGE_REFERENCE  # the longest length checked
        if not path.is_file():
            raise LoaderError("the package has no reference inputs", "it was built with --no-verify; pass your own inputs")
        with np.load(path) as data:
            length = label(json.loads(str(data["lengths"]))[-1])  # (the last: every range at its end)
            return [data[f"{length}/input:{s['name']}"] for s in self.inputs]

    @property
    def end(self) -> Any:
        """Every range at its end (the point :meth:`timing_inputs` is at)."""
        ends = tuple(hi for _lo, hi in self.ranges.values())
        return ends if len(ends) > 1 else ends[0]

    def timing_inputs(self) -> list[np.ndarray]:
        return self.bucket(self.end).timing_inputs(self.end if self.symbolic else None)

