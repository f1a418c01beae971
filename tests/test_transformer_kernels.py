"""The transformer kernels (dense over padded rows, matmul of two computed tensors, softmax,
layer-norm and RMS-norm row kernels) on shapes that break naive tiling — prime token counts, rows narrower
than a register, broadcast batch axes, fused producers and consumers — against onnxruntime."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import checked_package
from onnx import TensorProto, helper, numpy_helper

from edgetune.package import PackageOptions, package

F = TensorProto.FLOAT


def _model(path: Path, nodes, inputs, outputs, inits=()) -> Path:
    graph = helper.make_graph(nodes, path.stem, [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, F, s) for n, s in outputs], list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


# NEON's 4 lanes tile and cut rows differently from AVX-512's 16: both run, pi4 under qemu
DEVICES = ["host", pytest.param("pi4", marks=pytest.mark.qemu)]


def _packaged(model: Path, tmp_path: Path, device: str = "host", request=None) -> dict:
    sched = checked_package(model, tmp_path, device, request).manifest["schedules"]
    assert not sched.get("naive"), sched
    return sched["kinds"]


def _const(name: str, array: np.ndarray):
    return numpy_helper.from_array(array.astype(np.float32), name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tokens", [37, 16])
def test_attention_runs_on_matmul_and_softmax_kernels(tmp_path, request, device, tokens):
    # Q·Kᵀ through a transpose, scaled, masked, softmax, ·V: 37 tokens is prime (rows padded,
    # columns packed past the end); 16 tiles exactly
    heads, dh = 3, 24
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Add", ["ss", "mask"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    shape = [1, heads, tokens, dh]
    mask = np.where(np.arange(tokens) % 5 == 4, -1e4, 0.0).reshape(1, 1, 1, tokens)
    model = _model(tmp_path / "attention.onnx", nodes, [("q", shape), ("k", shape), ("v", shape)], [("y", shape)],
                   [_const("scale", np.array(dh ** -0.5)), _const("mask", mask)])
    kinds = _packaged(model, tmp_path, device, request)
    assert kinds.get("matmul") == 2 and kinds.get("softmax") == 1, kinds


@pytest.mark.parametrize("device", DEVICES)
def test_divisions_into_erf_and_softmax_are_multiplies_and_others_stay(tmp_path, request, device):
    # GELU written out (erf(x / √2)) and attention's scaled, masked scores: their divisions feed
    # approximations (fast erf, fast exp) and are multiplies; a plain quotient stays a division
    # (on the Pi the exact float64 multiply: a quantize's rounding must match)
    tokens, dh = 12, 8
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["xs"]),
             helper.make_node("Erf", ["xs"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["x", "e1"], ["xe"]),
             helper.make_node("Mul", ["xe", "half"], ["gelu"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "root"], ["ss"]),
             helper.make_node("Add", ["ss", "mask"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("Div", ["x", "three"], ["third"])]
    shape, qk = [1, tokens, 16], [1, tokens, dh]
    mask = np.where(np.arange(tokens) % 5 == 4, -1e4, 0.0).reshape(1, 1, tokens)
    model = _model(tmp_path / "divisions.onnx", nodes, [("x", shape), ("q", qk), ("k", qk)],
                   [("gelu", shape), ("p", [1, tokens, tokens]), ("third", shape)],
                   [_const("sqrt2", np.array(np.sqrt(2.0))), _const("one", np.array(1.0)), _const("half", np.array(0.5)),
                    _const("root", np.array(np.sqrt(dh))), _const("mask", mask), _const("three", np.array(3.0))])
    if device != "host":
        request.getfixturevalue("qemu")
    result = package(PackageOptions(model=model, device=device, output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed" and result.verification["max_rel_error"] < 1e-4, result.verification
    kernels = sorted(result.manifest["kernels"])
    approximated = [k for k in kernels if "erf" in k or "softmax" in k or "matmul" in k]
    assert approximated and not any("divide" in k for k in approximated), kernels
    assert sum("divide" in k for k in kernels) == 1, kernels  # x / 3


def test_dense_over_a_prime_token_count_and_a_broadcast_batch_matmul(tmp_path):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"]),
             helper.make_node("MatMul", ["a", "c"], ["z"])]  # [2,3,5,8] @ [3,8,7]: batch broadcast
    model = _model(tmp_path / "dense.onnx", nodes, [("x", [1, 197, 40]), ("a", [2, 3, 5, 8]), ("c", [3, 8, 7])],
                   [("y", [1, 197, 72]), ("z", [2, 3, 5, 7])],
                   [_const("w", rng.standard_normal((40, 72)) / 6), _const("b", rng.standard_normal(72))])
    kinds = _packaged(model, tmp_path)
    assert kinds.get("dense") == 1 and kinds.get("matmul") == 1, kinds


@pytest.mark.parametrize("device", DEVICES)
def test_dense_over_rows_on_several_axes(tmp_path, request, device):
    # [windows, tokens, C] as window attention writes it (TinyViT: 16 windows of 49 tokens), a
    # batch of two prime-length sequences, and one of 13: register tiles that do not divide the
    # inner axis once wrote back rows they never computed
    rng = np.random.default_rng(0)
    shapes = {"x": ([16, 49, 32], 48), "a": ([2, 197, 24], 40), "c": ([3, 13, 16], 24)}
    nodes, inits = [], []
    for name, (shape, out) in shapes.items():
        nodes += [helper.make_node("MatMul", [name, f"w_{name}"], [f"h_{name}"]),
                  helper.make_node("Add", [f"h_{name}", f"b_{name}"], [f"y_{name}"])]
        inits += [_const(f"w_{name}", rng.standard_normal((shape[-1], out)) / 4), _const(f"b_{name}", rng.standard_normal(out))]
    model = _model(tmp_path / "dense_rows.onnx", nodes, [(n, s) for n, (s, _o) in shapes.items()],
                   [(f"y_{n}", [*s[:-1], o]) for n, (s, o) in shapes.items()], inits)
    kinds = _packaged(model, tmp_path, device, request)
    assert kinds.get("dense") == 3, kinds


@pytest.mark.parametrize("device", [*DEVICES, pytest.param("pi5-fp16", marks=pytest.mark.qemu)])
def test_onnx_gelu_is_a_polynomial_in_the_kernels_epilogue(tmp_path, request, device):
    """Opset 20's ``Gelu`` (torch's dynamo exporter writes it; timm's TinyViT, Swin, ConvNeXt) after
    a convolution, a dense layer and a depthwise one, exact and tanh-approximated: computed with
    the vectorizable erf / tanh polynomials (in float16 packages: in float32 between
    conversions), not libm's ``erff`` / ``tanhf`` called per element (TinyViT: 66.5 → 37.3 ms
    on this host, 2 threads)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Gelu", ["c"], ["g"]),
             helper.make_node("Conv", ["g", "dw"], ["d"], pads=[1, 1, 1, 1], group=16),
             helper.make_node("Gelu", ["d"], ["y"], approximate="tanh"),
             helper.make_node("MatMul", ["t", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Gelu", ["a"], ["z"])]
    inits = [_const("cw", rng.standard_normal((16, 8, 3, 3)) / 4), _const("dw", rng.standard_normal((16, 1, 3, 3)) / 2),
             _const("w", rng.standard_normal((32, 48)) / 4), _const("b", rng.standard_normal(48))]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", F, [1, 8, 12, 12]),
                                              helper.make_tensor_value_info("t", F, [1, 20, 32])],
                              [helper.make_tensor_value_info("y", F, [1, 16, 12, 12]),
                               helper.make_tensor_value_info("z", F, [1, 20, 48])], inits)
    model = tmp_path / "gelu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9), str(model))
    if device == "pi5-fp16":
        request.getfixturevalue("qemu")
        if shutil.which("aarch64-linux-gnu-g++") is None:
            pytest.skip("aarch64-linux-gnu-g++ is not installed (scripts/install-system-deps.sh installs it)")
        result = package(PackageOptions(model=model, device="pi5", output=tmp_path / "pkg", precision="fp16"))
        assert result.verification["status"] == "passed" and "qemu" in result.verification["executed_on"], result.verification
    else:
        result = checked_package(model, tmp_path, device, request)
    library = (result.path / "model.so").read_bytes()
    calls = [name for name in ("erff", "tanhf") if f"\0{name}\0".encode() in library]
    assert not calls, f"GELU calls libm's {calls} per element"


