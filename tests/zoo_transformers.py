"""Transformer encoders and decoders as exporters write them, built with onnx.helper.

Each mirrors what ``torch.onnx.export`` makes of a Hugging Face model (read off real exports of
``transformers`` models: op patterns, weight layouts, where biases sit, how masks are spelled):

* ``bert``: BERT / MiniLM sentence encoders — word + token-type + position embeddings,
  LayerNorm spelled out as ReduceMean/Sub/Pow/Sqrt/Div (opset 14), the additive attention mask
  ``(1 − mask) · −10000``, ``Add(bias, MatMul)`` projections, heads split with Reshape +
  Transpose (constant shapes, or with ``dynamic`` the Shape → Gather → Unsqueeze → Concat chains
  an export with dynamic axes has), scores divided by √d, erf GELU.
* ``vit``: ViT-S/16-style — patch convolution, class token, position embeddings, pre-LN blocks
  with ``LayerNormalization`` (opset 17).
* ``whisper_encoder``: two 1-D convolutions with GELU, sinusoidal positions, pre-LN blocks, the
  query scaled before its product, no bias on the key projection.
* ``t5_encoder`` / ``t5_decoder``: RMS norm, no biases, relative position bias added to the
  scores, unscaled attention, ReLU feed-forward; the decoder has a causal mask and
  cross-attention over the encoder's states.

``ort_optimized`` passes a model through onnxruntime's transformer optimizer (which writes the
contrib ops real optimized files carry: Attention, SkipLayerNormalization,
EmbedLayerNormalization, BiasGelu, FastGelu, FusedMatMul); ``dynamic_int8`` through
``quantize_dynamic`` (MatMulInteger + DynamicQuantizeLinear, ConvInteger).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from zoo import Graph

OPSET = 14


class TGraph(Graph):
    """A graph builder with the transformer pieces; ``dynamic``: shapes through Shape chains."""

    def __init__(self, name: str, seed: int, dynamic: bool = False, opset: int = OPSET):
        super().__init__(name, seed)
        self.dynamic, self.opset = dynamic, opset
        self.inputs: dict[str, tuple[int, tuple[Any, ...]]] = {}

    def input(self, name: str, elem: int, shape: tuple[Any, ...]) -> str:
        self.inputs[name] = (elem, shape)
        return name

    def weight(self, shape: tuple[int, ...], scale: float | None = None) -> str:
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def linear(self, x: str, din: int, dout: int, bias: bool = True) -> str:
        y = self.op("MatMul", [x, self.weight((din, dout))])
        if bias:  # torch exports the bias first: Add(bias, MatMul)
            y = self.op("Add", [self.const((self.rng.standard_normal(dout) * 0.02).astype(np.float32), "b"), y])
        return y

    def layer_norm(self, x: str, d: int, eps: float = 1e-12) -> str:
        gamma = self.const(self.rng.uniform(0.8, 1.2, d).astype(np.float32), "ln_w")
        beta = self.const(self.rng.uniform(-0.1, 0.1, d).astype(np.float32), "ln_b")
        if self.opset >= 17:
            return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=eps)
        mean = self.op("ReduceMean", [x], axes=[-1])
        centred = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [centred, self.const(np.array(2.0, np.float32))])], axes=[-1])
        std = self.op("Sqrt", [self.op("Add", [var, self.const(np.array(eps, np.float32))])])
        return self.op("Add", [self.op("Mul", [self.op("Div", [centred, std]), gamma]), beta])

    def rms_norm(self, x: str, d: int, eps: float = 1e-6) -> str:
        weight = self.const(self.rng.uniform(0.8, 1.2, d).astype(np.float32), "rms_w")
        var = self.op("ReduceMean", [self.op("Pow", [x, self.const(np.array(2.0, np.float32))])], axes=[-1], keepdims=1)
        inv = self.op("Div", [self.const(np.array(1.0, np.float32)),
                              self.op("Sqrt", [self.op("Add", [var, self.const(np.array(eps, np.float32))])])])
        return self.op("Mul", [weight, self.op("Mul", [x, inv])])

    def gelu(self, x: str) -> str:
        """erf GELU as torch exports ``nn.GELU()`` below opset 20."""
        erf = self.op("Erf", [self.op("Div", [x, self.const(np.array(1.4142135, np.float32))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [erf, self.const(np.array(1.0, np.float32))])]),
                               self.const(np.array(0.5, np.float32))])

    def unsqueeze(self, x: str, axes: list[int]) -> str:
        return self.op("Unsqueeze", [x, self.const(np.array(axes, np.int64))])

    def shape_of(self, x: str, dims: list[int | str], fixed: list[int]) -> str:
        """A Reshape target: constant, or with ``dynamic`` the Shape → Gather → Unsqueeze →
        Concat chain (``str`` dims are sizes of ``x`` at that axis index)."""
        if not self.dynamic:
            return self.const(np.array(fixed, np.int64), "shape")
        parts = []
        for d in dims:
            if isinstance(d, str):
                size = self.op("Gather", [self.op("Shape", [x]), self.const(np.array(int(d), np.int64))], axis=0)
                parts.append(self.unsqueeze(size, [0]))
            else:
                parts.append(self.const(np.array([d], np.int64)))
        return self.op("Concat", parts, axis=0)

    def split_heads(self, x: str, seq: int, heads: int, dh: int, key: bool = False) -> str:
        y = self.op("Reshape", [x, self.shape_of(x, ["0", "1", heads, dh], [1, seq, heads, dh])])
        return self.op("Transpose", [y], perm=[0, 2, 3, 1] if key else [0, 2, 1, 3])

    def merge_heads(self, x: str, seq: int, hidden: int) -> str:
        y = self.op("Transpose", [x], perm=[0, 2, 1, 3])
        return self.op("Reshape", [y, self.shape_of(y, ["0", "1", hidden], [1, seq, hidden])])

    def attention(self, x: str, seq: int, hidden: int, heads: int, *, mask: str | None = None, bias: str | None = None,
                  kv: str | None = None, kv_seq: int | None = None, scale: str = "div", qkv_bias: bool = True,
                  k_bias: bool | None = None) -> str:
        """Multi-head attention as HF exports it; returns the output projection's result.
        ``scale``: ``div`` (scores / √d: BERT, ViT), ``query`` (q · d^-½ first: Whisper),
        ``none`` (T5). ``bias``: an additive [1, H, S, S] term (T5's position bias)."""
        dh = hidden // heads
        kv, kv_seq = (kv or x), (kv_seq or seq)
        q = self.linear(x, hidden, hidden, qkv_bias)
        if scale == "query":
            q = self.op("Mul", [q, self.const(np.array(dh ** -0.5, np.float32))])
        k = self.linear(kv, hidden, hidden, qkv_bias if k_bias is None else k_bias)
        v = self.linear(kv, hidden, hidden, qkv_bias)
        scores = self.op("MatMul", [self.split_heads(q, seq, heads, dh), self.split_heads(k, kv_seq, heads, dh, key=True)])
        if scale == "div":
            scores = self.op("Div", [scores, self.const(np.array(np.sqrt(dh), np.float32))])
        if bias is not None:
            scores = self.op("Add", [scores, bias])
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        probs = self.op("Softmax", [scores], axis=-1 if self.opset >= 13 else 3)
        ctx = self.merge_heads(self.op("MatMul", [probs, self.split_heads(v, kv_seq, heads, dh)]), seq, hidden)
        return self.linear(ctx, hidden, hidden, qkv_bias)

    def extended_mask(self, mask: str, fill: float = -10000.0) -> str:
        """``(1 − mask[:, None, None, :]) · fill`` from an int64 0/1 mask."""
        m = self.op("Cast", [self.unsqueeze(self.unsqueeze(mask, [1]), [2])], to=1)
        inverted = self.op("Sub", [self.const(np.array(1.0, np.float32)), m])
        return self.op("Mul", [inverted, self.const(np.array(fill, np.float32))])

    def save_model(self, out: Path, outputs: list[str]) -> Path:
        import onnx
        from onnx import helper

        inputs = [helper.make_tensor_value_info(n, elem, list(s)) for n, (elem, s) in self.inputs.items()]
        graph = helper.make_graph(self.nodes, self.name, inputs, [], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="pytorch",
                                  producer_version="2.5.0")
        model.ir_version = 8
        inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
        for name in outputs:
            vi = model.graph.output.add()
            vi.CopyFrom(inferred[name])
            if self.dynamic:  # exporters name the dynamic axes of outputs too
                for dim, label in zip(vi.type.tensor_type.shape.dim, ("batch", "sequence")):
                    dim.dim_param = label
        onnx.checker.check_model(model)
        onnx.save(model, str(out))
        return out


def _seq_shape(g: TGraph, seq: int) -> tuple[Any, ...]:
    return ("batch", "sequence") if g.dynamic else (1, seq)


# ---------------------------------------------------------------- BERT / MiniLM


def bert(out: Path, seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4, ffn: int | None = None,
         seq: int = 16, vocab: int = 120, dynamic: bool = False, token_types: bool = True) -> Path:
    """A BERT-style encoder (MiniLM-L6: layers=6, hidden=384, heads=12; BERT-base: 12 × 768 × 12);
    inputs input_ids, attention_mask (and token_type_ids), output last_hidden_state."""
    from onnx import TensorProto

    g = TGraph("bert", seed, dynamic)
    ffn = ffn or 4 * hidden
    ids = g.input("input_ids", TensorProto.INT64, _seq_shape(g, seq))
    mask = g.input("attention_mask", TensorProto.INT64, _seq_shape(g, seq))
    x = g.op("Gather", [g.weight((vocab, hidden), 0.5), ids])
    if token_types:
        tt = g.input("token_type_ids", TensorProto.INT64, _seq_shape(g, seq))
        x = g.op("Add", [x, g.op("Gather", [g.weight((2, hidden), 0.5), tt])])
    positions = g.const(np.arange(512 if dynamic else seq, dtype=np.int64).reshape(1, -1), "position_ids")
    if dynamic:  # position_ids[:, :seq] from the registered buffer
        length = g.unsqueeze(g.op("Gather", [g.op("Shape", [ids]), g.const(np.array(1, np.int64))], axis=0), [0])
        positions = g.op("Slice", [positions, g.const(np.array([0], np.int64)), length, g.const(np.array([1], np.int64))])
    x = g.op("Add", [x, g.op("Gather", [g.weight((512, hidden), 0.5), positions])])
    x = g.layer_norm(x, hidden)
    ext = g.extended_mask(mask)
    for _ in range(layers):
        x = g.layer_norm(g.op("Add", [g.attention(x, seq, hidden, heads, mask=ext), x]), hidden)
        h = g.linear(g.gelu(g.linear(x, hidden, ffn)), ffn, hidden)
        x = g.layer_norm(g.op("Add", [h, x]), hidden)
    return g.save_model(out, [x])


# ---------------------------------------------------------------- ViT


def vit(out: Path, seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4, image: int = 32, patch: int = 8,
        classes: int = 0) -> Path:
    """A ViT-style encoder (ViT-S/16: layers=12, hidden=384, heads=6, image=224, patch=16);
    ``classes``: a classifier on the class token (else the last hidden state is the output)."""
    from onnx import TensorProto

    g = TGraph("vit", seed, opset=17)
    pixels = g.input("pixel_values", TensorProto.FLOAT, (1, 3, image, image))
    tokens = (image // patch) ** 2
    w = (g.rng.standard_normal((hidden, 3, patch, patch)) / np.sqrt(3 * patch * patch)).astype(np.float32)
    x = g.op("Conv", [pixels, g.const(w), g.const(np.zeros(hidden, np.float32))], kernel_shape=[patch, patch],
             strides=[patch, patch])
    x = g.op("Transpose", [g.op("Reshape", [x, g.const(np.array([1, hidden, tokens], np.int64))])], perm=[0, 2, 1])
    cls = g.const((g.rng.standard_normal((1, 1, hidden)) * 0.02).astype(np.float32), "cls")
    x = g.op("Concat", [cls, x], axis=1)
    x = g.op("Add", [x, g.const((g.rng.standard_normal((1, tokens + 1, hidden)) * 0.02).astype(np.float32), "pos")])
    seq = tokens + 1
    for _ in range(layers):
        x = g.op("Add", [g.attention(g.layer_norm(x, hidden), seq, hidden, heads), x])
        x = g.op("Add", [g.linear(g.gelu(g.linear(g.layer_norm(x, hidden), hidden, 4 * hidden)), 4 * hidden, hidden), x])
    x = g.layer_norm(x, hidden)
    if classes:
        first = g.op("Gather", [x, g.const(np.array(0, np.int64))], axis=1)
        x = g.linear(first, hidden, classes)
    return g.save_model(out, [x])


# ---------------------------------------------------------------- Whisper encoder


def whisper_encoder(out: Path, seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4, mels: int = 16,
                    frames: int = 64, dynamic: bool = False) -> Path:
    """A Whisper-style audio encoder (tiny: layers=4, hidden=384, heads=6, mels=80, frames=3000)
    over a log-mel input [1, mels, frames]; output [1, frames / 2, hidden]. ``dynamic``: a
    speech encoder of any length (no mask: every frame is speech), its frame axis dynamic in
    the file and the positions the first frames / 2 rows of a 1024-row table."""
    from onnx import TensorProto

    g = TGraph("whisper_encoder", seed, dynamic=dynamic, opset=17)
    feats = g.input("input_features", TensorProto.FLOAT, ("batch", mels, "frames") if dynamic else (1, mels, frames))

    def conv1d(x: str, cin: int, stride: int) -> str:
        w = (g.rng.standard_normal((hidden, cin, 3)) / np.sqrt(3 * cin)).astype(np.float32)
        return g.op("Conv", [x, g.const(w), g.const(np.zeros(hidden, np.float32))], kernel_shape=[3], pads=[1, 1],
                    strides=[stride], dilations=[1], group=1)

    x = g.gelu(conv1d(g.gelu(conv1d(feats, mels, 1)), hidden, 2))
    x = g.op("Transpose", [x], perm=[0, 2, 1])
    seq = frames // 2
    t = np.arange(1024 if dynamic else seq)[:, None] / (10000 ** (np.arange(hidden // 2) / (hidden // 2 - 1)))[None, :]
    pos = g.const(np.concatenate([np.sin(t), np.cos(t)], 1).astype(np.float32)[None], "pos")
    if dynamic:  # pos[:, :T]
        length = g.unsqueeze(g.op("Gather", [g.op("Shape", [x]), g.const(np.array(1, np.int64))], axis=0), [0])
        pos = g.op("Slice", [pos, g.const(np.array([0], np.int64)), length, g.const(np.array([1], np.int64))])
    x = g.op("Add", [x, pos])
    for _ in range(layers):
        x = g.op("Add", [x, g.attention(g.layer_norm(x, hidden, 1e-5), seq, hidden, heads, scale="query", k_bias=False)])
        x = g.op("Add", [x, g.linear(g.gelu(g.linear(g.layer_norm(x, hidden, 1e-5), hidden, 4 * hidden)), 4 * hidden, hidden)])
    return g.save_model(out, [g.layer_norm(x, hidden, 1e-5)])


# ---------------------------------------------------------------- T5


def _relative_bias(g: TGraph, heads: int, q_len: int, k_len: int, causal: bool) -> str:
    """T5's bucketed relative position bias, [1, heads, q, k] (a constant once shapes are fixed)."""
    rel = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]
    buckets = np.minimum(np.abs(rel), 31) + (0 if causal else 32 * (rel > 0))
    table = g.rng.standard_normal((64, heads)).astype(np.float32) * 0.5
    return g.const(table[buckets].transpose(2, 0, 1)[None].astype(np.float32), "position_bias")


def t5_encoder(out: Path, seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4, seq: int = 16,
               vocab: int = 120) -> Path:
    """A T5-style encoder (t5-small: layers=6, hidden=512, heads=8); inputs input_ids and
    attention_mask, output the last hidden state."""
    from onnx import TensorProto

    g = TGraph("t5_encoder", seed)
    ids = g.input("input_ids", TensorProto.INT64, (1, seq))
    mask = g.input("attention_mask", TensorProto.INT64, (1, seq))
    x = g.op("Gather", [g.weight((vocab, hidden), 1.0), ids])
    ext = g.extended_mask(mask, float(np.finfo(np.float32).min))
    bias = _relative_bias(g, heads, seq, seq, causal=False)
    for _ in range(layers):
        x = g.op("Add", [x, g.attention(g.rms_norm(x, hidden), seq, hidden, heads, mask=ext, bias=bias, scale="none",
                                        qkv_bias=False)])
        x = g.op("Add", [x, g.linear(g.op("Relu", [g.linear(g.rms_norm(x, hidden), hidden, 2 * hidden, False)]),
                                     2 * hidden, hidden, False)])
    return g.save_model(out, [g.rms_norm(x, hidden)])


def t5_decoder(out: Path, seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4, seq: int = 8, enc_seq: int = 16,
               vocab: int = 120) -> Path:
    """A T5-style decoder without cache: inputs input_ids, encoder_hidden_states,
    encoder_attention_mask; causal self-attention, cross-attention; output the logits."""
    from onnx import TensorProto

    g = TGraph("t5_decoder", seed)
    ids = g.input("input_ids", TensorProto.INT64, (1, seq))
    enc = g.input("encoder_hidden_states", TensorProto.FLOAT, (1, enc_seq, hidden))
    enc_mask = g.input("encoder_attention_mask", TensorProto.INT64, (1, enc_seq))
    embed = g.weight((vocab, hidden), 1.0)
    x = g.op("Gather", [embed, ids])
    causal = np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), 1)[None, None]
    self_bias = g.op("Add", [_relative_bias(g, heads, seq, seq, causal=True), g.const(causal, "causal")])
    cross = g.extended_mask(enc_mask, float(np.finfo(np.float32).min))
    for _ in range(layers):
        x = g.op("Add", [x, g.attention(g.rms_norm(x, hidden), seq, hidden, heads, bias=self_bias, scale="none",
                                        qkv_bias=False)])
        x = g.op("Add", [x, g.attention(g.rms_norm(x, hidden), seq, hidden, heads, mask=cross, kv=enc, kv_seq=enc_seq,
                                        scale="none", qkv_bias=False)])
        x = g.op("Add", [x, g.linear(g.op("Relu", [g.linear(g.rms_norm(x, hidden), hidden, 2 * hidden, False)]),
                                     2 * hidden, hidden, False)])
    x = g.op("Mul", [g.rms_norm(x, hidden), g.const(np.array(hidden ** -0.5, np.float32))])
    logits = g.op("MatMul", [x, g.op("Transpose", [embed], perm=[1, 0])])
    return g.save_model(out, [logits])


def gpt_decoder_with_past(out: Path, seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4, seq: int = 1,
                          past: int = 15, vocab: int = 120) -> Path:
    """A GPT-2-style decoder step with a key/value cache, as optimum exports one for
    ``text-generation-with-past``: inputs input_ids [1, seq], attention_mask [1, past + seq],
    position_ids [1, seq] and past_key_values.N.key / .value [1, heads, past, dh]; each layer
    concatenates its new keys and values after the cached ones (outputs present.N.*), the
    causal mask over the new tokens and the attention mask as one additive term."""
    from onnx import TensorProto

    g = TGraph("gpt_decoder", seed)
    dh, total = hidden // heads, past + seq
    ids = g.input("input_ids", TensorProto.INT64, (1, seq))
    mask = g.input("attention_mask", TensorProto.INT64, (1, total))
    positions = g.input("position_ids", TensorProto.INT64, (1, seq))
    cache = [(g.input(f"past_key_values.{i}.key", TensorProto.FLOAT, (1, heads, past, dh)),
              g.input(f"past_key_values.{i}.value", TensorProto.FLOAT, (1, heads, past, dh))) for i in range(layers)]
    embed = g.weight((vocab, hidden), 0.1)
    x = g.op("Add", [g.op("Gather", [embed, ids]), g.op("Gather", [g.weight((64, hidden), 0.1), positions])])
    causal = np.triu(np.full((seq, total), np.finfo(np.float32).min, np.float32), past + 1)[None, None]
    bias = g.op("Add", [g.const(causal, "causal"), g.extended_mask(mask, float(np.finfo(np.float32).min))])
    presents = []
    for past_k, past_v in cache:
        h = g.layer_norm(x, hidden, 1e-5)
        q, k, v = (g.split_heads(g.linear(h, hidden, hidden), seq, heads, dh) for _ in range(3))
        k_all, v_all = g.op("Concat", [past_k, k], axis=2), g.op("Concat", [past_v, v], axis=2)
        presents += [k_all, v_all]
        scores = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [k_all], perm=[0, 1, 3, 2])]),
                              g.const(np.array(np.sqrt(dh), np.float32))])
        probs = g.op("Softmax", [g.op("Add", [scores, bias])], axis=-1)
        ctx = g.merge_heads(g.op("MatMul", [probs, v_all]), seq, hidden)
        x = g.op("Add", [x, g.linear(ctx, hidden, hidden)])
        x = g.op("Add", [x, g.linear(g.gelu(g.linear(g.layer_norm(x, hidden, 1e-5), hidden, 4 * hidden)), 4 * hidden,
                                     hidden)])
    logits = g.op("MatMul", [g.layer_norm(x, hidden, 1e-5), g.op("Transpose", [embed], perm=[1, 0])])
    return g.save_model(out, [logits, *presents])


