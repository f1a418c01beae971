"""The tuning tasks of one or more networks for a profile: identical kernels are one task,
counted in every network that calls it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import _tvm
from ..errors import UsageError
from ..importer import bindings_per_model, import_model, shapes_per_model
from ..model import ImportedModel
from ..profiles import Profile
from ..ranges import check_buckets, check_shape_weights, default_buckets, split


@dataclass(frozen=True)
class Task:
    """One kernel to tune; ``calls[j]`` = times network j runs it per inference."""

    name: str
    shash: str
    flops: float
    calls: tuple[int, ...]
    workload: Any  # the adapter's Workload (holds the TIR module)


@dataclass(frozen=True)
class TaskSet:
    """Tasks of several networks, deduplicated by workload hash."""

    networks: tuple[str, ...]
    models: tuple[ImportedModel, ...]
    tasks: tuple[Task, ...]
    target: Any
    lowering: str = "nhwc-packed"
    default_variant: str = "winograd"  # what an untuned build uses for an unmeasured 3×3 convolution

    def network_tasks(self, j: int, choice: Mapping[str, str] | None = None) -> dict[int, int]:
        """Task index → calls per inference, for network j, with each kernel that has variants (a
        convolution's direct and Winograd kernels, a symbolic kernel's register-tile heights)
        counted as ``choice`` says (else the untuned build's)."""
        alternatives = self.alternatives()
        out = {}
        for i, t in enumerate(self.tasks):
            sig, variant = t.workload.signature, t.workload.variant
            if sig in alternatives and variant != (choice or {}).get(sig, t.workload.default_variant or self.default_variant):
                continue
            if t.calls[j]:
                out[i] = t.calls[j]
        return out

    def alternatives(self) -> dict[str, dict[str, list[int]]]:
        """Signature → variant → task indices, for kernels with several variants."""
        found: dict[str, dict[str, list[int]]] = {}
        for i, t in enumerate(self.tasks):
            if t.workload.signature:
                found.setdefault(t.workload.signature, {}).setdefault(t.workload.variant, []).append(i)
        return {sig: v for sig, v in found.items() if len(v) > 1}

    def rows(self, stats: Mapping[str, Any] | None = None, generic: bool = False) -> list[dict[str, Any]]:
        """For ``--list-tasks``: name, FLOPs, weight per network, and what the records hold
        (``generic``: every task tuned with MetaSchedule's own rules, ``--rules generic``)."""
        out = []
        for t in self.tasks:
            s = (stats or {}).get(t.shash)
            rules = f"MetaSchedule {self.target.kind.name}" if generic else t.workload.rules
            out.append({"task": t.name, "kind": t.workload.kind, "rules": rules, "workload": t.shash,
                        "flops": t.flops,
                        "signature": t.workload.signature, "variant": t.workload.variant,
                        "default_variant": t.workload.default_variant,
                        "weight": dict(zip(self.networks, t.calls)), "calls": sum(t.calls),
                        "trials": s.trials if s else 0, "default_ms": s.default_ms if s else None,
                        "best_ms": s.best_ms if s else None})
        return out


def network_names(paths: Sequence[Path]) -> tuple[str, ...]:
    """Networks are named by file stem; two files with one stem are an error."""
    names = tuple(p.stem for p in paths)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"two models are both called '{dupes[0]}'", "rename one file: networks are named by file stem")
    return names


@dataclass(frozen=True)
class TunedNetwork:
    """One network a job tunes: its model, name and input shapes; for a symbolic range network
    (one library for a range of lengths) the lengths its kernels are timed at, with weights."""

    path: Path
    name: str
    shapes: dict[str, Any]
    lengths: dict[Any, float] = field(default_factory=dict)  # point (an int: the length) → weight

    @property
    def symbolic(self) -> bool:
        return bool(self.lengths)


def networks_of(paths: Sequence[Path], input_shapes: Mapping[str, tuple[Any, ...]] | None = None,
                buckets: Sequence[int] = (), shape_weights: Mapping[Any, float] | None = None) -> list[TunedNetwork]:
    """The networks a job tunes: a model, named by its file stem. A model with a length range
    (``--input-shape ids=1,1..256``) is tuned as the range package is built: an ONNX model
    without ``--buckets`` as one network of symbolic shape whose kernels are timed at the
    ``shape_weights`` lengths (default: :meth:`~edgetune.ranges.LengthRange.timed_points`,
    weighted equally; with several ranges, points: ``(4, 128)``), else one network per bucket (``NET@LENGTH``), so the buckets'
    kernels are tuned with the objective's weights (``--weight enc@128=2``)."""
    from ..importer import detect_format

    names = network_names(paths)
    out = []
    weighted = False
    for path, name, shapes in zip(paths, names, shapes_per_model(list(paths), list(names), input_shapes or {})):
        fixed, rng = split(shapes)
        if rng is None:
            out.append(TunedNetwork(path, name, shapes))
        elif not buckets and detect_format(path) == "onnx":
            weights = check_shape_weights(dict(shape_weights or {}), rng) if shape_weights else \
                {n: 1.0 for n in rng.timed_points()}
            weighted = True
            out.append(TunedNetwork(path, name, shapes, weights))
        else:
            lengths = check_buckets(list(buckets), rng) if buckets else default_buckets(rng.lo, rng.hi)
            out += [TunedNetwork(path, f"{name}@{b}", rng.shapes_at(b, fixed)) for b in lengths]
    if shape_weights and not weighted:
        raise UsageError("--shape-weights weights the lengths of a range tuned as one symbolic-shape library, and no "
                         "model here is one", "give an ONNX model a range (--input-shape NAME=1,1..256) without --buckets")
    return out


