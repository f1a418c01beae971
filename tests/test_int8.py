"""int8 models from the quantizers users use: onnxruntime's static QDQ quantization and
ai-edge-quantizer's static int8 recipe, applied to real float models (tests/quant_models.py).

TFLite int8 layers get exact integer sums requantized as LiteRT does, int8 adds LiteRT's fixed
point (edgetune/_tvm/passes/int8_layers.py, int8_elementwise.py); their convolutions run as int8 × int8 → int32 kernels
tensorized with the CPU's dot-product instruction (edgetune/_tvm/kernels/dot.py: AVX-512 VNNI, Arm sdot,
NEON) or, on a CPU without one, as exact sums in fp32 kernels. QDQ ONNX convolutions take the
same integer path (requantized as onnxruntime's QLinearConv does). Outputs within one
quantization step of LiteRT / onnxruntime."""

from __future__ import annotations

import json
import re
from pathlib import Path

import models
import numpy as np
import pytest
import quant_models
from conftest import EXAMPLES, built_candidates, run_edgetune

from edgetune import _tvm
from edgetune._tvm import parse_unsupported
from edgetune.errors import VerificationError
from edgetune.importer import import_model
from edgetune.package import PackageOptions, package


def integer_kernels_on(device: str) -> bool:
    """Whether ``device``'s int8 layers take integer kernels (its CPU has a dot-product
    instruction: the Pis' sdot / NEON, AVX-512 VNNI). An x86 host without VNNI (CI's AVX2
    machines) computes them as exact sums in its fp32 kernels instead."""
    from edgetune._tvm.kernels.dot import dot_family
    from edgetune.profiles import get_profile

    return device != "host" or dot_family(_tvm.make_target(get_profile("host").target_spec())) is not None


def assert_int8_kinds(device: str, kinds: dict, expected: bool) -> None:
    """``expected`` (the kinds' check) where ``device`` has integer kernels; else that no layer
    took one."""
    if integer_kernels_on(device):
        assert expected, kinds
    else:
        assert not any(k.endswith("-int8") for k in kinds), kinds


def test_unsupported_op_names_come_from_the_list_not_the_explanation():
    text = ("The following operators are not supported in frontend TFLite: 'FOO', 'BAR_X'\n"
            "The following quantized TFLite operators are not supported in frontend TFLite yet: 'PAD'. "
            "Quantized operators require explicit QDQ lowering to avoid applying Relax ops directly.")
    assert parse_unsupported(text) == ["BAR_X", "FOO", "PAD"]  # "QDQ" was reported as an operator


