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

The manifest (``kind: range``) records the range, the buckets and their sub-directories, the
pad values, and per output the axis that follows the length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError, LoaderError

RANGE_REFERENCE = "range_reference.npz"


def is_range(manifest: dict[str, Any]) -> bool:
    return manifest.get("kind") == "range"


def validate(manifest: dict[str, Any]) -> None:
    """Refuse a range manifest whose files, range, buckets or axes are not what ``edgetune package`` writes."""
    from .loader import validate_files

    def bad(what: str) -> LoaderError:
        return LoaderError(f"the range package's manifest is malformed: {what}", "package the model again")

    validate_files(manifest)
    rng = manifest.get("range")
    if not isinstance(rng, dict):
        raise bad("no 'range'")
    lo, hi, buckets = rng.get("min"), rng.get("max"), rng.get("buckets")
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 < lo <= hi):
        raise bad("its range is not min <= max")
    if not (isinstance(buckets, list) and buckets and all(isinstance(b, int) for b in buckets)
            and buckets == sorted(set(buckets)) and buckets[-1] >= hi):
        raise bad("its buckets are not increasing lengths reaching the range's end")
    dirs = rng.get("packages")
    files = manifest.get("files") or {}
    for b in buckets:
        sub = dirs.get(str(b)) if isinstance(dirs, dict) else None
        if not isinstance(sub, str) or "/" in sub or sub in ("", ".", "..") or f"{sub}/manifest.json" not in files:
            raise bad(f"bucket {b} has no package among the files it checks")
    for spec in manifest.get("inputs", []):
        axis = spec.get("range_axis")
        if axis is not None and not (isinstance(axis, int) and 0 <= axis < len(spec.get("shape", []))):
            raise bad(f"input {spec.get('original_name')!r} has a range axis outside its shape")


class RangeModel:
    """A range package: :meth:`run` at any length in the range; :meth:`check` and
    :meth:`measure` as a fixed-shape :class:`~edgetune_runtime.loader.Model` has them."""

    def __init__(self, root: Path, manifest: dict[str, Any], load_bucket: Any):
        self.root, self.manifest = root, manifest
        self.inputs: list[dict[str, Any]] = manifest["inputs"]
        self.outputs: list[dict[str, Any]] = manifest["outputs"]
        rng = manifest["range"]
        self.min, self.max, self.buckets = int(rng["min"]), int(rng["max"]), [int(b) for b in rng["buckets"]]
        self._dirs = {int(k): v for k, v in rng["packages"].items()}
        self._pad = dict(rng.get("pad") or {})
        # one symbolic-shape library serves every length at its own size (no padding)
        self.symbolic = bool(rng.get("symbolic"))
        self.timed = [int(n) for n in rng.get("timed") or self.buckets]
        self._load_bucket = load_bucket
        self._loaded: dict[int, Any] = {}

    def bucket_length(self, length: int) -> int:
        """The length a call of ``length`` runs at: the smallest bucket at least as long (a
        symbolic package: ``length`` itself)."""
        return length if self.symbolic else next(b for b in self.buckets if b >= length)

    def bucket(self, length: int) -> Any:
        """The package that serves ``length`` (loaded on first use)."""
        b = self.buckets[-1] if self.symbolic else self.bucket_length(length)
        if b not in self._loaded:
            self._loaded[b] = self._load_bucket(self.root / self._dirs[b])
        return self._loaded[b]

    def _named(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        if args and kwargs:
            raise InputError("pass inputs either by position or by name, not both")
        if args:
            if len(args) != len(self.inputs):
                raise InputError(f"model takes {len(self.inputs)} input(s), got {len(args)}",
                                 f"inputs are {[s['original_name'] for s in self.inputs]}")
            return {s["original_name"]: np.asarray(a) for s, a in zip(self.inputs, args)}
        return {k: np.asarray(v) for k, v in kwargs.items()}

    def length_of(self, named: dict[str, np.ndarray]) -> int:
        """The length the ranged inputs have (InputError when they disagree or leave the range)."""
        lengths = {}
        for spec in self.inputs:
            axis = spec.get("range_axis")
            value = named.get(spec["original_name"], named.get(spec["name"]))
            if axis is None or value is None:
                continue
            if value.ndim != len(spec["shape"]):
                raise InputError(f"input '{spec['original_name']}' needs {len(spec['shape'])} dimensions, got shape {value.shape}")
            lengths[spec["original_name"]] = int(value.shape[axis])
        if not lengths:
            raise InputError("none of the inputs with a length range was given",
                             f"inputs are {[s['original_name'] for s in self.inputs]}")
        if len(set(lengths.values())) > 1:
            raise InputError(f"the inputs' lengths differ: {lengths}", "pass the same length for every ranged input")
        length = next(iter(lengths.values()))
        if not self.min <= length <= self.max:
            raise InputError(f"length {length} is outside the package's range {self.min}..{self.max}",
                             f"package the model again with a range that holds it (--input-shape NAME=...,{self.min}..{length})"
                             if length > self.max else "pad the input up to the range's start")
        return length

    def run(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """One inference at the inputs' own length; outputs cut back to it."""
        named = self._named(args, kwargs)
        length = self.length_of(named)
        if self.symbolic:  # every length at its own size: outputs as the model makes them
            return self.bucket(length).run(**named)
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
        from .loader import compare, tolerance

        tol = tolerance(self.manifest, rtol, atol)
        path = self.root / RANGE_REFERENCE
        if not path.is_file():
            raise LoaderError("package has no reference data", "it was built with --no-verify")
        lengths: dict[str, Any] = {}
        with np.load(path) as data:
            for length in json.loads(str(data["lengths"])):
                inputs = {s["original_name"]: data[f"{length}/input:{s['name']}"] for s in self.inputs}
                expected = {s["original_name"]: data[f"{length}/output:{s['name']}"] for s in self.outputs}
                lengths[str(length)] = compare(expected, self.run(**inputs), **tol)
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
            per = {str(n): self.bucket(n).measure(**kwargs, length=n) for n in self.timed}
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
            length = max(json.loads(str(data["lengths"])))
            return [data[f"{length}/input:{s['name']}"] for s in self.inputs]

    def timing_inputs(self) -> list[np.ndarray]:
        return self.bucket(self.max).timing_inputs(self.max if self.symbolic else None)

