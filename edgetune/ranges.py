"""What a range of lengths is: ``--input-shape input_ids=1,1..256`` asks for one package for every
length in the range, verified at several lengths against the model's runtime (built by
:mod:`.range_package`; this module is the range itself: its lengths, buckets and checked
points). How the loader serves a length: :mod:`edgetune_runtime.ranges`. One length is shared by every ranged input (a sequence
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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgetune_runtime.ranges import label, point_values

from .errors import UsageError
from .importer import detect_format
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
    return not opts.buckets and detect_format(opts.model) == "onnx"