def test_a_classifier_softmax_of_one_row_gets_a_schedule(tmp_path):
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=-1)]
    model = _model(tmp_path / "one_row.onnx", nodes, [("x", [1, 1000])], [("y", [1, 1000])])
    kinds = _packaged(model, tmp_path)
    assert "naive" not in kinds, kinds


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("width", [37, 10, 64])
def test_layer_norm_and_softmax_rows_with_fused_neighbours(tmp_path, request, device, width):
    # a residual add fused before the layer norm, an activation after; rows of 37 (a register
    # and a tail of 5 on AVX-512, 4 steps of two + 5 on NEON), 10 (partials of 4 lanes), 64 (whole registers)
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Add", ["x", "r"], ["h"]),
             helper.make_node("LayerNormalization", ["h", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["y"]),
             helper.make_node("Softmax", ["x"], ["p"], axis=-1)]
    shape = [2, 13, width]
    model = _model(tmp_path / "rows.onnx", nodes, [("x", shape), ("r", shape)], [("y", shape), ("p", shape)],
                   [_const("g", rng.uniform(0.5, 1.5, width)), _const("b", rng.uniform(-0.5, 0.5, width))])
    kinds = _packaged(model, tmp_path, device, request)
    assert kinds.get("layer-norm") == 1 and kinds.get("softmax") == 1, kinds