@pytest.mark.long
def test_qdq_onnx_from_onnxruntime_quantizer_matches_onnxruntime(squeezenet, tmp_path):
    qdq = quant_models.qdq_onnx(squeezenet, tmp_path / "squeezenet-qdq.onnx")
    result = package(PackageOptions(model=qdq, device="host", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and v["reference"].startswith("onnxruntime"), v
    assert v["max_abs_error"] <= 1 / 255  # the softmax output is QDQ'd in 1/255 steps: within one
    # the Fire modules' branches are joined as int8, not as float32 then quantized
    scheme = json.loads(str(import_model(qdq).mod.attrs[_tvm.constants.SCHEME_ATTR]))
    assert (scheme["concats"], scheme["rescales"], scheme["tables"]) == (8, 8, 0), scheme  # branches rescaled by a multiply
    assert not [k for k in result.manifest["kernels"] if re.search(r"concatenate\d*_quantize|take|lookup", k)], result.manifest["kernels"]
    shown = run_edgetune("inspect", str(qdq))
    assert "quantized: weights int8 per-channel symmetric; activations int8 asymmetric; layers 26 conv2d" in shown.stdout
    assert "exact integer sums: 26 of 26 layers (requantized as onnxruntime's QLinearConv / MLAS does" in shown.stdout, shown.stdout
    assert "int8 × int8 → int32 convolutions: 26 of 26 exact layers" in shown.stdout
    assert "quantized:" not in run_edgetune("inspect", str(squeezenet)).stdout


def _with_dense_head(model: Path, out: Path) -> Path:
    """``model`` with its final Softmax replaced by Flatten → Gemm (transB, as PyTorch exports a
    Linear layer) to 10 scores: a dense layer, and outputs where a step's difference in any layer
    shows (a softmax squashes most of them away)."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load(str(model))
    last = m.graph.node[-1]
    assert last.op_type == "Softmax"
    m.graph.node.remove(last)
    rng = np.random.default_rng(0)
    m.graph.initializer.extend([numpy_helper.from_array((rng.standard_normal((10, 1000)) * 0.05).astype(np.float32), "head_w"),
                                numpy_helper.from_array(rng.uniform(-0.5, 0.5, 10).astype(np.float32), "head_b")])
    m.graph.node.extend([helper.make_node("Flatten", [last.input[0]], ["flat"], axis=1),
                         helper.make_node("Gemm", ["flat", "head_w", "head_b"], ["scores"], transB=1)])
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, None))
    onnx.save(m, str(out))
    return out


@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_qdq_onnx_scores_within_a_step_of_onnxruntime_on_integer_kernels(squeezenet, tmp_path, activations):
    """QDQ convolutions and the dense head run as integer sums requantized as onnxruntime's
    QLinearConv / QGemm do (an int32 sum, one float scale per channel), so the class scores agree
    within a step — where a float scale folded into float weights once put MobileNetV3's scores
    18 steps away."""
    scores = _with_dense_head(squeezenet, tmp_path / "scores.onnx")
    qdq = quant_models.qdq_onnx(scores, tmp_path / f"scores-{activations}.onnx", activations=activations)
    result = package(PackageOptions(model=qdq, device="host", output=tmp_path / "pkg"))
    v = result.verification
    step = quant_models.output_step(qdq)  # the scores' DequantizeLinear
    assert v["status"] == "passed" and v["max_abs_error"] <= step * 1.0001, (v, step)
    shown = run_edgetune("inspect", str(qdq)).stdout
    assert f"activations {activations} asymmetric" in shown and "layers 26 conv2d, 1 matmul" in shown, shown
    assert "int8 × int8 → int32 convolutions: 27 of 27 exact layers (full, depthwise, dense)" in shown, shown


@pytest.mark.long
def test_qoperator_onnx_runs_as_its_qdq_spelling_on_integer_kernels(squeezenet, tmp_path):
    """onnxruntime's QOperator format (QLinearConv, QGemm, com.microsoft QLinearConcat /
    QLinearGlobalAveragePool — none of which TVM 0.27 converts) is spelled as QDQ at import and
    takes the integer path; onnxruntime runs the QLinear ops themselves as the reference."""
    import onnx

    scores = _with_dense_head(squeezenet, tmp_path / "scores.onnx")
    qop = quant_models.qdq_onnx(scores, tmp_path / "scores-qop.onnx", qoperator=True)
    ops = {n.op_type for n in onnx.load(str(qop)).graph.node}
    assert {"QLinearConv", "QGemm", "QLinearConcat", "QLinearGlobalAveragePool"} <= ops, ops
    result = package(PackageOptions(model=qop, device="host", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed", v
    shown = run_edgetune("inspect", str(qop)).stdout
    assert "unsupported" not in shown and "int8 × int8 → int32 convolutions: 27 of 27" in shown, shown
    assert "QOperator int8 ops spelled as DequantizeLinear → op → QuantizeLinear: 1 QGemm, 8 QLinearConcat, 26 QLinearConv" in shown


def test_qoperator_below_opset_13_is_refused_with_the_reason(squeezenet, tmp_path):
    """Per-channel QLinearConv scales have no DequantizeLinear spelling before opset 13: the
    error says so and how to convert, instead of only "cannot convert"."""
    import onnx
    from onnxruntime import quantization as q

    src = _with_dense_head(squeezenet, tmp_path / "scores.onnx")  # opset 9: the quantizer writes opset 11
    data = next(i for i in onnx.load(str(src)).graph.input if i.name == "data_0")
    shape = tuple(d.dim_value for d in data.type.tensor_type.shape.dim)

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{"data_0": np.zeros(shape, np.float32)}])

        def get_next(self):  # noqa: ANN201 (onnxruntime's interface)
            return next(self.items, None)

    old = tmp_path / "scores-qop11.onnx"
    q.quantize_static(str(src), str(old), Reader(), quant_format=q.QuantFormat.QOperator, per_channel=True,
                      activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8)
    res = run_edgetune("package", str(old), "--device", "host", "-o", str(tmp_path / "pkg"))
    assert res.returncode != 0 and "cannot convert: QLinearConv" in res.stderr, res.stderr
    assert "need opset 13" in res.stderr and "this file is opset 11" in res.stderr, res.stderr


def test_int8_tflite_from_ai_edge_quantizer_matches_litert_within_a_step(tmp_path):
    """The quantizer's output stores weights after the flatbuffer, writes QUANTIZE's operator
    code in the new field only, and pads int8 tensors with PAD: all three used to stop the
    import. Through TVM's float path its outputs were 41 steps from LiteRT's; with exact
    integer sums and LiteRT's fixed-point adds, at most one."""
    int8 = quant_models.int8_tflite_from_float(EXAMPLES / "face_detection_short_range.tflite", tmp_path / "face-int8.tflite")
    model = import_model(int8)
    assert model.inputs[0].dtype == "int8" and model.inputs[0].quantization is not None
    assert any("stored after the flatbuffer" in n for n in model.notes), model.notes
    result = package(PackageOptions(model=int8, device="host", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and v["max_abs_error"] <= 1, v
    ref = np.load(tmp_path / "pkg" / "reference.npz")
    assert all(ref[k].dtype == np.int8 for k in ref.files if k.startswith("output:"))
    shown = run_edgetune("inspect", str(int8)).stdout
    assert "exact integer sums: 37 of 37 layers" in shown and "16 int8 adds in LiteRT's fixed point" in shown, shown
    assert "int8 × int8 → int32 convolutions: 37 of 37 exact layers" in shown, shown


def test_synthetic_int8_cnn_still_bit_exact(int8_tflite, tmp_path):
    result = package(PackageOptions(model=int8_tflite, device="host", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed" and result.verification["max_abs_error"] == 0


@pytest.mark.slow
def test_int8_tflite_for_pi5_under_qemu_within_a_step(tmp_path, qemu):
    """The same exact path, cross-compiled for the Pi 5 and checked under qemu against LiteRT."""
    int8 = quant_models.int8_tflite_from_float(EXAMPLES / "face_detection_short_range.tflite", tmp_path / "face-int8.tflite")
    v = package(PackageOptions(model=int8, device="pi5", output=tmp_path / "pkg")).verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] <= 1, v


@pytest.fixture(scope="module")
def int8_cnn(tmp_path_factory) -> Path:
    """ai-edge-quantizer's int8 version of a small VGG-style float CNN (3×3 convolutions,
    residual adds): every layer a full convolution."""
    work = tmp_path_factory.mktemp("cnn")
    float_model = models.float_cnn_tflite(work / "cnn.tflite", width=32, size=16, layers=2)
    return quant_models.int8_tflite_from_float(float_model, work / "cnn-int8.tflite")


def _rules(model, device: str, env: dict[str, str] | None = None) -> set[tuple[str, str]]:
    proc = run_edgetune("tune", str(model), "--device", device, "--list-tasks", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return {(r["kind"], r["rules"]) for r in json.loads(proc.stdout)}


@pytest.mark.long
def test_list_tasks_names_the_dot_product_instruction_each_board_tunes_with(int8_cnn):
    """pi5 (Cortex-A76) and pi4 (A72) get the integer kernel with sdot and NEON; this host gets
    VNNI where it has AVX-512 VNNI, else the convolutions are fp32 kernels over exact sums."""
    assert ("conv2d-int8", "micro-kernel, Arm dot product (sdot, s8×s8)") in _rules(int8_cnn, "pi5")
    assert ("conv2d-int8", "micro-kernel, Arm NEON (smull + pairwise add, s8×s8)") in _rules(int8_cnn, "pi4")
    from edgetune._tvm.kernels import dot
    from edgetune.profiles import get_profile

    host = _rules(int8_cnn, "host")
    if dot.dot_family(_tvm.make_target(get_profile("host").target_spec())) == "vnni":
        assert ("conv2d-int8", "micro-kernel, x86 AVX-512 VNNI (vpdpbusd, u8×s8)") in host, host
    else:
        assert ("conv2d", "micro-kernel") in host and not any(kind == "conv2d-int8" for kind, _ in host), host


def test_inspect_says_how_int8_layers_run_on_the_device_asked_for(int8_tflite):
    """`inspect` names the instruction the chosen board computes int8 layers with, and before a
    board is chosen it claims none."""
    def runs_as(*device: str) -> str:
        res = run_edgetune("inspect", str(int8_tflite), *device)
        assert res.returncode == 0, res.stderr
        return next(line for line in res.stdout.splitlines() if line.strip().startswith("runs as"))

    assert "on Arm sdot" in runs_as("--device", "pi5")
    assert "this CPU has no int8 dot-product instruction" in runs_as("--device", "pi4-32")
    assert "where it has one" in runs_as()


def test_int8_cnn_is_bit_exact_on_host_and_without_dot_products(int8_cnn, tmp_path):
    """The integer kernels compute LiteRT's results exactly; so does the fp32 fallback a CPU
    without an exact int8 instruction gets (an x86 profile without AVX-512, as a user profile)."""
    v = package(PackageOptions(model=int8_cnn, device="host", output=tmp_path / "host")).verification
    assert v["status"] == "passed" and v["max_abs_error"] == 0, v
    targets = tmp_path / "targets"
    targets.mkdir()
    host = (EXAMPLES.parent / "targets" / "host.toml").read_text()
    (targets / "x86-noavx512.toml").write_text(host.replace('mcpu = "native"', 'mcpu = "haswell"'))
    env = {"EDGETUNE_TARGETS_DIR": str(targets)}
    assert ("conv2d", "micro-kernel") in _rules(int8_cnn, "x86-noavx512", env)
    proc = run_edgetune("package", str(int8_cnn), "--device", "x86-noavx512", "-o", str(tmp_path / "hsw"), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    v = json.loads(proc.stdout)["manifest"]["verification"]
    assert v["status"] == "passed" and v["max_abs_error"] == 0, v


@pytest.mark.parametrize(("device", "depthwise"), [("host", False), ("pi5", False), ("pi5", True)])
def test_dead_channels_bias_at_int32_minimum_stay_on_integer_kernels(tmp_path, request, device, depthwise):
    """ai-edge-quantizer stores the bias of a channel whose weights are all zero as −2³¹ (its
    float bias over a vanishing weight scale, saturated). That is an int32 and the layer's
    integer sum: the layer runs on the integer kernel (it ran as a float convolution of
    dequantized values where the fold had to stay within ±(2³¹ − 1): MediaPipe hand landmark,
    15 of 31 convolutions), and equals onnxruntime's QLinearConv, whose sum starts at the same
    −2³¹ (× its tiny scale: a step below the zero point, not a clipped extreme). On the Pi 5
    (slow int → float conversions) the sums leave the kernel as floats by their bit pattern
    all the same, full and depthwise layers: a dead channel adds 0 and takes off 1.5 · 2²³ + 2³¹
    (passes/int8_kernels.py: _float_sums), where its −2³¹ had kept the whole layer on ``scvtf``."""
    import subprocess

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if device != "host":
        request.getfixturevalue("qemu")
    rng = np.random.default_rng(5)
    channels = 8 if depthwise else 16
    w = rng.integers(-127, 128, (channels, 1 if depthwise else 8, 3, 3)).astype(np.int8)
    ws = np.full(channels, 0.004, np.float32)
    b = rng.integers(-2000, 2000, channels).astype(np.int32)
    dead_channels = (3, 6) if depthwise else (3, 11)
    for dead in dead_channels:
        w[dead], ws[dead], b[dead] = 0, np.float32(1e-9), np.iinfo(np.int32).min
    inits = [numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in (
        ("s", 0.05, np.float32), ("z", 3, np.int8), ("os", 0.1, np.float32), ("oz", -2, np.int8))]
    inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(ws, "ws"),
              numpy_helper.from_array(np.zeros(channels, np.int8), "wz"), numpy_helper.from_array(b, "b"),
              numpy_helper.from_array((np.float32(0.05) * ws).astype(np.float32), "bs"),
              numpy_helper.from_array(np.zeros(channels, np.int32), "bz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1], group=channels if depthwise else 1),
             helper.make_node("QuantizeLinear", ["c", "os", "oz"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "os", "oz"], ["y"])]
    graph = helper.make_graph(nodes, "dead", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = tmp_path / "dead.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(model))
    result = package(PackageOptions(model=model, device=device, output=tmp_path / device))
    assert result.verification["status"] == "passed" and result.verification["max_abs_error"] == 0, result.verification
    kinds = result.manifest["schedules"]["kinds"]
    kind = "depthwise-int8" if depthwise else "conv2d-int8"
    assert_int8_kinds(device, kinds, kinds.get(kind) == 1 and "conv2d" not in kinds and "depthwise" not in kinds)
    if device == "host":
        import edgetune_runtime

        y = edgetune_runtime.load(result.path).run(rng.uniform(-6, 6, (1, 8, 12, 12)).astype(np.float32))["y"]
        assert np.all(y[0, list(dead_channels)] == np.float32(-0.1)), y[0, list(dead_channels)]  # (round(−2³¹ · 0.05 · 1e-9 / 0.1) = −1) · 0.1
        return
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    layer = "\n".join(f for f in asm.split("\n\n") if re.match(r"[0-9a-f]+ <fused_\w*conv2d\w*>:", f))
    assert layer and not re.search(r"\sscvtf\s+v", layer), layer[:3000]
    assert re.search(r"\sfsub\s+v", layer), "the sums' bit pattern less its constant"


def test_qdq_detector_with_long_int8_chains_packages_within_steps(tmp_path):
    """A DBNet-style text detector quantized with QDQ (an FPN of int8 resizes, adds and a concat;
    transposed convolutions that stay float): following its elementwise chains once overflowed
    Python's recursion limit at import. Its transposed convolutions, weights int8 behind
    dequantize, run as convolutions of their phases like float ones (not as generic loops)."""
    import zoo

    qdq = quant_models.qdq_onnx(zoo.ocr_det(tmp_path / "det.onnx", size=128), tmp_path / "det-qdq.onnx", count=2)
    result = package(PackageOptions(model=qdq, device="host", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed", result.verification
    kinds = result.manifest["schedules"]["kinds"]
    assert "reduction" not in kinds, kinds
    assert_int8_kinds("host", kinds, kinds.get("conv2d") == 2)


def _qdq_convs(out: Path, layers: list[tuple[int, int, int, float, float]], size: int, rng: np.random.Generator,
               bias: int, low: int = -127, depthwise: bool = False, stride: int = 1) -> Path:
    """A QDQ chain of convolutions as onnxruntime's quantizer writes them: the input quantized
    (scale 0.05, zero point 3), then per layer ``(in, out, kernel, weight scale, bias scale)``
    int8 weights in [``low``, 127] (the first one ``low``), int32 biases within ±``bias``, the
    result quantized on the input's parameters; ``size``² pixels, padded by half the kernel
    (``depthwise``: one group per channel; ``stride``: every layer's)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    s, z = 0.05, 3
    inits = [numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in (("s", s, np.float32), ("z", z, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["d0"])]
    for n, (cin, cout, k, weight_scale, bias_scale) in enumerate(layers):
        w = rng.integers(low, 128, (cout, 1 if depthwise else cin, k, k)).astype(np.int8)
        w.flat[0] = low
        inits += [numpy_helper.from_array(w, f"w{n}"),
                  numpy_helper.from_array(np.full(cout, weight_scale, np.float32), f"ws{n}"),
                  numpy_helper.from_array(np.zeros(cout, np.int8), f"wz{n}"),
                  numpy_helper.from_array(rng.integers(-bias, bias, cout).astype(np.int32), f"b{n}"),
                  numpy_helper.from_array(np.full(cout, bias_scale, np.float32), f"bs{n}"),
                  numpy_helper.from_array(np.zeros(cout, np.int32), f"bz{n}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{n}", f"ws{n}", f"wz{n}"], [f"wd{n}"], axis=0),
                  helper.make_node("DequantizeLinear", [f"b{n}", f"bs{n}", f"bz{n}"], [f"bd{n}"], axis=0),
                  helper.make_node("Conv", [f"d{n}", f"wd{n}", f"bd{n}"], [f"c{n}"], pads=[k // 2] * 4,
                                   group=cin if depthwise else 1, strides=[stride, stride]),
                  helper.make_node("QuantizeLinear", [f"c{n}", "s", "z"], [f"q{n}"]),
                  helper.make_node("DequantizeLinear", [f"q{n}", "s", "z"], [f"d{n + 1}"])]
    last, side = f"d{len(layers)}", size
    for _cin, _cout, k, _ws, _bs in layers:
        side = (side + 2 * (k // 2) - k) // stride + 1
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, layers[0][0], size, size])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, layers[-1][1], side, side])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(out))
    return out


@pytest.mark.parametrize("weights", ["narrow", "full", "eights"])
def test_pi4_int8_kernels_keep_partial_sums_and_are_exact_under_qemu(tmp_path, qemu, weights):
    """The Pi 4's int8 step over 16 input channels keeps four partial sums per output channel
    (``sadalp``: :func:`dot.partial_lanes`), summed once per tile: a QDQ model of a 3×3 and a
    1×1 convolution (40 output channels computed as 48) over 32 input channels, with weights
    within ±127 (``smlal2`` pairs in int16) or reaching −128 (``smull2``, widened apart), is
    exact against onnxruntime under qemu. So is the step over 8 channels (``eights``: 3×3 layers
    over 8 and 24 channels, which 16 would pad by a half and a third): a ``smull`` of the
    pixel's 8 bytes per output channel, no high halves (``smull2``, ``smlal2``)."""
    import subprocess

    layers = [(32, 32, 3, 0.002, 0.05 * 0.002), (32, 40, 1, 0.002, 0.05 * 0.002)]
    if weights == "eights":
        layers = [(8, 24, 3, 0.004, 0.05 * 0.004), (24, 40, 3, 0.003, 0.05 * 0.003)]
    _qdq_convs(tmp_path / "m.onnx", layers, size=9, rng=np.random.default_rng(11), bias=3000,
               low=-128 if weights == "full" else -127)
    result = package(PackageOptions(model=tmp_path / "m.onnx", device="pi4", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] == 0, v
    assert not result.manifest["schedules"]["naive"], result.manifest["schedules"]
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    assert re.search(r"\ssadalp\s", asm), "no partial sums accumulated by sadalp"
    if weights == "eights":
        assert not re.search(r"\ss(mull|mlal)2\s", asm)
    else:
        assert re.search(r"\ssmlal2\s" if weights == "narrow" else r"\ssmull2\s", asm)


@pytest.mark.parametrize("low", [-127, -128])
def test_pi4_pointwise_layers_over_few_channels_read_each_pixel_as_pairs_and_are_exact(tmp_path, qemu, low):
    """On the Pi 4 a 1×1 int8 layer over 8, 16, 24 or 40 input channels (dot.pointwise_pairs)
    reads each pixel's channels as a row of pairs straight from its input — each pair broadcast
    by lane into ``smull`` / ``smull2`` against 8 output channels' weights, two pairs summed in
    int16 where the weights are within ±127 — and sums nothing across lanes afterwards: no
    ``addp`` tree, which the partial-sum kernel spent per 4 output channels and pixel (MobileNetV2
    int8's 24 → 144 layer, A72 estimate: 5.88 → 3.63 M cycles). A QDQ chain of such layers is
    exact against onnxruntime under qemu, with a −128 weight too (products widened apart)."""
    import subprocess

    layers = [(8, 16, 1, 0.004, 0.05 * 0.004), (16, 24, 1, 0.003, 0.05 * 0.003), (24, 40, 1, 0.003, 0.05 * 0.003),
              (40, 24, 1, 0.002, 0.05 * 0.002)]
    _qdq_convs(tmp_path / "m.onnx", layers, size=9, rng=np.random.default_rng(12), bias=3000, low=low)
    result = package(PackageOptions(model=tmp_path / "m.onnx", device="pi4", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] == 0, v
    assert result.manifest["schedules"]["kinds"].get("conv2d-int8") == 4, result.manifest["schedules"]
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    bodies = [b for _fn, b in re.findall(r"<(fused_conv2d_nhwc_int8\w*)>:\n(.*?)(?:\n\n|\Z)", asm, re.S)]
    assert len(bodies) == 4, len(bodies)
    for body in bodies:
        assert re.search(r"\sdup\s+v\d+\.8h, v\d+\.h\[\d\]", body) and not re.search(r"\saddp\s", body), body[:3000]
        assert bool(re.search(r"\ssmlal2?\s", body)) == (low > -128), body[:3000]


def test_int8_cnn_for_pi5_multiplies_input_quads_by_lane_and_is_bit_exact(int8_cnn, tmp_path, qemu):
    """Pi 5: a layer of 16·k input channels loads four quads of a pixel's input at once and
    multiplies each by lane (``sdot v.4s, v.16b, v.4b[j]``: :data:`dot.SDOT_QUADS`) instead of
    broadcasting every quad first (``ld1r``, which takes the vector pipes beside the sdots),
    and requantizes by the floats' bit patterns (no ``scvtf`` / ``fcvtns``: the A76 converts
    on one pipe, codegen/rounding.py ``_bits_rounded``); exact under qemu."""
    import subprocess

    result = package(PackageOptions(model=int8_cnn, device="pi5", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] == 0, v
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    assert re.search(r"\ssdot\s+v\d+\.4s, v\d+\.16b, v\d+\.4b\[[0-3]\]", asm), "no sdot by element"
    layers = re.findall(r"<(fused_conv2d_nhwc_int8\w*)>:\n(.*?)(?:\n\n|\Z)", asm, re.S)
    assert layers and not any(re.search(r"\s(scvtf|fcvtns|fcvtzs)\s+v", body) for _fn, body in layers), layers


@pytest.mark.parametrize("width", [24, 40])
def test_pi5_layers_over_odd_eights_of_channels_multiply_quad_pairs_by_lane(width, tmp_path, qemu):
    """Pi 5: a layer whose input channels are an odd number of 8s (24, 40: no whole groups of
    four quads) loads two quads of a pixel at once (``ldr d``) and multiplies each by lane
    (:data:`dot.SDOT_PAIR`), where each quad was broadcast by ``ld1r`` (a vector-pipe µop per 4
    sdots: 80 % of the A76's sdot issue at best); exact under qemu."""
    import subprocess

    float_model = models.float_cnn_tflite(tmp_path / "cnn.tflite", width=width, size=8, layers=2)
    int8_model = quant_models.int8_tflite_from_float(float_model, tmp_path / "cnn-int8.tflite")
    result = package(PackageOptions(model=int8_model, device="pi5", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] == 0, v
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    layers = re.findall(r"<(fused_conv2d_nhwc_int8\w*)>:\n(.*?)(?:\n\n|\Z)", asm, re.S)
    assert len(layers) == 4, [fn for fn, _ in layers]  # the RGB stem, two 3×3 and a 1×1 over width channels
    by_lane = [fn for fn, body in layers if re.search(r"\ssdot\s+v\d+\.4s, v\d+\.16b, v\d+\.4b\[[0-3]\]", body)
               and re.search(r"\sldr\s+d\d+", body) and not re.search(r"\sld1r\s", body)]
    assert len(by_lane) == 3, [fn for fn, _ in layers]


def test_pi4_convinteger_sums_are_the_kernel_output_and_scheduled(tmp_path, qemu):
    """A dynamically quantized Whisper-style encoder's ``ConvInteger`` front end: its int32
    sums are the kernel's output (nothing fused after them), so on the Pi 4 the partial sums are
    summed into a local tile and stored — every kernel scheduled (summed straight into the output
    the tree did not apply: the two convolutions ran as plain loops, 13× slower by the estimate),
    and the package matches onnxruntime under qemu."""
    import zoo_transformers as zt

    model = zt.dynamic_int8(zt.whisper_encoder(tmp_path / "whisper.onnx"), tmp_path / "whisper-int8.onnx")
    result = package(PackageOptions(model=model, device="pi4", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed" and "qemu" in result.verification["executed_on"], result.verification
    assert not result.manifest["schedules"]["naive"], result.manifest["schedules"]
    assert any(v["kind"] == "conv2d-int8" for v in result.manifest["kernels"].values())


@pytest.mark.parametrize(("family", "rows", "computed"), [
    ("vnni", 17, 18), ("vnni", 122, 128), ("vnni", 197, 200), ("vnni", 64, 64), ("vnni", 5, 5), ("vnni", 12, 12),
    ("sdot", 17, 18), ("sdot", 5, 6), ("sdot", 122, 122), ("sdot", 197, 200), ("neon", 64, 64)])
def test_dense_rows_are_padded_to_the_cheapest_whole_tiles(family, rows, computed):
    """A dense layer's rows are computed as the count from them on that costs least in whole
    register tiles of at least half the default height (each tile a row's cost more): 17 tokens
    as 18 in tiles of 6 on x86, not 24 in tiles of 8; 122 as 128 (tiles of 4 measured slower)."""
    from edgetune._tvm.kernels import dot

    assert dot.dot_rows(family, rows) == computed


def test_int8_cnn_for_pi4_under_qemu_is_bit_exact(int8_cnn, tmp_path, qemu):
    """The NEON integer kernels (Cortex-A72, no dot product), checked under qemu."""
    v = package(PackageOptions(model=int8_cnn, device="pi4", output=tmp_path / "pkg")).verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] == 0, v


def test_requantizing_epilogues_are_vector_code_and_round_ties_to_even(tmp_path):
    """Every int8 layer ends in round → clip → cast. TOPI spells round ``nearbyint``, which TVM's
    loop vectorizer does not know (each such epilogue ran as a scalar loop); edgetune legalizes
    it as ``round`` — on LLVM targets the same ``llvm.nearbyint``, ties to even. A requantized
    value widened again (here the index of a lookup) is widened from its clipped float, not cast
    to int8 and back. 40 output channels are computed as 48 (blocks of 16) or 64 (tiles of two):
    the epilogue runs once per row of pixels over the 40, its loop cut into whole registers —
    per tile its bound flips at a lane TVM cannot vectorize around."""
    import onnx
    from onnx import TensorProto, helper

    import edgetune_runtime
    from edgetune._tvm.passes import pipeline

    model, *_ = _hard_swish_qdq(tmp_path / "hs.onnx", conv=True, channels=40)
    # the schedule as an AVX-512 VNNI host makes it (whatever this host has): the int8 kernel, 16 lanes
    target = _tvm.make_target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "cascadelake"})
    fused = pipeline.fuse(import_model(model).mod, target, _tvm.lowering_for(target, "auto"))
    [conv] = [f for gv, f in fused.functions_items() if "conv2d" in gv.name_hint]
    epilogue = _tvm.default_schedule(conv.with_attr("global_symbol", "main"), target)[0].mod.script()
    assert "T.round(" in epilogue and "nearbyint" not in epilogue, epilogue
    assert 'T.Cast("int32", T.max(T.min(T.round(' in epilogue, epilogue  # the lookup's index
    assert "T.where" not in epilogue and "T.vectorized(T.int64(32), T.int64(40))" in epilogue, epilogue
    result = package(PackageOptions(model=model, device="host", output=tmp_path / "hs"))
    assert result.verification["status"] == "passed", result.verification

    graph = helper.make_graph([helper.make_node("Round", ["x"], ["y"])], "round",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(tmp_path / "r.onnx"))
    result = package(PackageOptions(model=tmp_path / "r.onnx", device="host", output=tmp_path / "pkg"))
    x = (np.arange(-20, 20, dtype=np.float32) + 0.5).reshape(1, 40)  # every value a tie
    np.testing.assert_array_equal(edgetune_runtime.load(result.path).run(x)["y"], np.round(x))


@pytest.mark.parametrize(("mcpu", "channels", "kernel", "lanes", "on_stack"),
                         [("cortex-a76", 40, 3, False, True), ("cortex-a72", 40, 3, True, True),
                          ("cortex-a72", 12, 1, False, False)])
def test_kernel_scratch_is_an_alloca_unless_the_kernel_is_register_bound(tmp_path, mcpu, channels, kernel, lanes,
                                                                          on_stack):
    """TVM allocates every local buffer of a kernel (a ragged int8 convolution's accumulator tile:
    40 channels computed as 48, 8 as 16) from the runtime's workspace pool: two calls per tile
    and a pointer LLVM cannot keep in registers. edgetune's pipeline leaves it an alloca
    (edgetune/_tvm/codegen/scratch.py), except where the inner loop fills the registers already:
    the Pi 4's int8 step over 4 input channels (smull and an addp tree per step: a 1×1 layer
    over 12 channels: 16 a step pads them by a third, 8 does not divide them, no row of pairs), where promoted
    accumulators spilled (+30 %, estimate). Its steps over 16 or 8 channels into partial sums
    (``lanes``: the 40-channel 3×3 layer, five steps of 8 a tap) are promoted."""
    from edgetune._tvm.codegen import lookups
    from edgetune._tvm.passes import pipeline

    model = _qdq_convs(tmp_path / "m.onnx", [(channels, channels, kernel, 0.002, 0.05 * 0.002)], size=16,
                       rng=np.random.default_rng(3), bias=3000, low=-127)
    target = _tvm.make_target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": mcpu, "num-cores": 4})
    fused = pipeline.fuse(import_model(model).mod, target, _tvm.lowering_for(target, "auto"), "direct")
    layer = f"x{channels}>{channels} k{kernel}x{kernel}"  # (the input's padding a stage of its own)
    conv = next(f for gv, f in fused.functions_items() if "conv2d_nhwc_int8" in gv.name_hint and layer in f.script())
    assert ("edgetune.dot_lanes" in conv.script()) == lanes
    sch = _tvm.default_schedule(conv.with_attr("global_symbol", "main"), target).sch
    assert 'scope="local"' in sch.mod.script()
    lookups.register()
    calls = {}
    for pipe in (lookups.PIPELINE, "s_tir"):
        lib = _tvm.tvm().compile(sch.mod, target=target, tir_pipeline=pipe)
        calls[pipe] = lib.mod.inspect_source("ll").count("TVMBackendAllocWorkspace")
    # the pad stage's whole tensor stays in the pool either way
    assert calls[lookups.PIPELINE] < calls["s_tir"] if on_stack else calls[lookups.PIPELINE] == calls["s_tir"], calls


def _checked_under_qemu(pkg: Path, device: str, x: np.ndarray, expected: dict[str, np.ndarray]) -> dict:
    """The loader's ``check`` of package ``pkg`` under qemu against ``expected`` (output name →
    value: the x86 package's, or worked out by hand) for the input ``x``, its reference file and
    manifest hash replaced."""
    import hashlib

    from edgetune import emulation
    from edgetune.profiles import get_profile

    np.savez(pkg / "reference.npz", **{"input:x": x, **{f"output:{k}": v for k, v in expected.items()}})
    manifest = json.loads((pkg / "manifest.json").read_text())
    manifest["files"]["reference.npz"] = hashlib.sha256((pkg / "reference.npz").read_bytes()).hexdigest()
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    return emulation.run_loader(get_profile(device), pkg, ["check"])


def _hard_swish_qdq(out: Path, conv: bool, channels: int = 8) -> tuple[Path, float, int, float]:
    """A QDQ graph as onnxruntime's quantizer writes MobileNetV3's hard-swish: DequantizeLinear →
    HardSigmoid → QuantizeLinear → DequantizeLinear → Mul (with the dequantized input) →
    QuantizeLinear → DequantizeLinear, after a 1×1 convolution to ``channels`` (``conv``) or on
    the input itself. Returns the file, the input's scale and zero point, the output's scale."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    scale, zero, out_scale, out_zero = 0.05, 3, 0.021, -100
    inits = [numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in (
        ("s", scale, np.float32), ("z", zero, np.int8), ("hs", 1 / 255, np.float32), ("hz", -128, np.int8),
        ("os", out_scale, np.float32), ("oz", out_zero, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
    source = "xd"
    if conv:
        w = rng.integers(-127, 128, (channels, 8, 1, 1)).astype(np.int8)
        inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.full(channels, 0.002, np.float32), "ws"),
                  numpy_helper.from_array(np.zeros(channels, np.int8), "wz"),
                  numpy_helper.from_array(rng.integers(-500, 500, channels).astype(np.int32), "b"),
                  numpy_helper.from_array(np.full(channels, scale * 0.002, np.float32), "bs"),
                  numpy_helper.from_array(np.zeros(channels, np.int32), "bz")]
        nodes += [helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
                  helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0),
                  helper.make_node("Conv", ["xd", "wd", "bd"], ["c"]),
                  helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
                  helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["cd"])]
        source = "cd"
    nodes += [helper.make_node("HardSigmoid", [source], ["h"], alpha=1 / 6, beta=0.5),
              helper.make_node("QuantizeLinear", ["h", "hs", "hz"], ["hq"]),
              helper.make_node("DequantizeLinear", ["hq", "hs", "hz"], ["hd"]),
              helper.make_node("Mul", [source, "hd"], ["m"]),
              helper.make_node("QuantizeLinear", ["m", "os", "oz"], ["mq"]),
              helper.make_node("DequantizeLinear", ["mq", "os", "oz"], ["y"])]
    shape = [1, 8, 8, 4]
    graph = helper.make_graph(nodes, "hard_swish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels if conv else 8, 8, 4])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(out))
    return out, scale, zero, out_scale


@pytest.mark.parametrize("conv", [False, True], ids=["alone", "after-conv"])
def test_int8_elementwise_chains_are_table_lookups_within_a_step_of_onnxruntime(tmp_path, conv):
    """quantize(hard-swish(dequantize(x))) as QDQ spells it — two divisions per element on the
    float path — becomes one lookup in a 256-entry table computed at import; after a
    convolution the lookup runs in that kernel's epilogue. Checked on every one of the 256 int8
    inputs against onnxruntime."""
    import onnxruntime as ort

    import edgetune_runtime

    model, scale, zero, out_scale = _hard_swish_qdq(tmp_path / "hs.onnx", conv)
    if conv:
        scheme = json.loads(str(import_model(model).mod.attrs[_tvm.constants.SCHEME_ATTR]))
        assert scheme["tables"] == 2, scheme  # the hard-sigmoid's quantize, then the product's through it
        assert "2 int8 → int8 elementwise chains as 256-entry lookups" in run_edgetune("inspect", str(model)).stdout
    result = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed", result.verification
    kernels = sorted(result.manifest["kernels"])
    assert not any(k.startswith(("take", "fused_take")) for k in kernels), kernels  # no lookup kernel of its own
    assert any(("conv2d" in k) == conv and "lookup" in k for k in kernels), kernels
    # every int8 input value: x = (q − z)·s for q in −128…127 (the graph's quantize gives q back)
    x = ((np.arange(-128, 128) - zero) * np.float32(scale)).astype(np.float32).reshape(1, 8, 8, 4)
    ours = edgetune_runtime.load(result.path).run(x)["y"]
    theirs = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    steps = np.rint(np.abs(ours - theirs) / out_scale)
    assert steps.max() <= 1 and (steps == 0).mean() > 0.98, (steps.max(), (steps == 0).mean())


def _rescale_scales(exact: bool) -> tuple[float, int, float, int]:
    """Scales and zero points ``(s1, z1, s2, z2)`` of a rescale whose multiply-by-``s1/s2``
    spelling gives (``exact``) or does not give the float path's ``round(x / s2)`` on some of the
    256 int8 inputs — the first such ``s2`` on a fine grid."""
    s1, z1, z2 = np.float32(0.125), 3, -5  # (mismatches are rare: none for s1 = 0.05 on this grid)
    v = np.arange(-128, 128) - z1
    x = v.astype(np.float32) * s1
    for i in range(3000):
        s2 = np.float32(0.0371 * (1 + i * 1e-3))
        divided = np.clip(np.round(x / s2) + z2, -128, 127)
        multiplied = np.clip(np.round(v.astype(np.float32) * np.float32(s1 / s2)) + z2, -128, 127)
        if np.array_equal(divided, multiplied) == exact:
            return float(s1), z1, float(s2), z2
    raise AssertionError("no such scale on the grid")


@pytest.mark.parametrize("exact", [True, False], ids=["multiply", "lookup"])
def test_int8_rescales_are_a_multiply_where_exact_else_a_lookup(tmp_path, exact):
    """quantize(dequantize(x)) from one scale to another (how QDQ puts SqueezeNet's branches on
    their concatenation's scale) becomes ``round((x − z1) · s1/s2) + z2`` in the kernel where
    that equals the float path's division on all 256 inputs, and a lookup where it does not;
    either way onnxruntime's int8 result on every one of the 256 inputs."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    import edgetune_runtime

    s1, z1, s2, z2 = _rescale_scales(exact)
    inits = [numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in (
        ("s1", s1, np.float32), ("z1", z1, np.int8), ("s2", s2, np.float32), ("z2", z2, np.int8))]
    # an int8 input: with a float one, onnxruntime drops the Q → DQ before the rescale (and
    # quantizes the float input straight to s2: another result)
    nodes = [helper.make_node("DequantizeLinear", ["x", "s1", "z1"], ["xd"]),
             helper.make_node("QuantizeLinear", ["xd", "s2", "z2"], ["y"])]
    shape = [1, 16, 4, 4]
    graph = helper.make_graph(nodes, "rescale", [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, shape)], inits)
    model = tmp_path / "rescale.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(model))
    result = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed", result.verification
    lookups = [k for k in result.manifest["kernels"] if "take" in k or "lookup" in k]
    assert bool(lookups) != exact, result.manifest["kernels"]
    x = np.arange(-128, 128).astype(np.int8).reshape(shape)
    ours = edgetune_runtime.load(result.path).run(x)["y"]
    theirs = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ours, theirs)


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.long
def test_lookups_in_vector_epilogues_are_byte_permutes_or_gathers(tmp_path):
    """A lookup in a vectorized epilogue (TVM scalarizes a load at a vector index: a load and an
    insert per lane) is built as ``vpermi2b`` byte permutes where the CPU has AVX-512 VBMI and
    the value is narrowed to int8, else as ``vpgatherdd`` (AVX-512: zmm, AVX2: ymm) — 40 output
    channels, so 16-lane chunks of a 32-lane loop and one padded 8-lane tail. Each gives, on
    every one of the 256 int8 inputs, what the scalar loads of an x86 CPU with neither give
    (exact integer sums either way), on each of these CPUs this host can run."""
    import platform
    import subprocess

    import edgetune_runtime

    if platform.machine() != "x86_64":
        pytest.skip("builds x86 CPUs' variants of the host profile and runs them here: needs an x86-64 host")
    model, scale, zero, _ = _hard_swish_qdq(tmp_path / "hs.onnx", conv=True, channels=40)
    targets = tmp_path / "targets"
    targets.mkdir()
    host = (EXAMPLES.parent / "targets" / "host.toml").read_text()
    cpus = {"x86-nehalem": ("nehalem", None, "sse4_2"),  # no gather: the scalar loads
            "x86-icelake": ("icelake-server", r"vpermi2b", "avx512vbmi"),
            "x86-skylake": ("skylake-avx512", r"vpgatherdd \(%[a-z0-9]+,%zmm", "avx512f"),
            "x86-haswell": ("haswell", r"vpgatherdd %ymm", "avx2")}
    x = ((np.arange(-128, 128) - zero) * np.float32(scale)).astype(np.float32).reshape(1, 8, 8, 4)
    flags = _cpu_flags()
    outputs = {}
    for name, (mcpu, instruction, flag) in cpus.items():
        (targets / f"{name}.toml").write_text(host.replace('mcpu = "native"', f'mcpu = "{mcpu}"'))
        out = tmp_path / name
        proc = run_edgetune("package", str(model), "--device", name, "-o", str(out), "--no-verify",
                            env={"EDGETUNE_TARGETS_DIR": str(targets)})
        assert proc.returncode == 0, proc.stderr
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(out / "model.so")],
                             capture_output=True, text=True, check=True).stdout
        asm = re.sub(r"[ \t]+", " ", asm)
        if instruction is None:
            assert not re.search(r"vpermi2b|vpgather", asm), name
        else:
            assert re.search(instruction, asm), (name, instruction)
        if flag in flags:
            outputs[name] = edgetune_runtime.load(out).run(x)["y"]
    reference = outputs.pop("x86-nehalem")
    assert outputs, "this host runs none of the x86 CPUs with gathers"
    for name, ours in outputs.items():
        np.testing.assert_array_equal(ours, reference, err_msg=name)


@pytest.mark.parametrize("conv", [True, False], ids=["after-conv", "alone"])
def test_lookups_on_arm_are_neon_tbl_and_exact_under_qemu(tmp_path, qemu, conv):
    """On the Pi 4 a lookup narrowed to int8 is a NEON ``tbl`` over the table's first 64 bytes
    and three ``tbx`` over the rest, per 16 lanes; every one of the 256 int8 inputs gives what
    the x86 build gives (exact integer sums on both). 8×8 pixels on 4 cores: the ragged
    epilogue's pixel tiles are fused into the parallel loop (it had left the kernel unscheduled).
    Alone (on the quantized input) the index is the int8 value + 128 with no clamp — TVM drops
    it, the type bounds it — and is a ``tbl`` too (it was a scalar load per lane)."""
    import subprocess

    import edgetune_runtime

    model, scale, zero, _ = _hard_swish_qdq(tmp_path / "hs.onnx", conv=conv, channels=40)
    x = ((np.arange(-128, 128) - zero) * np.float32(scale)).astype(np.float32).reshape(1, 8, 8, 4)
    host = package(PackageOptions(model=model, device="host", output=tmp_path / "host", verify=False))
    expected = edgetune_runtime.load(host.path).run(x)["y"]
    pi = package(PackageOptions(model=model, device="pi4", output=tmp_path / "pi4"))
    assert pi.verification["status"] == "passed" and "qemu" in pi.verification["executed_on"], pi.verification
    assert not pi.manifest["schedules"]["naive"], pi.manifest["schedules"]
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(pi.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    assert re.search(r"\stbl\s", asm) and re.search(r"\stbx\s", asm)
    # the epilogue runs 16 lanes at a time for its lookups (registers._byte_lanes) and still
    # requantizes with fcvtns, four lanes a call (LLVM's lrint of 16 lanes: frintx + fcvtzs)
    assert not re.search(r"\sfrintx\s+v\d+\.4s", asm), "a vector requantize as frintx + fcvtzs"
    # the requantize clips once, on the integers (codegen/rounding.py: smax / smin after each
    # fcvtns, no float clip); the table index (the requantized int8 value + 128) is in the
    # table by construction: no second clamp
    conversions = len(re.findall(r"\sfcvtns\s+v\d+\.4s", asm))
    assert not re.search(r"\sf(max|min)nm\s+v\d+\.4s", asm)
    assert all(len(re.findall(rf"\ss{op}\s+v\d+\.4s", asm)) <= conversions for op in ("max", "min")), \
        "the lookup index clamped again"
    checked = _checked_under_qemu(pi.path, "pi4", x, {"y": expected})  # the 256 values, x86's results
    assert checked["outputs"]["y"]["max_abs_error"] == 0, checked


@pytest.mark.parametrize(("device", "channels", "kernel", "stride"),
                         [("pi5", 3, 3, 2), ("pi5", 1, 4, 1), ("pi4", 3, 3, 2), ("pi4", 1, 4, 1), ("pi4", 3, 5, 2)])
def test_first_layer_takes_its_taps_along_x_as_one_step_and_is_exact(tmp_path, qemu, device, channels, kernel, stride):
    """An int8 layer of at most 4 input channels reads its input as rows, a pixel's bytes from
    its first column on being its taps along x (kernels/conv.py ``taps``). On the Pi 5 (4-byte
    pixels, a kernel at most 4 wide) one ``ldr q`` per row of taps and an ``sdot`` by lane per
    tap, no broadcast load (``ld1r``) per tap and no broadcast (``dup``) held across the
    channel blocks. On the Pi 4 (a row of at most 16 bytes, a pixel's
    channels unpadded) the row's pairs broadcast by lane (``dup``) into ``smull`` — the integer
    kernel, where it was the fp32 one —, two pairs summed in int16 (``smlal``) where the
    weights are within ±127 (the one-channel layer has a −128: not), its 24 channels three
    blocks of 8. The outputs — the input padded with a non-zero zero point, the row's last
    pixel's window past the padded row — equal the x86 package's integers under qemu (3×3 and
    5×5 stride-2 RGB layers; a 4-wide one-channel layer)."""
    import subprocess

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import edgetune_runtime

    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (24, channels, kernel, kernel)).astype(np.int8)
    if channels == 1:
        w[5, 0, 1, 2] = -128  # products no longer pair in int16
    inits = [numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in (
        ("s", 0.02, np.float32), ("z", 37, np.int8), ("os", 0.05, np.float32), ("oz", -9, np.int8))]
    inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.full(24, 0.003, np.float32), "ws"),
              numpy_helper.from_array(np.zeros(24, np.int8), "wz"),
              numpy_helper.from_array(rng.integers(-900, 900, 24).astype(np.int32), "b"),
              numpy_helper.from_array(np.full(24, 0.02 * 0.003, np.float32), "bs"),
              numpy_helper.from_array(np.zeros(24, np.int32), "bz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 2, 2], strides=[stride, stride]),
             helper.make_node("QuantizeLinear", ["c", "os", "oz"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "os", "oz"], ["y"])]
    graph = helper.make_graph(nodes, "first", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 19, 23])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = tmp_path / "first.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(model))
    x = rng.uniform(-3.3, 3.2, (1, channels, 19, 23)).astype(np.float32)
    host = package(PackageOptions(model=model, device="host", output=tmp_path / "host", verify=False))
    expected = edgetune_runtime.load(host.path).run(x)
    pi = package(PackageOptions(model=model, device=device, output=tmp_path / device, verify=False))
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(pi.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    body = "\n".join(b for _fn, b in re.findall(r"<(fused_conv2d_nhwc_int8\w*)>:\n(.*?)(?:\n\n|\Z)", asm, re.S))
    if device == "pi5":
        assert re.search(r"\ssdot\s", body) and not re.search(r"\sld1r\s", body), body
        # every sdot by lane: the 24 channels are two blocks, cropped — with the blocks a loop,
        # LLVM hoisted each broadcast quad out of it (a dup, spilled) and lost the by-lane form
        dots = re.findall(r"\ssdot\s+[^\n]*", body)
        assert all(re.search(r"\.4b\[\d\]", d) for d in dots), [d for d in dots if "[" not in d][:4]
    else:
        assert re.search(r"\sdup\s+v\d+\.8h, v\d+\.h\[\d\]", body) and re.search(r"\ssmull2?\s", body), body
        assert bool(re.search(r"\ssmlal2?\s", body)) == (channels > 1), body
    assert np.ptp(np.round(expected["y"] / 0.05)) > 60, expected["y"]  # not a constant
    checked = _checked_under_qemu(pi.path, device, x, expected)
    assert all(o["max_abs_error"] == 0 for o in checked["outputs"].values()), checked


@pytest.mark.parametrize("device", ["pi4", "pi5"])
def test_requantize_on_arm_narrows_with_saturation_under_qemu(tmp_path, qemu, device):
    """On AArch64 an int8 layer's epilogue clips by saturating narrows (``fcvtns``, ``sqxtn`` to
    int16, the zero point a saturating add, ``sqxtn`` / ``sqxtun`` to 8 bits: codegen/rounding.py
    ``_narrowed``), not by a float clip and a four-register ``tbl``: in a chain of four int8
    convolutions, one with a uint8 output at zero point 0 (a ReLU folded into it, as
    onnxruntime's quantizer writes it; made int8 for the next layer, ``x − 128``, in the same
    narrows), one with an int8 output at −100 (24 channels: 8 lanes a step), and one whose
    requantized values reach ±10⁸ (past the ±2²² where rounding by bit pattern is exact, and
    below −1.5 · 2²³, where the pattern's sum turns negative), their values driven far past both
    ends of their ranges, and one whose sums are scaled by 2⁻⁶ exactly (ties to round to even),
    equal the x86 package's integers under qemu. On the Pi 5 (slow
    conversions) the sums reach float and the floats int32 by bit pattern — no ``scvtf``,
    ``fcvtns`` or ``frinti`` in the int8 layers (d's dequantized output rounded in float), the
    subtract saturating (``sqsub``)."""
    import subprocess

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import edgetune_runtime

    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in (
        ("s", 0.05, np.float32), ("z", 131, np.uint8), ("as", 0.02, np.float32), ("az", 0, np.uint8),
        ("bs", 0.03, np.float32), ("bz", -100, np.int8), ("cs", 0.1, np.float32), ("cz", 5, np.int8),
        ("ds", 1e-7, np.float32), ("dz", 3, np.int8), ("es", 1e-7, np.float32), ("ez", 0, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
    source, channels = "xd", 16
    # e: small weights of scale 2⁻⁶ over d's scale: e's sums times 2⁻⁶ exactly, a tie at every 32 mod 64
    for name, out, k, most, scale in (("a", 32, 1, 127, 0.004), ("b", 24, 3, 127, 0.004), ("c", 16, 1, 127, 0.004),
                                      ("d", 16, 1, 127, 0.004), ("e", 16, 1, 3, 2.0**-6)):
        w = rng.integers(-most, most + 1, (out, channels, k, k)).astype(np.int8)
        inits += [numpy_helper.from_array(w, f"w{name}"), numpy_helper.from_array(np.full(out, scale, np.float32), f"ws{name}"),
                  numpy_helper.from_array(np.zeros(out, np.int8), f"wz{name}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{name}", f"ws{name}", f"wz{name}"], [f"wd{name}"], axis=0),
                  helper.make_node("Conv", [source, f"wd{name}"], [f"c{name}"], pads=[k // 2] * 4),
                  helper.make_node("QuantizeLinear", [f"c{name}", f"{name}s", f"{name}z"], [f"q{name}"]),
                  helper.make_node("DequantizeLinear", [f"q{name}", f"{name}s", f"{name}z"], [name])]
        source, channels = name, out
    graph = helper.make_graph(nodes, "requantize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 16, 8, 8]),
                               helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, 16, 8, 8]),
                               helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 16, 8, 8])], inits)
    model = tmp_path / "requantize.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(model))
    x = rng.uniform(-6.5, 6.2, (1, 16, 8, 8)).astype(np.float32)
    host = package(PackageOptions(model=model, device="host", output=tmp_path / "host", verify=False))
    expected = edgetune_runtime.load(host.path).run(x)
    # b on the integer kernel (the Pi 4 makes such a 3×3 layer Winograd by default)
    direct = {"8x8x32>24 k3x3 s1x1 p1.1.1.1 d1x1": "direct"}
    pi = package(PackageOptions(model=model, device=device, output=tmp_path / device, verify=False, conv_variants=direct))
    assert pi.manifest["schedules"]["kinds"].get("conv2d-int8") == 5, sorted(pi.manifest["kernels"])
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(pi.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    found: dict[str, set[str]] = {}
    for fn, body in re.findall(r"<(fused_conv2d_nhwc_int8\w*)>:\n(.*?)(?:\n\n|\Z)", asm, re.S):
        found[fn] = set(re.findall(r"\s(sqxtun|sqxtn|sqadd|sqsub|tbl|fminnm|fmaxnm|fcvtns|scvtf|frinti)2?\s", body))
    eight_bit = [ops for fn, ops in found.items() if "dequantize" not in fn]  # a to d: 8-bit outputs
    assert len(eight_bit) == 4 and all(not ops & {"tbl", "fminnm", "fmaxnm"} for ops in eight_bit), found
    if device == "pi4":  # (a's uint8 output is made int8 for b)
        assert all({"sqxtn", "sqadd", "fcvtns", "scvtf"} <= ops for ops in eight_bit), found
    else:  # the zero point in the saturating subtract; d's dequantized output rounded by bits too
        assert all("sqxtn" in ops for ops in eight_bit), found
        assert not set().union(*found.values()) & {"fcvtns", "scvtf", "frinti"}, found
        assert all({"sqsub", "sqadd"} & ops for ops in eight_bit), found  # (LLVM may add the negated pattern)
    assert re.search(r"\ssqxtun2?\s", asm)  # the input's uint8 quantize (zero point 131)
    assert np.ptp(np.round(expected["c"] / 0.1)) > 100, expected["c"]  # the chain is not saturated to a constant
    d = np.round(expected["d"] / 1e-7)  # q − 3 of int8 q
    assert (d == 124).any() and (d == -131).any(), d  # both ends
    assert np.ptp(np.round(expected["e"] / 1e-7)) > 50, expected["e"]
    checked = _checked_under_qemu(pi.path, device, x, expected)
    assert all(o["max_abs_error"] == 0 for o in checked["outputs"].values()), checked


def test_quantize_divisions_on_arm_are_exact_multiplies_under_qemu(tmp_path, qemu):
    """On the Pi 4 a quantize's division by its scale — a constant (``QuantizeLinear``) or one
    computed at run time (``DynamicQuantizeLinear``) — is a float64 multiply by the reciprocal
    (codegen/division.py: no vector ``fdiv`` left), and rounds as the float32 division does on
    inputs one to three ulps either side of every rounding tie of the range: the integers equal
    numpy's, under qemu."""
    import subprocess

    import onnx
    from onnx import TensorProto, helper, numpy_helper


    scale, zero = np.float32(0.0123), 131
    ties = ((np.arange(-131, 125, dtype=np.float64) + 0.5) * np.float64(scale)).astype(np.float32)
    steps = [ties]
    for direction in (np.float32(np.inf), np.float32(-np.inf)):
        near = ties
        for _ in range(3):
            near = np.nextafter(near, direction)
            steps.append(near)
    x = np.concatenate([*steps, np.float32([0.0, -0.0, 1e-30, 3.1, -1.6, 1e6, -1e6])])
    x = x[: len(x) // 16 * 16].reshape(1, -1)
    inits = [numpy_helper.from_array(np.array(scale), "s"), numpy_helper.from_array(np.array(zero, np.uint8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
             helper.make_node("DynamicQuantizeLinear", ["x"], ["dq", "ds", "dz"]),
             helper.make_node("DequantizeLinear", ["dq", "ds", "dz"], ["d"])]
    graph = helper.make_graph(nodes, "quantize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(x.shape)) for n in ("y", "d")], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(tmp_path / "q.onnx"))
    pi = package(PackageOptions(model=tmp_path / "q.onnx", device="pi4", output=tmp_path / "pi4", verify=False))
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(pi.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    assert not re.search(r"\sfdiv\s+v\d+\.4s", asm), "a vector division left"
    assert re.search(r"\sfcvtl2?\s+v\d+\.2d", asm) and re.search(r"\sfmul\s+v\d+\.2d", asm)

    def fake_quant(values: np.ndarray, s: np.float32, z: int) -> np.ndarray:
        q = np.clip(np.round(values / s) + z, 0, 255)  # float32 ÷ float32: IEEE-rounded, as onnxruntime
        return ((q - z) * s).astype(np.float32)

    lo, hi = min(0.0, float(x.min())), max(0.0, float(x.max()))
    dscale = np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255))
    dzero = int(np.clip(np.round(np.float32(0 - np.float32(lo)) / dscale), 0, 255))
    expected = {"y": fake_quant(x, scale, zero), "d": fake_quant(x, dscale, dzero)}
    checked = _checked_under_qemu(pi.path, "pi4", x, expected)
    assert all(checked["outputs"][k]["max_abs_error"] == 0 for k in expected), checked


def test_depthwise_int8_input_widens_through_16_bit_lanes_on_arm(tmp_path, qemu):
    """An int8 depthwise layer whose weights reach −128 runs on the fp32 kernel on Arm (others on
    the integer kernel: the next test): its input is converted 16 lanes at a time through
    16-bit lanes made with ``zip`` (codegen/widening.py: ``sshr`` of eight 16-bit lanes), not
    LLVM's four-lane ``shl`` + ``sshr`` legalization, and the package passes its check against
    onnxruntime under qemu."""
    import subprocess

    _qdq_convs(tmp_path / "dw.onnx", [(32, 32, 3, 0.004, 0.05 * 0.004)], size=12, rng=np.random.default_rng(4),
               bias=2000, low=-128, depthwise=True)
    pi = package(PackageOptions(model=tmp_path / "dw.onnx", device="pi4", output=tmp_path / "pi4"))
    assert pi.verification["status"] == "passed" and "qemu" in pi.verification["executed_on"], pi.verification
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(pi.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    depthwise = "\n".join(f for f in asm.split("\n\n") if re.match(r"[0-9a-f]+ <\w*depthwise_conv2d\w*>:", f))
    assert re.search(r"\ssshr\s+v\d+\.8h, v\d+\.8h, #(0x)?8\b", depthwise), depthwise[:3000]
    assert not re.search(r"\sshl\s+v\d+\.4h, v\d+\.4h, #(0x)?8\b", depthwise), "int8 widened four lanes at a time"


@pytest.mark.parametrize(("device", "channels", "kernel", "stride", "low"),
                         [("pi4", 32, 3, 1, -127), ("pi4", 24, 3, 2, -127), ("pi4", 16, 5, 1, -127),
                          ("pi4", 16, 3, 1, -128), ("pi5", 24, 3, 1, -127)])
def test_int8_depthwise_on_arm_sums_tap_pairs_in_16_bit_lanes_and_is_exact(tmp_path, qemu, device, channels, kernel,
                                                                           stride, low):
    """On the Pis an int8 depthwise layer whose weights are within ±127 runs on the integer
    kernel (kernels/conv.py: depthwise_conv2d_nhwc_int8): its taps in pairs, each pair's products
    summed in 16-bit lanes (``smull`` + ``smlal``: 8 products an instruction, |2·128·127| <
    2¹⁵) and widened once (``saddw``), where the fp32 kernel's ``fmla`` took 4 and a float copy
    of its input — 16 channels a block (24: 8), 3×3 and 5×5 (an odd tap count: the last pair's
    partner a zero weight), stride 1 and 2, the input padded with its zero point 3. Equal to
    onnxruntime under qemu (Pi 4 and Pi 5). A weight of −128 (two products may overflow int16)
    keeps the fp32 kernel."""
    import subprocess

    _qdq_convs(tmp_path / "dw.onnx", [(channels, channels, kernel, 0.004, 0.05 * 0.004)], size=11,
               rng=np.random.default_rng(kernel + stride), bias=2000, low=low, depthwise=True, stride=stride)
    result = package(PackageOptions(model=tmp_path / "dw.onnx", device=device, output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] == 0, v
    kinds = [k["kind"] for k in result.manifest["kernels"].values()]
    assert ("depthwise-int8" in kinds) == (low > -128) and ("depthwise" in kinds) == (low == -128), kinds
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    depthwise = "\n".join(f for f in asm.split("\n\n") if re.match(r"[0-9a-f]+ <\w*depthwise_conv2d\w*>:", f))
    if low > -128:
        assert re.search(r"\ssmlal2?\s+v\d+\.8h", depthwise) and re.search(r"\ssaddw2?\s", depthwise), depthwise[:3000]
        assert not re.search(r"\sfmla\s", depthwise), "an fp32 multiply-add in the integer depthwise kernel"


@pytest.mark.parametrize(("channels", "kernel", "stride", "size", "layers"),
                         [(32, 3, 1, 12, 2), (16, 5, 1, 12, 1), (48, 3, 2, 13, 1), (32, 5, 1, 7, 1), (16, 3, 2, 9, 1)])
def test_int8_depthwise_on_the_pi5_takes_column_quads_into_sdot_and_is_exact(tmp_path, qemu, channels, kernel, stride,
                                                                            size, layers):
    """On the Pi 5 an int8 depthwise layer of whole 16-channel blocks runs on the sdot kernel
    (kernels/conv.py: depthwise_conv2d_nhwc_int8_sdot): per output row each input column's taps
    along y interleaved into channel quads (``zip1``/``zip2``; rows past the kernel's read from
    extra rows of the zero point, times zero weights), then one ``sdot`` per four channels, tap
    column and pixel — no ``smull`` —, a weight of −128 allowed (int32 sums). 3×3 and 5×5
    (two groups of four rows), stride 1 and 2, a width of 7 (a tile of the whole row, 8
    channels), the input padded with its zero point 3, two layers in a row: the outputs equal
    onnxruntime's under qemu."""
    import subprocess

    _qdq_convs(tmp_path / "dw.onnx", [(channels, channels, kernel, 0.004, 0.05 * 0.004)] * layers, size=size,
               rng=np.random.default_rng(kernel * stride + size), bias=2000, low=-128, depthwise=True, stride=stride)
    result = package(PackageOptions(model=tmp_path / "dw.onnx", device="pi5", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] == 0, v
    kinds = [k["kind"] for k in result.manifest["kernels"].values()]
    assert kinds.count("depthwise-sdot") == layers and "depthwise" not in kinds, kinds
    assert not result.manifest["schedules"]["naive"], result.manifest["schedules"]
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    depthwise = "\n".join(f for f in asm.split("\n\n") if re.match(r"[0-9a-f]+ <\w*depthwise_conv2d\w*>:", f))
    assert re.search(r"\ssdot\s+v\d+\.4s, v\d+\.16b, v\d+\.16b", depthwise), depthwise[:3000]
    assert re.search(r"\szip[12]\s", depthwise) and not re.search(r"\ssmull2?\s+v\d+\.8h", depthwise), depthwise[:3000]


def test_pi5_depthwise_sdot_tuning_candidates_build_as_aarch64_libraries(tmp_path):
    """The sdot depthwise kernel is a tuning task of its own (``depthwise-sdot``, one loop
    order): the candidates its design space proposes — pixel tiles sampled — tensorize and build
    for the Pi 5 with the cross toolchain, as the tuner's builder does."""
    from edgetune import _tvm, elf, profiles
    from edgetune._tvm import metaschedule as ms
    from edgetune._tvm.targets import lowering_for
    from edgetune.build import check_toolchain
    from edgetune.importer import import_model

    _qdq_convs(tmp_path / "dw.onnx", [(32, 32, 3, 0.004, 0.05 * 0.004)], size=12, rng=np.random.default_rng(1),
               bias=2000, low=-128, depthwise=True)
    profile = profiles.get_profile("pi5")
    target = _tvm.make_target(profile.target_spec())
    workloads = ms.extract_workloads(import_model(tmp_path / "dw.onnx").mod, target, lowering_for(target).key)
    (task,) = [w for w in workloads if w.kind == "depthwise-sdot"]
    for b in built_candidates(task, target, check_toolchain(profile), tmp_path):
        assert elf.machine(Path(b.artifact_path)) == "aarch64"
        ms.remove_artifact(b.artifact_path)


def _host_kernel(func, args: list[np.ndarray]) -> tuple[list[np.ndarray], str]:
    """``func`` (a PrimFunc) with its default schedule built for this host as tuning candidates
    are (edgetune's TIR pipeline), run on ``args`` (the last one written); (the arrays after the
    run, the assembly)."""
    import tvm

    from edgetune._tvm.metaschedule import build_candidate
    from edgetune.profiles import get_profile

    target = _tvm.make_target(get_profile("host").target_spec())
    sch, kind, _why = _tvm.default_schedule(func, target)
    assert sch is not None, kind
    lib = build_candidate(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}), target)
    tensors = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*tensors)
    return [t.numpy() for t in tensors], lib.inspect_source("asm")


@pytest.mark.parametrize(("dtype", "zero", "lo", "hi"), [("int8", -3, -128, 127), ("int32", 5, -128, 127),
                                                         ("int8", -128, -128, 5), ("uint8", 131, 0, 255)],
                         ids=["int8", "widened", "relu6", "uint8"])
def test_requantize_rounds_in_the_conversion(dtype, zero, lo, hi):
    """``cast(clip(round(v) + z, lo, hi))`` — how every int8 layer ends — is built as one
    rounding conversion (x86: ``vcvtps2dq``, no ``vrndscaleps`` before a truncating one) of the
    value clipped to ``[lo − z, hi − z]``, then ``+ z``: the same integers for ties (to even),
    both sides of the clip and far beyond it."""
    from tvm import te, tirx

    v = te.placeholder((256,), "float32", name="v")
    out = te.compute((256,), lambda i: tirx.max(tirx.min(tirx.round(v[i]) + float(zero), float(hi)), float(lo)).astype(dtype),
                     name="requantize")
    x = np.concatenate([np.arange(-150, 150, 2.5, dtype=np.float32)[:120] + 0.5,  # ties and others
                        np.float32([1e9, -1e9, 1e30, -1e30, 2.0**31, -(2.0**31), 127.5, -128.5]),
                        np.linspace(-300, 300, 128, dtype=np.float32)])
    (_, ours), asm = _host_kernel(te.create_prim_func([v, out]), [x, np.zeros(256, dtype)])
    expected = np.clip(np.round(x.astype(np.float64)) + zero, lo, hi).astype(dtype)
    np.testing.assert_array_equal(ours, expected)
    if "avx512f" in _cpu_flags():
        assert "vcvtps2dq" in asm and "vrndscaleps" not in asm, asm[:3000]


@pytest.mark.parametrize("padding", [0, 1], ids=["1x1", "3x3-padded"])
def test_int8_convolution_flips_the_sign_bit_in_the_register(padding):
    """On AVX-512 VNNI (``vpdpbusd``: unsigned data) an int8 convolution with nothing to pad
    reads its input as it is and flips each quad's sign bit in the register (x + 128 as uint8):
    no pass of its own over the input. One with spatial padding keeps its pad stage. Both equal
    numpy's integer sums plus the per-channel offset, and the offset's ``−128·Σw``."""
    from tvm import te

    from edgetune._tvm.kernels import conv, cpu, dot
    from edgetune.profiles import get_profile

    if dot.dot_family(_tvm.make_target(get_profile("host").target_spec())) != "vnni":
        pytest.skip("this host has no AVX-512 VNNI")
    rng = np.random.default_rng(3)
    k, ic, oc, size = 1 + 2 * padding, 24, 40, 10
    x = rng.integers(-128, 128, (1, size, size, ic)).astype(np.int8)
    w = rng.integers(-127, 128, (oc, k, k, ic)).astype(np.int8)
    offset = rng.integers(-5000, 5000, oc).astype(np.int32)
    blocks = dot.padded_blocks("vnni", oc)
    packed = cpu.pad_axis(w, 0, 16 * blocks).reshape(blocks, 16, k, k, ic // 4, 4).transpose(0, 2, 3, 4, 1, 5).copy()
    shift = (offset - 128 * w.astype(np.int64).sum(axis=(1, 2, 3))).astype(np.int32)
    data, weights, off = (te.placeholder(a.shape, str(a.dtype), name=n) for a, n in ((x, "x"), (packed, "w"), (shift, "o")))
    out = conv.conv2d_nhwc_int8(data, weights, off, strides=[1, 1], padding=[padding] * 4, dilation=[1, 1],
                                    out_channels=oc, family="vnni")
    func = te.create_prim_func([data, weights, off, out])
    assert ("pad" in func.script()) == bool(padding)
    (*_, ours), asm = _host_kernel(func, [x, packed, shift, np.zeros((1, size, size, oc), np.int32)])
    xp = np.pad(x.astype(np.int64), [(0, 0), (padding, padding), (padding, padding), (0, 0)])
    expected = sum(np.einsum("nhwc,oc->nhwo", xp[:, i:i + size, j:j + size], w[:, i, j].astype(np.int64))
                   for i in range(k) for j in range(k)) + offset
    np.testing.assert_array_equal(ours, expected)
    assert "vpdpbusd" in asm


def _qdq_moved(path: Path, rescaled: bool, seed: int, moves: list, constants: list, shapes: tuple) -> dict:
    """A QDQ 1×1 convolution (8 → 16 channels) whose int8 output goes through ``moves`` (ONNX
    nodes from ``cd`` to ``r``, with ``constants``) and is quantized again — on other parameters
    where ``rescaled`` —, saved at ``path`` (input and output ``shapes``); its quantization scheme
    as imported."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    s, z, s2, z2 = 0.05, 3, (0.07 if rescaled else 0.05), (-5 if rescaled else 3)
    inits = [numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in (
        ("s", s, np.float32), ("z", z, np.int8), ("s2", s2, np.float32), ("z2", z2, np.int8), *constants)]
    inits += [numpy_helper.from_array(rng.integers(-127, 128, (16, 8, 1, 1)).astype(np.int8), "w"),
              numpy_helper.from_array(np.full(16, 0.004, np.float32), "ws"),
              numpy_helper.from_array(np.zeros(16, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["cd"]),
             *moves,
             helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s2", "z2"], ["y"])]
    graph = helper.make_graph(nodes, "moves", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shapes[0])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shapes[1])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return _tvm.quantization_scheme(import_model(path).mod)


@pytest.mark.parametrize("rescaled", [False, True], ids=["same-scale", "rescaled"])
def test_qdq_layout_moves_run_on_the_int8_tensor(tmp_path, rescaled):
    """``quantize(reshape(transpose(dequantize(x))))`` — a QDQ graph moving an int8 tensor, as a
    YOLO head does its outputs — moves the int8 tensor itself (:class:`Int8LayoutMoves`; a
    rescale after it where the parameters differ): exact against onnxruntime, and no float
    transpose left in the package's kernels."""
    from onnx import helper

    moves = [helper.make_node("Transpose", ["cd"], ["t"], perm=[0, 2, 3, 1]), helper.make_node("Reshape", ["t", "shape"], ["r"])]
    scheme = _qdq_moved(tmp_path / "m.onnx", rescaled, 4, moves, [("shape", [1, -1, 16], np.int64)],
                        ([1, 8, 6, 6], [1, 36, 16]))
    assert scheme["layout_moves"] == 1, scheme
    result = package(PackageOptions(model=tmp_path / "m.onnx", device="host", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed" and result.verification["max_abs_error"] == 0, result.verification
    kernels = list(result.manifest["kernels"])
    assert not any(re.search(r"dequantize\d*_transpose", name) for name in kernels), kernels  # float moved
    assert any(re.search(r"transpose\d*_transpose\d*_reshape", name) for name in kernels), kernels  # int8 moved


def test_qdq_residual_add_requantizes_without_a_divide(tmp_path):
    """A QDQ residual add after a convolution, ``quantize(dequantize(conv) + dequantize(x))``, is
    requantized by a multiply by ``1/s`` where that equals the division for every one of the
    65,536 input pairs (:class:`Int8SumsWithoutDivide`): within a step of onnxruntime (whose
    float path sums the convolution in float32 — one output here lands on the other side of a
    rounding tie from the exact integer sum, with or without the rewrite), and no vector divide
    in the convolution's kernel."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgetune._tvm.codegen import lookups
    from edgetune._tvm.passes import pipeline

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(v, dtype=t), n) for n, v, t in (
        ("s", 0.05, np.float32), ("z", 3, np.int8), ("s2", 0.04, np.float32), ("z2", -2, np.int8),
        ("s3", 0.07, np.float32), ("z3", 5, np.int8), ("ws", np.full(16, 0.01), np.float32), ("wz", np.zeros(16), np.int8))]
    inits.append(numpy_helper.from_array(rng.integers(-127, 128, (16, 16, 1, 1)).astype(np.int8), "w"))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "s2", "z2"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s2", "z2"], ["cd"]),
             helper.make_node("Add", ["cd", "xd"], ["a"]),
             helper.make_node("QuantizeLinear", ["a", "s3", "z3"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "s3", "z3"], ["y"])]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(tmp_path / "m.onnx"))
    mod = import_model(tmp_path / "m.onnx").mod
    assert _tvm.quantization_scheme(mod)["sums_without_divide"] == 1
    result = package(PackageOptions(model=tmp_path / "m.onnx", device="host", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed", result.verification
    target = _tvm.make_target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a76", "num-cores": 4})
    fused = pipeline.fuse(mod, target, _tvm.lowering_for(target, "auto"))
    conv = next(f for gv, f in fused.functions_items() if "conv2d_nhwc_int8" in gv.name_hint)
    lookups.register()
    lib = _tvm.tvm().compile(_tvm.default_schedule(conv.with_attr("global_symbol", "main"), target).sch.mod,
                             target=target, tir_pipeline=lookups.PIPELINE)
    assert " fdiv " not in lib.mod.inspect_source("ll")


def test_layer_without_integer_kernel_keeps_the_float_path_and_is_named(tmp_path):
    """A quantized layer edgetune cannot compute as the runtime's integer kernel — here a QDQ
    convolution whose bias is on another scale than ``sx·sw`` — keeps TVM's float path; the
    package still passes its check against onnxruntime, the layer next to it runs on integer
    kernels, and the import note (package summary, ``inspect``) names the layer that does not."""

    s = 0.05
    _qdq_convs(tmp_path / "m.onnx", [(4, 8, 1, 0.004, s * 0.004), (8, 16, 1, 0.004, s * 0.004 * 3)],  # the second: another scale
               size=8, rng=np.random.default_rng(5), bias=300)
    result = package(PackageOptions(model=tmp_path / "m.onnx", device="host", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed", result.verification
    scheme = _tvm.quantization_scheme(import_model(tmp_path / "m.onnx").mod)
    assert scheme["exact"] == scheme["integer"] == 1 and scheme["float_layers"] == ["conv2d 1×8×8×8 → 1×16×8×8"], scheme
    [note] = [n for n in result.manifest["model"]["notes"] if n.startswith("int8:")]
    assert "1 quantized layer(s) keep TVM's float path" in note and "conv2d 1×8×8×8 → 1×16×8×8" in note, note
    proc = run_edgetune("inspect", str(tmp_path / "m.onnx"))
    assert proc.returncode == 0 and "conv2d 1×8×8×8 → 1×16×8×8" in proc.stdout, proc.stdout


def test_qdq_reference_reads_int8_as_uint8_where_onnxruntime_int8_kernels_saturate(tmp_path, monkeypatch):
    """On x86 without VNNI onnxruntime's int8 convolutions sum u8 × s8 pairs in saturating int16
    (``vpmaddubsw``): a QDQ 1×1 convolution with weights near ±127 came out up to 14 steps from
    the exact sums there. The reference then reads every int8 tensor as uint8 + 128 (the same
    values dequantized, summed exactly by its u8 × u8 kernels): the exact sums, and says so;
    where its u8 × u8 sums are not exact either, it runs the QDQ layers as written (dequantize,
    float convolution, quantize: within a step of the exact sums)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgetune import reference

    s, z = 0.05, 3
    w = np.array([[-127, -115, -90, 127], [127, 120, 101, -128], [5, -7, 9, 1]], np.int8)
    inits = [numpy_helper.from_array(np.array(s, np.float32), "s"), numpy_helper.from_array(np.array(z, np.int8), "z"),
             numpy_helper.from_array(w.reshape(3, 4, 1, 1), "w"), numpy_helper.from_array(np.full(3, 0.004, np.float32), "ws"),
             numpy_helper.from_array(np.zeros(3, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0), helper.make_node("Conv", ["xd", "wd"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(tmp_path / "m.onnx"))
    model = import_model(tmp_path / "m.onnx")
    x = reference.make_inputs(model.inputs, 0)
    xq = np.clip(np.round(x[0] / np.float32(s)) + z, -128, 127) - z
    exact = (np.clip(np.round(np.einsum("oc,nchw->nohw", w.astype(np.float64), xq) * 0.004), -128 - z, 127 - z)) * s

    monkeypatch.setattr(reference, "onnxruntime_int8_saturates", lambda: True)
    assert reference.onnxruntime_u8u8_exact()  # (measured: exact on every x86 and Arm CPU onnxruntime runs on)
    assert reference.QDQ_AS_UINT8 in reference.reference_label(model)
    [y] = reference.run_reference(model, x)
    np.testing.assert_array_equal(np.round(y / s), np.round(exact / s))  # every value on its exact step
    monkeypatch.setattr(reference, "onnxruntime_u8u8_exact", lambda: False)
    assert "QDQ layers in float" in reference.reference_label(model)
    [y] = reference.run_reference(model, x)
    assert np.abs(y - exact).max() <= s * 1.0001
    monkeypatch.setattr(reference, "onnxruntime_int8_saturates", lambda: False)
    assert reference.reference_label(model) == reference.runtime_label("onnx")


def test_integer_products_are_exact_in_the_reference_beside_qdq_layers_in_float(tmp_path, monkeypatch):
    """A dynamically quantized decoder holds ``MatMulInteger`` and, where its output projection
    shares the embedding's quantized table, a MatMul behind ``DequantizeLinear``: a QDQ model too.
    Where onnxruntime's int8 kernels saturate its QDQ layers run in float, and its u8 × s8
    ``MatMulInteger`` sums saturate as well (pairs of products past 32767): the reference reads
    those int8 weights as uint8 + 128 all the same (a T5 decoder was 15× its tolerance off on an
    AVX2 host without it), and its label says both."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgetune import reference

    k = 64
    w = np.full((k, 8), 127, np.int8)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.full((8, 4), 3, np.int8), "t"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ts"), numpy_helper.from_array(np.array(0, np.int8), "tz")]
    nodes = [helper.make_node("MatMulInteger", ["a", "w"], ["i"]), helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("DequantizeLinear", ["t", "ts", "tz"], ["td"]), helper.make_node("MatMul", ["f", "td"], ["y"])]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("a", TensorProto.UINT8, [4, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(tmp_path / "m.onnx"))
    model = import_model(tmp_path / "m.onnx")
    a = np.full((4, k), 255, np.uint8)
    exact = (a.astype(np.float64) @ w.astype(np.float64)) @ np.full((8, 4), 0.03)
    monkeypatch.setattr(reference, "onnxruntime_int8_saturates", lambda: True)
    monkeypatch.setattr(reference, "onnxruntime_u8s8_saturates", lambda: True)
    monkeypatch.setattr(reference, "onnxruntime_u8u8_exact", lambda: False)  # (the QDQ MatMul stays in float)
    assert reference.qdq_as_float(model)
    label = reference.reference_label(model)
    assert reference.EXACT_INTEGERS in label and "QDQ layers in float" in label, label
    [y] = reference.run_reference(model, [a])
    np.testing.assert_allclose(y, exact, rtol=1e-6)


@pytest.mark.parametrize(("dtype", "rows"), [("uint8", 64), ("uint8", 17), ("int8", 12)],
                         ids=["uint8", "uint8-rows-padded", "int8-flipped"])
def test_int8_dense_kernel_sums_rows_exactly_with_vnni(dtype, rows):
    """A dynamically quantized dense layer's kernel (``kernels.conv.dense_int8``) on AVX-512
    VNNI: uint8 rows read as they are (what ``vpdpbusd`` multiplies), int8 rows flipped to uint8
    in the register (x + 128: the caller takes 128·Σw off); 17 rows, which no tile of 4 to 8
    divides, computed as 18 (tiles of 6) and cropped. Output of the data's rank, numpy's integer
    sums."""
    from tvm import te

    from edgetune._tvm.kernels import conv, dot
    from edgetune.profiles import get_profile

    if dot.dot_family(_tvm.make_target(get_profile("host").target_spec())) != "vnni":
        pytest.skip("this host has no AVX-512 VNNI")
    rng = np.random.default_rng(5)
    k, n = 64, 40
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, rows, k)).astype(dtype)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    packed = dot.packed_weights(w.T.reshape(n, 1, 1, k), "vnni")
    assert dot.dot_rows("vnni", rows) == (18 if rows == 17 else rows)
    data, weights = te.placeholder(x.shape, dtype, name="x"), te.placeholder(packed.shape, "int8", name="w")
    out = conv.dense_int8(data, weights, out_channels=n, family="vnni", rows_to=dot.dot_rows("vnni", rows))
    assert tuple(int(d) for d in out.shape) == (2, rows, n)
    func = te.create_prim_func([data, weights, out])
    assert ("pad" in func.script()) == (rows == 17)
    (*_, ours), asm = _host_kernel(func, [x, packed, np.zeros((2, rows, n), np.int32)])
    shifted = x.astype(np.int64) + (128 if dtype == "int8" else 0)
    np.testing.assert_array_equal(ours, shifted @ w.astype(np.int64))
    assert "vpdpbusd" in asm


@pytest.mark.parametrize("device", ["host", "pi5", "pi4"])
def test_dynamically_quantized_encoder_runs_on_the_integer_dense_kernel(tmp_path, device):
    """onnxruntime's dynamic quantization of an encoder (uint8 activations quantized at run time,
    int8 weights): its dense layers on the board's dot-product kernel (VNNI / sdot / smull) with
    the scales fused after them, at a token count no register tile divides (17), checked against
    onnxruntime (on the Pis under qemu)."""
    import zoo_transformers as zt

    from edgetune._tvm.kernels import dot
    from edgetune.profiles import get_profile

    if dot.dot_family(_tvm.make_target(get_profile(device).target_spec())) is None:
        pytest.skip(f"{device} has no int8 dot-product instruction")
    base = zt.bert(tmp_path / "enc.onnx", layers=1, hidden=128, heads=4, vocab=500, seq=17)
    quantized = zt.dynamic_int8(base, tmp_path / "enc-int8.onnx")
    result = package(PackageOptions(model=quantized, device=device, output=tmp_path / "pkg"))
    assert result.manifest["verification"]["status"] == "passed", result.manifest["verification"]
    kernels = result.manifest["kernels"]
    ints = [name for name, k in kernels.items() if k["kind"] == "dense-int8"]
    assert len(ints) >= 4, kernels  # Q, K, V, output projection and the two feed-forward layers (some shared)
    assert all("multiply" in name for name in ints), ints  # the scales in the kernel's epilogue
    assert not any(k["kind"] == "dense" for k in kernels.values()), kernels


def test_int8_prelus_run_without_a_division_and_change_no_output(tmp_path, monkeypatch, request):
    """ai-edge-quantizer's int8 PRELU — ``quantize(prelu(dequantize(v), α))``, after nearly every
    convolution of MediaPipe's face and iris landmark models — is ``round((v − z1) · k) + z2``
    with ``k`` per sign and channel (passes/int8_elementwise.py: Int8Prelus), only where that is
    the float path's result for every channel and input: the per-channel and the single slope
    are rewritten, the [H, W, C] slope is not. The package equals LiteRT within a step (on the
    Pi 4 too, under qemu) and, bit for bit, the package built without the rewrite (the float
    path: its quantize divides)."""
    import tflite_models

    from edgetune._tvm.passes import int8_elementwise
    from edgetune_runtime import load

    int8 = quant_models.int8_tflite_from_float(tflite_models.prelu_slopes(tmp_path / "prelu.tflite"),
                                               tmp_path / "prelu-int8.tflite")
    scheme = json.loads(str(import_model(int8).mod.attrs[_tvm.constants.SCHEME_ATTR]))
    assert scheme["prelus"] == 2, scheme
    assert "2 int8 PReLUs without a division" in run_edgetune("inspect", str(int8)).stdout
    v = package(PackageOptions(model=int8, device="host", output=tmp_path / "pkg")).verification
    assert v["status"] == "passed" and v["max_abs_error"] <= 1, v
    monkeypatch.setattr(int8_elementwise, "_prelu", lambda mutator, call: None)  # no PRELU seen: the float path
    assert json.loads(str(import_model(int8).mod.attrs[_tvm.constants.SCHEME_ATTR]))["prelus"] == 0
    package(PackageOptions(model=int8, device="host", output=tmp_path / "float-path", verify=False))
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (4, 1, 6, 7, 8), dtype=np.int8)
    new, old = load(tmp_path / "pkg"), load(tmp_path / "float-path")
    for sample in x:
        a, b = new.run(sample), old.run(sample)
        assert all(np.array_equal(a[k], b[k]) for k in a), (a, b)
    monkeypatch.undo()
    request.getfixturevalue("qemu")  # and on the Pi 4, under qemu, against LiteRT
    v = package(PackageOptions(model=int8, device="pi4", output=tmp_path / "pi4")).verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] <= 1, v


def test_int8_adds_with_a_fused_activation_are_fixed_point_and_clamped(tmp_path, request):
    """An int8 ADD with a fused RELU6 or RELU (``quantize(clip(a + b))``) is LiteRT's fixed-point
    add clamped to the activation's quantized bounds (passes/int8_elementwise.py:
    XnnpackInt8Adds), not the float path's per-element division: both adds of the model are
    rewritten, and the package equals LiteRT within a step on the host and on the Pi 4."""
    import tflite_models

    int8 = quant_models.int8_tflite_from_float(tflite_models.activated_adds(tmp_path / "adds.tflite"),
                                               tmp_path / "adds-int8.tflite")
    assert json.loads(str(import_model(int8).mod.attrs[_tvm.constants.SCHEME_ATTR]))["fixed_point_adds"] == 2
    v = package(PackageOptions(model=int8, device="host", output=tmp_path / "pkg")).verification
    assert v["status"] == "passed" and v["max_abs_error"] <= 1, v
    request.getfixturevalue("qemu")
    v = package(PackageOptions(model=int8, device="pi4", output=tmp_path / "pi4")).verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] <= 1, v


def test_int8_bilinear_resizes_are_xnnpacks_fixed_point_bit_for_bit(tmp_path, request, monkeypatch):
    """TFLite int8 RESIZE_BILINEARs — ×2 with half-pixel centres, to 17 × 9 with aligned corners
    (weights that are no power-of-two fractions), to 20 × 20 by the legacy mapping — run on the
    8-bit values as XNNPACK's kernel does (passes/int8_elementwise.py: XnnpackInt8Resizes, its
    11-bit weights and rounding): the package equals LiteRT exactly on the host and on the Pi 4
    under qemu, and no float resize is left. The float path (dequantize, interpolate, divide)
    was up to two steps off on this model."""
    import tflite_models

    from edgetune._tvm.passes import int8_elementwise

    int8 = quant_models.int8_tflite_from_float(tflite_models.bilinear_upsamplings(tmp_path / "up.tflite"),
                                               tmp_path / "up-int8.tflite")
    assert json.loads(str(import_model(int8).mod.attrs[_tvm.constants.SCHEME_ATTR]))["fixed_point_resizes"] == 3
    result = package(PackageOptions(model=int8, device="host", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and v["max_abs_error"] == 0, v
    kernels = list(result.manifest["kernels"])
    assert sum(name.count("resize2d_q11") for name in kernels) == 3 and not any("quantize" in k for k in kernels), kernels
    with monkeypatch.context() as patched:  # the float path: not LiteRT's values
        patched.setattr(int8_elementwise, "_same_scale_bilinear", lambda mutator, q: None)
        with pytest.raises(VerificationError, match="beyond tolerance"):
            package(PackageOptions(model=int8, device="host", output=tmp_path / "float-path"))
    request.getfixturevalue("qemu")
    v = package(PackageOptions(model=int8, device="pi4", output=tmp_path / "pi4")).verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] == 0, v


@pytest.mark.parametrize("rescaled", [False, True], ids=["same-scale", "rescaled"])
def test_qdq_nearest_resize_moves_the_int8_tensor(tmp_path, rescaled):
    """``quantize(resize_nearest(dequantize(x)))`` — a QDQ YOLO neck's ×2 upsampling — gathers
    the int8 tensor itself (:class:`Int8LayoutMoves`; a rescale after it where the parameters
    differ): exact against onnxruntime, and no float resize or quantize left around it."""
    from onnx import helper

    moves = [helper.make_node("Resize", ["cd", "", "scales"], ["r"], mode="nearest")]
    scheme = _qdq_moved(tmp_path / "m.onnx", rescaled, 5, moves, [("scales", [1.0, 1.0, 2.0, 2.0], np.float32)],
                        ([1, 8, 6, 7], [1, 16, 12, 14]))
    assert scheme["layout_moves"] == 1, scheme
    result = package(PackageOptions(model=tmp_path / "m.onnx", device="host", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed" and result.verification["max_abs_error"] == 0, result.verification
    kernels = list(result.manifest["kernels"])
    assert not any(re.search(r"dequantize\d*_resize|resize2d\d*_quantize", name) for name in kernels), kernels


@pytest.mark.parametrize("device", ["host", "pi4", "pi5"])
def test_a_live_channel_with_a_saturated_bias_wraps_as_litert_sums(tmp_path, request, device):
    """A channel with a filter and ai-edge-quantizer's saturated −2³¹ bias (MediaPipe hand
    landmark's 1152 → 192 layer has one): ``bias − zx·Σw`` leaves int32, and LiteRT's int32
    accumulator wraps (XNNPACK folds it in uint32 arithmetic). The fold is taken modulo 2³²
    (passes/common.py: wrapped_int32), so the layer runs on the integer kernel and equals
    LiteRT exactly, on the host and on both Pis under qemu; as a float convolution of the
    true sum (before) that channel was two steps off wherever LiteRT's sum wrapped."""
    import tflite_models

    if device != "host":
        request.getfixturevalue("qemu")
    model = tflite_models.saturated_bias_conv(tmp_path / "m.tflite")
    result = package(PackageOptions(model=model, device=device, output=tmp_path / device))
    assert result.verification["status"] == "passed" and result.verification["max_abs_error"] == 0, result.verification
    kinds = result.manifest["schedules"]["kinds"]
    assert_int8_kinds(device, kinds, kinds == {"conv2d-int8": 1})


@pytest.mark.parametrize("device", ["host", "pi4", "pi5"])
def test_int8_layers_to_few_channels_sum_in_float_across_input_lanes(tmp_path, request, device):
    """An exact int8 layer to fewer output channels than a vector holds (a segmentation mask, a
    two-class head) runs on the few-outputs kernel in float (passes/int8_kernels.py:
    conv2d_nhwc_lanes over the integers, exact below 2²⁴) where the integer kernels' blocks of 16
    output channels multiplied 15 zero filters per real one (MediaPipe pose landmark int8's 3×3
    8 → 1 layer: 3.33 → 2.26 M A72 cycles). A QDQ chain (8 → 16 1×1, 16 → 1 3×3) is exact
    against onnxruntime on the host and on both Pis under qemu."""
    if device != "host":
        request.getfixturevalue("qemu")
    layers = [(8, 16, 1, 0.004, 0.05 * 0.004), (16, 1, 3, 0.003, 0.05 * 0.003)]
    _qdq_convs(tmp_path / "m.onnx", layers, size=12, rng=np.random.default_rng(13), bias=3000)
    result = package(PackageOptions(model=tmp_path / "m.onnx", device=device, output=tmp_path / device))
    v = result.verification
    assert v["status"] == "passed" and v["max_abs_error"] == 0, v
    kinds = result.manifest["schedules"]["kinds"]
    assert kinds.get("conv2d-lanes") == 1, kinds
    assert_int8_kinds(device, kinds, kinds.get("conv2d-int8") == 1)
