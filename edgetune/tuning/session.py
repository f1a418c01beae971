"""``edgetune tune``: entry points. The loop is in :mod:`.loop`, the runners in :mod:`.runners`,
the options and results in :mod:`.options`."""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import Any

from edgetune_runtime.ranges import label

from .. import _tvm
from ..devices import resolve_device
from ..errors import UsageError
from .network_check import NetworkChecker
from .options import Baseline, Notice, Progress, TuneOptions, TuneResult
from .records import RecordStore, default_dir
from .tasks import TaskSet, build_task_set

__all__ = ["TuneOptions", "TuneResult", "list_tasks", "tune"]

MAX_RESERVE = 0.5  # of a time budget, at most this share is kept for the network check


def _task_set(opts: TuneOptions, profile: Any) -> TaskSet:
    """The networks imported and their kernels extracted (:func:`.tasks.build_task_set`), in a child
    process (:mod:`..isolation`): a crash inside TVM is a CrashError, and nothing is tuned."""
    from ..isolation import isolated

    names = ", ".join(p.name for p in opts.models)
    return isolated("importing", names, build_task_set, opts.models, profile, opts.input_shapes, opts.layout,
                    opts.bindings, opts.buckets, opts.shape_weights, opts.precision)


def list_tasks(opts: TuneOptions) -> tuple[TaskSet, dict[str, Any], float | None]:
    """The task table only (``--list-tasks``): tasks, what the records hold for them, and the
    profile's fp32 peak in GFLOP/s (None if unknown)."""
    opts.check()
    profile = resolve_device(opts.device)
    tasks = _task_set(opts, profile)
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
    from ..build import check_precision, check_toolchain
    from .loop import TuneLoop
    from .runners import open_runner

    began = time.monotonic()  # a time budget counts from here: the whole command is the user's wait
    opts.check()
    profile = resolve_device(opts.device)
    check_precision(profile, opts.precision)
    cc, cuda = check_toolchain(profile)
    notice(f"importing {len(opts.models)} model(s) and extracting tasks for {profile.name}")
    tasks = _task_set(opts, profile)
    if tasks.target.kind.name != "llvm" and any(t.workload.symbolic for t in tasks.tasks):
        raise UsageError(f"tuning a range of lengths as one symbolic-shape library is built for CPUs, not for "
                         f"{profile.name}'s GPU (MetaSchedule's GPU search needs constant shapes)",
                         "tune the range's buckets: add --buckets 64,128,256 (and package with the same --buckets)")
    opts = _time_baselines(opts, profile, tasks, notice)
    store = RecordStore(opts.records or default_dir(profile.name), profile.name)
    with store.lock(), contextlib.ExitStack() as stack:
        store.prepare(_tvm.target_to_json(tasks.target), tasks.lowering)
        _check_shape_weights(store, tasks)
        checker = stack.enter_context(NetworkChecker(opts, store, notice)) if opts.network_check else None
        reserve = _reserve(checker, opts, notice) if checker else 0.0
        with open_runner(opts, profile, notice) as runner:
            peak = _tvm.peak_gflops(profile, tasks.target)
            loop = TuneLoop(opts, profile, tasks, store, runner, (cc, cuda), progress, notice, began,
                            peak_gflops=peak, reserve_s=reserve)
            result = loop.run()
        if checker is None:
            return result
        if result.interrupted:
            notice("network check skipped (interrupted): run the same `edgetune tune` again to resume and check")
            return result
        return replace(result, checks=tuple(checker.run(loop.budget_end)))


def _check_shape_weights(store: RecordStore, tasks: TaskSet) -> None:
    """Kernels of symbolic shape are timed at a range's weighted lengths: their records compare
    only at the same ones. Refuses tuning them at other lengths into records timed at others;
    else remembers the lengths (under the store's lock)."""
    known, stats = store.shape_weights(), store.stats()
    wanted = {t.shash: {label(n): w for n, w in t.workload.lengths} for t in tasks.tasks if t.workload.lengths}
    clash = [t for t in tasks.tasks if t.shash in wanted and t.shash in stats and known.get(t.shash) != wanted[t.shash]]
    if clash:
        had = known.get(clash[0].shash)
        said = ",".join(f"{n}={w:g}" for n, w in had.items()) if had else "one length (a fixed-shape build)"
        raise UsageError(f"{clash[0].name} and {len(clash) - 1} other kernel(s) already have records timed at "
                         f"--shape-weights {said}: times at other lengths do not compare with them",
                         "tune with the same --shape-weights, or into another --records directory")
    store.record_shape_weights({h: w for h, w in wanted.items() if known.get(h) != w})


