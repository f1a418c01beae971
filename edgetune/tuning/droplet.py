"""Droplet search ("Explore as a Storm, Exploit as a Raindrop"): coordinate descent over the
sampling decisions of the best schedule found so far, and fitting tile decisions to other loop
extents (schedule transfer). Pure Python over decision values; TVM traces are edited by the
adapter in :mod:`edgetune._tvm.metaschedule`.

A decision is a *coordinate*: a tile split (``SamplePerfectTile``: factors whose product is the
loop extent) or a categorical choice (unroll depth, vectorize/parallel extents). One step changes
one coordinate by one notch: a prime factor moves between two tile levels, or a categorical
index moves ±1. Compute-at locations are left alone: moving one changes how many loops later
instructions see, and MetaSchedule then cannot replay the trace from its database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Move = tuple[int, Any]  # (instruction index, new decision)


def prime_factors(n: int) -> list[int]:
    """Distinct prime factors of ``n`` in increasing order."""
    out, p = [], 2
    while p * p <= n:
        if n % p == 0:
            out.append(p)
            while n % p == 0:
                n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def tile_moves(factors: Sequence[int], max_innermost: int) -> list[list[int]]:
    """Every split reached by moving one prime factor from one tile level to another."""
    out = []
    for i, fi in enumerate(factors):
        for p in prime_factors(fi):
            for j in range(len(factors)):
                if j == i:
                    continue
                new = list(factors)
                new[i] //= p
                new[j] *= p
                if max_innermost > 0 and new[-1] > max_innermost:
                    continue
                out.append(new)
    return out


def moves(decisions: Sequence[tuple[int, str, Any, tuple[Any, ...]]]) -> list[Move]:
    """One-notch neighbours of a schedule, from its (index, kind, decision, attrs) list."""
    out: list[Move] = []
    for idx, kind, decision, attrs in decisions:
        if kind == "SamplePerfectTile":
            max_inner = int(attrs[1]) if len(attrs) > 1 else 0
            out.extend((idx, new) for new in tile_moves([int(x) for x in decision], max_inner))
        elif kind == "SampleCategorical":
            n = len(attrs[0]) if attrs else 0
            out.extend((idx, d) for d in (int(decision) - 1, int(decision) + 1) if 0 <= d < n)
    return out


def fit_tile(factors: Sequence[int], extent: int, max_innermost: int = 0) -> list[int]:
    """Adapt a tile split made for another extent: keep each inner factor where it still divides
    what is left (else the largest divisor not above it), and give the outermost level the rest."""
    left = extent
    inner = []
    for f in reversed(list(factors)[1:]):
        g = max(d for d in range(1, min(int(f), left) + 1) if left % d == 0)
        inner.append(g)
        left //= g
    fitted = [left, *reversed(inner)]
    if max_innermost > 0 and fitted[-1] > max_innermost:
        d = max(x for x in range(1, max_innermost + 1) if fitted[-1] % x == 0)
        fitted[0] *= fitted[-1] // d
        fitted[-1] = d
    return fitted


def key(decisions: Sequence[tuple[int, str, Any, tuple[Any, ...]]]) -> str:
    """A schedule's identity within one design space: its decision vector."""
    return repr([(idx, d) for idx, _kind, d, _attrs in decisions])


def improved(new: float, current: float, threshold: float = 0.01) -> bool:
    """A move is taken only when it beats the centre by more than measurement noise."""
    return new < current * (1.0 - threshold)
