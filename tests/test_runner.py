"""Timing candidates against the clock (issue: ``--time`` is a deadline): a per-batch timeout
below the runner's, a hopeless candidate timed once, and a batch cut at the deadline — with
real kernels built by TVM and timed in the runner's worker processes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgetune._tvm import metaschedule as ms

tvm = pytest.importorskip("tvm")


def _kernel(tmp_path: Path, n: int, name: str) -> tuple[str, tuple]:
    """A plain-loop n×n×n matmul (one thread, no schedule) as a library, and its arguments."""
    from tvm import te
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    func = te.create_prim_func([a, b, c]).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    path = tmp_path / f"{name}.so"
    lib.export_library(str(path))
    return str(path), tuple(x.as_json() for x in ArgInfo.from_prim_func(func))


def _inputs(artifact: str, args: tuple, count: int) -> list:
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    infos = [ArgInfo.from_json(a) for a in args]
    return [ms.meta_schedule().runner.RunnerInput(artifact, "cpu", infos) for _ in range(count)]


def test_a_hopeless_candidate_is_timed_once_and_a_good_one_fully(tmp_path):
    artifact, args = _kernel(tmp_path, 64, "small")
    evaluator = ms.Evaluator(number=1, repeat=5, min_repeat_ms=0).config()
    full = ms.local_measure(evaluator, artifact, "cpu", args)
    assert len(full) == 5
    assert len(ms.local_measure(evaluator, artifact, "cpu", args, cutoff_s=10.0)) == 5  # faster than the cutoff
    once = ms.local_measure(evaluator, artifact, "cpu", args, cutoff_s=1e-9)  # slower than any cutoff
    assert len(once) == 1 and once[0] > 0


def test_a_batch_timeout_below_the_runners_kills_the_slow_candidate(tmp_path):
    artifact, args = _kernel(tmp_path, 1024, "slow")  # ~1 GFLOP in plain loops: seconds per call
    runner = ms.local_runner(ms.Evaluator(number=3, repeat=1), timeout=120.0)
    try:
        start = time.monotonic()
        (result,) = [f.result() for f in runner.submit(_inputs(artifact, args, 1), timeout=1.0)]
        took = time.monotonic() - start
    finally:
        runner.close()
    assert result.run_secs is None and result.error_msg == "timed out after 1 s"
    assert took < 60  # the batch's 1 s, not the runner's 120 s


def test_past_the_deadline_what_has_not_started_is_dropped(tmp_path):
    artifact, args = _kernel(tmp_path, 384, "mid")  # a fraction of a second per call
    runner = ms.local_runner(ms.Evaluator(number=1, repeat=1, min_repeat_ms=0), timeout=120.0)
    try:
        futures = runner.submit(_inputs(artifact, args, 4))
        while not (futures[0].future.running() or futures[0].done()):  # the first one has started (one worker)
            time.sleep(0.01)
        results = ms.collect(futures, deadline=time.monotonic())  # then the deadline passes
        again = ms.collect(runner.submit(_inputs(artifact, args, 2)), deadline=None)
    finally:
        runner.close()
    measured = [r for r in results if r is not None]
    assert results[-1] is None and 1 <= len(measured) < 4, results
    assert all(r.run_secs and r.error_msg is None for r in measured)
    assert all(r is not None and r.run_secs for r in again)  # no deadline: every candidate


def _symbolic_kernel(tmp_path: Path) -> tuple[str, object]:
    """``y = x * 2 + 1`` over ``n × 256`` floats, ``n`` symbolic (a range package's kernel): its
    library and TIR module."""
    from tvm import te, tirx

    n = tirx.Var("length", "int64")
    x = te.placeholder((n, 256), name="x")
    y = te.compute((n, 256), lambda i, j: x[i, j] * 2.0 + 1.0, name="y")
    func = te.create_prim_func([x, y, n]).with_attr("global_symbol", "main")
    mod = tvm.IRModule({"main": func})
    lib = tvm.compile(mod, target="llvm")
    path = tmp_path / "symbolic.so"
    lib.export_library(str(path))
    return str(path), mod


def test_a_symbolic_kernel_is_timed_at_each_length_and_weighed(tmp_path):
    """Locally and over TVM RPC (a real server on 127.0.0.1): the arguments are made at each
    length (tensors and the length itself), the result is one weighted mean."""
    import socket

    from tvm import rpc

    from edgetune._tvm.metaschedule.tasks import is_symbolic, sized_args

    artifact, mod = _symbolic_kernel(tmp_path)
    assert is_symbolic(mod)
    small, big = sized_args(mod, {"length": 4}), sized_args(mod, {"length": 2048})
    assert small == [["tensor", "float32", [4, 256]], ["tensor", "float32", [4, 256]], ["int", "int64", 4]]
    assert sized_args(mod, {"other": 4}) is None
    sizes = {"sizes": [(1.0, small), (3.0, big)]}
    evaluator = ms.Evaluator(number=1, repeat=3, min_repeat_ms=0).config()
    (mean,) = ms.local_measure(evaluator, artifact, "cpu", sizes)
    (alone,) = ms.local_measure(evaluator, artifact, "cpu", {"sizes": [(1.0, small)]})
    assert mean > alone > 0  # 3/4 of the weight on 512× the data
    (probe,) = ms.local_measure(evaluator, artifact, "cpu", sizes, cutoff_s=1e-12)  # hopeless: one run per length
    assert probe > 0

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = rpc.Server("127.0.0.1", port, port + 1, silent=True)
    try:
        endpoint = ms.RpcEndpoint("127.0.0.1", server.port)
        (remote,) = ms.runner.rpc_measure(endpoint, evaluator, artifact, "cpu", sizes, timeout=60)
        assert remote > 0
    finally:
        server.terminate()
