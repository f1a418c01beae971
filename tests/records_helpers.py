"""Real tuning records, written without tuning: a small matmul workload and traces made by
scheduling it by hand (the instructions edgetune's spaces produce), in MetaSchedule's JSON
database format — what `records import` and the record checks read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"


def matmul(n: int) -> Any:
    import tvm
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")})


def workload_line(mod: Any) -> list[Any]:
    from edgetune._tvm import metaschedule as ms
    from edgetune._tvm.core import plain

    return plain(ms.meta_schedule().database.Workload(mod).as_json())


def trace(mod: Any, factor: int, extra: list[Any] | None = None) -> list[Any]:
    """The trace of a schedule: the j loop split by ``factor``, i parallel; ``extra``
    instructions (JSON form) appended after it."""
    from tvm.s_tir import schedule as s

    from edgetune._tvm.core import plain

    sch = s.Schedule(mod)
    block = sch.get_sblock("C")
    i, j, _k = sch.get_loops(block)
    extent = int(sch.get(j).extent)
    tiles = sch.sample_perfect_tile(j, n=2, decision=[extent // factor, factor])
    sch.split(j, tiles)
    sch.parallel(i)
    out = plain(sch.trace.as_json())
    out[0] += extra or []
    return out


def record(trace_json: list[Any], secs: list[float]) -> list[Any]:
    return [trace_json, secs, {"kind": "llvm"}, []]


def write_store(directory: Path, profile: str = "host") -> Any:
    """A records store with two matmul workloads and five records (a default "before" with an
    empty trace, a failure, three schedules)."""
    from edgetune.tuning.records import RecordStore

    store = RecordStore(directory, profile)
    store.prepare({"kind": "llvm"}, "nhwc-packed")
    big, small = matmul(64), matmul(32)
    (store.dir / WORKLOADS).write_text("".join(json.dumps(workload_line(m)) + "\n" for m in (big, small)))
    rows = [[0, record([[], []], [0.002, 0.004])], [0, record(trace(big, 8), [0.001])], [0, record(trace(big, 16), [1e10])],
            [1, record(trace(small, 8), [0.5])], [0, record(trace(big, 4), [0.0015])]]
    (store.dir / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return store


def hashes(store: Any) -> tuple[str, str]:
    return tuple(store.workloads())  # type: ignore[return-value]


def read_records(directory: Path) -> list[tuple[int, dict[int, Any], float | None]]:
    """The records of a directory in the order they were measured: (workload index, decisions
    by instruction index, mean seconds or None for a failed candidate)."""
    out = []
    for line in (directory / RECORDS).read_text().splitlines():
        idx, rec = json.loads(line)
        trace, secs = rec[0], [float(s) for s in rec[1]]
        decisions = {int(i): json.dumps(d) for i, d in (trace[1] if len(trace) > 1 else [])}
        ok = secs and max(secs) < 1e9
        out.append((int(idx), decisions, sum(secs) / len(secs) if ok else None))
    return out


def check_against_records(snap: Any, records: Path, profile: str, model: Path) -> None:
    """What a tuning snapshot reports is what the records directory holds: per task its best and its
    default (the untuned kernel, measured as a candidate) as the store reads them, and the
    network's estimates as Σ calls × those, computed here from the store."""
    from pytest import approx

    from edgetune.profiles import get_profile
    from edgetune.tuning.records import RecordStore
    from edgetune.tuning.tasks import build_task_set, choose_variants

    stats = RecordStore(records, profile).stats()
    taskset = build_task_set([model], get_profile(profile))
    for row, task in zip(snap.tasks, taskset.tasks, strict=True):
        stored = stats[task.shash]
        assert row.name == task.name, (row.name, task.name)
        assert row.best_ms == approx(stored.best_ms) and row.default_ms == approx(stored.default_ms), row
    # a convolution with a direct and a Winograd variant counts as the faster of the two
    rows = [{"signature": t.workload.signature, "variant": t.workload.variant, "calls": t.calls[0],
             "best_ms": stats[t.shash].best_ms, "default_ms": stats[t.shash].default_ms} for t in taskset.tasks]
    counted = taskset.network_tasks(0, choose_variants(rows, taskset.default_variant))
    (net,) = snap.networks
    assert net.estimate_ms == approx(sum(n * stats[taskset.tasks[i].shash].best_ms for i, n in counted.items()))
    assert net.before_ms == approx(sum(n * stats[taskset.tasks[i].shash].default_ms for i, n in counted.items()))
