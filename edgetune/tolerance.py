"""Reference-check tolerances from measurement: how far the reference runtime's own answer moves
when it computes the way the package does, times a stated factor.

A package computed in float16 (``--precision fp16``) cannot match float32 onnxruntime to 1e-3:
every tensor it stores holds 11 significant bits. How much that moves a model's outputs depends
on the model, so the tolerance is measured on the model itself: onnxruntime runs it once more
with every float tensor — weights, the inputs and each operator's result — rounded to float16
(:func:`half_storage_onnx`: a ``Cast`` to float16 and back after every operator), and that run's
distance from the float32 reference, per output, is the *spread*. The package also sums in
float16 inside its kernels, which the rounded run does not do: each of a layer's outputs adds K
products into a float16 accumulator, K roundings where the rounded run has one, and independent
rounding errors grow as √K. The error is bounded by the larger of :data:`HALF_FACTOR` and √K of
the model's longest sum, × the spread (:func:`half_factor`; measured on the benchmark's models,
``benchmarks/arm_estimate.py``, and a YOLO-style detector whose 3×3 layers of 256 channels sum
2,304 products: its error 16.1× its spread).

A model that float16 breaks — values past 65504, a tiny constant that rounds to zero — shows in
the spread itself: where rounding to float16 moves onnxruntime's own output by more than
:data:`HALF_BROKEN` of its range (or to inf / NaN), the check fails and says where, whatever the
package computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import VerificationError
from .model import ImportedModel

HALF_MAX = float(np.finfo(np.float16).max)
# the package's error against float32 onnxruntime, at most this many times onnxruntime's own
# spread under float16 rounding (see the module docstring)
HALF_FACTOR = 16.0
# float16 rounding that moves onnxruntime's own output by more than this share of the output's
# range means float16 cannot compute the model
HALF_BROKEN = 0.2


@dataclass(frozen=True)
class Measured:
    """A measured tolerance: per output an absolute bound (``bounds``), the reference's own
    ``spread`` it was derived from, and what was varied (``how``) — for the manifest."""

    bounds: dict[str, float]
    spread: dict[str, float]
    factor: float
    how: str
    # where the spread is one of sparse flips (dynamic quantization): the root-mean-square error's
    # bound too, at ``rms_factor`` × the RMS spread — a flip moves a few values far, an error in the
    # arithmetic every value
    rms_bounds: dict[str, float] = field(default_factory=dict)
    rms_spread: dict[str, float] = field(default_factory=dict)
    rms_factor: float = 0.0


def half_storage_onnx(source: bytes) -> bytes:
    """The ONNX model with every float32 tensor rounded to float16: initializers and Constant
    nodes' values rounded in place, and each float32 result of an operator (graph inputs too)
    passed through ``Cast(float16)`` → ``Cast(float32)``. Types come from ONNX shape inference;
    a result whose type it cannot infer stays unrounded."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper, shape_inference

    model = onnx.load_model_from_string(source)
    try:
        model = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 — inference fails on some contrib ops: the outputs it typed are rounded
        pass
    graph = model.graph
    typed = {v.name for v in (*graph.value_info, *graph.output, *graph.input)
             if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    for init in graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(_round_half(numpy_helper.to_array(init)), init.name))
    consts = {i.name for i in graph.initializer}

    def cast_pair(src: str, dst: str) -> list[Any]:
        return [helper.make_node("Cast", [src], [f"{dst}__fp16"], to=TensorProto.FLOAT16),
                helper.make_node("Cast", [f"{dst}__fp16"], [dst], to=TensorProto.FLOAT)]

    nodes = []
    inputs = {i.name: f"{i.name}__rounded" for i in graph.input if i.name not in consts and i.name in typed}
    for name, alias in inputs.items():  # a graph input's readers read its rounded copy
        nodes += cast_pair(name, alias)
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type == TensorProto.FLOAT:
                    attr.t.CopyFrom(numpy_helper.from_array(_round_half(numpy_helper.to_array(attr.t)), attr.t.name))
        for k, name in enumerate(node.input):
            if name in inputs:
                node.input[k] = inputs[name]
        casts = []
        for k, name in enumerate(node.output):
            if name in typed and node.op_type != "Constant":
                node.output[k] = f"{name}__fp32"
                casts += cast_pair(node.output[k], name)
        nodes += [node, *casts]
    del graph.node[:]
    graph.node.extend(nodes)
    return model.SerializeToString()


