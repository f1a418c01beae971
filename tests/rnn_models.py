"""ONNX models with recurrent layers and control flow, built with onnx.helper for the tests.

Weights are seeded and scaled like trained ones (|w| ~ 1/sqrt(H)) so the gates neither
saturate nor vanish and a wrong gate order shows up in the outputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OPSET = 17
IR_VERSION = 8  # onnxruntime reads up to 10 here; 8 is what common exporters write


def _save(graph: onnx.GraphProto, path: Path, opset: int = OPSET) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def recurrent_node(op: str, prefix: str, x: str, feats: int, hidden: int, rng: np.random.Generator, *,
                   direction: str = "forward", layout: int = 0, bias: bool = True, initial: str = "none",
                   clip: float | None = None, linear_before_reset: int = 0, peephole: bool = False,
                   input_forget: int = 0, activations: list[str] | None = None, seq_lens: np.ndarray | None = None,
                   batch: int = 1, outputs: tuple[str, ...] = ()) -> tuple[onnx.NodeProto, list[onnx.TensorProto], list[str]]:
    """One recurrent node, its initializers and the names of extra graph inputs it reads.

    ``initial``: ``none``, ``const`` (initializers) or ``input`` (graph inputs ``{prefix}_h0``,
    ``{prefix}_c0``: streaming state)."""
    ndir = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    scale = 1.0 / np.sqrt(hidden)
    inits = [_init(f"{prefix}_W", rng.uniform(-scale, scale, (ndir, g * hidden, feats)).astype("float32")),
             _init(f"{prefix}_R", rng.uniform(-scale, scale, (ndir, g * hidden, hidden)).astype("float32"))]
    ins = [x, f"{prefix}_W", f"{prefix}_R"]
    extra_inputs = []
    ins.append("")
    if bias:
        inits.append(_init(f"{prefix}_B", rng.uniform(-scale, scale, (ndir, 2 * g * hidden)).astype("float32")))
        ins[-1] = f"{prefix}_B"
    ins.append("")
    if seq_lens is not None:
        inits.append(_init(f"{prefix}_seq", seq_lens.astype("int32")))
        ins[-1] = f"{prefix}_seq"
    states = ["h"] + (["c"] if op == "LSTM" else [])
    for s in states:
        ins.append("")
        if initial == "const":
            shape = (ndir, batch, hidden)
            inits.append(_init(f"{prefix}_{s}0", rng.uniform(-0.5, 0.5, shape).astype("float32")))
            ins[-1] = f"{prefix}_{s}0"
        elif initial == "input":
            ins[-1] = f"{prefix}_{s}0"
            extra_inputs.append(ins[-1])
    if peephole:
        inits.append(_init(f"{prefix}_P", rng.uniform(-scale, scale, (ndir, 3 * hidden)).astype("float32")))
        ins.append(f"{prefix}_P")
    while ins and ins[-1] == "":
        ins.pop()
    attrs = {"hidden_size": hidden, "direction": direction}
    if layout:
        attrs["layout"] = layout
    if clip is not None:
        attrs["clip"] = clip
    if op == "GRU" and linear_before_reset:
        attrs["linear_before_reset"] = 1
    if op == "LSTM" and input_forget:
        attrs["input_forget"] = 1
    if activations:
        attrs["activations"] = activations
    node = helper.make_node(op, ins, list(outputs or (f"{prefix}_Y", f"{prefix}_Yh")), name=f"{prefix}_{op.lower()}", **attrs)
    return node, inits, extra_inputs


def single_layer(path: Path, op: str, steps: int = 5, batch: int = 2, feats: int = 6, hidden: int = 8,
                 seed: int = 0, **kw) -> Path:
    """A graph of one recurrent node; every output of the node is a graph output."""
    rng = np.random.default_rng(seed)
    layout = kw.get("layout", 0)
    ndir = 2 if kw.get("direction") == "bidirectional" else 1
    names = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node, inits, extra = recurrent_node(op, "rnn", "x", feats, hidden, rng, batch=batch, outputs=tuple(names), **kw)
    x_shape = [batch, steps, feats] if layout else [steps, batch, feats]
    state_shape = [batch, ndir, hidden] if layout else [ndir, batch, hidden]
    y_shape = [batch, steps, ndir, hidden] if layout else [steps, ndir, batch, hidden]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, state_shape) for n in extra]
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)]
    outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, state_shape) for n in names[1:]]
    return _save(helper.make_graph([node], f"{op.lower()}_layer", inputs, outputs, inits), path)


def crnn(path: Path, width: int = 128, classes: int = 37, hidden: int = 48, seed: int = 0) -> Path:
    """A small CRNN text recognizer as PaddleOCR and EasyOCR export it: a conv stack over a
    32×W grey line image, the height collapsed, a 2-layer bidirectional LSTM over the W/4
    columns, a linear layer and log-softmax (the CTC head's input)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(name: str, x: str, cin: int, cout: int, stride: tuple[int, int]) -> str:
        w = rng.normal(0, np.sqrt(2.0 / (9 * cin)), (cout, cin, 3, 3)).astype("float32")
        inits.extend([_init(f"{name}_w", w), _init(f"{name}_b", rng.normal(0, 0.05, cout).astype("float32"))])
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"], pads=[1, 1, 1, 1],
                                      strides=list(stride), name=name))
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [f"{name}_y"]))
        return f"{name}_y"

    x = conv("conv1", "image", 1, 16, (2, 2))  # 16 × W/2
    x = conv("conv2", x, 16, 32, (2, 2))  # 8 × W/4
    x = conv("conv3", x, 32, 64, (2, 1))  # 4 × W/4
    x = conv("conv4", x, 64, 64, (4, 1))  # 1 × W/4
    nodes.append(helper.make_node("Squeeze", [x, "axis2"], ["feat"]))  # [1, 64, T]
    inits.append(_init("axis2", np.array([2], dtype=np.int64)))
    nodes.append(helper.make_node("Transpose", ["feat"], ["seq"], perm=[2, 0, 1]))  # [T, 1, 64]
    feats, seq = 64, "seq"
    for layer in range(2):
        p = f"lstm{layer}"
        node, lstm_inits, _ = recurrent_node("LSTM", p, seq, feats, hidden, rng, direction="bidirectional",
                                             outputs=(f"{p}_Y",))
        nodes.append(node)
        inits.extend(lstm_inits)
        nodes.append(helper.make_node("Transpose", [f"{p}_Y"], [f"{p}_t"], perm=[0, 2, 1, 3]))  # [T, 1, 2, H]
        nodes.append(helper.make_node("Reshape", [f"{p}_t", "seq_shape"], [f"{p}_out"]))
        seq, feats = f"{p}_out", 2 * hidden
    inits.append(_init("seq_shape", np.array([0, 0, -1], dtype=np.int64)))
    w = rng.normal(0, 1.0 / np.sqrt(feats), (feats, classes)).astype("float32")
    inits.extend([_init("fc_w", w), _init("fc_b", np.zeros(classes, "float32"))])
    nodes.append(helper.make_node("MatMul", [seq, "fc_w"], ["logits0"]))
    nodes.append(helper.make_node("Add", ["logits0", "fc_b"], ["logits"]))
    nodes.append(helper.make_node("LogSoftmax", ["logits"], ["log_probs"], axis=2))
    steps = width // 4
    graph = helper.make_graph(nodes, "crnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 32, width])],
                              [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, [steps, 1, classes])], inits)
    return _save(graph, path)


