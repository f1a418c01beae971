"""Per-channel biases as the micro-kernels' starting sums (:mod:`edgetune._tvm.passes.bias_init`):
which fused kernels take their bias into the init and which keep the add, and packages built
that way checked against onnxruntime (host, and the Pi 4 under qemu)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from models import checked_package
from onnx import TensorProto, helper, numpy_helper


def _model(out: Path) -> Path:
    """conv 3×3/2 (+bias, ReLU) → depthwise 3×3 (+bias, clip) → conv 1×1 to 10 channels (+bias:
    10 is no whole vector block, its sums are cropped) → residual-free head: Gemm (+bias)."""
    rng = np.random.default_rng(3)

    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [init("w1", (32, 3, 3, 3)), init("b1", (32,)), init("dw", (32, 1, 3, 3)), init("db", (32,)),
             init("w3", (10, 32, 1, 1)), init("b3", (10,)), init("fc", (16, 10)), init("fcb", (16,)),
             numpy_helper.from_array(np.float32(0.0), "lo"), numpy_helper.from_array(np.float32(6.0), "hi")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "dw", "db"], ["c2"], pads=[1, 1, 1, 1], group=32),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
        helper.make_node("GlobalAveragePool", ["c3"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1),
    ]
    graph = helper.make_graph(nodes, "biases", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 30, 30])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def _kernels(model: Path, device: str) -> dict[str, tuple[bool, bool]]:
    """Each fused function with a micro-kernel → (its sums start at a parameter, it still adds one
    per channel after them)."""
    from edgetune import _tvm
    from edgetune._tvm.core import tvm
    from edgetune._tvm.passes import pipeline
    from edgetune._tvm.passes.bias_init import SUMS
    from edgetune._tvm.schedules.common import child_blocks, kernel_of
    from edgetune.importer import import_model
    from edgetune.profiles import get_profile

    target = _tvm.make_target(get_profile(device).target_spec())
    fused = pipeline.fuse(import_model(model).mod, target, _tvm.lowering_for(target, "auto"))
    out = {}
    for gv, func in fused.functions_items():
        if not isinstance(func, tvm().tirx.PrimFunc):
            continue
        sch = tvm().s_tir.Schedule(func)
        blocks = [sch.get(b) for b in child_blocks(sch)]
        kinds = [kernel_of(sch, b) for b in child_blocks(sch)]
        if not set(kinds) & SUMS:
            continue
        inits = [b.init for b in blocks if b.init is not None]
        starts = any(isinstance(i.value, tvm().ir.TensorLoad) for i in inits)
        adds = any(b.name_hint == "T_add" and isinstance(b.body.value, tvm().tirx.Add) for b in blocks)
        out[gv.name_hint] = (starts, adds)
    return out


@pytest.mark.parametrize("device", ["host", "pi4"])
def test_biases_start_the_sums_except_over_padded_channels(tmp_path, device):
    kernels = _kernels(_model(tmp_path / "m.onnx"), device)
    by_kind = {}
    for name, flags in kernels.items():
        kind = "depthwise" if "depthwise" in name else "dense" if "dense" in name or "matmul" in name else "conv"
        by_kind.setdefault(kind, []).append((name, flags))
    assert all(flags == (True, False) for _n, flags in by_kind["depthwise"]), by_kind
    # the 32-channel convolution takes its bias in; the 10-channel one (cropped from a whole
    # block) keeps its add
    convs = sorted(flags for _n, flags in by_kind["conv"])
    assert convs == [(False, True), (True, False)], by_kind
    assert all(flags == (True, False) for _n, flags in by_kind.get("dense", [])), by_kind


def test_winograd_and_plain_kernels_keep_their_add():
    """Only a micro-kernel's own sums start at the bias: an add after a plain reduction, or after
    a reduction that is not one of them (Winograd's batched product), stays an add."""
    from edgetune._tvm.core import tvm
    from edgetune._tvm.passes.bias_init import bias_into_init

    te = tvm().te
    x = te.placeholder((8, 16), name="x")
    b = te.placeholder((8,), name="b")
    k = te.reduce_axis((0, 16), "k")
    s = te.compute((8,), lambda i: te.sum(x[i, k], axis=k), name="s")
    y = te.compute((8,), lambda i: s[i] + b[i], name="T_add")
    assert bias_into_init(te.create_prim_func([x, b, y])) is None
    s = te.compute((8,), lambda i: te.sum(x[i, k], axis=k), name="winograd_gemm",
                   attrs={"edgetune.kernel": "winograd_gemm"})
    y = te.compute((8,), lambda i: s[i] + b[i], name="T_add")
    assert bias_into_init(te.create_prim_func([x, b, y])) is None
    s = te.compute((8,), lambda i: te.sum(x[i, k], axis=k), name="dense", attrs={"edgetune.kernel": "dense_packed"})
    y = te.compute((8,), lambda i: s[i] + b[i], name="T_add")
    rewritten = bias_into_init(te.create_prim_func([x, b, y]))
    assert rewritten is not None and "dense[v_i] = b[v_i]" in rewritten.script()
    lib = tvm().compile(tvm().IRModule({"main": rewritten.with_attr("global_symbol", "main")}), target="llvm")
    rng = np.random.default_rng(0)
    xs, bs = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    out = tvm().runtime.tensor(np.zeros(8, np.float32))
    lib["main"](tvm().runtime.tensor(xs), tvm().runtime.tensor(bs), out)
    np.testing.assert_allclose(out.numpy(), xs.sum(1) + bs, rtol=1e-5)


@pytest.mark.parametrize("device", ["host", "pi4"])
def test_packages_with_biases_in_the_sums_match_onnxruntime(tmp_path, device, request):
    checked_package(_model(tmp_path / "m.onnx"), tmp_path, device, request)
