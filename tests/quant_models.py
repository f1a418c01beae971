"""int8 versions of real float models, made with the quantizers users use: onnxruntime's static
quantization (QDQ ONNX) and ai-edge-quantizer (int8 TFLite), calibrated on a small random set."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _calibration(shapes: dict[str, tuple[int, ...]], count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{name: rng.uniform(-1.0, 1.0, shape).astype(np.float32) for name, shape in shapes.items()} for _ in range(count)]


def qdq_onnx(model: Path, out: Path, count: int = 8, seed: int = 0, per_channel: bool = True, activations: str = "int8",
             qoperator: bool = False) -> Path:
    """``model`` through ``onnxruntime.quantization.quantize_static`` (QDQ — or with ``qoperator``
    the QOperator format: QLinearConv and onnxruntime's QLinear ops —, int8 weights per channel,
    ``activations`` int8 or uint8), as its documentation shows."""
    import onnx
    from onnxruntime import quantization as q

    proto = onnx.load(str(model))
    inits = {i.name for i in proto.graph.initializer}
    shapes = {i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in proto.graph.input if i.name not in inits}
    if proto.opset_import[0].version < 13:  # per-channel DequantizeLinear (axis) needs opset 13
        from onnx import version_converter

        proto = version_converter.convert_version(proto, 13)
    prepared = out.with_name(out.stem + "-prep.onnx")
    upgraded = out.with_name(out.stem + "-13.onnx")
    onnx.save(proto, str(upgraded))
    q.quant_pre_process(str(upgraded), str(prepared), skip_symbolic_shape=True)
    upgraded.unlink()

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter(_calibration(shapes, count, seed))

        def get_next(self):  # noqa: ANN201 (onnxruntime's interface)
            return next(self.items, None)

    fmt = q.QuantFormat.QOperator if qoperator else q.QuantFormat.QDQ
    q.quantize_static(str(prepared), str(out), Reader(), quant_format=fmt, per_channel=per_channel,
                      activation_type=q.QuantType.QUInt8 if activations == "uint8" else q.QuantType.QInt8, weight_type=q.QuantType.QInt8)
    prepared.unlink()
    return out


def output_step(model: Path) -> float:
    """The quantization step of a QDQ model's (first) output: the scale of the DequantizeLinear
    that produces it — one step is as close as an integer pipeline can be expected to come."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(model)).graph
    dq = next(n for n in graph.node if n.output[0] == graph.output[0].name)
    return float(numpy_helper.to_array(next(i for i in graph.initializer if i.name == dq.input[1])))


def _float32_weights(m, sub) -> None:
    """Constant float16 weights behind DEQUANTIZE ops (MediaPipe stores its weights so) become
    float32 constants, the DEQUANTIZE ops gone: the quantizer only quantizes float32 weights."""
    from ai_edge_litert import schema_py_generated as schema

    dequantize = {i for i, c in enumerate(m.operatorCodes) if max(c.builtinCode, c.deprecatedBuiltinCode) == 6}
    kept = []
    for op in sub.operators:
        src = sub.tensors[op.inputs[0]]
        data = m.buffers[src.buffer].data if src.buffer else None
        if op.opcodeIndex in dequantize and src.type == 1 and data is not None and len(data):
            buffer = schema.BufferT()
            buffer.data = np.frombuffer(bytes(bytearray(data)), np.float16).astype(np.float32).view(np.uint8)
            m.buffers.append(buffer)
            sub.tensors[op.outputs[0]].buffer = len(m.buffers) - 1  # the output is the constant now
            continue
        kept.append(op)
    sub.operators = kept


def _with_signature(data: bytes) -> bytes:
    """A TFLite model with float32 weights and a ``serving_default`` signature over its inputs and
    outputs (ai-edge-quantizer calibrates through signatures; MediaPipe's models have none)."""
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    sub = m.subgraphs[0]
    for code in m.operatorCodes:  # old files keep the code in the deprecated field only; the quantizer reads the new one
        code.builtinCode = max(code.builtinCode, code.deprecatedBuiltinCode)
    _float32_weights(m, sub)

    def maps(indices: list[int]) -> list:
        out = []
        for i in indices:
            t = schema.TensorMapT()
            t.name, t.tensorIndex = sub.tensors[i].name, i
            out.append(t)
        return out

    if m.signatureDefs:
        return _pack(m, len(data))
    sig = schema.SignatureDefT()
    sig.inputs, sig.outputs, sig.signatureKey, sig.subgraphIndex = maps(list(sub.inputs)), maps(list(sub.outputs)), "serving_default", 0
    m.signatureDefs = [sig]
    return _pack(m, len(data))


def _pack(m, size: int) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(size * 2 + 1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def int8_tflite_from_float(model: Path, out: Path, count: int = 8, seed: int = 0) -> Path:
    """``model`` through ai-edge-quantizer's static int8 recipe (int8 weights per channel, int8
    activations), calibrated on ``count`` random inputs."""
    from ai_edge_litert.interpreter import Interpreter
    from ai_edge_quantizer import quantizer, recipe

    signed = out.with_name(out.stem + "-signed.tflite")
    signed.write_bytes(_with_signature(model.read_bytes()))
    runner = Interpreter(model_path=str(signed)).get_signature_runner("serving_default")
    shapes = {name: tuple(d["shape"]) for name, d in runner.get_input_details().items()}
    q = quantizer.Quantizer(str(signed))
    q.load_quantization_recipe(recipe.static_wi8_ai8())
    result = q.quantize(q.calibrate({"serving_default": _calibration(shapes, count, seed)}))
    out.write_bytes(bytes(result.quantized_model))
    signed.unlink()
    return out