def _round_half(array: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return array.astype(np.float16).astype(np.float32)


def _run_onnx(source: bytes, model: ImportedModel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the casts stay where they are
    session = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    feeds = {spec.original_name: value for spec, value in zip(model.inputs, inputs)}
    return [np.asarray(v) for v in session.run([spec.original_name for spec in model.outputs], feeds)]


def _run_tflite_half_weights(model: ImportedModel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """LiteRT on the TFLite model with its float32 weight buffers rounded to float16 (activations
    are not rounded: LiteRT has no operator to round them with)."""
    import dataclasses

    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    from .reference import run_reference

    m = schema.ModelT.InitFromPackedBuf(bytearray(model.source_bytes), 0)
    for sub in m.subgraphs or []:
        for t in sub.tensors or []:
            buf = m.buffers[t.buffer] if t.buffer < len(m.buffers or []) else None
            if t.type == schema.TensorType.FLOAT32 and buf is not None and buf.data is not None and len(buf.data):
                values = np.frombuffer(bytes(bytearray(buf.data)), np.float32)
                buf.data = np.frombuffer(_round_half(values).tobytes(), np.uint8)
    builder = flatbuffers.Builder(len(model.source_bytes) * 2 + 1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    half = dataclasses.replace(model, source_bytes=bytes(builder.Output()))
    return run_reference(half, [_round_half(a) if a.dtype == np.float32 else a for a in inputs])


def half_spread(model: ImportedModel, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> tuple[dict[str, float], str]:
    """Per output (original name), the largest distance between the reference's float32 outputs
    and its outputs with float16 rounding (:func:`half_storage_onnx`; TFLite: weights only), and
    a phrase saying what was rounded."""
    if model.format == "onnx":
        rounded, how = _run_onnx(half_storage_onnx(model.source_bytes), model, inputs), \
            "onnxruntime with every tensor (weights, inputs, each operator's result) rounded to float16"
    else:
        rounded, how = _run_tflite_half_weights(model, inputs), "LiteRT with the weights and inputs rounded to float16"
    spread = {}
    for spec, ref, got in zip(model.outputs, outputs, rounded):
        if ref.dtype.kind != "f":
            continue
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        spread[spec.original_name] = float(diff.max()) if diff.size and np.isfinite(diff).all() else float("inf")
    return spread, how


def half_factor(model: ImportedModel) -> float:
    """The float16 bound's factor over the spread (see the module docstring): the larger of
    :data:`HALF_FACTOR` and the square root of the longest sum a kernel accumulates in float16."""
    from . import _tvm

    return max(HALF_FACTOR, float(np.sqrt(_tvm.longest_sum(model.mod))))


def half_tolerance(model: ImportedModel, inputs: list[np.ndarray], outputs: list[np.ndarray], rtol: float,
                   atol: float) -> Measured:
    """The tolerance of a float16 package (see the module docstring): per float output the
    larger of the float32 check's bound (``atol`` + ``rtol`` × the output's magnitude) and
    :func:`half_factor` × the spread. Raises VerificationError where float16 breaks the model."""
    spread, how = half_spread(model, inputs, outputs)
    factor = half_factor(model)
    bounds = {}
    for spec, ref in zip(model.outputs, outputs):
        name = spec.original_name
        if name not in spread:
            continue
        scale = float(np.abs(ref.astype(np.float64)).max()) if ref.size else 0.0
        span = float(ref.max() - ref.min()) if ref.size else 0.0
        if not np.isfinite(spread[name]) or spread[name] > HALF_BROKEN * max(span, scale, 1e-30):
            raise VerificationError(*_broken(model, inputs, name, spread[name], max(span, scale)))
        bounds[name] = max(atol + rtol * scale, factor * spread[name])
    return Measured(bounds, spread, factor, how)


def _broken(model: ImportedModel, inputs: list[np.ndarray], output: str, spread: float,
            span: float) -> tuple[str, str]:
    moved = "to inf or NaN" if not np.isfinite(spread) else f"by {100 * spread / span:.0f} % of its range"
    where = _first_overflow(model, inputs) if model.format == "onnx" else None
    at = f" ({where})" if where else ""
    return (f"float16 cannot compute this model: rounding its tensors to float16 moves the reference's own output "
            f"'{output}' {moved}{at}",
            "package it in fp32 (drop --precision fp16), or rescale the model so its values stay within float16's "
            f"range (±{HALF_MAX:g}, steps of 6e-8 near zero)")


def _first_overflow(model: ImportedModel, inputs: list[np.ndarray]) -> str | None:
    """Where the float32 reference first leaves float16's range: the first operator (in graph
    order) with a result beyond ±65504, or a non-zero constant that float16 rounds to zero."""
    import onnx
    from onnx import TensorProto, numpy_helper, shape_inference

    m = onnx.load_model_from_string(model.source_bytes)
    for init in m.graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            a = numpy_helper.to_array(init)
            lost = (a != 0) & (np.abs(a) < float(np.finfo(np.float16).smallest_subnormal) / 2)
            if lost.any():
                return f"constant '{init.name}' holds {np.abs(a[lost]).min():.1e}, which float16 rounds to 0"
            if np.abs(a).max(initial=0) > HALF_MAX:
                return f"constant '{init.name}' holds {np.abs(a).max():.3g}, past float16's {HALF_MAX:g}"
    try:
        m = shape_inference.infer_shapes(m)
    except Exception:  # noqa: BLE001 — without types, every result is asked for
        pass
    known = {o.name for o in m.graph.output}
    typed = {v.name: v for v in m.graph.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    extra = [typed[o] for n in m.graph.node for o in n.output if o in typed and o not in known]
    m.graph.output.extend(extra)
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        feeds = {spec.original_name: value for spec, value in zip(model.inputs, inputs)}
        names = [o.name for o in m.graph.output]
        values = dict(zip(names, session.run(names, feeds)))
    except Exception:  # noqa: BLE001 — a diagnosis only: the check fails with or without it
        return None
    for node in m.graph.node:
        for o in node.output:
            v = values.get(o)
            if isinstance(v, np.ndarray) and v.dtype == np.float32 and v.size and np.abs(v).max() > HALF_MAX:
                return f"first at {node.op_type} node '{node.name or o}': values reach {np.abs(v).max():.3g}"
    return None


# ---------------------------------------------------------------- quantized models

# A quantized model rounds activations to int8 steps: at run time (DynamicQuantizeLinear; inside
# onnxruntime's DynamicQuantizeLSTM / DynamicQuantizeMatMul) or, in a static QDQ model, at each
# QuantizeLinear of a computed tensor. Two correct implementations, one ulp apart before such a
# rounding (float sums in another order, exact integer sums requantized by one multiply), put a
# value on either side of a step, and the next layers carry the flip on. How far that moves the
# outputs is measured on the model: onnxruntime again with each quantized activation scaled by
# 1 ± k ulp (k = 1, 2, 4) — the spread, its largest value and its root mean square over each
# output. The package must be within INT8_FACTOR × the first and INT8_RMS_FACTOR × the second.
# Measured: a T5-small-shaped encoder (24 quantized activations) spread 0.055 / RMS 0.0127,
# edgetune 0.051 / 0.0122; a 4-layer Whisper-tiny-wide encoder 0.051 / 0.0093, edgetune 0.020 /
# 0.0044 — and with DynamicQuantizeLinear rounding down instead of to nearest (an arithmetic
# error) 0.124 / 0.030: outside the RMS bound. In a static QDQ model the moved activation breaks
# onnxruntime's fusion of that layer into its int8 kernels, so the spread also holds how far its
# float QDQ layers land from its int8 kernels — another optimisation level of the reference. A
# QDQ SqueezeNet: spread 0.0039 (one step) / RMS 1.2e-4, edgetune 0 / 0 (the int8 kernels' own
# arithmetic), with the integer layers' requantize rounding down 0.0078 / 4.1e-4: outside. The
# Whisper-tiny-wide encoder quantized statically (150 QuantizeLinear, LayerNorm / Gelu / softmax
# between them): spread 0.258 / RMS 0.047 — onnxruntime's levels differ by as much, 8 steps at
# the output — edgetune 0.226 / 0.047; there a requantize rounding down (0.354 / 0.066) is
# within the reference's own noise, which no comparison with it can tell apart.
INT8_ULPS = (1, -1, 2, -2, 4, -4)
INT8_FACTOR = 4.0
INT8_RMS_FACTOR = 2.0
# where each op reads the float data it quantizes at run time
QUANTIZED_AT_RUN_TIME = {"DynamicQuantizeLinear": 0, "DynamicQuantizeLSTM": 0, "DynamicQuantizeMatMul": 0}


def _perturbed(source: bytes, eps: float, static: bool) -> bytes:
    """The ONNX model with the float input every op quantizes at run time scaled by ``1 + eps``
    (``static``: and each QuantizeLinear's input that is computed, not a constant)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_model_from_string(source)
    graph = model.graph
    constants = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    factor = "edgetune__ulps"
    graph.initializer.append(numpy_helper.from_array(np.array(1 + eps, np.float32), factor))
    nodes = []
    for node in graph.node:
        at = QUANTIZED_AT_RUN_TIME.get(node.op_type, 0 if static and node.op_type == "QuantizeLinear" else None)
        if at is not None and len(node.input) > at and node.input[at] and node.input[at] not in constants:
            moved = f"{node.input[at]}__moved"
            nodes.append(helper.make_node("Mul", [node.input[at], factor], [moved]))
            node.input[at] = moved
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model.SerializeToString()


def int8_tolerance(model: ImportedModel, inputs: list[np.ndarray], outputs: list[np.ndarray], rtol: float,
                   atol: float) -> Measured | None:
    """The tolerance of a quantized ONNX model — dynamically quantized, or static QDQ whose float
    outputs a quantized layer computes (see :data:`INT8_FACTOR`) — None for any other model."""
    import dataclasses

    from .reference import _run_onnxruntime, qdq_as_float, qdq_static

    if model.format != "onnx":
        return None
    dynamic = b"DynamicQuantize" in model.source_bytes
    static = qdq_static(model)
    if not dynamic and not static:
        return None
    as_float = qdq_as_float(model) if static else False  # the perturbed runs run as the reference does
    floats = [(s.original_name, ref) for s, ref in zip(model.outputs, outputs) if ref.dtype.kind == "f"]
    if not floats:
        return None
    spread = {name: 0.0 for name, _ in floats}
    rms = dict(spread)
    for k in INT8_ULPS:
        moved = dataclasses.replace(model, source_bytes=_perturbed(model.source_bytes, k * 2.0 ** -23, static))
        alts = dict(zip((s.original_name for s in model.outputs), _run_onnxruntime(moved, inputs, as_float)))
        for name, ref in floats:
            diff = np.abs(alts[name].astype(np.float64) - ref.astype(np.float64))
            if diff.size:
                spread[name] = max(spread[name], float(diff.max()))
                rms[name] = max(rms[name], float(np.sqrt((diff ** 2).mean())))
    bounds, rms_bounds = {}, {}
    for name, ref in floats:
        r = ref.astype(np.float64)
        scale = float(np.abs(r).max()) if ref.size else 0.0
        bounds[name] = max(atol + rtol * scale, INT8_FACTOR * spread[name])
        # the float32 check's tolerance on the output's root mean square, not its largest value: a
        # softmax over 1000 classes peaks at 0.4 and an error of rtol × 0.4 everywhere is no noise
        typical = float(np.sqrt((r ** 2).mean())) if ref.size else 0.0
        rms_bounds[name] = max(atol + rtol * typical, INT8_RMS_FACTOR * rms[name])
    how = ("onnxruntime with each activation quantized "
           + ("at run time" if dynamic and not static else "(QuantizeLinear)" if not dynamic else "at run time or by QuantizeLinear")
           + f" moved by {', '.join(f'{k:+d}' for k in INT8_ULPS)} ulp before its rounding")
    return Measured(bounds, spread, INT8_FACTOR, how, rms_bounds, rms, INT8_RMS_FACTOR)


def measured_tolerance(model: ImportedModel, inputs: list[np.ndarray], outputs: list[np.ndarray], precision: str,
                       rtol: float, atol: float) -> Measured | None:
    """The measured tolerance a package's check takes, where one applies: float16 packages
    (:func:`half_tolerance`), quantized models (:func:`int8_tolerance`)."""
    if precision == "fp16":
        return half_tolerance(model, inputs, outputs, rtol, atol)
    return int8_tolerance(model, inputs, outputs, rtol, atol)
