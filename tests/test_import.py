"""Import: exporter-style ONNX, name sanitizing, shape errors, unsupported ops, damaged files."""

import models
import pytest

from edgetune.errors import InputShapeError, ModelFormatError, UnsupportedOpsError
from edgetune.importer import import_model


def test_exporter_style_onnx_dynamic_batch_and_shape_chain(exporter_onnx):
    model = import_model(exporter_onnx, {"input/image:0": (1, 3, 16, 16)})
    (spec,) = model.inputs
    assert spec.original_name == "input/image:0" and spec.name.isidentifier()
    assert spec.shape == (1, 3, 16, 16)
    assert model.outputs[0].shape == (1, 10)
    assert any("folded" in n for n in model.notes)


def test_exporter_style_onnx_other_batch(exporter_onnx):
    model = import_model(exporter_onnx, {"input/image:0": (4, 3, 16, 16)})
    assert model.outputs[0].shape == (4, 10)


def test_dynamic_batch_defaults_to_one_with_a_note(exporter_onnx):
    model = import_model(exporter_onnx)
    assert model.inputs[0].shape == (1, 3, 16, 16)
    assert any("set to 1" in n for n in model.notes)


def test_dynamic_non_batch_dims_need_input_shape(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "h", "w"])])
    path = tmp_path / "dyn.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime 1.31 reads
    onnx.save(model, str(path))
    with pytest.raises(InputShapeError) as info:
        import_model(path)
    assert "--input-shape x=1,1,1" in info.value.hint
    assert import_model(path, {"x": (1, 4, 5)}).outputs[0].shape == (1, 4, 5)


@pytest.mark.parametrize("shapes,match", [
    ({"nope": (1, 3, 16, 16)}, "unknown input"),
    ({"input/image:0": (1, 3, 16)}, "has 3 dimensions"),
    ({"input/image:0": (1, 4, 16, 16)}, "contradicts"),
])
def test_bad_input_shapes(exporter_onnx, shapes, match):
    with pytest.raises(InputShapeError, match=match):
        import_model(exporter_onnx, shapes)


def test_initializers_listed_as_inputs_are_dropped(squeezenet):
    model = import_model(squeezenet)
    assert [s.original_name for s in model.inputs] == ["data_0"]


def test_unsupported_onnx_ops_listed_at_once(tmp_path):
    with pytest.raises(UnsupportedOpsError) as info:
        import_model(models.unsupported_onnx(tmp_path / "u.onnx"))
    assert info.value.ops == ["Celu", "LpNormalization"]


def test_unsupported_tflite_ops_listed_at_once(tmp_path):
    with pytest.raises(UnsupportedOpsError) as info:
        import_model(models.unsupported_tflite(tmp_path / "u.tflite"))
    assert info.value.ops == ["CUSTOM:EdgetuneTestOp", "REDUCE_WINDOW"]


def test_tflite_int8_spec(int8_tflite):
    model = import_model(int8_tflite)
    (spec,) = model.inputs
    assert spec.dtype == "int8" and spec.quantization == (pytest.approx(1 / 64), 0)
    assert spec.original_name == "serving_default_image:0" and spec.name == "serving_default_image_0"
    assert model.outputs[0].dtype == "int8" and model.outputs[0].shape == (1, 10)


@pytest.mark.parametrize("suffix", [".onnx", ".tflite"])
def test_truncated_files(tmp_path, squeezenet, face_tflite, suffix):
    source = squeezenet if suffix == ".onnx" else face_tflite
    path = tmp_path / f"truncated{suffix}"
    data = source.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelFormatError):
        import_model(path)


def test_unknown_extension_and_missing_file(tmp_path):
    (tmp_path / "model.pb").write_bytes(b"x")
    with pytest.raises(ModelFormatError, match="extension '.pb'"):
        import_model(tmp_path / "model.pb")
    with pytest.raises(ModelFormatError, match="not found"):
        import_model(tmp_path / "missing.onnx")
