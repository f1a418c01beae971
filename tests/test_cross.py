"""Cross builds: aarch64 under qemu, armhf ELF flags, Jetson compiled sm_87 kernels."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from edgetune import elf
from edgetune.errors import ToolchainError
from edgetune.package import PackageOptions, package
from edgetune.profiles import get_profile

pytestmark = pytest.mark.cross


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (scripts/install-system-deps.sh installs it)")


def test_pi4_package_runs_under_qemu_and_matches(tmp_path, squeezenet, qemu):
    _need("aarch64-linux-gnu-g++")
    result = package(PackageOptions(model=squeezenet, device="pi4", output=tmp_path / "pi4"))
    assert elf.machine(result.path / "model.so") == "aarch64"
    v = result.verification
    assert v["status"] == "passed", v
    assert "qemu-aarch64" in v["executed_on"] and v["max_rel_error"] < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(("name", "device", "size"), [("mobilenet_v3", "pi5", 96), pytest.param("yolo", "pi4", 128, marks=pytest.mark.long)])
def test_real_shaped_cnns_under_qemu_match_with_neon_default_schedules(tmp_path, qemu, name, device, size):
    # depthwise + hard-swish + SE (pi5) and SiLU + upsample/concat + 3×3 stacks (pi4), with the
    # register tiles sized for NEON; the YOLO-style stack's 3×3 stride-1 layers as Winograd
    import zoo

    _need("aarch64-linux-gnu-g++")
    model = zoo.ZOO[name](tmp_path / f"{name}.onnx", size=size)
    result = package(PackageOptions(model=model, device=device, output=tmp_path / device))
    v = result.verification
    assert v["status"] == "passed" and "qemu-aarch64" in v["executed_on"] and v["max_rel_error"] < 1e-3, v
    kinds = set(result.manifest["schedules"]["kinds"])
    assert "naive" not in kinds and "conv2d" in kinds and (name != "yolo" or "winograd" in kinds), kinds


def test_pi5_int8_tflite_under_qemu_is_bit_exact(tmp_path, int8_tflite, qemu):
    _need("aarch64-linux-gnu-g++")
    v = package(PackageOptions(model=int8_tflite, device="pi5", output=tmp_path / "pi5")).verification
    assert v["status"] == "passed" and v["max_abs_error"] == 0


def test_pi4_32_is_armhf_hard_float(tmp_path, exporter_onnx):
    _need("arm-linux-gnueabihf-g++")
    result = package(PackageOptions(model=exporter_onnx, device="pi4-32", output=tmp_path / "arm"))
    lib = result.path / "model.so"
    assert elf.machine(lib) == "armv7l"
    flags = struct.unpack_from("<I", lib.read_bytes(), 36)[0]
    assert flags & 0x400, "EF_ARM_ABI_FLOAT_HARD not set"
    assert result.verification["status"] == "skipped" and "armv7l" in result.verification["reason"]


@pytest.mark.cuda
def test_jetson_library_has_compiled_sm87_kernels(tmp_path, exporter_onnx):
    _need("aarch64-linux-gnu-g++")
    try:
        from edgetune.toolchain import find_cuda

        find_cuda(get_profile("jetson-orin-nano"))
    except ToolchainError as err:
        pytest.skip(f"no CUDA 13 nvcc: {err.message}")
    result = package(PackageOptions(model=exporter_onnx, device="jetson-orin-nano", output=tmp_path / "jet"))
    lib = result.path / "model.so"
    data = lib.read_bytes()
    assert elf.machine(lib) == "aarch64"
    assert elf.cuda_archs(lib) == ["sm_87"]
    assert b"__global__" not in data, "CUDA source embedded instead of a binary"
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["runtime"]["kind"] == "cuda" and manifest["runtime"]["cuda_archs"] == ["sm_87"]
    assert manifest["target"]["host"]["mcpu"] == "cortex-a78"


@pytest.mark.cuda
def test_a_cuda_package_says_which_library_or_gpu_it_lacks(tmp_path, monkeypatch, exporter_onnx):
    """An x86-64 CUDA package (benchmarks/cuda_run.py's stand-in for a Jetson) on this GPU-less host:
    the loader names the CUDA library that does not load, rather than "no cuda device"; given a
    GPU, one of another architecture is refused by name before the driver fails on the kernels."""
    from edgetune.toolchain import find_cuda

    monkeypatch.setenv("EDGETUNE_TARGETS_DIR", str(Path(__file__).parents[1] / "benchmarks" / "cuda"))
    try:
        find_cuda(get_profile("gpu-sm87"))
    except ToolchainError as err:
        pytest.skip(f"no CUDA 13 nvcc: {err.message}")
    result = package(PackageOptions(model=exporter_onnx, device="gpu-sm87", output=tmp_path / "sm87"))
    assert elf.machine(result.path / "model.so") == "x86_64" and elf.cuda_archs(result.path / "model.so") == ["sm_87"]
    driver = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"], capture_output=True)
    if driver.returncode == 0:  # asked in a fresh process: packaging loaded a stub libcuda into this one
        pytest.skip("this host has an NVIDIA driver: the check below is of a host without one")
    proc = subprocess.run([sys.executable, "-m", "edgetune_runtime", "check", str(result.path)], capture_output=True,
                          text=True, env=dict(os.environ, TVM_USE_RUNTIME_LIB="1"), timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "error: TVM's CUDA runtime does not load: lib" in proc.stderr and "cannot open shared object file" in proc.stderr
    assert ("hint: libcuda is the NVIDIA driver's" if "load: libcuda." in proc.stderr else
            "hint: put the CUDA runtime's library directory on LD_LIBRARY_PATH") in proc.stderr


@pytest.mark.cuda
def test_a_gpu_profile_is_timed_here_only_with_its_gpu(tmp_path, monkeypatch, exporter_onnx):
    """A CUDA profile tunes and checks on this machine only where its host code is this machine's
    and a GPU of its arch is here with a driver: a Jetson profile never (aarch64 host code), the
    x86-64 stand-in not on this GPU-less host — and tuning says why rather than failing every
    candidate. (On the lent H100 the same profile found "NVIDIA H100 80GB HBM3 (sm_90)".)"""
    from edgetune.errors import UsageError
    from edgetune.toolchain import find_cuda, local_gpu
    from edgetune.tuning.options import TuneOptions
    from edgetune.tuning.session import tune

    monkeypatch.setenv("EDGETUNE_TARGETS_DIR", str(Path(__file__).parents[1] / "benchmarks" / "cuda"))
    try:
        find_cuda(get_profile("gpu-sm90"))
    except ToolchainError as err:
        pytest.skip(f"no CUDA 13 nvcc: {err.message}")
    monkeypatch.setenv("EDGETUNE_TARGETS_DIR", str(Path(__file__).parents[1] / "targets"))
    assert local_gpu(get_profile("jetson-orin-nano")) is None
    monkeypatch.setenv("EDGETUNE_TARGETS_DIR", str(Path(__file__).parents[1] / "benchmarks" / "cuda"))
    driver = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"], capture_output=True)
    if driver.returncode == 0:
        pytest.skip("this host has an NVIDIA driver: the check below is of a host without one")
    assert local_gpu(get_profile("gpu-sm90")) is None
    with pytest.raises(UsageError) as info:
        tune(TuneOptions(models=(exporter_onnx,), device="gpu-sm90", trials=4, records=tmp_path / "r"))
    assert "cannot be measured on this host (no GPU of sm_90 with its driver here)" in info.value.message


def test_missing_cross_compiler_fails_fast(tmp_path, monkeypatch, exporter_onnx):
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "weird.toml").write_text(
        'description = "board with an uninstalled toolchain"\narch = "aarch64"\nruntime = "cpu"\n'
        '[target]\nkind = "llvm"\nmtriple = "aarch64-linux-gnu"\n'
        '[toolchain]\ncc = "aarch64-edgetune-missing-g++"\ndebian-packages = ["g++-aarch64-linux-gnu"]\n'
    )
    monkeypatch.setenv("EDGETUNE_TARGETS_DIR", str(targets))
    out = tmp_path / "out"
    with pytest.raises(ToolchainError) as info:
        package(PackageOptions(model=exporter_onnx, device="weird", output=out))
    assert "aarch64-edgetune-missing-g++" in info.value.message
    assert "g++-aarch64-linux-gnu" in info.value.hint
    assert not out.exists()


def _depthwise_layers(path: Path, layers: list[tuple[int, int, int, int]]) -> Path:
    """An ONNX model of independent depthwise layers (channels, size, kernel, stride), each
    with its bias and a ReLU6, SAME-padded."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(len(layers))
    nodes, inits, inputs, outputs = [], [], [], []
    for i, (c, size, k, stride) in enumerate(layers):
        out = (size + 2 * (k // 2) - k) // stride + 1
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, c, size, size]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, c, out, out]))
        inits += [numpy_helper.from_array(rng.standard_normal((c, 1, k, k)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), f"b{i}"),
                  numpy_helper.from_array(np.float32(0), f"lo{i}"), numpy_helper.from_array(np.float32(6), f"hi{i}")]
        nodes += [helper.make_node("Conv", [f"x{i}", f"w{i}", f"b{i}"], [f"c{i}"], group=c, kernel_shape=[k, k],
                                   pads=[k // 2] * 4, strides=[stride] * 2),
                  helper.make_node("Clip", [f"c{i}", f"lo{i}", f"hi{i}"], [f"y{i}"])]
    graph = helper.make_graph(nodes, "depthwise", inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


@pytest.mark.parametrize("device", ["pi4", "pi5"])
def test_arm_fp32_depthwise_reads_each_input_vector_once_per_kernel_row(tmp_path, qemu, device):
    """On the Pis an fp32 depthwise tile loads its input row once per kernel row and channel
    register — (P − 1)·stride + KW vectors — and every tap of every pixel reads it from
    registers (schedules/depthwise.py: _input_rows), where each tap of each pixel loaded its
    own: fewer vector loads than FMLAs in the stride-1 layers' code (1.2-1.4 loads per FMLA
    before). Equal to onnxruntime under qemu for 3×3 and 5×5 layers, stride 1 and 2, a prime
    width (13: one pixel a tile) and channels that are not whole registers (6)."""
    import re

    _need("aarch64-linux-gnu-g++")
    model = _depthwise_layers(tmp_path / "dw.onnx", [(24, 16, 3, 1), (32, 14, 5, 1), (6, 13, 3, 1), (16, 14, 3, 2)])
    result = package(PackageOptions(model=model, device=device, output=tmp_path / device))
    v = result.verification
    assert v["status"] == "passed" and "qemu-aarch64" in v["executed_on"] and v["max_rel_error"] < 1e-5, v
    kernels = result.manifest["schedules"]
    assert kernels["kinds"].get("depthwise") == 4 and not kernels["naive"], kernels
    asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                         capture_output=True, text=True, check=True).stdout
    ratios = []
    for text in asm.split("\n\n"):
        if re.match(r"[0-9a-f]+ <fused_depthwise_conv2d\w*>:", text):
            fmla = len(re.findall(r"\sfmla\s", text))
            loads = len(re.findall(r"\sldr\s+q", text)) + 2 * len(re.findall(r"\sldp\s+q", text))
            ratios.append(loads / max(1, fmla))
    assert len(ratios) == 4 and sum(r < 0.9 for r in ratios) >= 2, ratios


def _few_output_layers(path: Path, layers: list[tuple[int, int, int, int, int]]) -> Path:
    """An ONNX model of independent convolutions (in channels, size, out channels, kernel,
    stride), each with its bias and a ReLU, SAME-padded."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(len(layers))
    nodes, inits, inputs, outputs = [], [], [], []
    for i, (c, size, oc, k, stride) in enumerate(layers):
        out = (size + 2 * (k // 2) - k) // stride + 1
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, c, size, size]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, oc, out, out]))
        inits += [numpy_helper.from_array(rng.standard_normal((oc, c, k, k)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [f"x{i}", f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[k, k],
                                   pads=[k // 2] * 4, strides=[stride] * 2),
                  helper.make_node("Relu", [f"c{i}"], [f"y{i}"])]
    graph = helper.make_graph(nodes, "few", inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


FEW_OUTPUTS = [(8, 24, 1, 3, 1), (16, 12, 2, 1, 1), (12, 15, 3, 3, 2), (288, 2, 1, 1, 1), (6, 10, 1, 3, 1)]


@pytest.mark.parametrize("device", ["host", "pi4"])
def test_convolutions_to_few_channels_sum_across_input_lanes(tmp_path, request, device):
    """A convolution to fewer output channels than a vector holds (a segmentation head's mask)
    is summed across its input channels' lanes (kernels/conv.py: conv2d_nhwc_lanes), not padded
    to a register of output channels (MediaPipe pose landmark's 3×3 8 → 1 layer: three zero
    filters per real one, 5.8 → 1.8 M A72 cycles); on the Pis four outputs' sums are a tree of
    three ``faddp``. Equal to onnxruntime on the host and under qemu: 1, 2 and 3 channels, 3×3
    and 1×1, stride 2, an odd width, 288 input channels on 2×2 pixels; over 6 input channels (no
    whole vector) the packed kernel stays."""
    import re

    if device != "host":
        request.getfixturevalue("qemu")
        _need("aarch64-linux-gnu-g++")
    model = _few_output_layers(tmp_path / "few.onnx", FEW_OUTPUTS)
    result = package(PackageOptions(model=model, device=device, output=tmp_path / device))
    v = result.verification
    assert v["status"] == "passed" and v["max_rel_error"] < 1e-5, v
    kinds = result.manifest["schedules"]["kinds"]
    assert kinds.get("conv2d-lanes") == 4 and kinds.get("conv2d") == 1 and not result.manifest["schedules"]["naive"], kinds
    if device == "pi4":
        asm = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", str(result.path / "model.so")],
                             capture_output=True, text=True, check=True).stdout
        assert re.search(r"\sfaddp\s+v\d+\.4s", asm), "four outputs' sums as a tree of faddp"


@pytest.mark.parametrize("device", ["host", "pi5"])
def test_a_zero_pad_after_a_kernel_is_written_by_that_kernel(tmp_path, request, device):
    """A zero pad whose input is a kernel's only use is no kernel of its own: that kernel writes
    into the padded tensor (passes/padded_outputs.py: its output a strided view of the interior,
    the border zeroed first; MediaPipe pose landmark's four such pads took 0.7 M of its 62.4 M
    A76 cycles). Equal to LiteRT on the host and under qemu; a pad of a tensor used twice stays
    a pad kernel."""
    if device != "host":
        request.getfixturevalue("qemu")
        _need("aarch64-linux-gnu-g++")
    import tflite_models

    model = tflite_models.padded_depthwise(tmp_path / "padded.tflite")
    result = package(PackageOptions(model=model, device=device, output=tmp_path / device))
    v = result.verification
    assert v["status"] == "passed" and v["max_rel_error"] < 1e-5, v
    names = list(result.manifest["kernels"])
    assert sum(n.endswith("_padded") for n in names) == 1, names
    assert sum(n.startswith("pad") for n in names) == 1, names


def test_arm_depthwise_tiles_take_up_to_8_pixels_and_registers_enough_for_the_fmla_latency():
    from edgetune._tvm.kernels.cpu import CpuFacts
    from edgetune._tvm.schedules.depthwise import depthwise_row_tile

    a72 = CpuFacts(lanes=4, registers=32, fma_latency=7, aarch64=True, fma_pipes=1)
    a76 = CpuFacts(lanes=4, registers=32, fma_latency=4, aarch64=True, fma_pipes=2)
    assert depthwise_row_tile(144, 56, 3, 1, a72)[:2] == (4, 8)  # 8 sums cover the A72's one pipe
    assert depthwise_row_tile(672, 14, 5, 1, a72)[:2] == (4, 7)
    assert depthwise_row_tile(672, 14, 5, 1, a76)[:2] == (8, 7)  # 7 sums do not cover two pipes
    assert depthwise_row_tile(144, 56, 3, 1, a76)[:2] == (4, 8)
    assert depthwise_row_tile(36, 13, 3, 1, a72)[:2] == (12, 1)  # a prime width: wider blocks instead
    assert depthwise_row_tile(24, 112, 3, 2, a76)[:2] == (4, 8)  # stride 2: a row of 17 vectors