def build_task_set(paths: Sequence[Path], profile: Profile,
                   input_shapes: Mapping[str, tuple[Any, ...]] | None = None, layout: str = "auto",
                   bindings: Mapping[str, str] | None = None, buckets: Sequence[int] = (),
                   shape_weights: Mapping[Any, float] | None = None, precision: str = "fp32") -> TaskSet:
    """Import every network (:func:`networks_of`) and extract its kernels for ``profile``'s
    target, lowered as the build lowers them for ``layout`` and ``precision``."""
    target = _tvm.make_target(profile.target_spec())
    key = _tvm.lowering_for(target, layout, precision).key
    nets = networks_of(paths, input_shapes, buckets, shape_weights)
    stems = network_names(paths)
    binds = dict(zip(paths, bindings_per_model(list(paths), list(stems), bindings or {})))
    names = tuple(n.name for n in nets)
    models = tuple(import_model(n.path, n.shapes, binds[n.path]) for n in nets)
    merged: dict[str, dict[str, Any]] = {}
    for j, (model, net) in enumerate(zip(models, nets)):
        for wl in model_workloads(model, target, key, net.lengths):
            entry = merged.setdefault(wl.shash, {"wl": wl, "calls": [0] * len(models)})
            entry["calls"][j] += wl.weight
    tasks = tuple(Task(e["wl"].name, h, e["wl"].flops, tuple(e["calls"]), e["wl"]) for h, e in merged.items())
    return TaskSet(names, models, _unique(tasks), target, key, _tvm.default_conv_variant(target))


def model_workloads(model: ImportedModel, target: Any, lowering_key: str,
                    lengths: Mapping[Any, float] | None = None) -> list[Any]:
    """A model's kernels, with both the direct and the Winograd variant of every convolution
    that has one (tuning measures both and keeps the faster); a symbolic model's timed at
    ``lengths`` (point → weight; a point is the length, or a tuple of its ranges' values)."""
    from .._tvm import metaschedule as ms

    variables = tuple(model.ranges)
    direct = ms.extract_workloads(model.mod, target, lowering_key, "direct", lengths, variables)
    if lowering_key.startswith("nchw") or not any(wl.signature for wl in direct):
        return direct
    known = {wl.shash for wl in direct}
    out = direct
    if any(wl.variant in ("direct", "winograd") for wl in direct):
        out += [wl for wl in ms.extract_workloads(model.mod, target, lowering_key, "winograd", lengths, variables)
                if wl.variant == "winograd" and wl.shash not in known]
    if any(wl.variant.startswith("rows") for wl in direct):  # a symbolic model: each register-tile height
        for height in ms.ROW_HEIGHTS:
            found = ms.extract_workloads(model.mod, target, lowering_key, {ms.ROWS: str(height)}, lengths, variables)
            new = [dataclasses.replace(wl, name=f"{wl.name}@{wl.variant}") for wl in found
                   if wl.variant.startswith("rows") and wl.shash not in known]
            known |= {wl.shash for wl in new}
            out += new
    return out


def choose_variants(rows: Sequence[Mapping[str, Any]], default: str) -> dict[str, str]:
    """Per signature with several variants, the fastest by what was measured: Σ calls × best
    time (the default schedule's time where no search ran); where a variant is unmeasured, the
    untuned build's (a row's ``default_variant``, else ``default``: the target's convolution
    variant, see :attr:`TaskSet.default_variant`)."""
    totals: dict[str, dict[str, float | None]] = {}
    untuned: dict[str, str] = {}
    for r in rows:
        if not r.get("signature"):
            continue
        untuned[r["signature"]] = r.get("default_variant") or default
        ms = r["best_ms"] if r.get("best_ms") is not None else r.get("default_ms")
        per = totals.setdefault(r["signature"], {})
        current = per.get(r["variant"], 0.0)
        per[r["variant"]] = None if ms is None or current is None else current + r["calls"] * ms
    choice = {}
    for sig, per in totals.items():
        if len(per) > 1 and all(v is not None for v in per.values()):
            choice[sig] = min(per, key=lambda v: per[v])  # type: ignore[arg-type,return-value]
        elif len(per) > 1:
            choice[sig] = untuned[sig]
    return choice


def _unique(tasks: tuple[Task, ...]) -> tuple[Task, ...]:
    """Two networks may each have a ``fused_matmul_add`` of another shape: name them apart."""
    seen: dict[str, int] = {}
    out = []
    for t in tasks:
        n = seen[t.name] = seen.get(t.name, 0) + 1
        out.append(t if n == 1 else Task(f"{t.name}#{n}", t.shash, t.flops, t.calls, t.workload))
    return tuple(out)


def task_rows(model: ImportedModel, profile: Profile, stats: Mapping[str, Any], lowering_key: str) -> list[dict[str, Any]]:
    """Per kernel of one model (both variants of convolutions that have two): kind, calls,
    FLOPs, trials, default and best time measured on the board (manifests, package summaries)."""
    target = _tvm.make_target(profile.target_spec())
    rows = []
    for wl in model_workloads(model, target, lowering_key):
        s = stats.get(wl.shash)
        rows.append({"task": wl.name, "kind": wl.kind, "workload": wl.shash, "calls": wl.weight, "flops": wl.flops,
                     "signature": wl.signature, "variant": wl.variant, "default_variant": wl.default_variant,
                     "trials": s.trials if s else 0, "default_ms": s.default_ms if s else None,
                     "best_ms": s.best_ms if s else None})
    return rows
