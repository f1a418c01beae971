"""Timing candidates: on this machine, or over RPC on a board or a tracker's boards."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import last_line
from .base import ms
from .pool import shielded_pool


def runner_result(run_secs: Sequence[float] | None, error: str | None) -> Any:
    return ms().runner.RunnerResult(list(run_secs) if run_secs is not None else None, error)


def runner_input(artifact: str, device_type: str, candidate: Any) -> Any:
    return ms().runner.RunnerInput(artifact, device_type, candidate.args_info)


@dataclass(frozen=True)
class Evaluator:
    """How each candidate is timed (TVM's time evaluator settings)."""

    number: int = 3
    repeat: int = 1
    min_repeat_ms: int = 40
    flush_cpu_cache: bool = False

    def config(self) -> Any:
        return ms().runner.EvaluatorConfig(number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                                           enable_cpu_cache_flush=self.flush_cpu_cache)


def make_local_runner(evaluator: Evaluator, timeout: float) -> Any:
    """Time candidates on this machine, one at a time (parallel runs would disturb each other), in
    a worker shielded from Ctrl-C (:func:`shielded_pool`)."""
    import subprocess

    runner = ms().runner.LocalRunner(timeout_sec=timeout, evaluator_config=evaluator.config())
    runner.pool.shutdown()
    runner.pool = shielded_pool(1, timeout, stderr=subprocess.DEVNULL)  # LocalRunner's own stderr choice
    return runner


@dataclass(frozen=True)
class RpcEndpoint:
    """Where candidates run: a server (``tracker`` False) or a tracker key (``tracker`` True)."""

    host: str
    port: int
    key: str = ""
    tracker: bool = False


def connect(endpoint: RpcEndpoint, timeout: float) -> Any:
    """An RPC session that gives up after ``timeout`` seconds instead of waiting forever."""
    from tvm import rpc

    if not endpoint.tracker:
        return rpc.connect(endpoint.host, endpoint.port, key=endpoint.key, session_timeout=timeout)
    tracker = rpc.connect_tracker(endpoint.host, endpoint.port)
    return tracker.request(endpoint.key, priority=1, session_timeout=timeout)


def host_random_fill(tensor: Any) -> None:
    """Random inputs made here and copied over: the board's runtime-only TVM has no
    ``tvm.contrib.random`` (it lives in the compiler library)."""

    rng = np.random.default_rng(0)
    shape, dtype = tuple(int(x) for x in tensor.shape), str(tensor.dtype)
    if dtype.startswith("float") or dtype.startswith("bfloat"):
        data = rng.uniform(-1.0, 1.0, shape).astype(dtype)
    elif dtype == "bool":
        data = rng.integers(0, 2, shape).astype(dtype)
    else:
        data = rng.integers(0, 8, shape).astype(dtype)
    tensor.copyfrom(data)


def rpc_measure(endpoint: RpcEndpoint, evaluator: Any, artifact: str, device_type: str,
                args_info: tuple[Any, ...], timeout: float) -> list[float]:
    """Upload, load and time one candidate on a board (runs in a runner worker, which the pool
    kills after ``timeout``)."""
    from tvm.s_tir.meta_schedule.runner import rpc_runner as r
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    session = connect(endpoint, timeout)
    remote_path = None
    try:
        device = session.device(device_type, 0)
        remote_path = os.path.basename(artifact)
        rt_mod = r.default_upload_module(session, artifact, remote_path)
        args = alloc_argument_common(host_random_fill, device, args_info, 1)
        return [float(x) for x in r.default_run_evaluator(session, rt_mod, device, evaluator, args)]
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


class PoolRunner:
    """Candidates timed over RPC by a pool of ``workers`` processes, each killed after ``timeout``.

    MetaSchedule's RPCRunner waits forever on a dead board; here a stuck candidate becomes an
    error result and its worker process is replaced.
    """

    def __init__(self, endpoint: RpcEndpoint, evaluator: Evaluator, workers: int, timeout: float):
        self.endpoint, self.timeout = endpoint, timeout
        self.evaluator = evaluator.config()
        self.pool = shielded_pool(workers, timeout)

    def run(self, artifacts: list[str], device_type: str, candidates: list[Any]) -> list[Any]:
        futures = [self.pool.submit(rpc_measure, self.endpoint, self.evaluator, art, device_type,
                                    tuple(a.as_json() for a in c.args_info), self.timeout)
                   for art, c in zip(artifacts, candidates)]
        return [self._result(f) for f in futures]

    def _result(self, future: Any) -> Any:
        try:
            return runner_result(future.result(), None)
        except TimeoutError:
            return runner_result(None, f"timed out after {self.timeout:.0f} s")
        except Exception as err:  # noqa: BLE001 — a failed candidate is data
            return runner_result(None, f"RPC error: {last_line(err)}")

    def close(self) -> None:
        self.pool.shutdown()


class LocalPoolRunner:
    """MetaSchedule's LocalRunner behind the same ``run``/``close`` interface as :class:`PoolRunner`."""

    def __init__(self, evaluator: Evaluator, timeout: float):
        self.runner = make_local_runner(evaluator, timeout)

    def run(self, artifacts: list[str], device_type: str, candidates: list[Any]) -> list[Any]:
        inputs = [runner_input(a, device_type, c) for a, c in zip(artifacts, candidates)]
        return [f.result() for f in self.runner.run(inputs)]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.runner.pool.shutdown()