TRANSFORMERS = {"bert": bert, "vit": vit, "whisper_encoder": whisper_encoder, "t5_encoder": t5_encoder,
                "t5_decoder": t5_decoder, "gpt_decoder_with_past": gpt_decoder_with_past}


# ---------------------------------------------------------------- onnxruntime's tools


def ort_optimized(model: Path, out: Path, model_type: str, heads: int, hidden: int, gelu_approximation: bool = False) -> Path:
    """``model`` through ``onnxruntime.transformers.optimizer.optimize_model`` (CPU, the Python
    fusions only: Attention, SkipLayerNormalization, EmbedLayerNormalization, BiasGelu …; with
    ``gelu_approximation`` GELUs become FastGelu)."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    options = FusionOptions(model_type)
    options.enable_gelu_approximation = gelu_approximation
    optimized = optimizer.optimize_model(str(model), model_type=model_type, num_heads=heads, hidden_size=hidden,
                                         optimization_options=options, opt_level=0, use_gpu=False)
    optimized.save_model_to_file(str(out))
    return out


def ort_level_optimized(model: Path, out: Path, level: str = "extended") -> Path:
    """``model`` as onnxruntime's own graph optimizer writes it at ``level`` (extended: FusedMatMul,
    Gelu, LayerNormalization in the com.microsoft domain)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                     "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED}[level]
    opts.optimized_model_filepath = str(out)
    ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    return out


def dynamic_int8(model: Path, out: Path, per_channel: bool = False) -> Path:
    """``model`` through ``onnxruntime.quantization.quantize_dynamic`` with int8 weights, as its
    documentation shows (MatMulInteger / ConvInteger + DynamicQuantizeLinear)."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # DefaultTensorType: the types of contrib ops' outputs, which ONNX shape inference cannot tell
    quantize_dynamic(str(model), str(out), weight_type=QuantType.QInt8, per_channel=per_channel,
                     extra_options={"DefaultTensorType": TensorProto.FLOAT})
    return out
