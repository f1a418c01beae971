"""TFLite files of audio and streaming models (tests/tflite_models.py), packaged for real and
checked against LiteRT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetune.errors import InputShapeError
from edgetune.importer import import_model
from edgetune.package import PackageOptions, package


def packaged(model: Path, tmp_path: Path, **kw) -> Path:
    out = tmp_path / f"{model.stem}-pkg"
    result = package(PackageOptions(model=model, device="host", output=out, **kw))
    assert result.verification["status"] == "passed", result.verification
    return out


@pytest.mark.parametrize("frame", [400, 512, 600])
def test_rfft2d_whatever_the_frame_against_fft_length(tmp_path, frame):
    """TVM converts RFFT2D only when fft_length equals the input's size; spectrogram front ends
    zero-pad 400-sample frames to 512 (LiteRT takes powers of two only); longer ones are cropped."""
    import tflite_models

    packaged(tflite_models.rfft_frontend(tmp_path / f"rfft{frame}.tflite", frame=frame, fft=512), tmp_path)


def test_cast_of_a_complex_spectrum_is_its_real_part(tmp_path):
    """``tf.cast(rfft, tf.float32)`` (a CAST from COMPLEX64, as BirdNET's front end writes it)
    keeps the real part: TVM's CAST kept RFFT2D's trailing (real, imaginary) axis, and the next
    reshape failed."""
    import tflite_models

    packaged(tflite_models.rfft_frontend(tmp_path / "rfft_real.tflite", real_part=True), tmp_path)



def test_int8_strided_slice_and_split_v_are_bit_exact(tmp_path):
    import tflite_models

    import edgetune_runtime

    out = packaged(tflite_models.int8_slicing(tmp_path / "slicing.tflite"), tmp_path)
    check = edgetune_runtime.load(out).check()
    assert check["passed"] and all(o["max_abs_error"] == 0 for o in check["outputs"].values())


def test_float16_weights_behind_dequantize(tmp_path):
    import tflite_models

    packaged(tflite_models.fp16_weights(tmp_path / "fp16.tflite"), tmp_path)


def test_prelu_fuses_into_the_convolution_before_it(tmp_path):
    """Each PRELU slope form matches LiteRT, and a per-channel or single slope runs in its
    convolution's kernel, not as a kernel of its own over a flattened tensor."""
    import tflite_models

    import edgetune_runtime

    out = packaged(tflite_models.prelu_slopes(tmp_path / "prelu.tflite"), tmp_path)
    profile = edgetune_runtime.load(out).measure(runs=3, profile=True)["profile"]["kernels"]
    kernels = [k["name"] for k in profile if k["kind"] != "runtime"]
    assert len(kernels) == 2 and all("conv2d" in k for k in kernels), kernels
    assert "prelu" in kernels[0] + kernels[1] and not any("reshape" in k for k in kernels), kernels


@pytest.mark.parametrize("device", ["host", pytest.param("pi4", marks=pytest.mark.qemu)])
def test_hard_swish_divides_by_multiplying(tmp_path, request, device):
    """TVM's TFLite converter writes ``HARD_SWISH`` as ``x · relu6(x + 3) / 6``: the division
    is a multiply by 1/6 (passes/cleanups.py: DivideAsMultiply — on AArch64 a division by a
    constant is otherwise the exact float64 path), checked against LiteRT, on the Pi 4 under
    qemu."""
    import tflite_models
    from models import checked_package

    result = checked_package(tflite_models.hard_swish(tmp_path / "hswish.tflite"), tmp_path, device, request)
    kernels = sorted(result.manifest["kernels"])
    assert len(kernels) == 2 and not any("divide" in k for k in kernels), kernels


def test_gelu_keeps_its_approximate_form(tmp_path):
    """TFLite's ``GELU`` with ``approximate`` is the tanh form; TVM's converter wrote every GELU
    as the exact erf one (up to 4.7e-4 apart per activation). Both checked against LiteRT."""
    import tflite_models
    from models import checked_package

    result = checked_package(tflite_models.gelus(tmp_path / "gelu.tflite"), tmp_path)
    assert result.verification["max_abs_error"] < 2e-5, result.verification


def test_a_foreign_custom_op_is_named_not_blamed_on_input_shapes(tmp_path):
    """MediaPipe's face-landmark-with-attention model holds custom ops of MediaPipe's resolver:
    LiteRT (run to learn shapes) fails on them first; the error names them."""
    import tflite_models

    from edgetune.errors import UnsupportedOpsError

    bld = tflite_models.Builder()
    sub = bld.subgraph()
    x = bld.tensor(sub, "x", [1, 4])
    y = bld.tensor(sub, "y", [1, 4])
    shape = bld.tensor(sub, "shape", [2], tflite_models.INT32)
    bld.op(sub, tflite_models._ops().SHAPE, [x], [shape], *bld.options("ShapeOptions", outType=tflite_models.INT32))
    bld.op(sub, tflite_models._ops().CUSTOM, [x], [y])
    bld.model.operatorCodes[-1].customCode = "TransformLandmarks"
    sub.inputs, sub.outputs = [x], [y, shape]
    with pytest.raises(UnsupportedOpsError, match="CUSTOM:TransformLandmarks") as info:
        import_model(bld.save(tmp_path / "custom.tflite"))
    assert "framework that made the model" in info.value.hint


def test_dynamic_shape_signature_needs_and_takes_input_shape(tmp_path):
    import tflite_models

    path = tflite_models.dynamic_signature(tmp_path / "dynamic.tflite")
    with pytest.raises(InputShapeError, match=r"dynamic dimensions \[-1, -1, 16\]") as info:
        import_model(path)
    assert "--input-shape serving_default_x:0=1,1,16" in info.value.hint
    out = packaged(path, tmp_path, input_shapes={"serving_default_x:0": (2, 7, 16)})
    import edgetune_runtime

    assert edgetune_runtime.load(out).outputs[0]["shape"] == [2, 7, 8]


def test_resource_variables_become_state_in_and_out(tmp_path):
    """The package's state output, fed back, gives what LiteRT's own variable gives on the
    following calls (the original model, run three times)."""
    import tflite_models
    from ai_edge_litert.interpreter import Interpreter

    import edgetune_runtime

    path = tflite_models.streaming_state(tmp_path / "stream.tflite")
    model = edgetune_runtime.load(packaged(path, tmp_path))
    assert model.manifest["state"] == [{"input": "stream_state", "output": "stream_state_next", "shape": [1, 16],
                                        "dtype": "float32"}]
    state = model.initial_state()
    litert = Interpreter(model_path=str(path))
    litert.allocate_tensors()
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.uniform(-1, 1, (1, 8)).astype(np.float32)
        out = model.run(**{"serving_default_x:0": x}, **state)
        litert.set_tensor(litert.get_input_details()[0]["index"], x)
        litert.invoke()
        expected = litert.get_tensor(litert.get_output_details()[0]["index"])
        np.testing.assert_allclose(out["StatefulPartitionedCall:0"], expected, rtol=1e-5, atol=1e-6)
        state = {"stream_state": out["stream_state_next"]}


def test_an_unverified_package_keeps_the_initial_state(tmp_path):
    """``--no-verify`` writes no reference data, but a stateful model's initial state is part of
    the package: ``initial_state()`` returns it (it ended in a FileNotFoundError)."""
    import tflite_models

    import edgetune_runtime
    from edgetune.package import PackageOptions, package

    path = tflite_models.streaming_state(tmp_path / "stream.tflite")
    out = package(PackageOptions(model=path, device="host", output=tmp_path / "pkg", verify=False)).path
    assert not (out / "reference.npz").exists() and (out / "state.npz").is_file()
    state = edgetune_runtime.load(out).initial_state()
    assert list(state) == ["stream_state"] and state["stream_state"].shape == (1, 16)


def test_inspect_names_the_state_and_the_rewrites(tmp_path):
    import tflite_models

    from edgetune.report import inspect_model

    report = inspect_model(tflite_models.streaming_state(tmp_path / "stream.tflite"))
    assert any("stream_state → stream_state_next" in n for n in report.notes)
