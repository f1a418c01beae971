"""Half-precision packages (``--precision fp16``): the float32 graph computed in float16 on the
Pi 5 (under qemu, the Cortex-A76's ``asimdhp``) and built for Jetson's GPU; the reference check's
tolerance measured on the model (onnxruntime with every tensor rounded to float16) and failing
where float16 breaks a model; refused on boards without float16 arithmetic."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
import zoo
import zoo_transformers as zt
from onnx import TensorProto, helper, numpy_helper

from edgetune.errors import ProfileError, VerificationError
from edgetune.package import PackageOptions, package


def _half(model: Path, tmp_path: Path, request, name: str = "pkg", **kw):
    request.getfixturevalue("qemu")
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("aarch64-linux-gnu-g++ is not installed (scripts/install-system-deps.sh installs it)")
    return package(PackageOptions(model=model, device="pi5", output=tmp_path / name, precision="fp16", **kw))


def _asm(library: Path, symbol: str) -> str:
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(library)],
                         capture_output=True, text=True, check=True).stdout
    return "\n".join(f for f in asm.split("\n\n") if re.match(rf"[0-9a-f]+ <\w*{symbol}\w*>:", f))


def test_fp16_cnn_for_the_pi5_runs_in_half_precision_within_its_measured_tolerance(tmp_path, request):
    """A MobileNetV3-style CNN (convolutions, depthwise, squeeze-and-excitation, hard-swish, a
    classifier): float16 kernels (``fmla v.8h``), inputs and outputs float32 as the model's,
    weights in float16 (the library about half the float32 one's size), and the check under
    qemu within the tolerance measured for it, which the manifest explains."""
    model = zoo.mobilenet_v3(tmp_path / "mnv3.onnx", size=96, classes=100)
    result = _half(model, tmp_path, request)
    m, v = result.manifest, result.verification
    assert v["status"] == "passed" and "qemu" in v["executed_on"], v
    assert m["precision"] == "fp16"
    assert [s["dtype"] for s in m["inputs"] + m["outputs"]] == ["float32", "float32"]
    (name,) = [s["original_name"] for s in m["outputs"]]
    bound = v["tolerance"]["bounds"][name]
    assert 0 < v["outputs"][name]["max_abs_error"] <= bound and v["outputs"][name]["margin"] <= 1
    assert "float16" in v["tolerance_why"] and v["spread"][name] > 0
    assert v["outputs"][name]["top1_agree"] in (0.0, 1.0)
    assert not m["schedules"]["naive"], m["schedules"]
    conv = _asm(result.path / "model.so", "conv2d_nhwc")
    assert re.search(r"\sfmla\s+v\d+\.8h, v\d+\.8h, v\d+\.(8h|h\[\d\])", conv), conv[:2000]
    assert not re.search(r"\sfmla\s+v\d+\.4s", conv), "a float32 multiply-add in a float16 convolution"
    fp32 = package(PackageOptions(model=model, device="pi5", output=tmp_path / "fp32", verify=False))
    assert (result.path / "model.so").stat().st_size < 0.6 * (fp32.path / "model.so").stat().st_size


def test_fp16_transformer_keeps_attention_and_layer_norm_on_their_kernels(tmp_path, request):
    """A BERT-style encoder in float16: the fused attention kernel and the row kernels (their
    sums and statistics in float32 inside), passing the measured check under qemu."""
    model = zt.bert(tmp_path / "bert.onnx", layers=2, hidden=64, heads=4, seq=32)
    result = _half(model, tmp_path, request)
    assert result.verification["status"] == "passed", result.verification
    kinds = result.manifest["schedules"]["kinds"]
    assert kinds.get("attention") == 1 and kinds.get("layer-norm"), kinds  # (the layers share each kernel)
    assert not result.manifest["schedules"]["naive"], result.manifest["schedules"]


def test_fp16_detector_with_silu_resize_and_concat(tmp_path, request):
    """A YOLOv8n-style detector at 128²: SiLU epilogues (the exponential in float32 between
    conversions), nearest resizes, concatenations, max pools, Winograd 3×3 layers in float16."""
    result = _half(zoo.yolo(tmp_path / "yolo.onnx", size=128), tmp_path, request)
    assert result.verification["status"] == "passed", result.verification
    assert result.manifest["schedules"]["kinds"].get("winograd"), result.manifest["schedules"]


@pytest.mark.parametrize("device", ["pi4", "host", "pi4-32"])
def test_fp16_is_refused_on_a_board_without_half_precision_arithmetic(tmp_path, squeezenet, device):
    with pytest.raises(ProfileError) as err:
        package(PackageOptions(model=squeezenet, device=device, output=tmp_path / "pkg", precision="fp16"))
    assert "no float16 arithmetic" in err.value.message and "pi5" in err.value.hint, err.value.hint
    assert not (tmp_path / "pkg").exists()


def _breaks_in_half(path: Path, kind: str) -> Path:
    """A convolution then what float16 cannot hold: ``overflow`` squares values of ~±1e3 (past
    65504), ``underflow`` multiplies by 1e-9 and divides by it again (1e-9 rounds to 0)."""
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 16, 3, 3)).astype(np.float32), "W")]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1] * 4)]
    if kind == "overflow":
        inits += [numpy_helper.from_array(np.array(300.0, np.float32), "big"),
                  numpy_helper.from_array(np.array(1e-4, np.float32), "small")]
        nodes += [helper.make_node("Mul", ["c", "big"], ["b"]), helper.make_node("Mul", ["b", "b"], ["sq"]),
                  helper.make_node("Mul", ["sq", "small"], ["y"])]
    else:
        inits.append(numpy_helper.from_array(np.array(1e-9, np.float32), "eps"))
        nodes += [helper.make_node("Mul", ["c", "eps"], ["t"]), helper.make_node("Div", ["t", "eps"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, kind, [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(("kind", "where"), [("overflow", "Mul node 'sq'"), ("underflow", "constant 'eps'")])
def test_fp16_check_fails_where_float16_breaks_the_model(tmp_path, request, kind, where):
    """The same models pass in fp32; in fp16 the check fails — the tolerance cannot grow to hide
    it, since the reference itself moves past float16's range — naming where, and writes nothing."""
    model = _breaks_in_half(tmp_path / f"{kind}.onnx", kind)
    with pytest.raises(VerificationError) as err:
        _half(model, tmp_path, request)
    assert "float16 cannot compute this model" in err.value.message and where in err.value.message, err.value.message
    assert "fp32" in err.value.hint
    assert not (tmp_path / "pkg").exists()
    fp32 = package(PackageOptions(model=model, device="pi5", output=tmp_path / "fp32"))
    assert fp32.verification["status"] == "passed"


def test_fp16_records_are_their_own_lowering():
    """Tuning records of float16 kernels are stamped with their own lowering (they never apply to
    a float32 build, nor the reverse)."""
    from edgetune import _tvm
    from edgetune.profiles import get_profile

    target = _tvm.make_target(get_profile("pi5").target_spec())
    assert _tvm.lowering_for(target, "auto", "fp16").key == "nhwc-packed-fp16"
    assert _tvm.lowering_for(target, "auto").key == "nhwc-packed"
    assert _tvm.has_half(target)
    assert not _tvm.has_half(_tvm.make_target(get_profile("pi4").target_spec()))


@pytest.mark.cuda
def test_fp16_jetson_package_is_a_float16_sm87_library_that_the_loader_accepts(tmp_path):
    """The CUDA route in float16 (DLight's matmul rule takes tensor cores on fp16 operands):
    built as an sm_87 binary with nvcc, weights half the size, and the loader's checks of the
    manifest pass for an Orin (compute capability 8.7) and refuse an sm_90 card. (Timing needs a
    GPU: benchmarks/cuda_run.py.)"""
    from edgetune.errors import ToolchainError
    from edgetune.profiles import get_profile
    from edgetune.toolchain import find_cuda
    from edgetune_runtime.errors import PackageMismatchError
    from edgetune_runtime.loader import check_gpu, validate_manifest

    try:
        find_cuda(get_profile("jetson-orin-nano"))
    except ToolchainError as err:
        pytest.skip(str(err))
    model = zt.bert(tmp_path / "bert.onnx", layers=2, hidden=256, heads=4, seq=32)  # ~4 MB of float32 weights
    half = package(PackageOptions(model=model, device="jetson-orin-nano", output=tmp_path / "fp16", precision="fp16"))
    full = package(PackageOptions(model=model, device="jetson-orin-nano", output=tmp_path / "fp32"))
    m = half.manifest
    assert m["precision"] == "fp16" and m["runtime"]["cuda_archs"] == ["sm_87"]
    validate_manifest(m)
    check_gpu(m, "8.7", "Orin")
    with pytest.raises(PackageMismatchError):
        check_gpu(m, "9.0", "H200")
    assert (half.path / "model.so").stat().st_size < 0.75 * (full.path / "model.so").stat().st_size
