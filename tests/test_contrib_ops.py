"""edgetune's ONNX → ONNX rewrites checked against onnxruntime itself: each model below runs in
onnxruntime as written (with its contrib / signal / loop ops) and as rewritten to standard ops;
the two must agree. No TVM here: these pin the rewrites' meaning, the package tests the rest."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetune.errors import ModelError
from edgetune.importer import onnx_contrib, onnx_lstm_int8, onnx_signal
from edgetune.importer.onnx_loops import unroll_loops

MS = "com.microsoft"
RNG = np.random.default_rng(0)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def _model(nodes, inputs, outputs, inits, opset: int = 14) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _agree(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rewrite=onnx_contrib.standard_ops, atol: float = 2e-5) -> dict:
    before = _run(model, feeds)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    counts = rewrite(rewritten)
    assert counts, "nothing was rewritten"
    assert not any(n.domain == MS for n in rewritten.graph.node)
    after = _run(rewritten, feeds)
    for a, b in zip(before, after):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, atol=atol, rtol=1e-5)
    return counts


def _f(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- attention


def _attention_model(mask_shape: list[int] | None, *, unidirectional: int = 0, bias: bool = True, attn_bias: bool = False,
                     scale: float | None = None, quantized: bool = False) -> onnx.ModelProto:
    b, s, hidden, heads = 2, 6, 16, 4
    inputs = [_f("x", [b, s, hidden])]
    inits = {"w": _x(hidden, 3 * hidden) * 0.3, "bias": _x(3 * hidden) * 0.1}
    names = ["x", "w", "bias" if bias else "", ""]
    if mask_shape is not None:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT32, mask_shape))
        names[3] = "mask"
    extra = {"num_heads": heads, "unidirectional": unidirectional}
    if scale is not None:
        extra["scale"] = scale
    nodes = []
    if attn_bias:
        inputs.append(_f("attn_bias", [b, heads, s, s]))
        names += ["", "attn_bias"]
    if quantized:
        inits["w_q"] = (RNG.integers(-100, 100, (hidden, 3 * hidden))).astype(np.int8)
        inits["w_scale"] = np.array(0.01, np.float32)
        nodes.append(helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zero"]))
        qnames = ["xq", "w_q", "bias", "x_scale", "w_scale", names[3], "x_zero"]
        nodes.append(helper.make_node("QAttention", qnames, ["y"], domain=MS, **extra))
    else:
        nodes.append(helper.make_node("Attention", names, ["y"], domain=MS, **extra))
    return _model(nodes, inputs, [_f("y", [b, s, hidden])], inits)


def _mask(shape: list[int], s: int = 6) -> np.ndarray:
    if shape == [2]:
        return np.array([4, 6], np.int32)  # key lengths (right padding)
    if shape == [4]:
        return np.array([6, 5, 1, 0], np.int32)  # ends then starts (left padding)
    mask = (RNG.random(shape) > 0.3).astype(np.int32)
    mask[..., 0] = 1
    return mask


@pytest.mark.parametrize("mask_shape", [None, [2], [4], [2, 6], [2, 6, 6]], ids=str)
def test_attention_mask_formats_match_onnxruntime(mask_shape):
    feeds = {"x": _x(2, 6, 16)}
    if mask_shape is not None:
        feeds["mask"] = _mask(mask_shape)
    assert _agree(_attention_model(mask_shape), feeds) == {f"{MS}::Attention": 1}


@pytest.mark.parametrize("mask_shape,kw", [([2, 6], {"unidirectional": 1}), (None, {"attn_bias": True, "scale": 0.3})], ids=str)
def test_attention_variants_match_onnxruntime(mask_shape, kw):
    # onnxruntime 1.31's CPU kernel crashes on a 2-D mask together with attention_bias, and on a
    # missing bias input: neither is tested against it
    feeds = {"x": _x(2, 6, 16)}
    if mask_shape is not None:
        feeds["mask"] = _mask(mask_shape)
    if kw.get("attn_bias"):
        feeds["attn_bias"] = _x(2, 4, 6, 6)
    _agree(_attention_model(mask_shape, **kw), feeds)


def test_quantized_attention_matches_onnxruntime():
    feeds = {"x": _x(2, 6, 16), "mask": np.array([6, 3], np.int32)}
    assert _agree(_attention_model([2], quantized=True), feeds) == {f"{MS}::QAttention": 1}


def test_multi_head_attention_matches_onnxruntime():
    b, s, t, hidden = 1, 5, 7, 16
    nodes = [helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias", "pad"], ["y"], domain=MS, num_heads=2)]
    inputs = [_f("q", [b, s, hidden]), _f("k", [b, t, hidden]), _f("v", [b, t, hidden]),
              helper.make_tensor_value_info("pad", TensorProto.INT32, [b, t])]
    feeds = {"q": _x(b, s, hidden), "k": _x(b, t, hidden), "v": _x(b, t, hidden), "pad": np.array([[1] * 5 + [0] * 2], np.int32)}
    _agree(_model(nodes, inputs, [_f("y", [b, s, hidden])], {"bias": _x(3 * hidden) * 0.1}), feeds)


def test_attention_with_a_key_value_cache_is_refused_by_name():
    model = _attention_model([2])
    model.graph.node[0].input.append("past")
    model.graph.input.append(_f("past", [2, 2, 4, 3, 4]))
    with pytest.raises(ModelError, match="Attention '.*': attention with past"):
        onnx_contrib.standard_ops(model)


# ---------------------------------------------------------------- normalisations and activations


def test_layer_norm_fusions_match_onnxruntime():
    h = 12
    nodes = [
        helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "b", "bias"], ["y1", "", "", "sum"], domain=MS, epsilon=1e-5),
        helper.make_node("SkipSimplifiedLayerNormalization", ["y1", "skip", "g"], ["y2"], domain=MS, epsilon=1e-6),
        helper.make_node("SimplifiedLayerNormalization", ["y2", "g"], ["y3"], axis=-1, epsilon=1e-6),
        helper.make_node("LayerNormalization", ["y3", "g", "b"], ["y4"], axis=-1, epsilon=1e-5),  # ORT's, below opset 17
    ]
    inits = {"g": _x(h) * 0.1 + 1, "b": _x(h) * 0.1, "bias": _x(h) * 0.1}
    model = _model(nodes, [_f("x", [2, 3, h]), _f("skip", [2, 3, h])], [_f("y4", [2, 3, h]), _f("sum", [2, 3, h])], inits)
    counts = _agree(model, {"x": _x(2, 3, h), "skip": _x(2, 3, h)})
    assert counts == {f"{MS}::SkipLayerNormalization": 1, f"{MS}::SkipSimplifiedLayerNormalization": 1,
                      "SimplifiedLayerNormalization": 1, "LayerNormalization": 1}


@pytest.mark.parametrize("with_mask", [True, False])
def test_embed_layer_normalization_matches_onnxruntime(with_mask):
    b, s, h = 2, 5, 8
    names = ["ids", "seg", "words", "positions", "segments", "g", "beta", "mask" if with_mask else ""]
    nodes = [helper.make_node("EmbedLayerNormalization", names, ["y", "mask_index"], domain=MS, epsilon=1e-12)]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT32, [b, s]) for n in ("ids", "seg", "mask")[:3 if with_mask else 2]]
    inits = {"words": _x(30, h), "positions": _x(16, h), "segments": _x(2, h), "g": _x(h) + 1, "beta": _x(h) * 0.1}
    outputs = [_f("y", [b, s, h]), helper.make_tensor_value_info("mask_index", TensorProto.INT32, [b])]
    feeds = {"ids": RNG.integers(0, 30, (b, s)).astype(np.int32), "seg": RNG.integers(0, 2, (b, s)).astype(np.int32)}
    if with_mask:
        feeds["mask"] = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    _agree(_model(nodes, inputs, outputs, inits), feeds)


def test_gelus_and_fused_matmul_match_onnxruntime():
    nodes = [
        helper.make_node("FusedMatMul", ["x", "w"], ["mm"], domain=MS, transB=1, alpha=0.5),
        helper.make_node("BiasGelu", ["mm", "bias"], ["g1"], domain=MS),
        helper.make_node("FastGelu", ["g1", "bias"], ["g2"], domain=MS),
        helper.make_node("Gelu", ["g2"], ["g3"], domain=MS),
        helper.make_node("QuickGelu", ["g3"], ["y"], domain=MS, alpha=1.5),
    ]
    model = _model(nodes, [_f("x", [2, 3, 8])], [_f("y", [2, 3, 6])], {"w": _x(6, 8), "bias": _x(6)})
    assert len(_agree(model, {"x": _x(2, 3, 8)})) == 5


def test_bias_add_is_the_sum_of_its_inputs():
    """BiasAdd has no CPU kernel in onnxruntime: checked against its definition instead."""
    nodes = [helper.make_node("BiasAdd", ["x", "bias", "skip"], ["y"], domain=MS)]
    model = _model(nodes, [_f("x", [2, 3, 6]), _f("skip", [2, 3, 6])], [_f("y", [2, 3, 6])], {"bias": _x(6)})
    assert onnx_contrib.standard_ops(model) == {f"{MS}::BiasAdd": 1}
    x, skip = _x(2, 3, 6), _x(2, 3, 6)
    bias = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(_run(model, {"x": x, "skip": skip})[0], x + bias + skip, rtol=1e-6)


def test_dynamic_quantized_matmuls_match_onnxruntime():
    nodes = [
        helper.make_node("DynamicQuantizeMatMul", ["x", "wq", "ws", "wz", "bias"], ["y1"], domain=MS),
        helper.make_node("DynamicQuantizeLinear", ["y1"], ["q", "qs", "qz"]),
        helper.make_node("MatMulIntegerToFloat", ["q", "wq2", "qs", "ws2", "qz"], ["y"], domain=MS),
    ]
    inits = {"wq": RNG.integers(-127, 127, (8, 6)).astype(np.int8), "ws": np.array(0.02, np.float32), "wz": np.array(0, np.int8),
             "bias": _x(6), "wq2": RNG.integers(-127, 127, (6, 4)).astype(np.int8), "ws2": (RNG.random(4) * 0.02).astype(np.float32)}
    model = _model(nodes, [_f("x", [3, 8])], [_f("y", [3, 4])], inits)
    _agree(model, {"x": _x(3, 8)}, atol=1e-6)


# ---------------------------------------------------------------- signal ops, loops, quantized LSTM


def test_stft_and_dft_match_onnxruntime(tmp_path):
    import audio_models

    for path in (audio_models.stft_log_mel(tmp_path / "stft.onnx"), audio_models.dft_forms(tmp_path / "dft17.onnx"),
                 audio_models.dft_forms(tmp_path / "dft20.onnx", opset=20)):
        model = onnx.load(str(path))
        name = model.graph.input[0].name
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        _agree(model, {name: _x(*shape)}, rewrite=onnx_signal.standard_ops, atol=2e-4)


def test_constant_trip_count_loop_unrolls_to_onnxruntimes_result(tmp_path):
    import audio_models

    model = onnx.load(str(audio_models.frame_loop(tmp_path / "loop.onnx")))
    feeds = {"x": _x(6, 8)}
    before = _run(model, feeds)
    trips = [n for n in model.graph.node if n.op_type == "Gather" and n.output[0] == "trips"][0]
    model.graph.node.remove(trips)  # what the shape folding leaves: the trip count a constant
    model.graph.initializer.append(numpy_helper.from_array(np.array(6, np.int64), "trips"))
    assert unroll_loops(model) == ({"final": 6}, {})
    for a, b in zip(before, _run(model, feeds)):
        np.testing.assert_allclose(b, a, atol=1e-6)


def test_run_time_loop_with_scan_outputs_is_refused_by_name(tmp_path):
    import audio_models

    model = onnx.load(str(audio_models.frame_loop(tmp_path / "loop.onnx")))
    with pytest.raises(ModelError, match="Loop 'final'.*trip count is decided at run time.*scan outputs"):
        unroll_loops(model)


def test_run_time_loop_without_scan_outputs_is_kept(tmp_path):
    import rnn_models

    model = onnx.load(str(rnn_models.run_time_loop(tmp_path / "loop.onnx", early_exit=True)))
    assert unroll_loops(model) == ({}, {"step_loop": "its trip count is decided at run time"})
    assert [n.op_type for n in model.graph.node] == ["Loop"]


@pytest.mark.parametrize("batch,direction", [(1, "forward"), (1, "bidirectional"), (3, "reverse")])
def test_dynamic_quantize_lstm_matches_onnxruntime_on_one_thread(tmp_path, batch, direction):
    import rnn_models
    import zoo_transformers

    float_model = rnn_models.single_layer(tmp_path / "lstm.onnx", "LSTM", batch=batch, steps=6, direction=direction)
    model = onnx.load(str(zoo_transformers.dynamic_int8(float_model, tmp_path / "lstm_q.onnx")))
    assert any(n.op_type == "DynamicQuantizeLSTM" for n in model.graph.node)
    feeds = {"x": _x(6, batch, 6)}
    counts = _agree(model, feeds, rewrite=onnx_lstm_int8.standard_ops, atol=0)
    assert counts == {f"{MS}::DynamicQuantizeLSTM": 1}


def test_contrib_rewrites_on_optimizer_output(tmp_path):
    """What onnxruntime's transformer optimizer writes for a BERT encoder (Attention with a 1-D
    mask index from ReduceSum, SkipLayerNormalization, BiasGelu) means the same rewritten."""
    import zoo_transformers as zt

    optimized = zt.ort_optimized(zt.bert(tmp_path / "bert.onnx"), tmp_path / "opt.onnx", "bert", heads=4, hidden=64)
    model = onnx.load(str(optimized))
    assert {n.op_type for n in model.graph.node if n.domain == MS} >= {"Attention", "SkipLayerNormalization", "BiasGelu"}
    mask = np.ones((1, 16), np.int64)
    mask[0, 12:] = 0
    feeds = {"input_ids": RNG.integers(0, 120, (1, 16)), "token_type_ids": RNG.integers(0, 2, (1, 16)), "attention_mask": mask}
    _agree(model, feeds)


def test_unknown_contrib_op_stays_for_the_unsupported_list():
    nodes = [helper.make_node("CDist", ["x", "x"], ["y"], domain=MS)]
    model = _model(nodes, [_f("x", [3, 4])], [_f("y", [3, 3])], {})
    assert onnx_contrib.standard_ops(model) == {}
    assert model.graph.node[0].op_type == "CDist"


def _lstm_behind_a_shape_chain(tmp_path) -> onnx.ModelProto:
    """A DynamicQuantizeLSTM whose input is reshaped by a shape computed from the graph
    (Shape → Gather → Concat → Reshape, as exporters write a batch-major to time-major move):
    every graph input is fixed, but ONNX's shape inference alone leaves the LSTM's input open."""
    import rnn_models
    import zoo_transformers

    model = onnx.load(str(rnn_models.single_layer(tmp_path / "lstm.onnx", "LSTM", batch=1, steps=6)))
    g = model.graph
    g.input[0].name = "xb"
    g.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # [batch, steps, features]
    g.input[0].type.tensor_type.shape.dim[1].dim_value = 6
    for name, axis in (("i0", 0), ("i1", 1), ("i2", 2)):
        g.initializer.append(numpy_helper.from_array(np.array([axis], np.int64), name))
    chain = [helper.make_node("Shape", ["xb"], ["s"]), helper.make_node("Gather", ["s", "i1"], ["d1"]),
             helper.make_node("Gather", ["s", "i0"], ["d0"]), helper.make_node("Gather", ["s", "i2"], ["d2"]),
             helper.make_node("Concat", ["d1", "d0", "d2"], ["shp"], axis=0),
             helper.make_node("Transpose", ["xb"], ["xt"], perm=[1, 0, 2]), helper.make_node("Reshape", ["xt", "shp"], ["x"])]
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(chain + nodes)
    onnx.save(model, str(tmp_path / "chained.onnx"))
    return onnx.load(str(zoo_transformers.dynamic_int8(tmp_path / "chained.onnx", tmp_path / "chained_q.onnx")))


@pytest.mark.parametrize("how", ["propagated", "measured"])
def test_dynamic_quantize_lstm_behind_a_shape_chain(tmp_path, monkeypatch, how):
    """Its input's shape comes from ONNX's shape inference with the shape computations
    propagated, or — where inference cannot follow the graph at all — from onnxruntime running
    it (the TTS model refused with "its input shape is not fixed")."""
    from edgetune.importer import onnx_rewriter

    model = _lstm_behind_a_shape_chain(tmp_path)
    if how == "measured":
        monkeypatch.setattr(onnx_rewriter, "_infer", lambda *a: {})
    counts = _agree(model, {"xb": _x(1, 6, 6)}, rewrite=onnx_lstm_int8.standard_ops, atol=0)
    assert counts == {f"{MS}::DynamicQuantizeLSTM": 1}
