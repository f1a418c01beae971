"""Reference outputs from the framework's own runtime: onnxruntime for ONNX, LiteRT for TFLite."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .errors import ModelError
from .model import ImportedModel, TensorSpec


def make_inputs(specs: tuple[TensorSpec, ...], seed: int = 0, fixed: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Deterministic inputs: ``fixed`` values by original name (a model's initial state); floats
    ~U(-1, 1); integers in their ``value_range`` (token ids, masks), 8-bit integers over their
    full range, small ints else."""
    rng = np.random.default_rng(seed)
    arrays = []
    fixed = fixed or {}
    for spec in specs:
        dtype = np.dtype(spec.dtype)
        if spec.original_name in fixed:
            arrays.append(np.asarray(fixed[spec.original_name], dtype).reshape(spec.shape))
        elif spec.value_range and dtype.kind in "iu":
            arrays.append(rng.integers(spec.value_range[0], spec.value_range[1], spec.shape).astype(dtype))
        elif dtype.kind == "f":
            arrays.append(rng.uniform(-1.0, 1.0, spec.shape).astype(dtype))
        elif dtype.kind in "iu" and dtype.itemsize == 1:
            info = np.iinfo(dtype)
            arrays.append(rng.integers(info.min, info.max, spec.shape, endpoint=True).astype(dtype))
        elif dtype.kind in "iu":
            arrays.append(rng.integers(0, 10, spec.shape).astype(dtype))
        else:
            arrays.append(rng.integers(0, 2, spec.shape).astype(dtype))
    return arrays


def runtime_label(fmt: str) -> str:
    """Name and version of the reference runtime for ``fmt``."""
    from importlib import metadata

    if fmt == "onnx":
        return f"onnxruntime {metadata.version('onnxruntime')}"
    return f"ai-edge-litert {metadata.version('ai-edge-litert')}"


def reference_label(model: ImportedModel, as_float: bool | None = None) -> str:
    """:func:`runtime_label`, and how the reference ran where that is not as usual
    (``as_float``: :func:`qdq_as_float`, decided here when None)."""
    label = runtime_label(model.format)
    as_float = qdq_as_float(model) if as_float is None else as_float
    notes = []
    if as_float:
        notes.append(f"QDQ layers in float: {SATURATING}")
    elif _qdq_shifted(model, as_float):
        notes.append(QDQ_AS_UINT8)
    if model.format == "onnx" and _integer_weights_shifted(model):
        notes.append(EXACT_INTEGERS)
    return f"{label} ({'; '.join(notes)})" if notes else label


def _integer_weights_shifted(model: ImportedModel) -> bool:
    return onnxruntime_u8s8_saturates() and exact_integer_weights(model.source_bytes) is not None


SATURATING = "its int8 kernels saturate on this CPU"


