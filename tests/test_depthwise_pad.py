"""x86 depthwise kernels read their input where it is (the zero padding as a condition per pixel,
:func:`edgetune._tvm.schedules.depthwise._inline_pad`), with no padded copy of it: every
padding the importers produce (symmetric, asymmetric, stride 2, 5×5; 48 channels, and 20: no
whole number of AVX-512 vectors), checked against onnxruntime, fp32 and int8. On this machine's
CPU: the tests need an x86 host."""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import checked_package
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 kernels, built for this host")

# (kernel, stride, pads: top, left, bottom, right)
LAYERS = [(3, 1, (1, 1, 1, 1)), (5, 2, (1, 1, 2, 2)), (3, 2, (0, 0, 1, 1)), (5, 1, (2, 2, 2, 2))]


def _model(out: Path, channels: int = 48) -> Path:
    """Four depthwise layers in a row, each with its own padding, on a 1 × channels × 23 × 19 input
    (odd sizes: the last tile of a row is partial, a pad column on one side only)."""
    rng = np.random.default_rng(11)
    inits, nodes, x = [], [], "x"
    c, h, w = channels, 23, 19
    for n, (k, s, (t, left, b, r)) in enumerate(LAYERS):
        h, w = (h + t + b - k) // s + 1, (w + left + r - k) // s + 1
        inits += [numpy_helper.from_array((rng.standard_normal((c, 1, k, k)) * 0.3).astype(np.float32), f"w{n}"),
                  numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), f"b{n}")]
        nodes.append(helper.make_node("Conv", [x, f"w{n}", f"b{n}"], [f"y{n}"], group=c, kernel_shape=[k, k],
                                      strides=[s, s], pads=[t, left, b, r]))
        x = f"y{n}"
    graph = helper.make_graph(nodes, "depthwise_pads",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 23, 19])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, h, w])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def _depthwise_kernels(model: Path) -> list[str]:
    """The host's default depthwise kernels of ``model``, as TVMScript."""
    from edgetune._tvm.schedules.dispatch import default_schedule
    from edgetune.profiles import get_profile
    from edgetune.tuning.tasks import build_task_set

    tasks = build_task_set([model], get_profile("host"))
    out = []
    for task in tasks.tasks:
        if "depthwise" in task.name:
            out.append(default_schedule(task.workload.mod, tasks.target).sch.mod.script())
    return out


@pytest.mark.parametrize("channels", [48, 20])
def test_x86_depthwise_reads_its_input_without_a_padded_copy(tmp_path: Path, channels: int) -> None:
    model = _model(tmp_path / "dw.onnx", channels)
    kernels = _depthwise_kernels(model)
    assert len(kernels) == len(LAYERS)
    for script in kernels:
        assert 'T.sblock("pad")' not in script, script
        assert "if_then_else" in script  # the padding, read in place
    checked_package(model, tmp_path)


def test_x86_int8_depthwise_pads_with_the_zero_point(tmp_path: Path) -> None:
    """A QDQ model (onnxruntime's quantizer, uint8 activations: a zero point other than 0): its
    depthwise layers read the padding in place too, the input's zero point, within a step of
    onnxruntime."""
    import quant_models

    from edgetune.package import PackageOptions, package

    q = quant_models.qdq_onnx(_model(tmp_path / "dw.onnx"), tmp_path / "dw-qdq.onnx", activations="uint8")
    kernels = _depthwise_kernels(q)
    assert len(kernels) == len(LAYERS)
    for script in kernels:
        assert 'T.sblock("pad")' not in script, script
    v = package(PackageOptions(model=q, device="host", output=tmp_path / "pkg")).verification
    step = quant_models.output_step(q)
    assert v["status"] == "passed" and v["max_abs_error"] <= step * 1.0001, (v, step)
