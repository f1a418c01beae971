"""int8 models from the quantizers users use: onnxruntime's static QDQ quantization and
ai-edge-quantizer's static int8 recipe, applied to real float models (tests/quant_models.py).

Their convolution / dense layers get exact integer sums (in fp32 kernels) requantized as the
runtimes do, TFLite's int8 adds LiteRT's fixed point (edgetune/_tvm/quantized.py): outputs
within one quantization step of LiteRT / onnxruntime. Integer-instruction kernels (VNNI,
dot-product) are not built yet."""

from __future__ import annotations

import numpy as np
import quant_models
from conftest import EXAMPLES, run_edgetune

from edgetune._tvm import _parse_unsupported
from edgetune.importer import import_model
from edgetune.package import PackageOptions, package


def test_unsupported_op_names_come_from_the_list_not_the_explanation():
    text = ("The following operators are not supported in frontend TFLite: 'FOO', 'BAR_X'\n"
            "The following quantized TFLite operators are not supported in frontend TFLite yet: 'PAD'. "
            "Quantized operators require explicit QDQ lowering to avoid applying Relax ops directly.")
    assert _parse_unsupported(text) == ["BAR_X", "FOO", "PAD"]  # "QDQ" was reported as an operator


def test_qdq_onnx_from_onnxruntime_quantizer_matches_onnxruntime(squeezenet, tmp_path):
    qdq = quant_models.qdq_onnx(squeezenet, tmp_path / "squeezenet-qdq.onnx")
    result = package(PackageOptions(model=qdq, device="host", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and v["reference"].startswith("onnxruntime"), v
    assert v["max_abs_error"] <= 1 / 255  # the softmax output is QDQ'd in 1/255 steps: within one
    shown = run_edgetune("inspect", str(qdq))
    assert "quantized: weights int8 per-channel symmetric; activations int8 asymmetric; layers 26 conv2d" in shown.stdout
    assert "exact integer sums: 0 of 26 layers" in shown.stdout and "as onnxruntime runs QDQ graphs" in shown.stdout
    assert "quantized:" not in run_edgetune("inspect", str(squeezenet)).stdout


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


def test_synthetic_int8_cnn_still_bit_exact(int8_tflite, tmp_path):
    result = package(PackageOptions(model=int8_tflite, device="host", output=tmp_path / "pkg"))
    assert result.verification["status"] == "passed" and result.verification["max_abs_error"] == 0


def test_int8_tflite_for_pi5_under_qemu_within_a_step(tmp_path, qemu):
    """The same exact path, cross-compiled for the Pi 5 and checked under qemu against LiteRT."""
    int8 = quant_models.int8_tflite_from_float(EXAMPLES / "face_detection_short_range.tflite", tmp_path / "face-int8.tflite")
    v = package(PackageOptions(model=int8, device="pi5", output=tmp_path / "pkg")).verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"] and v["max_abs_error"] <= 1, v
