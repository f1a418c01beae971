"""Audio front ends as ONNX exporters write them (``torch.stft`` at opset 17 writes ``STFT``;
``torch.fft`` writes ``DFT``), built with onnx.helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _save(nodes, inputs, outputs, inits, out: Path, opset: int) -> Path:
    import onnx
    from onnx import helper, numpy_helper

    graph = helper.make_graph(nodes, "audio", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="pytorch")
    model.ir_version = 8 if opset < 21 else 10
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def stft_log_mel(out: Path, samples: int = 4000, n_fft: int = 400, hop: int = 160, mels: int = 40, seed: int = 0) -> Path:
    """waveform [1, samples] → STFT (Hann window, onesided) → power → mel matrix → log:
    [1, frames, mels], as Whisper-style and wake-word front ends compute it."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    bins = n_fft // 2 + 1
    frames = (samples - n_fft) // hop + 1
    inits = {"unsqueeze_axes": np.array([-1], np.int64), "hop": np.array(hop, np.int64),
             "window": (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32),
             "n_fft": np.array(n_fft, np.int64), "two": np.array(2.0, np.float32), "sum_axes": np.array([-1], np.int64),
             "mel": np.abs(rng.standard_normal((bins, mels))).astype(np.float32) * 0.05, "eps": np.array(1e-6, np.float32)}
    nodes = [
        helper.make_node("Unsqueeze", ["waveform", "unsqueeze_axes"], ["signal"]),
        helper.make_node("STFT", ["signal", "hop", "window", "n_fft"], ["spectrum"], onesided=1),
        helper.make_node("Pow", ["spectrum", "two"], ["squares"]),
        helper.make_node("ReduceSum", ["squares", "sum_axes"], ["power"], keepdims=0),
        helper.make_node("MatMul", ["power", "mel"], ["mel_power"]),
        helper.make_node("Add", ["mel_power", "eps"], ["shifted"]),
        helper.make_node("Log", ["shifted"], ["log_mel"]),
    ]
    return _save(nodes, [helper.make_tensor_value_info("waveform", TensorProto.FLOAT, [1, samples])],
                 [helper.make_tensor_value_info("log_mel", TensorProto.FLOAT, [1, frames, mels])], inits, out, 17)


def dft_forms(out: Path, opset: int = 17, n: int = 24, length: int = 32) -> Path:
    """x [2, n, 3] real: a onesided forward DFT over axis 1 zero-padded to ``length``; and a
    complex inverse DFT of that spectrum along axis 1 (opset 20: the axis as an input)."""
    from onnx import TensorProto, helper

    inits = {"length": np.array(length, np.int64), "last": np.array([-1], np.int64)}
    forward = {"onesided": 1} if opset >= 20 else {"onesided": 1, "axis": 1}
    inverse = {"inverse": 1} if opset >= 20 else {"inverse": 1, "axis": 1}
    extra = ["axis1"] if opset >= 20 else []
    if opset >= 20:
        inits["axis1"] = np.array(1, np.int64)
    nodes = [
        helper.make_node("Unsqueeze", ["x", "last"], ["x_real"]),
        helper.make_node("DFT", ["x_real", "length", *extra], ["spectrum"], **forward),
        helper.make_node("DFT", ["spectrum", "", *extra], ["back"], **inverse),
    ]
    bins = length // 2 + 1
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n, 3])],
                 [helper.make_tensor_value_info("spectrum", TensorProto.FLOAT, [2, bins, 3, 2]),
                  helper.make_tensor_value_info("back", TensorProto.FLOAT, [2, bins, 3, 2])], inits, out, opset)


def frame_loop(out: Path, frames: int = 6, width: int = 8, dynamic: bool = False, seed: int = 0) -> Path:
    """A ``Loop`` over the frames of x [frames, width], as torch exports a Python ``for`` over
    ``x.shape[0]``: the trip count from Shape → Gather (a constant once shapes are fixed; with
    ``dynamic`` the frame count is a named dimension), a running state carried through the body
    (decayed, plus a projected frame), and each step's state as a scan output."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["frame"], axis=0),
         helper.make_node("MatMul", ["frame", "w"], ["projected"]),
         helper.make_node("Mul", ["state_in", "decay"], ["decayed"]),
         helper.make_node("Add", ["decayed", "projected"], ["summed"]),
         helper.make_node("Tanh", ["summed"], ["state_out"]),
         helper.make_node("Identity", ["state_out"], ["scan_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("state_in", TensorProto.FLOAT, [width])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [width]),
         helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [width])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "decay")])
    nodes = [helper.make_node("Shape", ["x"], ["x_shape"]),
             helper.make_node("Gather", ["x_shape", "zero"], ["trips"], axis=0),
             helper.make_node("Loop", ["trips", "", "state0"], ["final", "states"], body=body)]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array((rng.standard_normal((width, width)) * 0.4).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(width, np.float32), "state0")]
    rows = "frames" if dynamic else frames
    graph = helper.make_graph(nodes, "frame_loop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
                              [helper.make_tensor_value_info("final", TensorProto.FLOAT, [width]),
                               helper.make_tensor_value_info("states", TensorProto.FLOAT, [rows, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], producer_name="pytorch")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out
