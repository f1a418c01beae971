"""Real TVM builds for the host, checked against onnxruntime / LiteRT."""

import json
import re

import models
import numpy as np
import pytest
import zoo

from edgetune.package import PackageOptions, package


def _package(model, out, **kw):
    return package(PackageOptions(model=model, device="host", output=out, **kw))


def _long(name):
    """A case the default run leaves out (-m long runs it): the default suite stays near 30 minutes."""
    return pytest.param(name, marks=pytest.mark.long)


@pytest.mark.slow
# the light CNNs that together hold every operator of the nine (Transpose: shufflenet; LRN:
# inception_v1; Add/Mul/Unsqueeze: densenet121) and the classic residual net; alexnet, zfnet512,
# inception_v2 and vgg19 (550 MB of weights) add no operator. densenet121 and resnet50 add none
# beyond the others either (-m long runs them)
@pytest.mark.parametrize("name", [_long("densenet121"), "inception_v1", _long("resnet50"), "shufflenet", "squeezenet"])
def test_light_cnns_with_random_weights_match_onnxruntime(tmp_path, name):
    model = models.randomized_light(name, tmp_path / f"{name}.onnx")
    result = _package(model, tmp_path / "pkg")
    v = result.verification
    assert v["status"] == "passed" and v["reference"].startswith("onnxruntime")
    assert v["max_rel_error"] < 1e-3
    # random weights: the output is not a constant vector (the shipped models' would be)
    with np.load(result.path / "reference.npz") as ref:
        out = ref[f"output:{result.manifest['outputs'][0]['name']}"]
    assert np.isfinite(out).all() and out.std() > 1e-6


@pytest.mark.slow
# the YOLO-style detector is checked under qemu for the Pi 4 as well (test_cross.py); the VGG block
# adds shapes, not operators: both in -m long
@pytest.mark.parametrize("name", [_long(n) if n in ("vgg_block", "yolo") else n for n in sorted(zoo.ZOO)])
def test_real_shaped_cnns_match_onnxruntime_with_default_schedules(tmp_path, name):
    # NHWC lowering, folded batch norms, Winograd, fast exp/sigmoid (SiLU, hard-swish, SE),
    # resize/concat and pooling, each checked on the shapes the speed claims are made on
    model = zoo.ZOO[name](tmp_path / f"{name}.onnx")
    result = _package(model, tmp_path / "pkg")
    v = result.verification
    assert v["status"] == "passed" and v["max_rel_error"] < 1e-3, v
    sched = result.manifest["schedules"]
    assert not sched.get("naive"), sched  # every kernel got a default schedule
    if name == "mobilenet_v3":  # its SE gates' products run apart from the gate convolutions (not once per pixel)
        assert any("_apart" in k for k in result.manifest["kernels"]), sorted(result.manifest["kernels"])
    if name == "mobilenet_v2":  # its ReLU6 clips (ONNX Clip) inside the convolutions' epilogues, in NHWC
        assert not any("clip" in k and "conv" not in k or "maximum" in k for k in result.manifest["kernels"]), \
            sorted(result.manifest["kernels"])
        # transposes: the input's and the flatten's before the classifier only (none at a clip)
        assert sum("transpose" in k for k in result.manifest["kernels"]) == 2, sorted(result.manifest["kernels"])
    if name in ("mobilenet_v3", "ocr_cls"):  # hard-swish written out: its "/ 6" a multiply in the epilogues
        assert not any("divide" in k for k in result.manifest["kernels"]), sorted(result.manifest["kernels"])


def test_repackaging_in_one_process_checks_the_new_library(tmp_path, squeezenet, exporter_onnx):
    # dlopen caches by path: the second check must not run the first model's library
    out = tmp_path / "pkg"
    _package(squeezenet, out)
    result = _package(exporter_onnx, out, force=True)
    assert result.verification["status"] == "passed"
    assert result.manifest["outputs"][0]["shape"] == [1, 10]


def test_face_detector_float_tflite_matches_litert(tmp_path, face_tflite):
    v = _package(face_tflite, tmp_path / "pkg").verification
    assert v["status"] == "passed" and v["reference"].startswith("ai-edge-litert")
    assert v["max_rel_error"] < 1e-4


