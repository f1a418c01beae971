"""Tuning records: MetaSchedule's JSON database, what it holds, and applying it to a build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..constants import FAILED_RUN_SECS, RECORDS_FILE, WORKLOADS_FILE
from ..core import last_line, plain
from .base import meta_schedule
from .search import trace_key
from .tasks import peak_factor, tuning_module, workload_hash


def mean_secs(result: Any) -> float | None:
    """Mean run time of a measured candidate, None if it failed."""
    if result.error_msg or result.run_secs is None:
        return None
    secs = [float(plain(x)) for x in result.run_secs]
    return sum(secs) / len(secs) if secs and min(secs) < FAILED_RUN_SECS else None


def open_database(directory: Path) -> Any:
    """MetaSchedule's JSON database in ``directory`` (which must exist and be repaired)."""
    return meta_schedule().database.JSONDatabase(path_workload=str(directory / WORKLOADS_FILE),
                                      path_tuning_record=str(directory / RECORDS_FILE),
                                      module_equality="structural")


def commit(database: Any, workload_mod: Any, candidates: list[Any], results: list[Any], target: Any) -> None:
    """Append one measured batch; failed candidates are kept with MetaSchedule's failure time."""
    m = meta_schedule()
    wl = database.commit_workload(workload_mod)
    for cand, res in zip(candidates, results):
        secs = mean_secs(res)
        run_secs = [float(plain(x)) for x in res.run_secs] if secs is not None else [FAILED_RUN_SECS]
        database.commit_tuning_record(m.database.TuningRecord(cand.sch.trace, wl, run_secs, target, cand.args_info))


def top_traces(database: Any, workload_mod: Any, k: int) -> list[tuple[Any, float]]:
    """The ``k`` fastest valid records of a workload: (trace, mean seconds)."""
    if not database.has_workload(workload_mod):
        return []
    wl = database.commit_workload(workload_mod)
    out = []
    for rec in database.get_top_k(wl, k):
        secs = [float(x) for x in rec.run_secs]
        if secs and min(secs) < FAILED_RUN_SECS:
            out.append((rec.trace, sum(secs) / len(secs)))
    return out


def measured_keys(database: Any, workload_mod: Any) -> list[str]:
    """The design-space points already measured for a workload (see :meth:`TaskContext.key`)."""
    if not database.has_workload(workload_mod):
        return []
    wl = database.commit_workload(workload_mod)
    return [trace_key(rec.trace) for rec in database.get_top_k(wl, 100_000)]


def replay_problem(workload_line: Any, record: Any) -> tuple[str | None, float, float]:
    """Replay one record's trace on its workload, as a build would: (why it is not a schedule
    edgetune's spaces make — its workload does not parse or does not hash to its name, the
    trace does not replay, or the replayed kernel carries annotations no design space sets — or
    None; the workload's FLOPs, 0 when unknown; its :func:`.tasks.peak_factor`, the device's
    fp32 peak times which its times are checked against). ``workload_line``: ``[hash, IR]``;
    ``record``: ``[trace, run_secs, target, args]`` (both already checked for their shape,
    :mod:`edgetune.tuning.record_check`)."""
    from tvm.s_tir import schedule as s
    from tvm.s_tir.analysis import estimate_tir_flops

    from ..constants import TRACE_ANNOTATIONS
    from ..schedules.dispatch import dot_family_of

    m = meta_schedule()
    try:
        workload = m.database.Workload.from_json(workload_line)
    except Exception as err:  # noqa: BLE001 — TVM's deserializer raises many types
        return f"its workload does not parse ({last_line(err)[:120]})", 0.0, 1.0
    if workload_hash(workload.mod) != str(workload_line[0]):
        return "its workload does not hash to the name it is filed under", 0.0, 1.0
    before = annotation_keys(workload.mod)
    try:
        rec = m.database.TuningRecord.from_json(record, workload)
        sch = s.Schedule(workload.mod)
        rec.trace.apply_to_schedule(sch, remove_postproc=False)
    except Exception as err:  # noqa: BLE001 — a trace that does not replay is refused, whatever TVM raised
        return f"its trace does not replay on its workload ({last_line(err)[:120]})", 0.0, 1.0
    added = annotation_keys(sch.mod) - before - TRACE_ANNOTATIONS
    if added:
        return f"its schedule carries annotation(s) {', '.join(sorted(added))}", 0.0, 1.0
    try:
        flops = float(estimate_tir_flops(workload.mod))
    except Exception:  # noqa: BLE001 — data-dependent loops have no estimate
        flops = 0.0
    return None, flops, peak_factor(dot_family_of(workload.mod))


def annotation_keys(mod: Any) -> set[str]:
    """Every loop and block annotation key (and attribute key) in ``mod``'s PrimFuncs, read off
    the IR objects (TVM 0.27 exposes no TIR visitor to Python: the statement fields are walked)."""
    from tvm import s_tir, tirx

    keys: set[str] = set()
    stack = [f.body for _gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if isinstance(node, (tirx.For, s_tir.SBlock)):
            keys.update(str(k) for k in node.annotations.keys())
        if isinstance(node, tirx.AttrStmt):
            keys.add(str(node.attr_key))
        if isinstance(node, tirx.SeqStmt):
            stack.extend(node.seq)
        for field in ("body", "then_case", "else_case", "block", "init"):
            child = getattr(node, field, None)
            if isinstance(child, tirx.Stmt):
                stack.append(child)
    return keys


def apply_records(fused: Any, target: Any, database_dir: Path) -> Any:
    """Replace the kernels of a fused module that have tuning records by their best schedule."""
    from tvm import relax

    database = open_database(database_dir)
    with target, database:
        return relax.transform.MetaScheduleApplyDatabase()(fused)


def compile_with_records(mod: Any, target: Any, database_dir: Path) -> Any:
    """``compile_relax`` with the records in ``database_dir`` applied (untuned kernels stay as the
    default pipeline leaves them; on GPU, DLight schedules them)."""
    database = open_database(database_dir)
    return meta_schedule().relax_integration.compile_relax(database, tuning_module(mod), target, params=None)
