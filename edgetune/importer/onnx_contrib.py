"""onnxruntime's own operators as standard ONNX ops (TVM-free, so onnxruntime itself can check
each rewrite against the operator it replaces).

Exported models carry the ops onnxruntime's tools write: ``onnxruntime.transformers``' optimizer
fuses attention, layer norms and GELUs into ``com.microsoft`` ops, its graph optimizer writes
``FusedMatMul`` and ``LayerNormalization`` below opset 17, ``quantize_dynamic`` writes
``QAttention``, ``DynamicQuantizeMatMul`` / ``MatMulIntegerToFloat``. TVM 0.27 converts none of
them by domain (its converter map is keyed by op name alone, so a ``com.microsoft`` op of the same
name as a standard one would be converted with the wrong meaning). Each is spelled here as the
standard ops it stands for, as onnxruntime's CPU kernels compute it:

==================================  ===========================================================
``SkipLayerNormalization``          ``input + skip (+ bias)``, then a layer norm
``SkipSimplifiedLayerNormalization`` the same with an RMS norm (T5)
``SimplifiedLayerNormalization``    an RMS norm
``LayerNormalization`` (opset < 17) the layer norm spelled out (ReduceMean, Sub, Mul, Sqrt, Div)
``EmbedLayerNormalization``         three Gathers, their sum, a layer norm; ``mask_index`` the
                                    count of ones per row of the mask (zeros without one)
``Attention``, ``QAttention``       the Q/K/V projection (``QAttention``: an integer MatMul of
                                    the quantized input, scaled), heads split, ``scale·QKᵀ``
                                    plus the mask as ``mask_filter_value`` where masked (every
                                    mask_index format but 4-D), ``attention_bias``, causal when
                                    unidirectional, softmax, ``·V``, heads merged
``MultiHeadAttention``              the same from separate Q, K, V (no packed or past inputs)
``FusedMatMul``, ``TransposeMatMul``  transposes, MatMul, ``alpha``
``Gelu``, ``BiasGelu``, ``FastGelu``, ``QuickGelu``, ``BiasAdd``  their formulas (erf; tanh)
``DynamicQuantizeMatMul``, ``MatMulIntegerToFloat``  DynamicQuantizeLinear + MatMulInteger +
                                    Cast + the scales' product (+ bias)
==================================  ===========================================================

Anything else outside the standard domain stays, and is refused by name with the rest of the
unsupported operators.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ModelError
from ..onnx_proto import attrs, node_label
from .onnx_rewriter import Rewriter, Table, inp, out, rewrite_nodes

MS = "com.microsoft"


# ---------------------------------------------------------------- normalisations


def _skip_sum(rw: Rewriter, node: Any, bias_index: int) -> str:
    total = rw.op("Add", [node.input[0], node.input[1]])
    bias = inp(node, bias_index)
    return rw.op("Add", [total, bias]) if bias else total


def skip_layer_norm(rw: Rewriter, node: Any) -> None:
    eps = float(attrs(node).get("epsilon", 1e-12))
    total = _skip_sum(rw, node, 4)
    rw.layer_norm(total, node.input[2], inp(node, 3), eps, [node.output[0], out(node, 1), out(node, 2)])
    if out(node, 3):
        rw.op("Identity", [total], node.output[3])


def skip_simplified_layer_norm(rw: Rewriter, node: Any) -> None:
    eps = float(attrs(node).get("epsilon", 1e-12))
    total = _skip_sum(rw, node, 3)
    if out(node, 1):
        raise ModelError(f"{node_label(node)}: its 'mean' output (training only) is read", "export for inference")
    rw.rms_norm(total, node.input[2], eps, [node.output[0], out(node, 2)])
    if out(node, 3):
        rw.op("Identity", [total], node.output[3])


def _last_axis_only(rw: Rewriter, node: Any) -> None:
    axis = int(attrs(node).get("axis", -1))
    if axis != -1 and axis != rw.rank(node.input[0], node) - 1:
        raise ModelError(f"{node_label(node)}: normalisation over axis {axis}, not the last one, is not supported")


def simplified_layer_norm(rw: Rewriter, node: Any) -> None:
    _last_axis_only(rw, node)
    rw.rms_norm(node.input[0], node.input[1], float(attrs(node).get("epsilon", 1e-5)), [node.output[0], out(node, 1)])


def layer_norm_below_17(rw: Rewriter, node: Any) -> None:
    _last_axis_only(rw, node)
    rw.layer_norm(node.input[0], node.input[1], inp(node, 2), float(attrs(node).get("epsilon", 1e-5)),
                  [node.output[0], out(node, 1), out(node, 2)])


def embed_layer_norm(rw: Rewriter, node: Any) -> None:
    ids, segments, words, positions, segment_table, gamma, beta, mask, position_ids = (
        inp(node, i) for i in range(9))
    total = rw.op("Gather", [words, ids])
    if position_ids:
        total = rw.op("Add", [total, rw.op("Gather", [positions, position_ids])])
    else:  # positions 0 … S−1 (folded once shapes are fixed)
        length = rw.op("Gather", [rw.op("Shape", [ids]), rw.const(1, np.int64)], axis=0)
        steps = rw.op("Range", [rw.const(0, np.int64), length, rw.const(1, np.int64)])
        total = rw.op("Add", [total, rw.op("Gather", [positions, steps])])
    if segments and segment_table:
        total = rw.op("Add", [total, rw.op("Gather", [segment_table, segments])])
    rw.layer_norm(total, gamma, beta, float(attrs(node).get("epsilon", 1e-12)), [node.output[0]])
    if out(node, 1):
        if mask:
            ones = rw.op("Cast", [rw.op("Equal", [mask, rw.const(1, np.int32)])], to=6)
            rw.op("ReduceSum", [ones, rw.ints([1])], node.output[1], keepdims=0)
        else:
            batch = rw.op("Slice", [rw.op("Shape", [ids]), rw.ints([0]), rw.ints([1])])
            rw.op("ConstantOfShape", [batch], node.output[1], value=_tensor(np.array([0], np.int32)))
    if out(node, 2):
        rw.op("Identity", [total], node.output[2])


def _tensor(value: np.ndarray) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(value)


# ---------------------------------------------------------------- activations, matmuls


def gelu(rw: Rewriter, node: Any) -> None:
    rw.gelu(node.input[0], node.output[0])


def bias_gelu(rw: Rewriter, node: Any) -> None:
    rw.gelu(rw.op("Add", [node.input[0], node.input[1]]), node.output[0])


def fast_gelu(rw: Rewriter, node: Any) -> None:
    x = rw.op("Add", [node.input[0], node.input[1]]) if inp(node, 1) else node.input[0]
    cube = rw.op("Mul", [rw.op("Mul", [x, x]), x])
    inner = rw.op("Mul", [rw.op("Add", [x, rw.op("Mul", [cube, rw.const(0.044715)])]), rw.const(np.sqrt(2 / np.pi))])
    rw.op("Mul", [rw.op("Mul", [x, rw.const(0.5)]), rw.op("Add", [rw.op("Tanh", [inner]), rw.const(1.0)])], node.output[0])


def quick_gelu(rw: Rewriter, node: Any) -> None:
    alpha = float(attrs(node).get("alpha", 1.702))
    x = node.input[0]
    rw.op("Mul", [x, rw.op("Sigmoid", [rw.op("Mul", [x, rw.const(alpha)])])], node.output[0])


def bias_add(rw: Rewriter, node: Any) -> None:
    rw.op("Add", [rw.op("Add", [node.input[0], node.input[1]]), node.input[2]], node.output[0])


def fused_matmul(rw: Rewriter, node: Any) -> None:
    at = attrs(node)
    if int(at.get("transBatchA", 0)) or int(at.get("transBatchB", 0)):
        raise ModelError(f"{node_label(node)}: transBatchA/transBatchB are not supported")
    a, b = node.input[0], node.input[1]
    if int(at.get("transA", 0)):
        a = _swap_last(rw, a, node)
    if int(at.get("transB", 0)):
        b = _swap_last(rw, b, node)
    alpha = float(at.get("alpha", 1.0))
    y = rw.op("MatMul", [a, b], None if alpha != 1.0 else node.output[0])
    if alpha != 1.0:
        rw.op("Mul", [y, rw.const(alpha)], node.output[0])


def _swap_last(rw: Rewriter, x: str, node: Any) -> str:
    rank = rw.rank(x, node)
    perm = list(range(rank))
    perm[-2:] = [rank - 1, rank - 2]
    return rw.op("Transpose", [x], perm=perm)


def dynamic_quantize_matmul(rw: Rewriter, node: Any) -> None:
    q, scale, zero = (rw.fresh() for _ in range(3))
    from onnx import helper

    rw.out.append(helper.make_node("DynamicQuantizeLinear", [node.input[0]], [q, scale, zero], name=rw.fresh()))
    rw.matmul_integer_to_float(q, node.input[1], scale, node.input[2], zero, inp(node, 3), inp(node, 4), node.output[0])


def matmul_integer_to_float(rw: Rewriter, node: Any) -> None:
    rw.matmul_integer_to_float(node.input[0], node.input[1], node.input[2], node.input[3], inp(node, 4), inp(node, 5),
                               inp(node, 6), node.output[0])


# ---------------------------------------------------------------- attention


def attention(rw: Rewriter, node: Any) -> None:
    _no_past(node, (4, 6), ("past", "past_sequence_length"))
    qkv = rw.op("MatMul", [node.input[0], node.input[1]])
    if inp(node, 2):
        qkv = rw.op("Add", [qkv, node.input[2]])
    _attention_from_qkv(rw, node, qkv, inp(node, 3), inp(node, 5))


def q_attention(rw: Rewriter, node: Any) -> None:
    _no_past(node, (8,), ("past",))
    qkv = rw.matmul_integer_to_float(node.input[0], node.input[1], node.input[3], node.input[4], inp(node, 6),
                                     inp(node, 7), node.input[2], rw.fresh())
    _attention_from_qkv(rw, node, qkv, inp(node, 5), "")


def _no_past(node: Any, indices: tuple[int, ...], names: tuple[str, ...]) -> None:
    at = attrs(node)
    used = [n for i, n in zip(indices, names) if inp(node, i)]
    if used or int(at.get("do_rotary", 0)) or int(at.get("past_present_share_buffer", 0)) or out(node, 1):
        what = ", ".join(used) or "rotary embeddings or a key/value cache"
        raise ModelError(f"{node_label(node)}: attention with {what} is not supported",
                         "export the model without a key/value cache (a decoder without past)")


def _attention_from_qkv(rw: Rewriter, node: Any, qkv: str, mask: str, bias: str) -> None:
    at = attrs(node)
    heads = int(at["num_heads"])
    weights = rw.shape(node.input[1]) or [None, None]
    sizes = [int(s) for s in at.get("qkv_hidden_sizes", [])] or [int(weights[1]) // 3] * 3
    offsets = np.cumsum([0, *sizes])
    q, k, v = (rw.op("Slice", [qkv, rw.ints([int(offsets[i])]), rw.ints([int(offsets[i + 1])]), rw.ints([2])])
               for i in range(3))
    head = sizes[0] // heads
    scale = float(at.get("scale", 0.0)) or 1.0 / np.sqrt(head)
    _attend(rw, node, (q, k, v), heads, scale, _mask_bias(rw, node, mask, float(at.get("mask_filter_value", -10000.0))),
            bias, (node.input[0], node.input[0]) if int(at.get("unidirectional", 0)) else None, node.output[0])


def multi_head_attention(rw: Rewriter, node: Any) -> None:
    _no_past(node, (6, 7, 8, 9), ("past_key", "past_value", "past_sequence_length", "cache_indirection"))
    if len([o for o in node.output if o]) > 1:
        raise ModelError(f"{node_label(node)}: present key/value or qk outputs are not supported")
    at = attrs(node)
    query, key, value, bias = (inp(node, i) for i in range(4))
    lengths = (query, key) if int(at.get("unidirectional", 0)) else None
    if not key or not value or rw.rank(key, node) != 3:
        raise ModelError(f"{node_label(node)}: packed Q/K/V or per-head key/value inputs are not supported",
                         "export with separate query, key and value tensors of shape (batch, sequence, hidden)")
    heads = int(at["num_heads"])
    hidden = rw.shape(query)[-1]
    if bias:
        hv = rw.shape(value)[-1]
        parts = [rw.op("Slice", [bias, rw.ints([lo]), rw.ints([hi]), rw.ints([0])])
                 for lo, hi in ((0, hidden), (hidden, 2 * hidden), (2 * hidden, 2 * hidden + hv))]
        query, key, value = (rw.op("Add", [x, b]) for x, b in zip((query, key, value), parts))
    scale = float(at.get("scale", 0.0)) or 1.0 / np.sqrt(hidden // heads)
    fill = float(at.get("mask_filter_value", -10000.0))
    _attend(rw, node, (query, key, value), heads, scale, _mask_bias(rw, node, inp(node, 4), fill), inp(node, 5),
            lengths, node.output[0])


def _heads(rw: Rewriter, x: str, heads: int, key: bool = False) -> str:
    split = rw.op("Reshape", [x, rw.ints([0, 0, heads, -1])])
    return rw.op("Transpose", [split], perm=[0, 2, 3, 1] if key else [0, 2, 1, 3])


def _attend(rw: Rewriter, node: Any, qkv: tuple[str, str, str], heads: int, scale: float, mask: str | None,
            bias: str, causal: tuple[str, str] | None, output: str) -> None:
    """``causal``: the graph tensors whose second dimension is the query's and the key's length,
    for a unidirectional (causal) mask; None for none."""
    q, k, v = qkv
    scores = rw.op("Mul", [rw.op("MatMul", [_heads(rw, q, heads), _heads(rw, k, heads, key=True)]), rw.const(scale)])
    for term in (mask, bias or None, _causal(rw, node, *causal) if causal else None):
        if term:
            scores = rw.op("Add", [scores, term])
    probs = rw.op("Softmax", [scores], axis=-1)
    merged = rw.op("Transpose", [rw.op("MatMul", [probs, _heads(rw, v, heads)])], perm=[0, 2, 1, 3])
    rw.op("Reshape", [merged, rw.ints([0, 0, -1])], output)


def _causal(rw: Rewriter, node: Any, q: str, k: str) -> str:
    fill = float(attrs(node).get("mask_filter_value", -10000.0))
    s, t = (rw.shape(x) or [None, None, None] for x in (q, k))
    if s[1] is None or t[1] is None:
        raise ModelError(f"{node_label(node)}: unidirectional attention needs fixed sequence lengths",
                         "fix the input shapes with --input-shape")
    rows, cols = np.arange(s[1])[:, None], np.arange(t[1])[None, :]
    return rw.const(np.where(cols > rows + (t[1] - s[1]), np.float32(fill), np.float32(0)))


def _mask_bias(rw: Rewriter, node: Any, mask: str, fill: float) -> str | None:
    """The additive [B, 1, S|1, T] term of an Attention ``mask_index``, as onnxruntime's CPU
    kernel builds it: 0 where attended, ``fill`` where masked."""
    if not mask:
        return None
    shape = rw.shape(mask)
    if shape is None:
        raise ModelError(f"{node_label(node)}: the shape of its mask '{mask}' is unknown",
                         "fix the model's input shapes with --input-shape")
    keep: str
    if len(shape) == 1:
        keep = _keep_from_lengths(rw, node, mask, shape[0])
    elif len(shape) in (2, 3):
        keep = rw.op("Greater", [mask, rw.const(0, _mask_dtype(rw, mask))])
        keep = rw.op("Unsqueeze", [keep, rw.ints([1, 2] if len(shape) == 2 else [1])])
    else:
        raise ModelError(f"{node_label(node)}: a {len(shape)}-D attention mask is not supported")
    dropped = rw.op("Sub", [rw.const(1.0), rw.op("Cast", [keep], to=1)])
    return rw.op("Mul", [dropped, rw.const(fill)])


def _mask_dtype(rw: Rewriter, name: str) -> Any:
    for init in rw.model.graph.initializer:
        if init.name == name:
            from onnx import helper

            return helper.tensor_dtype_to_np_dtype(init.data_type)
    return np.int32


def _keep_from_lengths(rw: Rewriter, node: Any, mask: str, length: int | None) -> str:
    """[B, 1, 1, T] booleans from a 1-D mask index: ``B`` exclusive end positions (right
    padding), or ``2B`` ends then inclusive starts (left padding)."""
    x = rw.shape(node.input[0]) or [None, None]
    batch, seq = x[0], x[1]
    if batch is None or seq is None or length is None or length not in (batch, 2 * batch):
        raise ModelError(f"{node_label(node)}: a 1-D mask index of length {length} for batch {batch} is not supported",
                         "fix the model's input shapes with --input-shape")
    positions = rw.const(np.arange(seq, dtype=np.int32).reshape(1, seq))
    positions = rw.op("Cast", [positions], to=6)
    ends = rw.op("Slice", [mask, rw.ints([0]), rw.ints([batch])])
    keep = rw.op("Less", [positions, rw.op("Unsqueeze", [ends, rw.ints([1])])])
    if length == 2 * batch:
        starts = rw.op("Slice", [mask, rw.ints([batch]), rw.ints([2 * batch])])
        after = rw.op("Not", [rw.op("Less", [positions, rw.op("Unsqueeze", [starts, rw.ints([1])])])])
        keep = rw.op("And", [keep, after])
    return rw.op("Unsqueeze", [keep, rw.ints([1, 2])])


# ---------------------------------------------------------------- the pass

REWRITES: dict[tuple[str, str], Callable[[Rewriter, Any], None]] = {
    (MS, "SkipLayerNormalization"): skip_layer_norm,
    (MS, "SkipSimplifiedLayerNormalization"): skip_simplified_layer_norm,
    (MS, "SimplifiedLayerNormalization"): simplified_layer_norm,
    ("", "SimplifiedLayerNormalization"): simplified_layer_norm,
    (MS, "EmbedLayerNormalization"): embed_layer_norm,
    (MS, "Gelu"): gelu,
    (MS, "BiasGelu"): bias_gelu,
    (MS, "FastGelu"): fast_gelu,
    (MS, "QuickGelu"): quick_gelu,
    (MS, "BiasAdd"): bias_add,
    (MS, "FusedMatMul"): fused_matmul,
    (MS, "TransposeMatMul"): fused_matmul,
    (MS, "DynamicQuantizeMatMul"): dynamic_quantize_matmul,
    (MS, "MatMulIntegerToFloat"): matmul_integer_to_float,
    (MS, "Attention"): attention,
    (MS, "QAttention"): q_attention,
    (MS, "MultiHeadAttention"): multi_head_attention,
}


def _rewrite_for(node: Any, model_opset: int) -> Callable[[Rewriter, Any], None] | None:
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    if (domain, node.op_type) == ("", "LayerNormalization") and model_opset < 17:
        return layer_norm_below_17  # onnxruntime's own op below opset 17
    return REWRITES.get((domain, node.op_type))


TABLE = Table(_rewrite_for)

# What each operator becomes, for the import notes (``edgetune inspect``, the package summary).
BECOMES = {
    "SkipLayerNormalization": "Add (+ bias), layer norm",
    "SkipSimplifiedLayerNormalization": "Add (+ bias), RMS norm",
    "SimplifiedLayerNormalization": "RMS norm (ReduceMean of squares, Sqrt, Div, Mul)",
    "LayerNormalization": "layer norm spelled out (ReduceMean, Sub, Mul, Sqrt, Div)",
    "EmbedLayerNormalization": "3 Gathers, Add, layer norm; mask index as ReduceSum of the mask",
    "Gelu": "erf GELU", "BiasGelu": "Add, erf GELU", "FastGelu": "(Add,) tanh GELU", "QuickGelu": "x·Sigmoid(αx)",
    "BiasAdd": "two Adds", "FusedMatMul": "Transpose(s), MatMul, Mul(alpha)", "TransposeMatMul": "Transpose(s), MatMul",
    "DynamicQuantizeMatMul": "DynamicQuantizeLinear, MatMulInteger (exact), scale product (+ bias)",
    "MatMulIntegerToFloat": "MatMulInteger (exact), scale product (+ bias)",
    "Attention": "Q/K/V MatMul, heads split, scaled QKᵀ + mask, Softmax, ·V",
    "QAttention": "MatMulInteger Q/K/V projection (exact, scaled), then as Attention",
    "MultiHeadAttention": "heads split, scaled QKᵀ + mask, Softmax, ·V",
    "DynamicQuantizeLSTM": "LSTM unrolled per step, each product as onnxruntime's dynamic uint8 quantization "
                           "+ MatMulInteger (exact)",
}


def standard_ops(model: Any) -> dict[str, int]:
    """Rewrite every onnxruntime operator of the main graph (table above) in place; returns how
    many of each kind (``domain::Op``) were rewritten. ModelError names a node whose form is not
    supported."""
    return rewrite_nodes(model, TABLE, MS)