def test_int8_tflite_is_bit_exact_with_litert(tmp_path, int8_tflite):
    v = _package(int8_tflite, tmp_path / "pkg").verification
    assert v["status"] == "passed" and v["max_abs_error"] == 0


def test_exporter_style_onnx_matches(tmp_path, exporter_onnx):
    result = _package(exporter_onnx, tmp_path / "pkg", input_shapes={"input/image:0": (2, 3, 16, 16)})
    assert result.verification["status"] == "passed"
    assert result.manifest["inputs"][0]["original_name"] == "input/image:0"
    assert result.manifest["inputs"][0]["shape"] == [2, 3, 16, 16]


def test_manifest_contents(host_package):
    from edgetune.util import sha256_file

    manifest = json.loads((host_package / "manifest.json").read_text())
    assert manifest["format"] == 1 and manifest["tvm"] == "0.27.0.post1"
    assert manifest["profile"]["name"] == "host" and manifest["target"]["kind"] == "llvm"
    assert manifest["weights"] == "embedded" and manifest["library"] == "model.so"
    assert manifest["verification"]["status"] == "passed" and manifest["verification"]["executed_on"] == "host"
    assert {"model.so", "reference.npz", "edgetune_runtime/loader.py"} <= set(manifest["files"])
    for name, digest in manifest["files"].items():
        assert sha256_file(host_package / name) == digest


def test_tarball(tmp_path, exporter_onnx):
    import tarfile

    result = _package(exporter_onnx, tmp_path / "pkg", tar=True)
    with tarfile.open(result.tarball) as tar:
        names = tar.getnames()
    assert "pkg/manifest.json" in names and "pkg/model.so" in names


def test_no_verify_is_recorded(tmp_path, exporter_onnx):
    result = _package(exporter_onnx, tmp_path / "pkg", verify=False)
    assert result.verification == {"status": "skipped", "reason": "--no-verify"}
    assert not (result.path / "reference.npz").exists()


def test_verification_failure_leaves_nothing(tmp_path, squeezenet):
    from edgetune.errors import VerificationError

    out = tmp_path / "pkg"
    with pytest.raises(VerificationError, match="beyond tolerance"):
        _package(squeezenet, out, rtol=0.0, atol=0.0)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".pkg")]


def test_a_mismatch_of_dequantized_int8_outputs_is_told_in_steps_with_the_atol_that_allows_it():
    """A failed check names each failing output's error, in quantization steps where the output
    is int8 values dequantized, and for those says why an int8 network drifts from the float
    reference and which --atol allows it (rounded up: that --atol passes); other outputs keep
    the default hint."""
    from edgetune.check import mismatch

    outputs = {"boxes": {"passed": False, "max_abs_error": 0.024981588}, "scores": {"passed": True, "max_abs_error": 0.0}}
    message, hint = mismatch(outputs, {"boxes": 0.0049963146}, "onnxruntime 1.31.1", 0.001, 1e-5)
    assert "boxes: max abs 0.02498 (5 quantization steps of 0.004996)" in message and "scores" not in message
    assert hint is not None and "--atol 0.025 " in hint and "float32" in hint
    message, hint = mismatch({"y": {"passed": False, "max_abs_error": 0.3}}, {}, "onnxruntime 1.31.1", 0.001, 1e-5)
    assert "steps" not in message and hint is None


