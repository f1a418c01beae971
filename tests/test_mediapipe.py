"""MediaPipe models TVM 0.27 refuses on its own: sparse (DENSIFY) weights and the custom op
Convolution2DTransposeBias. Real models from MediaPipe's wheel (scripts/fetch_test_models.py)
package and match LiteRT; the custom op is checked against MediaPipe's own loop (in numpy),
since LiteRT cannot run it without MediaPipe's op resolver."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from edgetune.importer import tflite_rewrite as rw
from edgetune.package import PackageOptions, package

MODELS = Path(__file__).parent / ".models"


def _model(name: str) -> Path:
    path = MODELS / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `{sys.executable} scripts/fetch_test_models.py` (scripts/install.sh does)")
    return path


def _deconv_model(path: Path, x_shape, w: np.ndarray, bias: np.ndarray, strides, padding: str) -> Path:
    """A one-op TFLite model holding MediaPipe's custom op, as its converter writes it."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    m = s.ModelT()
    m.version, m.buffers = 3, [s.BufferT()]

    def tensor(name: str, shape, data: np.ndarray | None = None) -> int:
        t = s.TensorT()
        t.name, t.shape, t.type, t.buffer = name.encode(), list(shape), 0, 0
        if data is not None:
            b = s.BufferT()
            b.data = np.frombuffer(data.astype(np.float32).tobytes(), np.uint8)
            m.buffers.append(b)
            t.buffer = len(m.buffers) - 1
        sub.tensors.append(t)
        return len(sub.tensors) - 1

    sub = s.SubGraphT()
    sub.tensors = []
    x = tensor("x", x_shape)
    wt = tensor("w", w.shape, w)
    bt = tensor("b", bias.shape, bias)
    (oh, ow), _ = rw.deconv_output_hw(x_shape[1:3], w.shape[1:3], strides, padding)
    y = tensor("y", (x_shape[0], oh, ow, w.shape[0]))
    code = s.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = rw.CUSTOM
    code.customCode, code.version = rw.MEDIAPIPE_DECONV.encode(), 1
    m.operatorCodes = [code]
    op = s.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [x, wt, bt], [y]
    op.customOptions = list(struct.pack("<3i", {"SAME": 1, "VALID": 2}[padding], strides[1], strides[0]))
    sub.operators, sub.inputs, sub.outputs, sub.name = [op], [x], [y], b"main"
    m.subgraphs = [sub]
    builder = flatbuffers.Builder(1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(bytes(builder.Output()))
    return path


@pytest.mark.parametrize(("x_shape", "k", "strides", "padding"), [
    ((1, 5, 6, 3), 4, (2, 2), "SAME"),  # the segmenter's 4×4 / 2 upsampling, odd and even sizes
    ((1, 4, 4, 8), 3, (2, 2), "SAME"),
    ((1, 3, 5, 2), 3, (1, 2), "VALID"),
])
def test_mediapipe_deconv_rewrite_matches_mediapipes_loop(tmp_path, x_shape, k, strides, padding):
    from ai_edge_litert.interpreter import Interpreter

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, k, k, x_shape[3])).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    model = _deconv_model(tmp_path / "deconv.tflite", x_shape, w, bias, strides, padding)
    expected = rw.transpose_conv_bias_reference(x, w, bias, strides, padding)

    rewritten, notes = rw.rewrite(model.read_bytes())
    assert notes and "TRANSPOSE_CONV" in notes[0]
    interp = Interpreter(model_content=rewritten)  # LiteRT's builtin kernel, on the rewrite
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    got = interp.get_tensor(interp.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    pkg = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg"))  # TVM's kernel
    assert pkg.verification["status"] == "passed"
    import edgetune_runtime

    out = next(iter(edgetune_runtime.load(pkg.path).run(x).values()))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_densify_expands_block_sparse_csr():
    """A 4×4 matrix stored as 2×2 blocks, rows dense, block columns CSR (TFLite's layout for
    sparse convolution weights), expands to the matrix."""
    from types import SimpleNamespace

    dense = np.array([[1, 2, 0, 0], [3, 4, 0, 0], [0, 0, 7, 8], [0, 0, 5, 6]], np.float32)
    dims = [SimpleNamespace(format=0, denseSize=2), SimpleNamespace(format=1, arraySegments=SimpleNamespace(values=[0, 1, 2]), arrayIndices=SimpleNamespace(values=[0, 1])),
            SimpleNamespace(format=0, denseSize=2), SimpleNamespace(format=0, denseSize=2)]
    sparsity = SimpleNamespace(traversalOrder=[0, 1, 2, 3], blockMap=[0, 1], dimMetadata=dims)
    values = np.array([1, 2, 3, 4, 7, 8, 5, 6], np.float32)  # block (0,0), then block (1,1), row-major inside
    np.testing.assert_array_equal(rw.densify((4, 4), sparsity, values), dense)


@pytest.mark.parametrize("name", ["face_detection_full_range_sparse.tflite", "pose_detection.tflite"])
def test_sparse_mediapipe_detectors_package_and_match_litert(tmp_path, name):
    """The reference is LiteRT running the original file (its own DENSIFY), so the densified
    weights are checked against LiteRT's expansion, not against themselves."""
    pkg = package(PackageOptions(model=_model(name), device="host", output=tmp_path / "pkg"))
    assert pkg.verification["status"] == "passed", pkg.verification
    assert any("densified" in n for n in pkg.manifest["model"]["notes"])


@pytest.mark.long
def test_sparse_face_detector_runs_its_pruned_layers_sparse_on_the_pi_under_qemu(tmp_path, qemu):
    """On AArch64 the pruned 1×1 layers (70 % zeros) run on the sparse kernel, checked against
    LiteRT's own sparse run of the file."""
    from edgetune.importer import import_model
    from edgetune.report import kernel_report

    model = _model("face_detection_full_range_sparse.tflite")
    pkg = package(PackageOptions(model=model, device="pi4", output=tmp_path / "pkg"))
    v = pkg.verification
    assert v["status"] == "passed" and "qemu-aarch64" in v["executed_on"], v
    assert pkg.manifest["schedules"]["kinds"].get("sparse-conv"), pkg.manifest["schedules"]["kinds"]
    # every one of its 46 pruned 1×1 layers (identical layers share a kernel: count the calls)
    rows = kernel_report(import_model(model), "pi4")
    assert sum(r["calls"] for r in rows if r["kind"] == "sparse-conv") == 46, rows


def test_selfie_segmentation_with_the_custom_op_packages_and_matches(tmp_path):
    pkg = package(PackageOptions(model=_model("selfie_segmentation.tflite"), device="host", output=tmp_path / "pkg"))
    assert pkg.verification["status"] == "passed", pkg.verification
    assert any(rw.MEDIAPIPE_DECONV in n for n in pkg.manifest["model"]["notes"])


def test_selfie_segmentation_for_pi5_under_qemu(tmp_path, qemu):
    """The same rewrite and the NCHW transposed convolution on the ARM build, run under qemu."""
    pkg = package(PackageOptions(model=_model("selfie_segmentation.tflite"), device="pi5", output=tmp_path / "pkg"))
    v = pkg.verification
    assert v["status"] == "passed" and "qemu-aarch64" in v["executed_on"], v
