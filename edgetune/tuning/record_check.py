"""What a tuning record may hold — checked before a record is imported, applied to a build or
used to start a search (no TVM here; :func:`edgetune._tvm.metaschedule.replay_problem` replays
the trace on its workload for the import).

A record is ``[workload index, [trace, run_secs, target, args]]``. Its trace is replayed into
every library built with it, so it is code: only the instruction kinds and annotation keys
edgetune's design spaces produce are allowed (:data:`~edgetune._tvm.constants.TRACE_INSTRUCTIONS`,
``TRACE_ANNOTATIONS``), tensorized only with edgetune's own intrinsics. Its run times decide
which schedule is "best", so they must be positive finite numbers (or MetaSchedule's failure
value), and not faster than the device can be (:func:`impossible_time`).
"""

from __future__ import annotations

import math
from typing import Any

from .._tvm.constants import DOT_INTRINSICS, FAILED_RUN_SECS, TRACE_ANNOTATIONS, TRACE_INSTRUCTIONS

# A record may claim at most this multiple of the device's peak FLOP/s: timings above that are
# forged or broken (measurement noise never beats the hardware by this much).
PEAK_MARGIN = 2.0


def row_problem(row: Any, workloads: int) -> str | None:
    """Why ``row`` (one parsed record line) is not a record edgetune could have written, or None."""
    if not (isinstance(row, list) and len(row) == 2):
        return "not a [workload, record] pair"
    idx, rec = row
    if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < workloads:
        return f"workload index {idx!r} is not one of the {workloads} workloads"
    if not (isinstance(rec, list) and len(rec) >= 2):
        return "not a [trace, run times, …] record"
    return trace_problem(rec[0]) or run_secs_problem(rec[1])


def trace_problem(trace: Any) -> str | None:
    """Why ``trace`` (a trace's JSON form: ``[instructions, decisions]``) is not one of edgetune's
    design spaces' traces, or None."""
    if trace is None or trace == []:
        return None  # edgetune 0.1's "before": the unscheduled kernel
    if not (isinstance(trace, list) and len(trace) == 2 and isinstance(trace[0], list) and isinstance(trace[1], list)):
        return "its trace is not [instructions, decisions]"
    for n, inst in enumerate(trace[0]):
        if not (isinstance(inst, list) and len(inst) == 4 and isinstance(inst[0], str)
                and all(isinstance(part, list) for part in inst[1:])):
            return f"trace instruction {n} is malformed"
        kind, inputs, attrs, outputs = inst
        if kind not in TRACE_INSTRUCTIONS:
            return f"trace instruction {n} is {kind!r}, which edgetune's design spaces never produce"
        if kind == "Annotate" and (not attrs or attrs[0] not in TRACE_ANNOTATIONS):
            return f"trace instruction {n} annotates {attrs[0] if attrs else '?'!r}, which edgetune's design spaces never set"
        if kind == "Tensorize" and (not attrs or attrs[0] not in DOT_INTRINSICS):
            return f"trace instruction {n} tensorizes with {attrs[0] if attrs else '?'!r}, not an edgetune intrinsic"
        if not all(_plain(v) for v in (*inputs, *attrs, *outputs)):
            return f"trace instruction {n} ({kind}) holds an unexpected value"
    for decision in trace[1]:
        if not (isinstance(decision, list) and len(decision) == 2 and isinstance(decision[0], int)
                and 0 <= decision[0] < len(trace[0]) and _plain(decision[1])):
            return "its decisions are malformed"
    return None


def _plain(value: Any, depth: int = 0) -> bool:
    """JSON scalars and short nested lists of them (what instructions carry)."""
    if value is None or isinstance(value, (bool, int, str)):
        return not isinstance(value, str) or len(value) <= 256
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, list) and depth < 4 and len(value) <= 4096 and all(_plain(v, depth + 1) for v in value)


def run_secs_problem(run_secs: Any) -> str | None:
    """Why ``run_secs`` is not a list of measured times, or None."""
    if not isinstance(run_secs, list) or len(run_secs) > 1000:
        return "its run times are not a list"
    for value in run_secs:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"run time {value!r} is not a number"
        if not math.isfinite(value) or value <= 0 or (value > 1e4 and value != FAILED_RUN_SECS):
            return f"run time {value!r} s is not a measured time"
    return None


def impossible_time(flops: float, seconds: float, peak_gflops: float | None) -> str | None:
    """Why running ``flops`` in ``seconds`` cannot have happened on a device of ``peak_gflops``
    (None when it can, or when the peak or the FLOPs are unknown)."""
    if not peak_gflops or flops <= 0 or seconds >= FAILED_RUN_SECS:
        return None
    rate = flops / seconds / 1e9
    if rate > PEAK_MARGIN * peak_gflops:
        return f"{rate:,.0f} GFLOP/s is beyond the device's {peak_gflops:,.0f} GFLOP/s peak"
    return None