def _reserve(checker: NetworkChecker, opts: TuneOptions, notice: Notice) -> float:
    """Build (and with a time budget, time) the default packages the network check compares
    with; the seconds of a time budget kept for the rest of it (what this took is on the
    budget's clock already) — with per-kernel verdicts where the whole check fits in
    ``MAX_RESERVE`` of the budget, else only the network's time deciding, else none (the check
    will not fit before the deadline and is skipped then)."""
    t0 = time.monotonic()
    checker.prepare(time_it=opts.time_s is not None)
    if opts.time_s is None:
        return 0.0
    spent = time.monotonic() - t0
    full, light = spent + checker.expected_s(True), spent + checker.expected_s(False)
    cap = MAX_RESERVE * opts.time_s
    if full <= cap:
        notice(f"keeping {full:.0f} s of the {opts.time_s:.0f} s budget for the network check")
        return full - spent
    checker.per_kernel = False
    if light <= cap:
        notice(f"keeping {light:.0f} s of the {opts.time_s:.0f} s budget for the network check: only the networks' "
               f"times decide (judging each kernel would take ~{full:.0f} s; give --time more for that)")
        return light - spent
    # kept or not, a check that does not fit before the deadline is skipped: the search gets the time
    notice(f"the network check needs ~{light:.0f} s, over half of the {opts.time_s:.0f} s budget: the search takes "
           "the budget and the records stay unchecked (give --time more for the check, or pass --no-network-check)")
    return 0.0


def _time_baselines(opts: TuneOptions, profile: Any, tasks: TaskSet, notice: Notice) -> TuneOptions:
    """Time the networks' own runtimes on the device where relative targets (``0.8x``) or
    ``--baseline`` ask for it, before the tuner's RPC server runs beside them; the relative
    targets become seconds."""
    wanted = [n for n in tasks.networks if opts.baseline or n in opts.relative_targets]
    if not wanted:
        return opts
    from ..remote.bench import measure_baseline
    from ..remote.inventory import load_inventory

    ranged = [n for j, n in enumerate(tasks.networks) if n in wanted and tasks.models[j].ranges]
    if ranged:
        raise UsageError(f"{ranged[0]} is tuned for a range of lengths: relative latency targets and --baseline time "
                         "the model's own runtime at one shape",
                         f"give it an absolute target (--latency {ranged[0]}=25ms: the mean over the --shape-weights "
                         "lengths), or tune one length")
    where = opts.device if opts.device in load_inventory() else "host" if profile.is_native else None
    if opts.tracker or where is None:
        raise UsageError("relative latency targets and --baseline time the model's own runtime with a shell on the device",
                         "use --device host or a board added with `edgetune devices add`, or an absolute target "
                         "such as --latency NET=25ms")
    measured = {}
    for j, name in enumerate(tasks.networks):
        if name not in wanted:
            continue
        notice(f"timing {name} with its own runtime on {where}")
        timing = measure_baseline(tasks.models[j], where)
        for w in timing.warnings:
            if w["level"] == "bad":
                notice(f"while timing {name}'s baseline: {w['text']}")
        measured[name] = Baseline(timing.runtime, timing.p50_s)
        notice(f"{name}: {timing.runtime} p50 {timing.p50_s * 1e3:.3f} ms on {where} ({timing.threads} threads)"
               + (f" → target {opts.relative_targets[name] * timing.p50_s * 1e3:.3f} ms ({opts.relative_targets[name]:g}×)"
                  if name in opts.relative_targets else ""))
    targets = dict(opts.targets) | {n: share * measured[n].seconds for n, share in opts.relative_targets.items()}
    return replace(opts, targets=targets, baselines=measured)
