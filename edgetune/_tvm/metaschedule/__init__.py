"""MetaSchedule, as edgetune's tuner drives it: tasks (:mod:`.tasks`), their design spaces and
the search's trace edits (:mod:`.search`), the records database (:mod:`.database`), and the
builder and runners that compile and time candidates (:mod:`.builder`, :mod:`.runner`, on the
worker pools of :mod:`.pool`). ``edgetune.tuning`` reads this package as ``ms``."""

from ..constants import FAILED_RUN_SECS, RECORDS_FILE, WORKLOADS_FILE
from ..passes.legalize import ROW_HEIGHTS, ROWS
from .base import meta_schedule
from .builder import (
    TIMING_FILE,
    PooledBuilder,
    artifact_timing,
    build_candidate,
    builder_input,
    make_builder,
    remove_artifact,
)
from .database import (
    annotation_keys,
    apply_records,
    commit,
    compile_with_records,
    mean_secs,
    measured_keys,
    open_database,
    replay_problem,
    top_traces,
)
from .gensor import gensor_search
from .pool import shielded_pool
from .runner import (
    Evaluator,
    PoolRunner,
    RpcEndpoint,
    collect,
    local_measure,
    local_runner,
    probe,
    rpc_runner,
    runner_input,
    runner_result,
)
from .search import (
    SearchConfig,
    TaskContext,
    decisions,
    design_space_of,
    fit_decisions,
    make_cost_model,
    similar_workloads,
    trace_key,
    update_cost_model,
    with_decision,
)
from .tasks import Workload, extract_workloads, kernel_workloads, workload_hash

__all__ = [
    "FAILED_RUN_SECS", "RECORDS_FILE", "ROWS", "ROW_HEIGHTS", "TIMING_FILE", "WORKLOADS_FILE", "Evaluator", "PoolRunner", "PooledBuilder",
    "RpcEndpoint", "SearchConfig", "TaskContext", "Workload", "annotation_keys", "apply_records", "artifact_timing",
    "build_candidate", "builder_input", "collect", "commit", "compile_with_records", "decisions", "design_space_of",
    "extract_workloads", "fit_decisions", "gensor_search", "kernel_workloads", "local_measure", "local_runner", "make_builder", "make_cost_model", "mean_secs",
    "measured_keys", "meta_schedule", "open_database", "probe", "remove_artifact", "replay_problem", "rpc_runner", "runner_input",
    "runner_result", "shielded_pool", "similar_workloads", "top_traces", "trace_key", "update_cost_model",
    "with_decision", "workload_hash",
]