def test_existing_output_needs_force(tmp_path, exporter_onnx):
    from edgetune.errors import PackageError

    out = tmp_path / "pkg"
    _package(exporter_onnx, out, verify=False)
    with pytest.raises(PackageError, match="not empty"):
        _package(exporter_onnx, out, verify=False)
    assert _package(exporter_onnx, out, verify=False, force=True).path == out
    other = tmp_path / "notapkg"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    with pytest.raises(PackageError, match="not an edgetune package"):
        _package(exporter_onnx, other, verify=False, force=True)
    assert (other / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize(("channels", "stride"), [(42, 2), (28, 1), (6, 1)])
def test_depthwise_channels_rounded_up_to_whole_registers_match_onnxruntime(tmp_path, channels, stride):
    """A depthwise layer whose channels are not whole vector registers (BlazeFace's 28, 36, 42)
    computes them rounded up (zero weights after the last; 42 had run as one 42-lane vector, 14
    GFLOP/s) and crops them in its epilogue, once per row of pixels: the same outputs as
    onnxruntime, from a depthwise kernel (not plain loops)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgetune._tvm.kernels.cpu import CpuFacts, depthwise_weights

    rng = np.random.default_rng(channels)
    inits = [numpy_helper.from_array(rng.standard_normal((channels, 1, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=channels, pads=[1, 1, 1, 1], strides=[stride] * 2),
             helper.make_node("Relu", ["c"], ["y"])]
    out = 20 // stride
    graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 20, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, out, out])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(tmp_path / "dw.onnx"))
    result = _package(tmp_path / "dw.onnx", tmp_path / "pkg")
    assert result.verification["status"] == "passed", result.verification
    kernels = result.manifest["schedules"]
    assert kernels["kinds"].get("depthwise") == 1 and not kernels["naive"], kernels
    cpu = CpuFacts(lanes=16, registers=32, fma_latency=4)
    assert depthwise_weights(np.ones((channels, 3, 3, 1)), cpu).shape[-1] == {42: 48, 28: 32, 6: 8}[channels]


def test_a_depthwise_row_of_prime_width_takes_a_narrower_block_to_fill_its_tile():
    from edgetune._tvm.kernels.cpu import CpuFacts
    from edgetune._tvm.schedules.depthwise import depthwise_tile

    avx512, neon = CpuFacts(lanes=16, registers=32, fma_latency=4), CpuFacts(lanes=4, registers=32, fma_latency=7)
    # 7 pixels of 1152 channels: 4 zmm fit 6 pixels, so 1 per tile; 3 zmm fit all 7
    assert depthwise_tile(1152, 7, avx512)[:2] == (48, 7)
    assert depthwise_tile(1152, 7, neon)[:2] == (12, 7)
    # where the widest block tiles well enough it stays (2 zmm x 8 measured slower than 4 x 4)
    assert depthwise_tile(64, 56, avx512)[:2] == (64, 4)
    assert depthwise_tile(672, 14, avx512)[:2] == (48, 7)


@pytest.mark.parametrize("device", ["host", "pi5"])
def test_an_int8_image_inputs_pad_is_split_off_so_llvm_vectorizes_it(tmp_path, device):
    # NCHW float in, the first convolution's padded NHWC int8 out, 3 channels innermost: with
    # the pad's conditions inside, every element was scalar. Now a fill, rows in parallel, which
    # LLVM makes a memset or vector stores per row, then the in-bound part without a condition, which LLVM
    # vectorizes (on Arm with interleaved st3)
    import quant_models

    from edgetune import _tvm
    from edgetune._tvm import metaschedule as ms
    from edgetune._tvm.codegen import lookups
    from edgetune.devices import resolve_device
    from edgetune.importer import import_model

    model = quant_models.qdq_onnx(models.small_cnn_onnx(tmp_path / "cnn.onnx"), tmp_path / "qdq.onnx")
    target = _tvm.make_target(resolve_device(device).target_spec())
    [layout] = [wl for wl in ms.extract_workloads(import_model(model).mod, target, _tvm.lowering_for(target, "auto").key)
                if wl.name.endswith("quantize_pad_transpose")]
    found = _tvm.default_schedule(layout.mod, target, layout.name)
    assert found.kind == "elementwise", found.why
    script = found.sch.mod.script()
    assert "_pad_const" in script and "if_then_else" not in script, script
    # (fused and vectorized by TVM the fill's indices were divisions: a byte store per lane)
    assert "T.vectorized" not in script and "//" not in script, script
    if device == "host":
        v = _package(model, tmp_path / "pkg").verification
        assert v["status"] == "passed", v
    else:
        lookups.register()
        lib = _tvm.tvm().compile(found.sch.mod, target=target, tir_pipeline=lookups.PIPELINE)
        asm = lib.mod.inspect_source("asm")
        # the fill: a memset, or (rows this short) one register stored over and over
        assert "st3\t" in asm and ("memset" in asm or re.search(r"\tstp\tq(\d+), q\1,", asm)), asm


@pytest.mark.parametrize("device", ["host", "pi5"])
def test_concatenation_along_the_vector_axis_is_cut_at_its_seams(tmp_path, device):
    # a detector head's three scales concatenated along the innermost axis: one vectorized loop
    # per source (a select per lane kept it scalar), and the seams land where onnxruntime has them
    from edgetune import _tvm
    from edgetune._tvm import metaschedule as ms
    from edgetune.devices import resolve_device
    from edgetune.importer import import_model

    model = models.detector_head_onnx(tmp_path / "head.onnx")
    target = _tvm.make_target(resolve_device(device).target_spec())
    [concat] = [wl for wl in ms.extract_workloads(import_model(model).mod, target, _tvm.lowering_for(target, "auto").key)
                if "concatenate" in wl.name]
    found = _tvm.default_schedule(concat.mod, target, concat.name)
    assert found.kind == "elementwise", found.why
    script = found.sch.mod.script()
    assert script.count("T.vectorized") == 3 and "range(T.int64(16), T.int64(20))" in script, script
    if device == "host":
        v = _package(model, tmp_path / "pkg").verification
        assert v["status"] == "passed" and v["max_rel_error"] < 1e-5, v


@pytest.mark.parametrize(("opset", "bounds"), [(17, (0.0, 6.0)), (17, (0.0, None)), (17, (None, float("nan"))), (6, (-1.0, 1.0))])
def test_onnx_clip_stays_in_nhwc_between_convolutions(tmp_path, opset, bounds):
    # ReLU6 as a PyTorch export writes it (Clip with its bounds as inputs, opset >= 11) or as an
    # old export (attributes): a clip inside the convolutions' epilogue. TVM's converter made it
    # TOPI kernels no graph pass saw through: two transposes around each. A NaN bound is no bound.
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    lo, hi = bounds
    inits = [numpy_helper.from_array((rng.standard_normal((24, 16, 3, 3)) / 6).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((8, 24, 1, 1)) / 3).astype(np.float32), "w2")]
    if opset >= 11:
        names = []
        for name, b in (("lo", lo), ("hi", hi)):
            names.append("" if b is None else name)
            if b is not None:
                inits.append(numpy_helper.from_array(np.array(b, np.float32), name))
        clip = helper.make_node("Clip", ["a", *names], ["c"])
    else:
        clip = helper.make_node("Clip", ["a"], ["c"], min=lo, max=hi)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), clip,
             helper.make_node("Conv", ["c", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "clip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 20, 20])], inits)
    path = tmp_path / "clip.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), str(path))
    result = _package(path, tmp_path / "pkg")
    assert result.verification["status"] == "passed", result.verification
    names = sorted(result.manifest["kernels"])
    assert sum("transpose" in n for n in names) == 2, names  # the model's input and output only
    assert len(names) == 4, names  # the transposes and two convolutions, the clip in the first's epilogue


@pytest.mark.parametrize("device", ["host", "pi5"])
def test_winograd_transforms_over_channels_that_make_no_vector_stay_loops(tmp_path, device):
    # YOLO11n-pose's keypoint branch: 3x3 layers over 51 channels (17 keypoints x 3), no whole
    # vector of them. The transforms' unit channel loop was dropped and their unrolls took the
    # tile and channel loops instead: 25 tiles x 51 channels unrolled, over 15 minutes in TVM's
    # simplifier for that model (under a minute now). The tiles stay a parallel loop.
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgetune import _tvm
    from edgetune._tvm import metaschedule as ms
    from edgetune.devices import resolve_device
    from edgetune.importer import import_model

    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array((rng.standard_normal((51, 51, 3, 3)) / 20).astype(np.float32), f"w{i}") for i in range(2)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "kpt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 51, 20, 20])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 51, 20, 20])], w)
    model = tmp_path / "kpt.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(model))
    target = _tvm.make_target(resolve_device(device).target_spec())
    layers = [wl for wl in ms.extract_workloads(import_model(model).mod, target, _tvm.lowering_for(target, "auto").key)
              if "winograd" in wl.name]
    assert layers
    for layer in layers:
        found = _tvm.default_schedule(layer.mod, target, layer.name)
        assert found.kind == "winograd", found.why
        script = found.sch.mod.script()
        tiles = re.findall(r"for p in T\.(\w+)\(T\.int64\((\d+)\)\)", script)
        assert tiles and all(kind == "parallel" for kind, _n in tiles), tiles
        assert len(script) < 40_000, len(script)
    if device == "host":
        v = _package(model, tmp_path / "pkg").verification
        assert v["status"] == "passed" and v["max_rel_error"] < 1e-4, v
