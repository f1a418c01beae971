"""``edgetune tune``: entry points. The loop is in :mod:`.loop`, the runners in :mod:`.runners`,
the options and results in :mod:`.options`."""

from __future__ import annotations

from typing import Any

from .. import _tvm
from ..devices import resolve_device
from .options import Notice, Progress, TuneOptions, TuneResult
from .records import RecordStore, default_dir
from .tasks import TaskSet, build_task_set

__all__ = ["TuneOptions", "TuneResult", "list_tasks", "tune"]


def list_tasks(opts: TuneOptions) -> tuple[TaskSet, dict[str, Any], float | None]:
    """The task table only (``--list-tasks``): tasks, what the records hold for them, and the
    profile's fp32 peak in GFLOP/s (None if unknown)."""
    opts.check()
    profile = resolve_device(opts.device)
    tasks = build_task_set(opts.models, profile, opts.input_shapes, opts.layout, opts.bindings)
    store = RecordStore(opts.records or default_dir(profile.name), profile.name)
    if not store.exists():
        return tasks, {}, _tvm.peak_gflops(profile, tasks.target)
    with store.snapshot() as snap:
        stats = RecordStore(snap, profile.name).stats()
    return tasks, stats, _tvm.peak_gflops(profile, tasks.target)


def tune(opts: TuneOptions, progress: Progress = lambda _s: None, notice: Notice = lambda _m: None) -> TuneResult:
    """Tune ``opts.models`` for ``opts.device`` (see :mod:`.loop`).

    Raises UsageError, ProfileError, ModelError, ToolchainError or RemoteError (a board that
    cannot be reached at the start, or every board lost mid-run, after saving what was measured).
    """
    from ..build import check_toolchain
    from .loop import TuneLoop
    from .runners import open_runner

    opts.check()
    profile = resolve_device(opts.device)
    cc, cuda = check_toolchain(profile)
    notice(f"importing {len(opts.models)} model(s) and extracting tasks for {profile.name}")
    tasks = build_task_set(opts.models, profile, opts.input_shapes, opts.layout, opts.bindings)
    store = RecordStore(opts.records or default_dir(profile.name), profile.name)
    with store.lock():
        store.prepare(_tvm.target_to_json(tasks.target), tasks.lowering)
        with open_runner(opts, profile, notice) as runner:
            peak = _tvm.peak_gflops(profile, tasks.target)
            loop = TuneLoop(opts, profile, tasks, store, runner, (cc, cuda), progress, notice, peak)
            return loop.run()
