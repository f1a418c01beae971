"""The GPU build's own rewrites and schedule (``passes/gpu.py``, ``schedules/gpu.py``), checked
where no GPU is: numerically on the CPU (the graph rewrites), and in the CUDA source TVM writes
for a GPU target (the schedule). What they fixed was measured on an H200 with
``benchmarks/cuda_run.py`` (README: Jetson)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from edgetune import _tvm  # noqa: F401 — loads TVM the way edgetune does

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from edgetune._tvm.passes import pipeline  # noqa: E402
from edgetune._tvm.passes.gpu import IntegerPowersAsProducts, TwoStepReductions  # noqa: E402

CUDA = {"kind": "cuda", "arch": "sm_87", "max_threads_per_block": 1024, "max_num_threads": 1024, "thread_warp_size": 32,
        "max_shared_memory_per_block": 49152, "registers_per_block": 65536}


def _module(shape, fn, dtype="float32"):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(fn(x))
        bb.emit_func_output(out)
    return bb.get()


def _ops(mod) -> list[str]:
    found = []
    relax.analysis.post_order_visit(mod["main"].body, lambda e: found.append(str(e.op.name))
                                    if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return found


def _run_cpu(mod, x):
    target = tvm.target.Target("llvm")
    ex = tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("shape", [(1, 64, 1024), (3, 1000, 7), (65536,)])
@pytest.mark.parametrize("op, keepdims", [("max", False), ("min", True), ("sum", False), ("mean", True)])
def test_whole_tensor_reductions_in_two_steps_give_the_same_value(shape, op, keepdims):
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    mod = _module(shape, lambda v: getattr(relax.op, op)(v, axis=None, keepdims=keepdims))
    rewritten = TwoStepReductions()(mod)
    assert _ops(rewritten).count(f"relax.{op}") == 2 and "relax.reshape" in _ops(rewritten)
    want = getattr(np, op)(x.astype(np.float64), keepdims=keepdims)
    got = _run_cpu(rewritten, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3 if op == "sum" else 1e-6)


def test_a_reduction_that_leaves_rows_or_is_small_is_left_alone():
    rows = _module((64, 1024), lambda v: relax.op.max(v, axis=[1]))
    small = _module((4, 100), lambda v: relax.op.max(v, axis=None))
    prime = _module((65537,), lambda v: relax.op.max(v, axis=None))  # no split into rows of >= 256
    for mod in (rows, small, prime):
        assert _ops(TwoStepReductions()(mod)) == _ops(mod)


@pytest.mark.parametrize("exponent, products", [(2.0, 1), (3.0, 2), (4.0, 2), (0.5, 0), (2.5, None)])
def test_integer_powers_become_products_and_keep_the_sign(exponent, products):
    x = np.linspace(-3, 3, 64, dtype="float32").reshape(8, 8)
    mod = _module((8, 8), lambda v: relax.op.power(v, relax.const(exponent, "float32")))
    rewritten = IntegerPowersAsProducts()(mod)
    ops = _ops(rewritten)
    if products is None:  # a fractional power stays a power (NaN below zero in the reference too)
        assert ops == ["relax.power"]
        return
    assert "relax.power" not in ops and ops.count("relax.multiply") == products
    got = _run_cpu(rewritten, np.abs(x) if exponent == 0.5 else x)
    np.testing.assert_allclose(got, (np.abs(x) if exponent == 0.5 else x) ** exponent, rtol=1e-6)


def _scheduled(mod) -> str:
    """The kernels as TVM's CUDA pipeline with edgetune's rule schedules them (no CUDA compile)."""
    from edgetune._tvm.schedules.gpu import cuda_pipeline

    target = tvm.target.Target(CUDA, host="llvm")
    lowered = cuda_pipeline(target)(mod)
    return "\n".join(f.script() for _gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


def test_a_row_max_runs_as_one_thread_block_per_row_on_the_gpu():
    """DLight matches sum reductions only; a max of 64 rows of 1024 went to its fallback, one
    thread per row looping over 1024 values (one block of 1024 threads, 64 of them working).
    With ReductionRows each row is a block whose threads share the row (partials in registers,
    then combined across the threads)."""
    text = _scheduled(_module((64, 1024), lambda v: relax.op.max(v, axis=[1])))
    assert 'T.thread_binding(T.int64(64), thread="blockIdx.x")' in text, text
    assert 'T.thread_binding(T.int64(256), thread="threadIdx.x")' in text and "rf_local" in text, text


def test_the_gpu_graph_has_no_power_no_shape_tensor_and_one_layer_norm_kernel_per_norm(tmp_path: Path):
    sys.path.insert(0, str(Path(__file__).parent))
    import zoo_transformers as zt

    from edgetune.importer import import_model

    model = zt.bert(tmp_path / "bert.onnx", layers=1, hidden=64, heads=4, seq=16)  # layer norms written out (opset 14)
    ops = _ops(pipeline.for_gpu(import_model(model).mod))
    assert "relax.power" not in ops and "relax.shape_to_tensor" not in ops and "relax.shape_of" not in ops
    assert ops.count("relax.nn.layer_norm") == 3 and "relax.mean" not in ops