def test_rows_padded_only_when_no_divisor_tiles_well():
    from edgetune._tvm.kernels.cpu import CpuFacts, padded_rows

    avx512 = CpuFacts(lanes=16, registers=32, fma_latency=4)
    neon = CpuFacts(lanes=4, registers=32, fma_latency=7)
    assert padded_rows(197, 4, avx512) > 197 and padded_rows(197, 4, avx512) % 2 == 0
    assert padded_rows(197, 4, neon) > 197
    for cpu in (avx512, neon):
        assert padded_rows(384, 4, cpu) == 384  # 6 divides it
        assert padded_rows(16, 4, cpu) == 16  # 4 rows per tile are close enough to 6
        assert padded_rows(1, 4, cpu) == 1  # a recurrent step's one row is not six


@pytest.mark.parametrize("device", DEVICES)
def test_conv1d_front_end_runs_on_the_packed_convolution_kernel(tmp_path, request, device):
    # Whisper's front end: Conv1d k=3 pad 1, stride 1 then 2, dilation 2 for good measure
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], kernel_shape=[3], pads=[1, 1], strides=[1]),
             helper.make_node("Conv", ["h", "w2"], ["y"], kernel_shape=[3], pads=[2, 2], strides=[2], dilations=[2])]
    model = _model(tmp_path / "conv1d.onnx", nodes, [("x", [1, 20, 50])], [("y", [1, 24, 25])],
                   [_const("w1", rng.standard_normal((24, 20, 3)) / 8), _const("b1", rng.standard_normal(24)),
                    _const("w2", rng.standard_normal((24, 24, 3)) / 8)])
    kinds = _packaged(model, tmp_path, device, request)
    assert set(kinds) <= {"conv2d", "elementwise"} and kinds.get("conv2d"), kinds


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k,s,pads,out_pad", [(2, 2, [0, 0, 0, 0], 0), (4, 2, [1, 1, 2, 1], 0), (3, 2, [1, 1, 1, 1], 1),
                                              (5, 3, [4, 2, 1, 0], 2), (3, 1, [1, 1, 1, 1], 0)])