def _branch(name: str, nodes: list[onnx.NodeProto], out: str, shape: list[int | str] | None) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)])


def streaming_vad(path: Path, frame: int = 512, hidden: int = 32, seed: int = 0) -> Path:
    """A voice-activity detector shaped like Silero VAD's ONNX export: inputs ``input`` [1, N]
    (one audio frame), ``state`` [2, 1, H] (the LSTM's h and c, fed back by the caller) and
    ``sr`` (the sample rate, an int64 scalar); outputs ``output`` [1, 1] (speech probability)
    and ``stateN``. An ``If`` on ``sr == 16000`` picks the 16 kHz front end (a conv of stride
    4) or the 8 kHz one (stride 2, then a pool); another ``If`` on the frame length (a shape
    comparison) scales short frames. Both fold once ``sr`` is bound and the shape is fixed."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    ch = 16

    def conv_w(name: str, k: int) -> str:
        inits.append(_init(name, rng.normal(0, np.sqrt(2.0 / k), (ch, 1, k)).astype("float32")))
        return name

    inits += [_init("sr16k", np.array(16000, dtype=np.int64)), _init("min_len", np.array(256, dtype=np.int64)),
              _init("idx1", np.array(1, dtype=np.int64)), _init("half", np.array(0.5, dtype=np.float32)),
              _init("unsq1", np.array([1], dtype=np.int64)),
              _init("zero_i", np.array([0], dtype=np.int64)), _init("one_i", np.array([1], dtype=np.int64)),
              _init("two_i", np.array([2], dtype=np.int64))]
    # frame-length If: Shape(input)[1] < 256 ? input * 0.5 : input
    nodes += [helper.make_node("Shape", ["input"], ["in_shape"]),
              helper.make_node("Gather", ["in_shape", "idx1"], ["in_len"], axis=0),
              helper.make_node("Less", ["in_len", "min_len"], ["is_short"]),
              helper.make_node("If", ["is_short"], ["audio"], name="if_short",
                               then_branch=_branch("short", [helper.make_node("Mul", ["input", "half"], ["a_s"])], "a_s", None),
                               else_branch=_branch("long", [helper.make_node("Identity", ["input"], ["a_l"])], "a_l", None))]
    nodes.append(helper.make_node("Unsqueeze", ["audio", "unsq1"], ["audio3"]))  # [1, 1, N]
    then_nodes = [helper.make_node("Conv", ["audio3", conv_w("w16", 16)], ["f16"], strides=[8], name="conv16k")]
    else_nodes = [helper.make_node("Conv", ["audio3", conv_w("w8", 8)], ["f8c"], strides=[4], name="conv8k"),
                  helper.make_node("AveragePool", ["f8c"], ["f8"], kernel_shape=[2], strides=[2])]
    nodes += [helper.make_node("Equal", ["sr", "sr16k"], ["is16k"]),
              helper.make_node("If", ["is16k"], ["front"], name="if_sr",
                               then_branch=_branch("sr16k", then_nodes, "f16", None),
                               else_branch=_branch("sr8k", else_nodes, "f8", None)),
              helper.make_node("Relu", ["front"], ["front_r"]),
              helper.make_node("ReduceMean", ["front_r"], ["pooled"], axes=[2], keepdims=0),  # [1, ch]
              helper.make_node("Unsqueeze", ["pooled", "zero_i"], ["step"]),  # [1, 1, ch]: one LSTM step
              helper.make_node("Slice", ["state", "zero_i", "one_i", "zero_i"], ["h0"]),
              helper.make_node("Slice", ["state", "one_i", "two_i", "zero_i"], ["c0"])]
    lstm, lstm_inits, _ = recurrent_node("LSTM", "dec", "step", ch, hidden, rng, outputs=("dec_Y", "hN", "cN"))
    while len(lstm.input) < 5:
        lstm.input.append("")
    lstm.input.extend(["h0", "c0"])
    inits += lstm_inits
    inits += [_init("head_w", rng.normal(0, 1 / np.sqrt(hidden), (hidden, 1)).astype("float32"))]
    nodes += [lstm,
              helper.make_node("Concat", ["hN", "cN"], ["stateN"], axis=0),
              helper.make_node("Squeeze", ["hN", "zero_i"], ["h_last"]),  # [1, H]
              helper.make_node("MatMul", ["h_last", "head_w"], ["logit"]),
              helper.make_node("Sigmoid", ["logit"], ["output"])]
    graph = helper.make_graph(
        nodes, "vad",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, frame]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, hidden]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, 1, hidden])], inits)
    return _save(graph, path)


def data_if(path: Path, size: int = 16) -> Path:
    """An ``If`` whose condition is computed from the input's values (not foldable): where the
    input's sum is positive the output is ``relu(x) @ W``, else ``tanh(x) @ W * 2``."""
    rng = np.random.default_rng(1)
    inits = [_init("w", rng.normal(0, 0.3, (size, size)).astype("float32")), _init("zero", np.array(0.0, "float32")),
             _init("two", np.array(2.0, "float32"))]
    then_b = _branch("pos", [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["yp"])],
                     "yp", [1, size])
    else_b = _branch("neg", [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("MatMul", ["t", "w"], ["tm"]),
                             helper.make_node("Mul", ["tm", "two"], ["yn"])], "yn", [1, size])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["pos"]),
             helper.make_node("If", ["pos"], ["y0"], then_branch=then_b, else_branch=else_b, name="if_sign"),
             helper.make_node("Add", ["y0", "x"], ["y"])]
    graph = helper.make_graph(nodes, "data_if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, size])], inits)
    return _save(graph, path)


def run_time_loop(path: Path, size: int = 16, early_exit: bool = False, seed: int = 2) -> Path:
    """A ``Loop`` decided by the data, as torch exports a Python ``for``/``while`` over values:
    the trip count is an input (``steps``, int64) and the state ``h`` [1, size] is carried:
    ``h = tanh(h @ W + x)``; with ``early_exit`` the body also stops once ``sum(h)`` exceeds a
    threshold (the condition computed in the body). No scan outputs: the result is the state."""
    rng = np.random.default_rng(seed)
    body_nodes = [helper.make_node("MatMul", ["h_in", "w"], ["hw"]),
                  helper.make_node("Add", ["hw", "x"], ["pre"]),
                  helper.make_node("Tanh", ["pre"], ["h_out"])]
    if early_exit:
        body_nodes += [helper.make_node("ReduceSum", ["h_out"], ["total"], keepdims=0),
                       helper.make_node("Less", ["total", "limit"], ["going"]),
                       helper.make_node("Reshape", ["going", "one"], ["cond_out"])]
    else:
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [1]),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, size])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, [1]),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, size])])
    inits = [_init("w", rng.normal(0, 0.4, (size, size)).astype("float32")), _init("limit", np.array(3.0, "float32")),
             _init("yes", np.array([True])), _init("one", np.array([1], np.int64)), _init("h0", np.zeros((1, size), "float32"))]
    nodes = [helper.make_node("Loop", ["steps", "yes", "h0"], ["h"], name="step_loop", body=body)]
    graph = helper.make_graph(nodes, "run_time_loop",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size]),
                               helper.make_tensor_value_info("steps", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, size])], inits)
    return _save(graph, path)
