"""Timing candidates: on this machine, or over RPC on a board or a tracker's boards — a MetaSchedule
``PyRunner`` on a pool of workers. Importing this module imports TVM (the runner classes derive
from MetaSchedule's)."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import last_line, tvm
from ..rpc import rpc_connect, rpc_tracker_request
from .base import classes, derived_object, meta_schedule
from .pool import shielded_pool


def runner_result(run_secs: Sequence[float] | None, error: str | None) -> Any:
    return meta_schedule().runner.RunnerResult(list(run_secs) if run_secs is not None else None, error)


def runner_input(artifact: str, device_type: str, candidate: Any) -> Any:
    return meta_schedule().runner.RunnerInput(artifact, device_type, candidate.args_info)


@dataclass(frozen=True)
class Evaluator:
    """How each candidate is timed (TVM's time evaluator settings)."""

    number: int = 3
    repeat: int = 1
    min_repeat_ms: int = 40
    flush_cpu_cache: bool = False

    def config(self) -> Any:
        return meta_schedule().runner.EvaluatorConfig(number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                                           enable_cpu_cache_flush=self.flush_cpu_cache)


@dataclass(frozen=True)
class RpcEndpoint:
    """Where candidates run: a server (``tracker`` False) or a tracker key (``tracker`` True)."""

    host: str
    port: int
    key: str = ""
    tracker: bool = False


def connect(endpoint: RpcEndpoint, timeout: float) -> Any:
    """An RPC session that gives up after ``timeout`` seconds instead of waiting forever."""
    if not endpoint.tracker:
        return rpc_connect(endpoint.host, endpoint.port, endpoint.key, session_timeout=timeout)
    session = rpc_tracker_request(endpoint.host, endpoint.port, endpoint.key, wait=timeout, session_timeout=timeout)
    if session is None:
        raise TimeoutError(f"no board under '{endpoint.key}' was free within {timeout:.0f} s")
    return session


def host_random_fill(tensor: Any) -> None:
    """Random inputs made here and copied over, for the boards and this machine alike (the
    board's runtime-only TVM has no ``tvm.contrib.random``: it lives in the compiler library).
    32- and 64-bit integers are indices (a gather's, an embedding's) and are zeros: TVM's
    gather does not check its bounds, and MetaSchedule's random fill made a BERT-style
    encoder's embedding lookups read far outside their tables and kill the runner (its
    token-type table has 2 rows; 8-bit integers are quantized data, random)."""

    rng = np.random.default_rng(0)
    shape, dtype = tuple(int(x) for x in tensor.shape), str(tensor.dtype)
    if dtype.startswith("float") or dtype.startswith("bfloat"):
        data = rng.uniform(-1.0, 1.0, shape).astype(dtype)
    elif dtype == "bool":
        data = rng.integers(0, 2, shape).astype(dtype)
    elif dtype in ("int32", "int64", "uint32", "uint64"):
        data = np.zeros(shape, dtype)
    else:
        data = rng.integers(0, 8, shape).astype(dtype)
    tensor.copyfrom(data)


def _timed(rt_mod: Any, device: Any, evaluator: Any, args: list[Any], cutoff_s: float | None,
           run: Callable[..., list[float]]) -> list[float]:
    """``run(rt_mod, device, evaluator, args)`` — MetaSchedule's evaluator, every repeat — unless
    one probe run (after the warm-up call every time evaluator makes) is already slower than
    ``cutoff_s``: then that one time, which says enough about a hopeless candidate."""
    if cutoff_s is not None:
        probe = rt_mod.time_evaluator(rt_mod.entry_name, device, number=1, repeat=1)
        device.sync()
        first = float(probe(*args[0]).mean)
        if first > cutoff_s:
            return [first]
    return [float(x) for x in run(rt_mod, device, evaluator, args)]


def sized_arguments(device: Any, spec: Sequence[Any]) -> list[Any]:
    """A symbolic kernel's arguments at one length (``spec``: :func:`~.tasks.sized_args`),
    random tensors made here and copied to ``device``."""
    runtime = tvm().runtime
    out: list[Any] = []
    for kind, dtype, value in spec:
        if kind == "int":
            out.append(int(value))
            continue
        arg = runtime.empty(tuple(int(v) for v in value), dtype, device)
        host_random_fill(arg)
        out.append(arg)
    return out


def _weighted(rt_mod: Any, device: Any, evaluator: Any, sizes: Sequence[Any], cutoff_s: float | None,
              run: Callable[..., list[float]]) -> list[float]:
    """A symbolic kernel's time (a range package's): the weighted mean of its mean times at each
    length (``sizes``: (weight, arguments spec)); with ``cutoff_s`` one probe run per length
    first, and only the probes' mean when that is already slower."""
    total = sum(float(w) for w, _spec in sizes) or 1.0
    args = [(float(w), sized_arguments(device, spec)) for w, spec in sizes]
    if cutoff_s is not None:
        probe = rt_mod.time_evaluator(rt_mod.entry_name, device, number=1, repeat=1)
        device.sync()
        first = sum(w * float(probe(*a).mean) for w, a in args) / total
        if first > cutoff_s:
            return [first]
    mean = 0.0
    for w, a in args:
        secs = [float(x) for x in run(rt_mod, device, evaluator, [a])]
        mean += w * sum(secs) / len(secs) / total
    return [mean]


def _time_candidate(rt_mod: Any, device: Any, evaluator: Any, args_info: Any, cutoff_s: float | None,
                    run: Callable[..., list[float]], alloc: Callable[[Any], list[Any]]) -> list[float]:
    """One candidate's times: MetaSchedule's arguments (``alloc(args_info)``), or a symbolic
    kernel's at its lengths (``args_info`` ``{"sizes": ...}``)."""
    if isinstance(args_info, dict):
        return _weighted(rt_mod, device, evaluator, args_info["sizes"], cutoff_s, run)
    return _timed(rt_mod, device, evaluator, alloc(args_info), cutoff_s, run)


def rpc_measure(endpoint: RpcEndpoint, evaluator: Any, artifact: str, device_type: str,
                args_info: Any, cutoff_s: float | None = None, *, timeout: float) -> list[float]:
    """Upload, load and time one candidate on a board (runs in a runner worker, which the pool
    kills after its timeout; ``timeout`` bounds the connection); one run only when that is
    slower than ``cutoff_s``. ``args_info``: MetaSchedule's, or a symbolic kernel's lengths
    (:func:`_time_candidate`)."""
    from tvm.s_tir.meta_schedule.runner import rpc_runner as r
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    session = connect(endpoint, timeout)
    remote_path = None
    try:
        device = session.device(device_type, 0)
        remote_path = os.path.basename(artifact)
        rt_mod = r.default_upload_module(session, artifact, remote_path)
        return _time_candidate(rt_mod, device, evaluator, args_info, cutoff_s,
                               functools.partial(r.default_run_evaluator, session),
                               lambda info: alloc_argument_common(host_random_fill, device, info, 1))
    finally:
        with contextlib.suppress(Exception):
            session.get_function("tvm.rpc.server.remove")(remote_path)


def probe(endpoint: RpcEndpoint, timeout: float) -> bool:
    """Whether a server (or, for a tracker, any server under the key) answers within ``timeout``."""
    from tvm.support.popen_pool import PopenPoolExecutor

    pool = PopenPoolExecutor(max_workers=1, timeout=timeout)
    try:
        pool.submit(ping, endpoint, timeout).result()
        return True
    except Exception:  # noqa: BLE001 — any failure means no answer
        return False
    finally:
        pool.shutdown()


def ping(endpoint: RpcEndpoint, timeout: float) -> None:
    connect(endpoint, timeout).cpu(0)


def local_measure(evaluator: Any, artifact: str, device_type: str, args_info: Any,
                  cutoff_s: float | None = None) -> list[float]:
    """Load and time one candidate on this machine (runs in a runner worker), as MetaSchedule's
    LocalRunner does, with the boards' argument fill (:func:`host_random_fill`); one run only
    when that is slower than ``cutoff_s``. ``args_info``: MetaSchedule's, or a symbolic
    kernel's lengths (:func:`_time_candidate`)."""
    from tvm.s_tir.meta_schedule.runner import local_runner as lr
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    runtime = tvm().runtime
    rt_mod = runtime.load_module(artifact)
    device = runtime.device(device_type, 0)
    return _time_candidate(rt_mod, device, evaluator, args_info, cutoff_s, lr.default_run_evaluator,
                           lambda info: alloc_argument_common(host_random_fill, device, info, 1))


@derived_object
class PoolFuture(classes().runner.PyRunnerFuture):
    """One candidate's timing in a pool worker; a timeout or an error is its result."""

    def __init__(self, future: Any, timeout: float, where: str):
        super().__init__()
        self.future, self.timeout, self.where = future, timeout, where

    def done(self) -> bool:
        return bool(self.future.done())

    def cancel(self) -> bool:
        """Drop the candidate if its timing has not started (True), else let it finish."""
        return bool(self.future.cancel())

    def result(self) -> Any:
        try:
            return runner_result(self.future.result(), None)
        except TimeoutError:
            return runner_result(None, f"timed out after {self.timeout:.0f} s")
        except Exception as err:  # noqa: BLE001 — a failed candidate is data
            return runner_result(None, f"{self.where} error: {last_line(err)}")


def collect(futures: Sequence[Any], deadline: float | None) -> list[Any]:
    """The futures' results in order; past ``deadline`` (``time.monotonic``), a candidate whose
    timing has not started is dropped (None) and one that has is waited for (its timeout bounds it)."""
    import time

    results: list[Any] = []
    dropped: set[int] = set()
    for n, future in enumerate(futures):
        if not dropped and deadline is not None and time.monotonic() >= deadline:
            # all at once: one by one, each would start in the time the one before took to finish
            dropped = {m for m in range(n, len(futures)) if futures[m].cancel()}
        results.append(None if n in dropped else future.result())
    return results


@derived_object
class PoolRunner(classes().runner.PyRunner):
    """Candidates timed by ``measure(artifact, device_type, args_info)`` in a pool of
    ``workers`` processes shielded from Ctrl-C (:func:`shielded_pool`), each killed after
    ``timeout``: MetaSchedule's RPCRunner waits forever on a dead board, and its LocalRunner is
    not interruptible; here a stuck candidate becomes an error result and its worker process is
    replaced. Build one with :func:`local_runner` or :func:`rpc_runner`."""

    def __init__(self, measure: Callable[..., list[float]], workers: int, timeout: float, where: str,
                 stderr: Any = None):
        super().__init__()
        self.measure, self.timeout, self.where = measure, timeout, where
        self.pool = shielded_pool(workers, timeout, stderr=stderr)

    def run(self, runner_inputs: Sequence[Any]) -> list[Any]:
        """MetaSchedule's interface: :meth:`submit` with the runner's timeout."""
        return self.submit(runner_inputs)

    def submit(self, runner_inputs: Sequence[Any], timeout: float | None = None,
               cutoffs: Sequence[float | None] | None = None,
               sizes: Sequence[Any] | None = None) -> list[PoolFuture]:
        """Submit every candidate; each is killed after ``timeout`` (default, and at most: the
        runner's), and timed once only when slower than its ``cutoffs`` entry; a symbolic
        kernel at the lengths of its ``sizes`` entry (:attr:`~.tasks.Workload.sizes`). One batch
        at a time: the pool reads its timeout as each job starts. Returns the Python futures
        (:func:`collect` drops those a deadline leaves unstarted)."""
        timeout = self.timeout if timeout is None else min(timeout, self.timeout)
        self.pool._timeout = timeout  # TVM's PopenPoolExecutor has no per-job timeout; it reads this one
        cutoffs = cutoffs or [None] * len(runner_inputs)
        sizes = sizes or [None] * len(runner_inputs)
        futures = [self.pool.submit(self.measure, str(i.artifact_path), str(i.device_type),
                                    {"sizes": size} if size else tuple(a.as_json() for a in i.args_info), cutoff)
                   for i, cutoff, size in zip(runner_inputs, cutoffs, sizes)]
        return [PoolFuture(f, timeout, self.where) for f in futures]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pool.shutdown()


def local_runner(evaluator: Evaluator, timeout: float) -> Any:
    """Time candidates on this machine, one at a time (parallel runs would disturb each other);
    the worker's stderr dropped, as LocalRunner does."""
    import subprocess

    return PoolRunner(functools.partial(local_measure, evaluator.config()), 1, timeout, "run",
                      stderr=subprocess.DEVNULL)


def rpc_runner(endpoint: RpcEndpoint, evaluator: Evaluator, workers: int, timeout: float) -> Any:
    """Time candidates over RPC on a board, or on ``workers`` boards behind a tracker."""
    return PoolRunner(functools.partial(rpc_measure, endpoint, evaluator.config(), timeout=timeout), workers,
                      timeout, "RPC")