def test_transposed_convolutions_run_as_phase_convolutions(tmp_path, request, device, k, s, pads, out_pad):
    # a DB-head / segmenter upsampling: kernels a multiple of the stride or not, padding larger
    # than the stride (whole phases skipped), output padding, then a ReLU
    rng = np.random.default_rng(k * 10 + s)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], kernel_shape=[k, k], strides=[s, s], pads=pads,
                              output_padding=[out_pad, out_pad]),
             helper.make_node("Relu", ["t"], ["y"])]
    size = [(n - 1) * s + k - pads[a] - pads[a + 2] + out_pad for a, n in enumerate((9, 7))]
    model = _model(tmp_path / "deconv.onnx", nodes, [("x", [1, 12, 9, 7])], [("y", [1, 10, *size])],
                   [_const("w", rng.standard_normal((12, 10, k, k)) / 8), _const("b", rng.standard_normal(10))])
    kinds = _packaged(model, tmp_path, device, request)
    convs = {kind: n for kind, n in kinds.items() if kind != "elementwise"}
    assert convs in ({"conv2d": 1}, {"winograd": 1}), kinds  # stride 1, 3 × 3: a Winograd convolution


def test_whole_tensor_min_and_max_reduce_in_vector_lanes(tmp_path):
    # a dynamically quantized activation's range: min and max over all of it, to scalars
    nodes = [helper.make_node("ReduceMax", ["x"], ["hi"], keepdims=0),
             helper.make_node("ReduceMin", ["x"], ["lo"], keepdims=0),
             helper.make_node("Sub", ["hi", "lo"], ["y"])]
    model = _model(tmp_path / "range.onnx", nodes, [("x", [1, 37, 64])], [("y", [])])
    kinds = _packaged(model, tmp_path)
    assert "naive" not in kinds, kinds


def test_scalar_reduction_schedule_has_vector_partials():
    from tvm import s_tir, te, topi

    from edgetune._tvm.kernels.cpu import CpuFacts
    from edgetune._tvm.schedules.rules import schedule_reduction

    x = te.placeholder((1, 128, 384), name="x")
    sch = s_tir.Schedule(te.create_prim_func([x, topi.max(x)]))
    schedule_reduction(sch, CpuFacts(lanes=16, registers=32, fma_latency=4), 2)
    assert "T.vectorized(64)" in sch.mod.script()


@pytest.mark.parametrize("square", ["Pow", "Mul"])
def test_layer_norm_written_out_below_opset_17_runs_on_the_row_kernel(tmp_path, square):
    rng = np.random.default_rng(3)
    sq = (helper.make_node("Pow", ["d", "two"], ["d2"]) if square == "Pow" else helper.make_node("Mul", ["d", "d"], ["d2"]))
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
             helper.make_node("Sub", ["x", "m"], ["d"]), sq,
             helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["n"]),
             helper.make_node("Mul", ["n", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["y"])]
    graph = helper.make_graph(nodes, "ln13", [helper.make_tensor_value_info("x", F, [1, 37, 48])],
                              [helper.make_tensor_value_info("y", F, [1, 37, 48])],
                              [_const("two", np.array(2.0)), _const("eps", np.array(1e-12)),
                               _const("g", rng.uniform(0.5, 1.5, 48)), _const("b", rng.uniform(-0.5, 0.5, 48))])
    path = tmp_path / "ln13.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    kinds = _packaged(path, tmp_path)
    assert kinds.get("layer-norm") == 1 and "reduction" not in kinds, kinds


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["reciprocal", "divide", "square-as-product"])
def test_rms_norm_written_out_runs_on_the_row_kernel(tmp_path, request, device, form):
    # T5's x · rsqrt(mean(x²) + ε) · w as exporters write it: the reciprocal of the root times x
    # (torch's rsqrt), or x divided by the root; x² a power of 2 or x · x. 37 rows of 52: a row
    # with a tail past its whole vectors (52 = 48 + 4 on AVX-512)
    rng = np.random.default_rng(4)
    sq = helper.make_node("Mul", ["x", "x"], ["x2"]) if form == "square-as-product" else helper.make_node("Pow", ["x", "two"], ["x2"])
    scaled = ([helper.make_node("Div", ["x", "s"], ["n"])] if form == "divide" else
              [helper.make_node("Div", ["one", "s"], ["r"]), helper.make_node("Mul", ["x", "r"], ["n"])])
    nodes = [sq, helper.make_node("ReduceMean", ["x2"], ["v"], axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]), *scaled,
             helper.make_node("Mul", ["w", "n"], ["y"])]
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", F, [1, 37, 52])],
                              [helper.make_tensor_value_info("y", F, [1, 37, 52])],
                              [_const("two", np.array(2.0)), _const("one", np.array(1.0)), _const("eps", np.array(1e-6)),
                               _const("w", rng.uniform(0.5, 1.5, 52))])
    path = tmp_path / "rms.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    kinds = _packaged(path, tmp_path, device, request)
    assert kinds == {"rms-norm": 1}, kinds