@functools.cache
def onnxruntime_int8_saturates() -> bool:
    """Whether onnxruntime's int8 convolutions and matmuls can saturate here: on x86 without
    VNNI its MLAS kernels multiply u8 × s8 pairs with ``vpmaddubsw``, whose int16 pair sums
    saturate (measured on an AVX2 host: a QDQ 1×1 convolution with weights near ±127 came out
    14 steps from the exact integer sums, which edgetune's kernels and numpy agree on)."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return not {"avx512_vnni", "avx_vnni"} & set(flags)


@functools.cache
def onnxruntime_u8s8_saturates() -> bool:
    """Whether this host's onnxruntime sums ``MatMulInteger`` / ``ConvInteger`` products of uint8
    data and int8 weights with saturation: measured, on a matrix product whose pairs of products
    pass 32767 (its u8 × s8 kernels pair products in int16 — ``vpmaddubsw`` — even on CPUs with
    VNNI: a dynamically quantized T5 encoder's projection came out 1981 off the exact int32 sum).
    With uint8 weights the same sums are exact."""
    got, exact = _matmul_integer_probe(np.int8(127))
    return bool((got != exact).any())


EXACT_INTEGERS = "its int8 weights of integer products read as uint8 + 128: this CPU's onnxruntime saturates u8×s8 sums"
# ops whose int8 weights onnxruntime sums with its u8 × s8 kernels: (weight input, its zero point's input)
INTEGER_WEIGHTS = {"MatMulInteger": ((1, 3),), "ConvInteger": ((1, 3),), "DynamicQuantizeMatMul": ((1, 3),),
                   "MatMulIntegerToFloat": ((1, 5),), "QAttention": ((1, 7),), "DynamicQuantizeLSTM": ((1, 9), (2, 11))}


def exact_integer_weights(source: bytes) -> bytes | None:
    """The ONNX model with every constant int8 weight of an integer product (:data:`INTEGER_WEIGHTS`:
    ``MatMulInteger``, ``ConvInteger`` and onnxruntime's own dynamically quantized ops), and its
    zero point, read as uint8 + 128 — the same products, which onnxruntime sums exactly
    (:func:`onnxruntime_u8s8_saturates`) — or None when it has none."""
    import onnx

    if not any(op.encode() in source for op in INTEGER_WEIGHTS):
        return None
    model = onnx.load_model_from_string(source)
    inits = {i.name: i for i in model.graph.initializer}
    shifted: set[str] = set()
    for node in model.graph.node:
        for w, z in INTEGER_WEIGHTS.get(node.op_type, ()):
            if len(node.input) > w:
                _shift(model, inits, node, w, z, shifted)
    return model.SerializeToString() if shifted else None


def _shift(model: Any, inits: dict[str, Any], node: Any, w: int, z: int, shifted: set[str]) -> None:
    """``node``'s int8 weight ``w`` and its zero point ``z`` (0 where omitted) as uint8 + 128."""
    from onnx import TensorProto, numpy_helper

    names = [node.input[w]] + ([node.input[z]] if len(node.input) > z and node.input[z] else [])
    if any(n not in inits or inits[n].data_type != TensorProto.INT8 for n in names):
        return
    if len(names) == 1:  # no zero point given: it is 0, now 128
        zero = f"{node.input[w]}__zero_point_u8"
        if zero not in inits:
            inits[zero] = numpy_helper.from_array(np.array(128, np.uint8), zero)
            model.graph.initializer.append(inits[zero])
        while len(node.input) <= z:
            node.input.append("")
        node.input[z] = zero
    for n in names:
            if n not in shifted:
                value = numpy_helper.to_array(inits[n]).astype(np.int16) + 128
                inits[n].CopyFrom(numpy_helper.from_array(value.astype(np.uint8), n))
                shifted.add(n)
    return model.SerializeToString() if shifted else None


def qdq_static(model: ImportedModel) -> bool:
    """Whether ``model`` is a static QDQ ONNX model: a convolution or matmul reads a dequantized
    tensor (dynamically quantized layers are ``MatMulInteger`` / ``ConvInteger`` instead)."""
    if model.format != "onnx" or b"DequantizeLinear" not in model.source_bytes:
        return False
    graph = onnx_graph(model)
    dequantized = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    return any(n.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm") and dequantized & set(n.input) for n in graph.node)


def qdq_as_float(model: ImportedModel) -> bool:
    """Whether the reference runs a QDQ model's layers as written — dequantize, float op,
    quantize — instead of onnxruntime fusing them into its int8 kernels: where those saturate
    (:func:`onnxruntime_int8_saturates`), the layers are static QDQ ones (:func:`qdq_static`)
    and they cannot be read as uint8 instead (:func:`qdq_as_uint8`, which onnxruntime sums
    exactly, :func:`onnxruntime_u8u8_exact`). The float layers round within a step of the exact
    sums, which the check allows for 8-bit and dequantized outputs."""
    if not onnxruntime_int8_saturates() or not qdq_static(model):
        return False
    return not onnxruntime_u8u8_exact() or qdq_as_uint8(model.source_bytes) is None


def _qdq_shifted(model: ImportedModel, as_float: bool) -> bool:
    """Whether the reference reads the QDQ model's int8 tensors as uint8 + 128."""
    return not as_float and onnxruntime_int8_saturates() and qdq_static(model)


@functools.cache
def onnxruntime_u8u8_exact() -> bool:
    """Whether this host's onnxruntime sums uint8 × uint8 products exactly (its u8 × u8 kernels
    widen to 16 bits before they multiply): measured like :func:`onnxruntime_u8s8_saturates`."""
    got, exact = _matmul_integer_probe(np.uint8(255))
    return bool((got == exact).all())


def _matmul_integer_probe(weight: np.generic, k: int = 64) -> tuple[np.ndarray, int]:
    """onnxruntime's ``MatMulInteger`` of uint8 255s by a constant matrix of ``weight`` over
    ``k`` terms (its dtype the weights'), and the exact sum every output should be."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    a = helper.make_tensor_value_info("a", TensorProto.UINT8, [16, k])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, [16, 16])
    w = numpy_helper.from_array(np.full((k, 16), weight, weight.dtype), "w")
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w"], ["y"])], "probe", [a], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    got = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        None, {"a": np.full((16, k), 255, np.uint8)})[0]
    return got, k * 255 * int(weight)


QDQ_AS_UINT8 = "its int8 tensors read as uint8 + 128: this CPU's onnxruntime saturates int8 sums, not uint8 ones"


def qdq_as_uint8(source: bytes) -> bytes | None:
    """The QDQ ONNX model with every int8 tensor read as uint8 + 128 — each int8 zero point of a
    ``QuantizeLinear`` / ``DequantizeLinear`` and each int8 constant they dequantize (weights) —
    the same values once dequantized, and the same rounding and saturation (a shift of the range
    by 128), which onnxruntime fuses into its uint8 × uint8 kernels; None where some int8 tensor
    is not one of those (a zero point computed at run time, an int8 constant read otherwise)."""
    import onnx
    from onnx import TensorProto, numpy_helper

    model = onnx.load_model_from_string(source)
    graph = model.graph
    if any(vi.type.tensor_type.elem_type == TensorProto.INT8 for vi in list(graph.input) + list(graph.output)):
        return None  # int8 at the model's edge: its callers' values
    inits = {i.name: i for i in graph.initializer}
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    shift: set[str] = set()
    for node in graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        attrs = {a.name: a for a in node.attribute}
        if "output_dtype" in attrs and attrs["output_dtype"].i == TensorProto.INT8:
            return None  # (opset 21's int8 without a zero point: not written by onnxruntime's quantizer)
        zero = node.input[2] if len(node.input) > 2 else ""
        if zero:
            if zero not in inits:
                return None
            if inits[zero].data_type == TensorProto.INT8:
                shift.add(zero)
        data = node.input[0]
        if node.op_type == "DequantizeLinear" and data in inits and inits[data].data_type == TensorProto.INT8:
            if not zero:
                return None
            shift.add(data)
    if not shift:
        return None
    for name in shift:
        if any(r.op_type not in ("QuantizeLinear", "DequantizeLinear") for r in readers.get(name, [])):
            return None
        value = numpy_helper.to_array(inits[name]).astype(np.int16) + 128
        inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.uint8), name))
    for vi in graph.value_info:
        if vi.type.tensor_type.elem_type == TensorProto.INT8:
            vi.type.tensor_type.elem_type = TensorProto.UINT8
    return model.SerializeToString()


RTOL = 1e-3
def onnx_graph(model: ImportedModel) -> Any | None:
    """The ONNX graph of ``model`` (parsed once for the check's tolerances), None for TFLite."""
    if model.format != "onnx":
        return None
    import onnx

    return onnx.load_model_from_string(model.source_bytes).graph


def output_steps(model: ImportedModel, graph: Any | None) -> dict[str, float]:
    """Float outputs that are int8 values dequantized (a QDQ ONNX model's last ``DequantizeLinear``
    with one constant scale): output name → that scale, one quantization step. The check allows
    one step there, as it allows one for int8 outputs. ``graph``: the model's :func:`onnx_graph`."""
    if graph is None:
        return {}
    from onnx import numpy_helper

    consts = {i.name: i for i in graph.initializer}
    consts.update({n.output[0]: n.attribute[0].t for n in graph.node if n.op_type == "Constant" and n.attribute
                   and n.attribute[0].name == "value"})
    producer = {o: n for n in graph.node for o in n.output}
    steps = {}
    for spec in model.outputs:
        node = producer.get(spec.original_name)
        if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in consts:
            continue
        scale = numpy_helper.to_array(consts[node.input[1]])
        if scale.size == 1:
            steps[spec.original_name] = float(scale.reshape(()))
    return steps


def run_reference(model: ImportedModel, inputs: list[np.ndarray], as_float: bool | None = None) -> list[np.ndarray]:
    """Outputs of the reference runtime on ``inputs``, in the model's output order
    (``as_float``: :func:`qdq_as_float`, decided here when None)."""
    try:
        if model.format == "onnx":
            return _run_onnxruntime(model, inputs, qdq_as_float(model) if as_float is None else as_float)
        return _run_litert(model, inputs)
    except ModelError:
        raise
    except Exception as err:  # the runtimes raise their own exception types
        raise ModelError(
            f"the reference runtime ({runtime_label(model.format)}) failed: {str(err).splitlines()[0][:300]}",
            "use --no-verify to package without the reference check",
        ) from err


def _run_onnxruntime(model: ImportedModel, inputs: list[np.ndarray], as_float: bool) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1  # one answer whatever the machine (dynamically quantized LSTMs differ by threads)
    if as_float:  # no QDQ → QLinear fusion (graph optimizations off): the float layers as written
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model.source_bytes
    if _qdq_shifted(model, as_float):
        source = qdq_as_uint8(source) or source
    # integer products of int8 weights read as uint8 + 128 wherever onnxruntime saturates u8 × s8
    # sums, QDQ layers in float or not: a dynamically quantized T5 decoder (MatMulInteger, and
    # a tied output projection behind DequantizeLinear, which makes it a QDQ model too) was 15×
    # its tolerance off its own exact sums on an AVX2 host, whose QDQ layers run in float
    if any(op.encode() in source for op in INTEGER_WEIGHTS) and onnxruntime_u8s8_saturates():
        source = exact_integer_weights(source) or source
    session = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    feeds = {spec.original_name: value for spec, value in zip(model.inputs, inputs)}
    names = [spec.original_name for spec in model.outputs]
    return [np.asarray(v) for v in session.run(names, feeds)]


def _run_litert(model: ImportedModel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    interp: Any = Interpreter(model_content=model.source_bytes, num_threads=1)
    details = {d["name"]: d for d in interp.get_input_details()}
    for spec, value in zip(model.inputs, inputs):
        if tuple(details[spec.original_name]["shape"]) != value.shape:
            interp.resize_tensor_input(details[spec.original_name]["index"], value.shape)
    interp.allocate_tensors()
    for spec, value in zip(model.inputs, inputs):
        interp.set_tensor(details[spec.original_name]["index"], value)
    interp.invoke()
    outs = {d["name"]: d["index"] for d in interp.get_output_details()}
    return [np.array(interp.get_tensor(outs[spec.original_name])) for spec in model.outputs]
