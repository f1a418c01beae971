"""The model's own framework runtime, for a side-by-side timing: onnxruntime for ONNX models,
LiteRT (with its default XNNPACK delegate) for TFLite, on the package's reference inputs and
with the same thread count. Imported only when ``bench --baseline`` asks for it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .errors import LoaderError

_INSTALL = "on a board: `edgetune devices setup BOARD --baselines` on the host; elsewhere: pip install onnxruntime ai-edge-litert"


def runner(model: Path, inputs: dict[str, np.ndarray], threads: int) -> tuple[str, Callable[[], Any]]:
    """(label, one inference) for ``model`` on ``inputs`` (keyed by the model's input names)."""
    if not model.is_file():
        raise LoaderError(f"baseline model {model} not found", "give the .onnx / .tflite the package was built from")
    if model.suffix == ".onnx":
        return _onnxruntime(model, inputs, threads)
    if model.suffix == ".tflite":
        return _litert(model, inputs, threads)
    raise LoaderError(f"no baseline runtime for '{model.suffix}' files", "give an .onnx or .tflite model")


def _onnxruntime(model: Path, inputs: dict[str, np.ndarray], threads: int) -> tuple[str, Callable[[], Any]]:
    try:
        import onnxruntime as ort
    except ImportError as err:
        raise LoaderError("onnxruntime is not installed here", _INSTALL) from err
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.log_severity_level = 3  # errors only
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # its idle threads would steal our cores
    session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    feed = {k: v for k, v in inputs.items() if k in names}
    return f"onnxruntime {ort.__version__}", lambda: session.run(None, feed)


def _litert(model: Path, inputs: dict[str, np.ndarray], threads: int) -> tuple[str, Callable[[], Any]]:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as err:
        raise LoaderError("LiteRT (ai-edge-litert) is not installed here", _INSTALL) from err
    interp = Interpreter(model_path=str(model), num_threads=threads)
    details = interp.get_input_details()
    for d in details:
        if d["name"] not in inputs:
            raise LoaderError(f"the baseline model's input '{d['name']}' is not an input of the package")
        if tuple(d["shape"]) != inputs[d["name"]].shape:  # a dynamic input, fixed for the package
            interp.resize_tensor_input(d["index"], inputs[d["name"]].shape)
    interp.allocate_tensors()
    details = interp.get_input_details()

    def call() -> None:
        for d in details:
            interp.set_tensor(d["index"], inputs[d["name"]])
        interp.invoke()
    return "LiteRT + XNNPACK", call
