"""Pruned 1×1 convolutions on the sparse kernel (AArch64): the kernel against numpy on the host,
its weights' compressed rows, and whole models packaged for the Pis and checked under qemu."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from models import checked_package
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _pruned(rng: np.random.Generator, out: int, inp: int, density: float) -> np.ndarray:
    w = rng.standard_normal((out, inp)) / np.sqrt(inp * density)
    w[rng.random((out, inp)) >= density] = 0
    return w.astype(np.float32)


def _reference(x: np.ndarray, weights: np.ndarray, steps: tuple, biases: list[np.ndarray],
               residual: np.ndarray | None) -> np.ndarray:
    """What :func:`edgetune._tvm.kernels.sparse.sparse_conv1x1` computes, in numpy."""
    y = np.einsum("nhwc,oc->nhwo", x.astype(np.float64), weights.astype(np.float64))
    k = 0
    for step in steps:
        if step.kind == "bias":
            y = y + biases[k]
            k += 1
        elif step.kind == "residual":
            y = y + residual
        elif step.kind == "relu":
            y = np.maximum(y, 0)
        elif step.kind == "clip":
            y = np.clip(y, step.lo, step.hi)
        elif step.kind == "max":
            y = np.maximum(y, step.lo)
        elif step.kind == "min":
            y = np.minimum(y, step.hi)
        elif step.kind == "pad":
            t, b, left, right = step.pads
            y = np.pad(y, ((0, 0), (t, b), (left, right), (0, 0)))
    return y.astype(np.float32)


@pytest.mark.parametrize(("shape", "co", "steps"), [
    ((1, 12, 13, 144), 40, ("bias", "padded residual", "clip")),  # 156 pixels: 9 whole tiles and a tail of 12
    ((1, 4, 8, 64), 32, ("bias", "relu", "min")),  # whole tiles only
    ((2, 3, 5, 42), 16, ()),  # input channels not in fours (no 4 × 4 blocks), two images, one partial tile
    ((1, 9, 7, 32), 24, ("bias", "relu", "pad")),  # written inside a border of zeros (1, 2, 0, 1)
    ((2, 5, 6, 20), 8, ("residual", "pad")),
    ((2, 5, 6, 20), 8, ("padded residual", "pad")),
])
def test_sparse_kernel_matches_numpy(shape, co, steps):
    from edgetune._tvm.core import tvm
    from edgetune._tvm.kernels import sparse

    rng = np.random.default_rng(len(steps))
    w = _pruned(rng, co, shape[-1], 0.3)
    w[3] = 0  # an output channel without weights: its row is empty
    w[5, :] = 0
    w[5, 7] = 1.5  # one with a single weight (no whole quad)
    # (a padded residual: another layer's output written inside a border of zeros (2, 0, 1, 1))
    plan = tuple(sparse.Step("residual", pads=(2, 0, 1, 1)) if k == "padded residual" else sparse.Step(k, 0.0, 2.0, (1, 2, 0, 1))
                 for k in steps)
    csr = sparse.Csr.of(w)
    func = sparse.sparse_conv1x1(shape, co, csr.stored, plan)
    lib = tvm().compile(tvm().IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    x = rng.standard_normal(shape).astype(np.float32)
    bias = rng.standard_normal(co).astype(np.float32)
    res = rng.standard_normal((*shape[:3], co)).astype(np.float32)
    t, b, left, right = next((s.pads for s in plan if s.kind == "residual"), (0, 0, 0, 0))
    res_padded = np.pad(res, ((0, 0), (t, b), (left, right), (0, 0)), constant_values=np.nan)
    args = [x, csr.vals, csr.cols, csr.rows]
    args += [bias] * sum(s.kind == "bias" for s in plan) + [res_padded] * sum(s.kind == "residual" for s in plan)
    want = _reference(x, w, plan, [bias], res)
    out = tvm().runtime.tensor(np.full(want.shape, np.nan, np.float32))  # (a border left unwritten stays NaN)
    lib["main"](*(tvm().runtime.tensor(a) for a in args), out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


def test_compressed_rows_hold_the_matrix():
    from edgetune._tvm.kernels.sparse import Csr

    w = _pruned(np.random.default_rng(3), 12, 30, 0.3)
    w[4] = 0
    csr = Csr.of(w)
    back = np.zeros_like(w)
    for o in range(w.shape[0]):
        lo, hi = csr.rows[o], csr.rows[o + 1]
        assert hi - lo == np.count_nonzero(w[o])
        back[o, csr.cols[lo:hi]] = csr.vals[lo:hi]
    np.testing.assert_array_equal(back, w)


def test_which_layers_are_sparse_enough():
    from edgetune._tvm.kernels.sparse import sparse_enough

    rng = np.random.default_rng(0)
    assert sparse_enough(_pruned(rng, 64, 96, 0.25))
    assert not sparse_enough(_pruned(rng, 64, 96, 0.5))  # XNNPACK's rule: two thirds zero at least
    assert not sparse_enough(_pruned(rng, 32, 4, 0.25))  # 1 weight per output channel: transposes cost more
    assert not sparse_enough(_pruned(rng, 42, 96, 0.25))  # output channels not in groups of 4


def _model(path: Path, rng: np.random.Generator) -> Path:
    """x [1, 48, 13, 11] → pruned 1×1 (bias, ReLU) plus another pruned 1×1 of x (bias) → dense 1×1
    to 42 channels → pruned 1×1 to 64 (bias, clip 0..6) → dense 1×1 to 40: three sparse layers
    with their epilogues (the sum of two taken by one of them), one over 42 input channels; 143
    pixels (a partial last tile)."""
    wa, wb, wc = _pruned(rng, 48, 48, 0.25), rng.standard_normal((42, 48)) / 7, _pruned(rng, 64, 42, 0.3)
    we = _pruned(rng, 48, 48, 0.3)
    wd = rng.standard_normal((40, 64)) / 8
    inits = [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in [
        ("wa", wa[:, :, None, None]), ("ba", rng.standard_normal(48)), ("wb", wb[:, :, None, None]),
        ("wc", wc[:, :, None, None]), ("bc", rng.standard_normal(64)), ("lo", np.array(0.0)), ("hi", np.array(6.0)),
        ("wd", wd[:, :, None, None]), ("we", we[:, :, None, None]), ("be", rng.standard_normal(48))]]
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["x", "we", "be"], ["e"]),
             helper.make_node("Add", ["ar", "e"], ["h"]),
             helper.make_node("Conv", ["h", "wb"], ["b"]),
             helper.make_node("Conv", ["b", "wc", "bc"], ["c"]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["cc"]),
             helper.make_node("Conv", ["cc", "wd"], ["y"])]
    graph = helper.make_graph(nodes, "pruned", [helper.make_tensor_value_info("x", F, [1, 48, 13, 11])],
                              [helper.make_tensor_value_info("y", F, [1, 40, 13, 11])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


@pytest.mark.parametrize("device", [pytest.param("pi4", marks=pytest.mark.qemu), pytest.param("pi5", marks=pytest.mark.qemu),
                                    "host"])
def test_pruned_layers_run_sparse_on_the_pis_with_their_epilogues(tmp_path, request, device):
    result = checked_package(_model(tmp_path / "pruned.onnx", np.random.default_rng(1)), tmp_path, device, request)
    kinds = result.manifest["schedules"]["kinds"]
    if device == "host":
        assert "sparse-conv" not in kinds and kinds["conv2d"] == 5, kinds  # AVX-512's dense kernel is left alone
        return
    # bias, ReLU, the sum and clip inside the sparse kernels: besides them only the dense layers and
    # the model's NCHW ↔ NHWC transposes
    names = sorted(result.manifest["kernels"])
    assert kinds == {"sparse-conv": 3, "conv2d": 2, "elementwise": 2}, kinds
    assert not [n for n in names if any(op in n for op in ("add", "relu", "max", "min", "clip"))], names
    # the package's kernel facts count a sparse kernel's multiply-adds (TVM's estimate cannot)
    sparse = [k for k in result.manifest["kernels"].values() if k["kind"] == "sparse-conv"]
    assert len(sparse) == 3 and all(k["flops"] > 0 for k in sparse), sparse


def test_inspect_lists_the_sparse_kernels_with_their_flops(tmp_path):
    # written scheduled, they are no tuning task; `edgetune inspect --device` still shows them
    from edgetune.importer import import_model
    from edgetune.report import kernel_report

    model = _model(tmp_path / "pruned.onnx", np.random.default_rng(1))
    rows = kernel_report(import_model(model), "pi4")
    sparse = [r for r in rows if r["kind"] == "sparse-conv"]
    assert len(sparse) == 3 and all(r["flops"] > 0 for r in sparse), rows
    assert abs(sum(r["flops_share"] for r in rows) - 1) < 1e-9


def test_a_layer_read_by_a_pad_and_as_a_residual_is_written_padded_once():
    """TFLite files pad a depthwise layer's input with a PAD op (TVM's importer: SAME padding
    too). A sparse layer's output read by such a pad and by the next sparse layer's residual add
    is written inside the pad's border by its kernel, and the next layer reads its residual
    there: no pad pass left. The module after the pass computes what it did before."""
    from edgetune._tvm.core import tvm
    from edgetune._tvm.passes.sparse import SparseConvolutions
    from edgetune._tvm.targets import make_target
    from edgetune.profiles import get_profile

    relax = tvm().relax
    rng = np.random.default_rng(4)

    def const(a):
        return relax.const(np.asarray(a, np.float32))

    def conv(v, w, groups=1):
        return relax.op.nn.conv2d(v, const(w), groups=groups, data_layout="NHWC", kernel_layout="OHWI")

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 10, 9, 24), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(bb.emit(conv(x, _pruned(rng, 32, 24, 0.3)[:, None, None])),
                                                              const(rng.standard_normal(32))))))
            padded = bb.emit(relax.op.nn.pad(a, [0, 0, 1, 1, 1, 1, 0, 0]))
            d = bb.emit(conv(padded, rng.standard_normal((32, 3, 3, 1)) / 3, groups=32))
            b = bb.emit(relax.op.add(bb.emit(conv(d, _pruned(rng, 32, 32, 0.3)[:, None, None])), const(rng.standard_normal(32))))
            y = bb.emit_output(relax.op.nn.relu(bb.emit(relax.op.add(b, a))))
        bb.emit_func_output(y)
    before = bb.get()
    after = SparseConvolutions(make_target(get_profile("pi4").target_spec()))(before)
    text = after.script(show_meta=False)
    assert text.count("sparse_conv1x1") >= 2 and "R.nn.pad" not in text, text
    xv = rng.standard_normal((1, 10, 9, 24)).astype(np.float32)
    outs = []
    for mod in (before, after):
        vm = relax.VirtualMachine(tvm().compile(mod, target="llvm"), tvm().cpu())
        outs.append(vm["main"](tvm().runtime.tensor(xv)).numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)
