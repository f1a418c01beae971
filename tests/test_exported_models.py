"""The models edge users deploy now, packaged for real and checked against their own runtime:
transformers as exporters and onnxruntime's tools write them, dynamic quantization, audio front
ends, loops, files as exporters leave them, and the real wake-word / VAD models from PyPI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import zoo_transformers as zt
from onnx import TensorProto, helper, numpy_helper

from edgetune.errors import ModelError, ModelFormatError, VerificationError
from edgetune.importer import import_model
from edgetune.package import PackageOptions, package

MODELS = Path(__file__).parent / ".models"


def packaged(model: Path, tmp_path: Path, **kw) -> dict:
    """Package ``model`` for the host; the reference check must pass."""
    result = package(PackageOptions(model=model, device="host", output=tmp_path / f"{model.stem}-pkg", **kw))
    assert result.verification["status"] == "passed", result.verification
    return result.manifest


# ---------------------------------------------------------------- transformers


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("transformers")


def test_bert_exported_with_fixed_shapes_packages_and_matches(zoo_dir, tmp_path):
    """Shape-valued bindings (Relax's ``shape_of`` … of the mask's Expand) went through the
    numpy constant folding, which read a dtype off them and crashed every such export."""
    import zoo_transformers as zt

    manifest = packaged(zt.bert(zoo_dir / "bert.onnx"), tmp_path)
    ranges = {s["original_name"]: s["value_range"] for s in manifest["inputs"]}
    assert ranges == {"input_ids": [0, 120], "attention_mask": [0, 2], "token_type_ids": [0, 2]}


def test_bert_exported_with_dynamic_axes_packages_at_a_given_length(zoo_dir, tmp_path):
    import zoo_transformers as zt

    model = zt.bert(zoo_dir / "bert_dyn.onnx", dynamic=True)
    manifest = packaged(model, tmp_path, input_shapes={"input_ids": (1, 24)})
    assert [s["shape"] for s in manifest["inputs"]] == [[1, 24]] * 3  # the named dims follow input_ids


@pytest.mark.parametrize("kind", ["bert-opt", "bert-fastgelu", "vit-opt", "vit-ort-extended", "t5-opt"])
def test_onnxruntime_optimized_transformers_package_and_match(zoo_dir, tmp_path, kind):
    import zoo_transformers as zt

    name, variant = kind.split("-", 1)
    base = {"bert": lambda: zt.bert(zoo_dir / "bert.onnx"), "vit": lambda: zt.vit(zoo_dir / "vit.onnx", classes=10),
            "t5": lambda: zt.t5_encoder(zoo_dir / "t5.onnx")}[name]()
    out = tmp_path / f"{kind}.onnx"
    if variant == "ort-extended":
        zt.ort_level_optimized(base, out)
    else:
        zt.ort_optimized(base, out, {"bert": "bert", "vit": "vit", "t5": "t5"}[name], heads=4, hidden=64,
                         gelu_approximation=variant == "fastgelu")
    contrib = {n.op_type for n in onnx.load(str(out)).graph.node if n.domain == "com.microsoft"}
    assert contrib, "the optimizer wrote no contrib op"
    manifest = packaged(out, tmp_path)
    assert any("onnxruntime ops as standard ops" in n for n in manifest["model"]["notes"])


@pytest.mark.parametrize("kind", ["bert", "bert-opt", "t5-decoder", "whisper"])
def test_dynamically_quantized_transformers_package_and_match(zoo_dir, tmp_path, kind):
    """quantize_dynamic's MatMulInteger + DynamicQuantizeLinear (ConvInteger for Whisper's
    convolutions, QAttention after the optimizer)."""
    import zoo_transformers as zt

    base = {"bert": lambda: zt.bert(zoo_dir / "bert.onnx"),
            "bert-opt": lambda: zt.ort_optimized(zt.bert(zoo_dir / "bert.onnx"), tmp_path / "opt.onnx", "bert", 4, 64),
            "t5-decoder": lambda: zt.t5_decoder(zoo_dir / "t5d.onnx"),
            "whisper": lambda: zt.whisper_encoder(zoo_dir / "whisper.onnx")}[kind]()
    quantized = zt.dynamic_int8(base, tmp_path / f"{kind}-int8.onnx")
    ops = {n.op_type for n in onnx.load(str(quantized)).graph.node}
    assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops
    manifest = packaged(quantized, tmp_path)
    # inside the bound measured on the model (onnxruntime's own spread under one-ulp moves)
    v = manifest["verification"]
    assert all(o["margin"] <= 1 for o in v["outputs"].values()) and v["tolerance"]["bounds"], v
    # the integer products on the integer kernel of the host's dot-product instruction, or where
    # it has none on the packed dense kernel (exact in fp32 at these sizes); not a generic reduction
    from edgetune import _tvm
    from edgetune._tvm.kernels import dot
    from edgetune.profiles import get_profile

    family = dot.dot_family(_tvm.make_target(get_profile("host").target_spec()))
    assert manifest["schedules"]["kinds"].get("dense-int8" if family else "dense"), manifest["schedules"]


def _floored_quantize(bb, inputs, attrs):
    """DynamicQuantizeLinear with one rounding rule changed: x / scale rounded down, not to
    nearest (every activation up to a step low, as an arithmetic bug would have it)."""
    from tvm import relax

    from edgetune._tvm.frontend.onnx_ops import dynamic_quantize_linear

    _y, scale, point = dynamic_quantize_linear(bb, inputs, attrs).fields
    x = inputs[0]
    steps = relax.op.floor(relax.op.divide(x, scale))
    y = relax.op.clip(relax.op.add(steps, relax.op.astype(point, str(x.ty.dtype))), 0, 255)
    return relax.Tuple([bb.normalize(relax.op.astype(y, "uint8")), scale, point])


def test_dynamic_int8_check_is_measured_and_catches_a_changed_rounding_rule(tmp_path, monkeypatch):
    """Four Whisper-tiny-wide layers, each quantizing the float result of the last: the check's
    bound is measured — onnxruntime with each quantized activation moved by a few ulp before its
    rounding, times a stated factor — and the manifest says so; the package is inside it. The
    same model with DynamicQuantizeLinear rounding down instead of to nearest is far outside and
    fails, where the old formula (0.2 % per quantized activation) allowed 3.2 %."""
    import zoo_transformers as zt

    from edgetune.tolerance import INT8_FACTOR

    base = zt.whisper_encoder(tmp_path / "w.onnx", layers=4, hidden=384, heads=6, mels=80, frames=128)
    quantized = zt.dynamic_int8(base, tmp_path / "w-int8.onnx")
    manifest = packaged(quantized, tmp_path)
    v = manifest["verification"]
    (name,) = v["tolerance"]["bounds"]
    assert v["tolerance"]["bounds"][name] >= INT8_FACTOR * v["spread"][name] > 0, v
    assert "ulp before its rounding" in v["tolerance_why"] and v["outputs"][name]["margin"] <= 1, v
    from edgetune._tvm.frontend import onnx_ops

    monkeypatch.setitem(onnx_ops.CONVERTERS, "DynamicQuantizeLinear", _floored_quantize)
    with pytest.raises(VerificationError) as err:
        package(PackageOptions(model=quantized, device="host", output=tmp_path / "floored"))
    assert "its bound" in err.value.message, err.value.message
    # the CLI says how the tolerance was measured
    from conftest import run_edgetune

    monkeypatch.undo()
    res = run_edgetune("package", str(quantized), "--device", "host", "-o", str(tmp_path / "cli"))
    assert res.returncode == 0, res.stderr
    assert "(tolerance each output within" in res.stdout and "ulp before its rounding" in res.stdout, res.stdout


def _floored_round(x):
    """relax.op.round with one rounding rule changed: down, not half to even (each requantized
    int8 activation up to a step low, as an arithmetic bug would have it)."""
    from tvm import relax

    return relax.op.floor(x)


def test_static_qdq_check_is_measured_and_catches_a_changed_rounding_rule(squeezenet, tmp_path, monkeypatch):
    """A Whisper-tiny-wide encoder quantized statically (QDQ, as onnxruntime's quantize_static
    writes it: a 1-D convolution front end, int8 projections with LayerNorm, Gelu and attention
    between quantize / dequantize pairs) runs its convolutions on integer kernels. onnxruntime's
    own int8 kernels and its QDQ layers in float differ by several steps at the output, so the
    check's bound is measured — each QuantizeLinear's input moved by a few ulp, which also
    unfuses that layer — and the package is inside it. A QDQ SqueezeNet, where the package
    computes what onnxruntime's int8 kernels do, with the integer layers' requantize rounding
    down instead of to nearest: outside its bound (the root mean square), and fails."""
    import quant_models

    from edgetune._tvm.passes import int8_layers
    from edgetune.tolerance import INT8_FACTOR

    base = zt.whisper_encoder(tmp_path / "w.onnx", layers=4, hidden=384, heads=6, mels=80, frames=128)
    quantized = quant_models.qdq_onnx(base, tmp_path / "w-qdq.onnx")
    manifest = packaged(quantized, tmp_path)
    v = manifest["verification"]
    # the 1-D convolutions of the front end are int8 layers too: integer kernels, no float convolution
    assert "conv2d" not in manifest["schedules"]["kinds"], manifest["schedules"]["kinds"]
    (name,) = v["tolerance"]["bounds"]
    assert v["tolerance"]["bounds"][name] >= INT8_FACTOR * v["spread"][name] > v["tolerance"]["steps"][name], v
    assert "(QuantizeLinear)" in v["tolerance_why"] and v["outputs"][name]["margin"] <= 1, v

    cnn = quant_models.qdq_onnx(squeezenet, tmp_path / "squeezenet-qdq.onnx")
    packaged(cnn, tmp_path)
    monkeypatch.setattr(int8_layers.relax.op, "round", _floored_round)
    with pytest.raises(VerificationError) as err:
        package(PackageOptions(model=cnn, device="host", output=tmp_path / "floored"))
    assert "root-mean-square" in err.value.message and "its bound" in err.value.message, err.value.message


def test_a_decoder_step_with_a_key_value_cache_packages_and_matches(tmp_path):
    """A GPT-2-style decoder step as optimum exports it with a cache (past keys / values in,
    the concatenated ones out beside the logits) at fixed lengths: 15 cached tokens, one new."""
    model = zt.gpt_decoder_with_past(tmp_path / "gpt.onnx", past=15, seq=1)
    manifest = packaged(model, tmp_path)
    assert len(manifest["outputs"]) == 5, manifest["outputs"]
    assert [o["shape"] for o in manifest["outputs"][1:]] == [[1, 4, 16, 16]] * 4, manifest["outputs"]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_optimum_decoders_with_a_key_value_cache_package_at_fixed_lengths(arch, tmp_path):
    """GPT-2 and Llama (rotary embeddings, grouped-query attention) decoders with random weights,
    exported by optimum for text-generation-with-past (every length a dynamic axis), packaged
    with the lengths fixed: one new token after 15 cached ones."""
    import exporters

    try:
        model = exporters.decoder_with_past(arch)
    except RuntimeError as err:  # torch / transformers / optimum missing: no export here
        pytest.skip(f"optimum's export is not available: {str(err)[-200:]}")
    kv_heads = 4 if arch == "gpt2" else 2
    shapes = {"input_ids": (1, 1), "attention_mask": (1, 16), "position_ids": (1, 1)}
    shapes.update({f"past_key_values.{i}.{t}": (1, kv_heads, 15, 32) for i in range(2) for t in ("key", "value")})
    manifest = packaged(model, tmp_path, input_shapes=shapes)
    assert manifest["outputs"][0]["original_name"] == "logits", manifest["outputs"]


def test_a_t5_encoder_quantized_dynamically_matches_the_exact_integer_sums(tmp_path):
    """A T5-small-shaped encoder (relative position bias, RMS norm, ReLU FFN; 24 activations
    quantized at run time) exported by torch from transformers, quantized by onnxruntime's
    quantize_dynamic: on x86 onnxruntime's u8 × s8 kernels saturate (one projection 1981 off the
    exact int32 sum), so the reference reads the int8 weights as uint8 + 128 (the same products,
    summed exactly), and the package matches it within the measured bound."""
    import exporters

    if not exporters.available("transformers", "torch"):
        pytest.skip("transformers and torch are not installed (pip install '.[dev]')")
    model = zt.dynamic_int8(exporters.t5_encoder(), tmp_path / "t5-int8.onnx")
    manifest = packaged(model, tmp_path)
    v = manifest["verification"]
    from edgetune.reference import EXACT_INTEGERS, onnxruntime_u8s8_saturates

    assert (EXACT_INTEGERS in v["reference"]) == onnxruntime_u8s8_saturates(), v["reference"]
    assert all(o["margin"] <= 1 for o in v["outputs"].values()), v


def test_int8_chain_analysis_is_linear_in_the_graph(monkeypatch):
    """A chain of shared sub-graphs (each value read by the next two) was walked once per path:
    2^depth visits. Each expression is now evaluated once."""
    from tvm import relax

    from edgetune._tvm.passes import int8_elementwise, int8_values

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16,), "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            v = bb.emit(relax.op.astype(x, "float32"))
            for _ in range(40):  # v_{n+1} = v_n + v_n: 2^40 paths to x
                v = bb.emit(relax.op.add(v, v))
            out = bb.emit_output(relax.op.quantize(v, relax.const(1e9, "float32"), relax.const(0, "int8"), axis=0,
                                                   out_dtype="int8"))
        bb.emit_func_output(out)
    calls = []
    original = int8_values._call_values
    monkeypatch.setattr(int8_values, "_call_values", lambda *a: calls.append(1) or original(*a))
    tables = int8_elementwise.Int8Tables()
    tables(bb.get())
    assert tables.count == 1  # the whole chain became one table lookup
    assert len(calls) < 200


# ---------------------------------------------------------------- audio, loops


def test_stft_log_mel_front_end_packages_and_matches(tmp_path):
    import audio_models

    manifest = packaged(audio_models.stft_log_mel(tmp_path / "stft.onnx"), tmp_path)
    assert any("Fourier transforms" in n for n in manifest["model"]["notes"])


@pytest.mark.parametrize("opset", [17, 20])
def test_dft_forward_and_inverse_package_and_match(tmp_path, opset):
    import audio_models

    packaged(audio_models.dft_forms(tmp_path / f"dft{opset}.onnx", opset=opset), tmp_path)


def test_loop_over_frames_unrolls_once_shapes_are_fixed(tmp_path):
    import audio_models

    model = audio_models.frame_loop(tmp_path / "loop.onnx", dynamic=True)
    manifest = packaged(model, tmp_path, input_shapes={"x": (9, 8)})
    assert "Loop unrolled: 'final' × 9" in manifest["model"]["notes"]


@pytest.mark.parametrize("early_exit", [False, True])
def test_loop_decided_by_the_data_stays_a_loop_and_matches_at_every_trip_count(tmp_path, early_exit):
    """A trip count given as an input (and an exit computed in the body) cannot unroll: the loop
    runs as a recursive Relax function, checked against onnxruntime for several counts."""
    import onnxruntime as ort
    import rnn_models

    import edgetune_runtime

    model = rnn_models.run_time_loop(tmp_path / "loop.onnx", early_exit=early_exit)
    manifest = packaged(model, tmp_path)
    assert any("kept as a real loop" in n for n in manifest["model"]["notes"])
    pkg = edgetune_runtime.load(tmp_path / "loop-pkg")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).uniform(-1, 1, (1, 16)).astype(np.float32)
    for steps in (0, 1, 7, 60):
        feeds = {"x": x, "steps": np.array(steps, np.int64)}
        np.testing.assert_allclose(pkg.run(**feeds)["h"], session.run(None, feeds)[0], atol=1e-6)


@pytest.mark.slow
def test_dynamically_quantized_lstm_packages_and_matches(tmp_path):
    import rnn_models
    import zoo_transformers as zt

    crnn = zt.dynamic_int8(rnn_models.crnn(tmp_path / "crnn.onnx", width=64), tmp_path / "crnn-int8.onnx")
    assert sum(n.op_type == "DynamicQuantizeLSTM" for n in onnx.load(str(crnn)).graph.node) == 2
    packaged(crnn, tmp_path)


# ---------------------------------------------------------------- files as exporters leave them


def _small_model(path: Path, *, input_name: str = "x", reverse: bool = False, opsets=(), external: bool = False) -> Path:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", [input_name, "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    if reverse:
        nodes.reverse()
    inits = [numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((64, 8)).astype(np.float32), "w2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), *(helper.make_opsetid(d, v) for d, v in opsets)])
    model.ir_version = 8
    if external:
        onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    else:
        onnx.save(model, str(path))
    return path


def test_nodes_out_of_topological_order_are_sorted(tmp_path):
    manifest = packaged(_small_model(tmp_path / "unsorted.onnx", reverse=True), tmp_path)
    assert any("topological order sorted" in n for n in manifest["model"]["notes"])


def test_weights_in_an_external_data_file(tmp_path):
    path = _small_model(tmp_path / "external.onnx", external=True)
    assert (tmp_path / "external.onnx.data").is_file()
    manifest = packaged(path, tmp_path)
    assert any("external data" in n for n in manifest["model"]["notes"])
    (tmp_path / "external.onnx.data").unlink()
    with pytest.raises(ModelFormatError, match="external.onnx.data', which is not beside it"):
        import_model(path)


def test_unused_opset_domains_are_dropped(tmp_path):
    """Even one onnxruntime would refuse (an opset version it does not know)."""
    path = _small_model(tmp_path / "opsets.onnx", opsets=[("ai.onnx.ml", 2), ("com.microsoft", 99)])
    manifest = packaged(path, tmp_path)
    assert any("unused opset domain(s) dropped: ai.onnx.ml, com.microsoft" in n for n in manifest["model"]["notes"])


def test_if_branch_reading_a_sanitized_input_name(tmp_path):
    """tf2onnx names inputs ``x:0``; a branch reading it kept the old name after sanitizing and
    TVM's frontend failed with "'NoneType' object has no attribute 'ty'"."""
    then_g = helper.make_graph([helper.make_node("Relu", ["input_1:0"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["input_1:0"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 4])])
    nodes = [helper.make_node("ReduceSum", ["input_1:0"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input_1:0", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "keras_if.onnx"))
    packaged(tmp_path / "keras_if.onnx", tmp_path)


def test_loader_takes_the_original_or_identifier_spelling_of_a_name(tmp_path):
    import edgetune_runtime

    path = _small_model(tmp_path / "tf2onnx.onnx", input_name="serving_default_input_2:0")
    packaged(path, tmp_path)
    model = edgetune_runtime.load(tmp_path / "tf2onnx-pkg")
    x = np.ones((1, 32), np.float32)
    a = model.run(**{"serving_default_input_2:0": x})
    b = model.run(serving_default_input_2_0=x)
    np.testing.assert_array_equal(a["y"], b["y"])


def test_a_node_tvm_cannot_convert_is_named(tmp_path):
    nodes = [helper.make_node("TopK", ["x", "k"], ["y", "i"], name="my_topk", largest=0, sorted=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              [numpy_helper.from_array(np.array([2], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "topk.onnx"))
    with pytest.raises(ModelError, match="failed on TopK node 'my_topk': TopK sorted must be 1"):
        import_model(tmp_path / "topk.onnx")


# ---------------------------------------------------------------- real models from PyPI packages


def _real(name: str) -> Path:
    path = MODELS / name
    if not path.is_file():
        pytest.skip(f"{name} not fetched (scripts/fetch_test_models.py fetches it)")
    return path


@pytest.mark.parametrize("name,shapes,binds", [
    ("oww_melspectrogram.onnx", {"input": (1, 1760)}, {}),
    ("oww_embedding_model.onnx", {}, {}),
    ("silero_vad.onnx", {"input": (1, 512)}, {"sr": "16000"}),
    ("silero_vad6.onnx", {"input": (1, 512), "state": (2, 1, 128)}, {"sr": "16000"}),
    ("silero_vad6_op18_ifless.onnx", {"input": (1, 512), "state": (2, 1, 128)}, {"sr": "16000"}),
    ("oww_melspectrogram.tflite", {"serving_default_input:0": (1, 1760)}, {}),
    ("oww_embedding_model.tflite", {}, {}),
    pytest.param("birdnet_fp32.tflite", {}, {}, marks=pytest.mark.slow),
])
def test_real_audio_models_package_and_match(tmp_path, name, shapes, binds):
    """openWakeWord's front end and speech-embedding CNN (ONNX and TFLite), Silero's VAD (v4 and v6),
    BirdNET's classifier (its spectrogram inside: shapes computed in the graph, a RESHAPE to a
    scalar, the complex spectrum cast to its real part)."""
    manifest = packaged(_real(name), tmp_path, input_shapes=shapes, bindings=binds)
    assert json.dumps(manifest["verification"])


def test_silero6_without_the_sample_rate_bound_is_refused_with_the_input_to_bind(tmp_path):
    """At 512 samples only the 16 kHz branch of silero-vad 6's ``If`` can run (onnxruntime
    fails on 8 kHz at that length too): without ``--bind sr=…`` the import says which input
    decides the branch, instead of onnxruntime's shape-inference message."""
    from edgetune.errors import InputShapeError

    with pytest.raises(InputShapeError) as err:
        import_model(_real("silero_vad6.onnx"), {"input": (1, 512), "state": (2, 1, 128)})
    assert "input(s) sr decide which branch runs" in err.value.message and "--bind sr=" in err.value.hint


def _if_on_a_setting(path: Path) -> Path:
    """A model as silero's exporter writes it: ``If(mode == 1)`` choosing between a branch that
    fits the input's length and one that only fits another length (a Reshape to [1, 4, -1, 3]
    that 10 samples cannot make), and inside the fitting branch an ``If`` on the rank of an
    intermediate result (decided by the shapes)."""
    f = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f, [1, 12])
    mode = helper.make_tensor_value_info("mode", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", f, [1, 4])
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    two = numpy_helper.from_array(np.array(2, np.int64), "two")
    w = numpy_helper.from_array(np.linspace(-1, 1, 12 * 4).astype(np.float32).reshape(12, 4), "w")
    rank_then = helper.make_graph([helper.make_node("Relu", ["h"], ["t_out"])], "rank_then", [],
                                  [helper.make_tensor_value_info("t_out", f, [1, 4])])
    rank_else = helper.make_graph([helper.make_node("Neg", ["h"], ["e_out"])], "rank_else", [],
                                  [helper.make_tensor_value_info("e_out", f, [1, 4])])
    fits = helper.make_graph([
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Shape", ["h"], ["hs"]), helper.make_node("Size", ["hs"], ["rank"]),
        helper.make_node("Equal", ["rank", "two"], ["is2"]),
        helper.make_node("If", ["is2"], ["r"], then_branch=rank_then, else_branch=rank_else),
    ], "fits", [], [helper.make_tensor_value_info("r", f, [1, 4])])
    wrong = helper.make_graph([helper.make_node("Reshape", ["x", "badshape"], ["bad"]),
                               helper.make_node("ReduceSum", ["bad", "axes"], ["b_out"], keepdims=0)], "wrong", [],
                              [helper.make_tensor_value_info("b_out", f, [1, 4])],
                              [numpy_helper.from_array(np.array([1, 4, -1, 5], np.int64), "badshape"),
                               numpy_helper.from_array(np.array([2, 3], np.int64), "axes")])
    graph = helper.make_graph([helper.make_node("Equal", ["mode", "one"], ["c"]),
                               helper.make_node("If", ["c"], ["y"], then_branch=fits, else_branch=wrong)],
                              "if_on_a_setting", [x, mode], [y], [one, two, w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_if_decided_by_a_bound_setting_and_by_shapes_builds_only_the_branch_taken(tmp_path):
    """``--bind mode=1`` decides the outer ``If``, the fixed shapes the inner one: both are
    inlined before onnxruntime folds the graph (its inlining failed on outer names), the branch
    not taken — which no shape inference could pass at these shapes — is never looked at."""
    model = _if_on_a_setting(tmp_path / "m.onnx")
    manifest = packaged(model, tmp_path, bindings={"mode": "1"})
    assert any("If node(s) decided" in n for n in manifest["model"]["notes"]), manifest["model"]["notes"]


def test_a_detector_head_with_topk_is_refused_naming_the_op(tmp_path):
    """An M-LSD-style line detector's post-processing in the graph: a 1×1 conv's centre map
    through a sigmoid, peaks kept where a 3×3 max pool equals the map, TopK over the flattened
    map and the displacements gathered at its indices. TVM's CPU TopK is a call into its sort
    library, which only the compiler has: the library built (once the fusion passes no longer
    read that call as blocks under a root: 'Cannot find a block with the name: root') and passed
    its check in the compiling process, then failed in the board's loader. It is refused at
    build, naming the op and the runtime."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((5, 8, 1, 1)).astype(np.float32), "w")
    consts = [w, numpy_helper.from_array(np.array([1, 1, 4096], np.int64), "flat"),
              numpy_helper.from_array(np.array([1, 4, 4096], np.int64), "flat4"),
              numpy_helper.from_array(np.array([50], np.int64), "k"),
              numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(np.array([1], np.int64), "one"),
              numpy_helper.from_array(np.array([5], np.int64), "five"), numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["tp"]),
             helper.make_node("Slice", ["tp", "zero", "one", "axis1"], ["c"]),
             helper.make_node("Slice", ["tp", "one", "five", "axis1"], ["disp"]),
             helper.make_node("Sigmoid", ["c"], ["centre"]),
             helper.make_node("MaxPool", ["centre"], ["peak"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Equal", ["centre", "peak"], ["is_peak"]),
             helper.make_node("Cast", ["is_peak"], ["keep"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["centre", "keep"], ["peaks"]),
             helper.make_node("Reshape", ["peaks", "flat"], ["flat_peaks"]),
             helper.make_node("TopK", ["flat_peaks", "k"], ["scores", "idx"], axis=-1),
             helper.make_node("Reshape", ["disp", "flat4"], ["flat_disp"]),
             helper.make_node("Expand", ["idx", helper.make_tensor("e", TensorProto.INT64, [3], [1, 4, 50]).name], ["idx4"]),
             helper.make_node("GatherElements", ["flat_disp", "idx4"], ["lines"], axis=2)]
    consts.append(numpy_helper.from_array(np.array([1, 4, 50], np.int64), "e"))
    graph = helper.make_graph(nodes, "mlsd_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 64, 64])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 50]),
                               helper.make_tensor_value_info("lines", TensorProto.FLOAT, [1, 4, 50])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "mlsd_head.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelError) as err:
        package(PackageOptions(model=path, device="host", output=tmp_path / "pkg"))
    assert "'topk'" in err.value.message and "runtime on the board" in err.value.message, err.value.message
    assert not (tmp_path / "pkg").exists()


def test_a_stack_of_many_decoding_steps_compiles_as_a_tree_of_concatenations(tmp_path):
    """A table recognizer's decoder (PP-OCR's SLANet) stacks each of its 501 steps' outputs into
    one tensor: one Concat of that many pieces. It becomes concatenations of at most
    WIDE_CONCAT pieces (one kernel over 501 pieces spent minutes in scheduling and LLVM), and
    the package matches onnxruntime."""
    from tvm import relax

    from edgetune._tvm.passes.cleanups import WIDE_CONCAT, WideConcatsAsTrees

    steps = 40
    nodes = [helper.make_node("Mul", ["x", f"s{k}"], [f"y{k}"]) for k in range(steps)]
    nodes += [helper.make_node("Unsqueeze", [f"y{k}", "axis"], [f"u{k}"]) for k in range(steps)]
    nodes.append(helper.make_node("Concat", [f"u{k}" for k in range(steps)], ["steps"], axis=1))
    consts = [numpy_helper.from_array(np.array([1], np.int64), "axis")]
    consts += [numpy_helper.from_array(np.array(k + 0.5, np.float32), f"s{k}") for k in range(steps)]
    graph = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 50])],
                              [helper.make_tensor_value_info("steps", TensorProto.FLOAT, [1, steps, 50])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "stack.onnx"
    onnx.save(model, str(path))
    mod = WideConcatsAsTrees()(import_model(path).mod)
    widths = []
    relax.analysis.post_order_visit(mod["main"].body, lambda e: widths.append(len(e.args[0].fields)) if isinstance(
        e, relax.Call) and getattr(e.op, "name", "") == "relax.concat" else None)
    assert widths and max(widths) <= WIDE_CONCAT and sum(w for w in widths) > steps, widths
    packaged(path, tmp_path)
