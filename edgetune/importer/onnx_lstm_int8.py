"""onnxruntime's ``DynamicQuantizeLSTM`` (what ``quantize_dynamic`` makes of an ``LSTM``) as the
standard ops that compute what onnxruntime's CPU kernel computes, step by step:

* the input projection of every step at once: the whole ``[steps · batch, input]`` block
  quantized to uint8 with one dynamic scale and zero point (``DynamicQuantizeLinear``), an
  integer product with the int8 weights (``MatMulInteger``, exact), scaled by
  ``input scale · weight scale``;
* per step, the previous hidden state quantized the same way and multiplied with the int8
  recurrent weights, scaled and added; then the bias ``Wb + Rb`` and the gates (i, o, f, c) with
  their activations, peepholes, clip and ``input_forget`` as ONNX defines them.

The recurrence is unrolled (one copy of the step per time step): the dynamic quantization of the
hidden state depends on its values at each step, which is what keeps the result at onnxruntime's.
As for ``LSTM``, ``sequence_lens`` must be absent or the whole sequence. For a batch above one,
onnxruntime's own result depends on its thread count (each thread quantizes the hidden states of
its share of the rows); edgetune quantizes the batch's rows together, as onnxruntime does on one
thread — the reference check runs onnxruntime on one thread.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError
from ..onnx_proto import attrs, node_label, text
from .onnx_rewriter import Rewriter, Table, inp, out, rewrite_nodes

_ACTIVATIONS = {"Sigmoid", "Tanh", "Relu"}
MAX_STEPS = 512


def dynamic_quantize_lstm(rw: Rewriter, node: Any) -> None:
    at = attrs(node)
    direction = text(at.get("direction", b"forward"))
    ndir = 2 if direction == "bidirectional" else 1
    hidden = int(at["hidden_size"])
    acts = [text(a) for a in at.get("activations", [])] or ["Sigmoid", "Tanh", "Tanh"] * ndir
    odd = sorted(set(acts) - _ACTIVATIONS)
    if odd or len(acts) != 3 * ndir:
        raise ModelError(f"{node_label(node)}: activations {acts} are not supported")
    x_shape = rw.fixed_shape(node.input[0])
    if x_shape is None or None in x_shape or len(x_shape) != 3:
        raise ModelError(f"{node_label(node)}: its input shape is not fixed", "fix the input shapes with --input-shape")
    steps, batch, _features = x_shape
    if steps > MAX_STEPS:
        raise ModelError(f"{node_label(node)}: {steps} steps is more than edgetune unrolls ({MAX_STEPS})")
    _full_length(rw, node, steps)
    ys, hs, cs = [], [], []
    for d in range(ndir):
        reverse = direction == "reverse" or d == 1
        y, h, c = _direction(rw, node, d, steps, batch, hidden, reverse, acts[3 * d:3 * d + 3],
                             float(at["clip"]) if "clip" in at else None, int(at.get("input_forget", 0)))
        ys.append(y)
        hs.append(h)
        cs.append(c)
    if out(node, 0):
        rw.op("Concat", ys, node.output[0], axis=1)  # [steps, ndir, batch, hidden]
    for index, parts in ((1, hs), (2, cs)):
        if out(node, index):
            rw.op("Concat", [rw.op("Unsqueeze", [p, rw.ints([0])]) for p in parts], node.output[index], axis=0)


def _full_length(rw: Rewriter, node: Any, steps: int) -> None:
    if not inp(node, 4):
        return
    lens = rw.value(node.input[4])
    if lens is None or (np.asarray(lens) != steps).any():
        raise ModelError(f"{node_label(node)}: sequence_lens shorter than the sequence ({steps} steps) or given at run "
                         "time is not supported", "export without sequence_lens")


def _direction_slice(rw: Rewriter, name: str, d: int) -> str:
    return rw.op("Squeeze", [rw.op("Slice", [name, rw.ints([d]), rw.ints([d + 1]), rw.ints([0])]), rw.ints([0])])


def _quantized_product(rw: Rewriter, x: str, weights: str, w_scale: str, w_zero: str) -> str:
    """``x · W`` as onnxruntime's quantized GEMM: x to uint8 with a dynamic scale, an exact
    integer product, then ``· (x scale · W scale)``."""
    from onnx import helper

    q, scale, zero = rw.fresh(), rw.fresh(), rw.fresh()
    rw.out.append(helper.make_node("DynamicQuantizeLinear", [x], [q, scale, zero], name=rw.fresh()))
    acc = rw.op("Cast", [rw.op("MatMulInteger", [q, weights, zero, w_zero])], to=1)
    return rw.op("Mul", [acc, rw.op("Mul", [scale, w_scale])])


def _direction(rw: Rewriter, node: Any, d: int, steps: int, batch: int, hidden: int, reverse: bool, acts: list[str],
               clip: float | None, input_forget: int) -> tuple[str, str, str]:
    """One direction: returns (Y part [steps, 1, batch, hidden], last h, last c)."""
    x, w, r = node.input[0], node.input[1], node.input[2]
    w_d, r_d = _direction_slice(rw, w, d), _direction_slice(rw, r, d)
    scales = [_per_direction(rw, inp(node, i), d) for i in (8, 9, 10, 11)]
    rows = rw.op("Reshape", [x, rw.ints([steps * batch, -1])])
    projected = rw.op("Reshape", [_quantized_product(rw, rows, w_d, scales[0], scales[1]), rw.ints([steps, batch, 4 * hidden])])
    bias = rw.value(inp(node, 3)) if inp(node, 3) else np.zeros((2, 8 * hidden), np.float32)
    if bias is None:
        raise ModelError(f"{node_label(node)}: its bias is computed at run time, not a constant")
    bias = np.asarray(bias, np.float32).reshape(-1, 8 * hidden)[d]
    bias_sum = rw.const(bias[:4 * hidden] + bias[4 * hidden:])
    h = _initial(rw, node, 5, d, batch, hidden)
    c = _initial(rw, node, 6, d, batch, hidden)
    peep = _peepholes(rw, node, d, hidden)
    outputs: list[str] = [""] * steps
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for t in order:
        x_t = rw.op("Squeeze", [rw.op("Slice", [projected, rw.ints([t]), rw.ints([t + 1]), rw.ints([0])]), rw.ints([0])])
        gates = rw.op("Add", [rw.op("Add", [x_t, _quantized_product(rw, h, r_d, scales[2], scales[3])]), bias_sum])
        i, o, f, g = (rw.op("Slice", [gates, rw.ints([k * hidden]), rw.ints([(k + 1) * hidden]), rw.ints([1])]) for k in range(4))
        if peep is not None:
            i = rw.op("Add", [i, rw.op("Mul", [peep[0], c])])
            f = rw.op("Add", [f, rw.op("Mul", [peep[2], c])])
        i = rw.op(acts[0], [_clip(rw, i, clip)])
        f = rw.op("Sub", [rw.const(1.0), i]) if input_forget else rw.op(acts[0], [_clip(rw, f, clip)])
        g = rw.op(acts[1], [_clip(rw, g, clip)])
        c = rw.op("Add", [rw.op("Mul", [f, c]), rw.op("Mul", [i, g])])
        if peep is not None:
            o = rw.op("Add", [o, rw.op("Mul", [peep[1], c])])
        o = rw.op(acts[0], [_clip(rw, o, clip)])
        h = rw.op("Mul", [o, rw.op(acts[2], [c])])
        outputs[t] = rw.op("Unsqueeze", [h, rw.ints([0, 1])])
    return rw.op("Concat", outputs, axis=0), h, c


def _clip(rw: Rewriter, x: str, clip: float | None) -> str:
    return x if clip is None else rw.op("Clip", [x, rw.const(-clip), rw.const(clip)])


def _per_direction(rw: Rewriter, name: str, d: int) -> str:
    """A scale or zero point of direction ``d`` ([ndir] or [ndir, 4H]: per-column)."""
    value = rw.value(name) if name else None
    if value is None:
        raise ModelError(f"a DynamicQuantizeLSTM scale or zero point ('{name}') is not a constant")
    value = np.asarray(value)
    part = value.reshape(value.shape[0], -1)[d] if value.ndim else value.reshape(1)
    return rw.const(part.reshape(()) if part.size == 1 else part, part.dtype)


def _initial(rw: Rewriter, node: Any, index: int, d: int, batch: int, hidden: int) -> str:
    if inp(node, index):
        return _direction_slice(rw, node.input[index], d)
    return rw.const(np.zeros((batch, hidden), np.float32))


def _peepholes(rw: Rewriter, node: Any, d: int, hidden: int) -> tuple[str, str, str] | None:
    if not inp(node, 7):
        return None
    p = rw.value(node.input[7])
    if p is None:
        raise ModelError(f"{node_label(node)}: its peephole weights are computed at run time")
    p = np.asarray(p, np.float32).reshape(-1, 3 * hidden)[d]
    return rw.const(p[:hidden]), rw.const(p[hidden:2 * hidden]), rw.const(p[2 * hidden:])


TABLE = Table(lambda node, version: dynamic_quantize_lstm
              if node.domain == "com.microsoft" and node.op_type == "DynamicQuantizeLSTM" else None)


def standard_ops(model: Any) -> dict[str, int]:
    """Rewrite every DynamicQuantizeLSTM of the main graph in place; returns how many."""
    if not any(n.op_type == "DynamicQuantizeLSTM" for n in model.graph.node):
        return {}
    return rewrite_nodes(model, TABLE, "com.microsoft")