@pytest.mark.long
def test_slow_dividing_cores_compute_sigmoid_and_erf_without_a_division(tmp_path, request):
    """On the Pi 4's Cortex-A72 (a vector fdiv ~34 cycles) the fast sigmoid's and fast erf's
    divisions are Newton reciprocals (passes/legalize.py: ``_reciprocal``): no ``fdiv`` in a
    dense + GELU + SiLU package, which passes its check against onnxruntime under qemu; the
    reciprocal itself is within 2.5 ulps of 1/d, erf / sigmoid within 3e-7 of TOPI's and no
    further from float64 math than TOPI's but an ulp. The Pi 5 (A76, a fast divider) keeps the division."""
    import math
    import subprocess

    from tvm import te

    from edgetune import _tvm
    from edgetune._tvm.kernels.cpu import CpuFacts
    from edgetune._tvm.passes import legalize
    from edgetune.profiles import get_profile

    assert CpuFacts.of(_tvm.make_target(get_profile("pi4").target_spec())).slow_divide
    assert not CpuFacts.of(_tvm.make_target(get_profile("pi5").target_spec())).slow_divide
    assert not CpuFacts.of(_tvm.make_target(get_profile("host").target_spec())).slow_divide

    import tvm

    x = te.placeholder((4096,), "float32", name="x")
    outs = [legalize._fast_erf_reciprocal(x), legalize._fast_sigmoid(x, divide=False),
            te.compute(x.shape, lambda i: legalize._reciprocal(x[i]), name="r"), tvm.topi.fast_erf(x),
            legalize._fast_sigmoid(x)]
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, *outs]))
    lib = tvm.compile(sch.mod, target="llvm")
    grid = np.linspace(-9, 9, 4096, dtype=np.float32)
    positive = np.exp(np.linspace(np.log(1e-3), np.log(1e30), 4096)).astype(np.float32)
    args = [tvm.runtime.tensor(a) for a in (grid, *[np.zeros(4096, np.float32)] * 5)]
    lib["main"](*args)
    (erf, sigmoid, _, topi_erf, topi_sigmoid), wide = (a.numpy() for a in args[1:]), grid.astype(np.float64)
    for ours, theirs, exact in ((erf, topi_erf, np.array([math.erf(v) for v in wide])),
                                (sigmoid, topi_sigmoid, 1 / (1 + np.exp(-wide)))):
        assert np.abs(ours - theirs).max() <= 3e-7  # a few ulps from TOPI's division
        assert np.abs(ours - exact).max() <= np.abs(theirs - exact).max() + 1.2e-7
    args = [tvm.runtime.tensor(a) for a in (positive, *[np.zeros(4096, np.float32)] * 5)]
    lib["main"](*args)
    assert np.abs(args[3].numpy() / (1 / positive.astype(np.float64)) - 1).max() < 2.5 * 2.0**-24

    inits = [numpy_helper.from_array((np.random.default_rng(2).standard_normal((32, 48)) * 0.2).astype(np.float32), "w")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Gelu", ["h"], ["g"], domain="com.microsoft"),
             helper.make_node("Sigmoid", ["g"], ["s"]), helper.make_node("Mul", ["g", "s"], ["y"])]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", F, [1, 16, 32])],
                              [helper.make_tensor_value_info("y", F, [1, 16, 48])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    onnx.save(model, str(tmp_path / "gelu.onnx"))
    request.getfixturevalue("qemu")
    result = package(PackageOptions(model=tmp_path / "gelu.onnx", device="pi4", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed" and "qemu" in result.verification["executed_on"], result.verification
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    assert "erf" in asm and "sigmoid" in asm, "the kernels are named after what they compute"
    assert not re.search(r"\sfdiv\s", asm), "a division left in the Pi 4's sigmoid or erf"
