"""TFLite files of the kinds audio and streaming models ship as, written with the TFLite schema's
object API (``ai_edge_litert.schema_py_generated``), each as TensorFlow's converter lays it out:

* ``rfft_frontend``: a log-magnitude spectrogram front end — frames reshaped to ``[…, 1, frame]``,
  ``RFFT2D`` with ``fft_length [1, N]`` (N ≥ the frame: zero-padded, what ``tf.signal.stft``
  converts to), ``COMPLEX_ABS``, a mel matrix, ``LOG``.
* ``streaming_state``: a model keeping its state in a resource variable — ``CALL_ONCE`` of an
  init subgraph that assigns the initial value, ``VAR_HANDLE`` / ``READ_VARIABLE`` /
  ``ASSIGN_VARIABLE`` in the main one (TF's ``experimental_enable_resource_variables``).
* ``int8_slicing``: int8 data movement — ``STRIDED_SLICE`` with masks and ``SPLIT_V`` with an
  inferred (−1) size, between int8 layers.
* ``fp16_weights``: weights stored as float16 behind ``DEQUANTIZE`` (TF's float16 quantization).
* ``prelu_slopes``: ``PRELU`` after convolutions as MediaPipe's landmark models have it — a
  per-channel slope ``[1, 1, C]``, one slope ``[1]``, and a slope per element ``[H, W, C]``.
* ``hard_swish``: ``HARD_SWISH`` after convolutions (MediaPipe's segmenters and landmark models).
* ``dynamic_signature``: an input whose shape signature is ``[-1, -1, F]`` and a reshape computed
  at run time from ``SHAPE`` (``[1, 1, F]`` stored as its shape).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

FLOAT32, FLOAT16, INT32, INT8, INT64, COMPLEX64, RESOURCE = 0, 1, 2, 9, 4, 8, 13


def _schema() -> Any:
    from ai_edge_litert import schema_py_generated as schema

    return schema


class Builder:
    """A TFLite model under construction (object API): subgraphs, tensors, buffers, operators."""

    def __init__(self) -> None:
        s = _schema()
        self.s = s
        self.model = s.ModelT()
        self.model.version = 3
        self.model.description = "edgetune test model"
        self.model.buffers = [s.BufferT()]
        self.model.operatorCodes = []
        self.model.subgraphs = []

    def subgraph(self, name: str = "main") -> Any:
        sub = self.s.SubGraphT()
        sub.name, sub.tensors, sub.operators, sub.inputs, sub.outputs = name, [], [], [], []
        self.model.subgraphs.append(sub)
        return sub

    def tensor(self, sub: Any, name: str, shape: list[int], dtype: int = FLOAT32, data: np.ndarray | None = None,
               signature: list[int] | None = None, quant: tuple[list[float], list[int], int] | None = None) -> int:
        t = self.s.TensorT()
        t.name, t.shape, t.type = name, list(shape), dtype
        if signature is not None:
            t.shapeSignature = list(signature)
        t.buffer = 0
        if data is not None:
            buf = self.s.BufferT()
            buf.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
            self.model.buffers.append(buf)
            t.buffer = len(self.model.buffers) - 1
        if quant is not None:
            q = self.s.QuantizationParametersT()
            q.scale, q.zeroPoint, q.quantizedDimension = list(quant[0]), list(quant[1]), quant[2]
            t.quantization = q
        sub.tensors.append(t)
        return len(sub.tensors) - 1

    def const(self, sub: Any, name: str, value: np.ndarray, dtype: int | None = None) -> int:
        value = np.asarray(value)
        kinds = {np.dtype(np.float32): FLOAT32, np.dtype(np.float16): FLOAT16, np.dtype(np.int32): INT32,
                 np.dtype(np.int8): INT8, np.dtype(np.int64): INT64}
        return self.tensor(sub, name, list(value.shape), dtype if dtype is not None else kinds[value.dtype], value)

    def op(self, sub: Any, code: int, inputs: list[int], outputs: list[int], options_type: int = 0,
           options: Any = None) -> None:
        codes = self.model.operatorCodes
        index = next((i for i, c in enumerate(codes) if c.builtinCode == code), None)
        if index is None:
            c = self.s.OperatorCodeT()
            c.builtinCode, c.deprecatedBuiltinCode, c.version = code, min(code, 127), 1
            codes.append(c)
            index = len(codes) - 1
        o = self.s.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = index, list(inputs), list(outputs)
        o.builtinOptionsType, o.builtinOptions = options_type, options
        sub.operators.append(o)

    def options(self, kind: str, **fields: Any) -> tuple[int, Any]:
        """(BuiltinOptions enum value, the ``{kind}T`` object with ``fields`` set)."""
        obj = getattr(self.s, f"{kind}T")()
        for key, value in fields.items():
            setattr(obj, key, value)
        return getattr(self.s.BuiltinOptions, kind), obj

    def save(self, out: Path) -> Path:
        import flatbuffers

        b = flatbuffers.Builder(1024)
        b.Finish(self.model.Pack(b), file_identifier=b"TFL3")
        out.write_bytes(bytes(b.Output()))
        return out


def _ops() -> Any:
    return _schema().BuiltinOperator


def _fc(bld: Builder, sub: Any, x: int, w: np.ndarray, name: str, out_shape: list[int], keep_dims: bool = True) -> int:
    y = bld.tensor(sub, name, out_shape)
    weights = bld.const(sub, f"{name}/w", w.astype(np.float32))
    bias = bld.const(sub, f"{name}/b", np.zeros(w.shape[0], np.float32))
    bld.op(sub, _ops().FULLY_CONNECTED, [x, weights, bias], [y], *bld.options("FullyConnectedOptions", keepNumDims=keep_dims))
    return y


def rfft_frontend(out: Path, frames: int = 12, frame: int = 400, fft: int = 512, mels: int = 16, seed: int = 0,
                  real_part: bool = False) -> Path:
    """frames [1, frames, frame] → log(mel · |RFFT|) [1, frames, mels]; ``real_part``: the
    spectrum's real part instead of its magnitude, as ``tf.cast(complex, float32)`` writes it
    (a CAST from COMPLEX64: BirdNET's front end)."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    x = bld.tensor(sub, "serving_default_frames:0", [1, frames, frame])
    shaped = bld.tensor(sub, "frames_4d", [1, frames, 1, frame])
    bld.op(sub, ops.RESHAPE, [x, bld.const(sub, "shape4", np.array([1, frames, 1, frame], np.int32))], [shaped],
           *bld.options("ReshapeOptions", newShape=[1, frames, 1, frame]))
    bins = fft // 2 + 1
    spectrum = bld.tensor(sub, "spectrum", [1, frames, 1, bins], COMPLEX64)
    bld.op(sub, ops.RFFT2D, [shaped, bld.const(sub, "fft_length", np.array([1, fft], np.int32))], [spectrum],
           *bld.options("Rfft2dOptions"))
    magnitude = bld.tensor(sub, "magnitude", [1, frames, 1, bins])
    if real_part:
        bld.op(sub, ops.CAST, [spectrum], [magnitude], *bld.options("CastOptions", inDataType=COMPLEX64, outDataType=FLOAT32))
    else:
        bld.op(sub, ops.COMPLEX_ABS, [spectrum], [magnitude])
    flat = bld.tensor(sub, "magnitude_3d", [1, frames, bins])
    bld.op(sub, ops.RESHAPE, [magnitude, bld.const(sub, "shape3", np.array([1, frames, bins], np.int32))], [flat],
           *bld.options("ReshapeOptions", newShape=[1, frames, bins]))
    mel = _fc(bld, sub, flat, np.abs(rng.standard_normal((mels, bins))) * 0.05, "mel", [1, frames, mels])
    shifted = bld.tensor(sub, "mel_eps", [1, frames, mels])
    bld.op(sub, ops.ADD, [mel, bld.const(sub, "eps", np.array([1e-3], np.float32))], [shifted], *bld.options("AddOptions"))
    y = bld.tensor(sub, "StatefulPartitionedCall:0", [1, frames, mels])
    if real_part:  # (the real part may be negative: no log)
        bld.op(sub, ops.TANH, [shifted], [y])
    else:
        bld.op(sub, ops.LOG, [shifted], [y])
    sub.inputs, sub.outputs = [x], [y]
    return bld.save(out)


def streaming_state(out: Path, features: int = 8, hidden: int = 16, seed: int = 0) -> Path:
    """y, state' = f(x, state) with the state in a resource variable (initial value nonzero)."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    main = bld.subgraph("main")
    init = bld.subgraph("init")
    handle_opts = bld.options("VarHandleOptions", container="", sharedName="stream_state")
    h0 = bld.tensor(init, "init/handle", [], RESOURCE)
    bld.op(init, ops.VAR_HANDLE, [], [h0], *handle_opts)
    value0 = bld.const(init, "init/value", (rng.standard_normal((1, hidden)) * 0.5).astype(np.float32))
    bld.op(init, ops.ASSIGN_VARIABLE, [h0, value0], [], *bld.options("AssignVariableOptions"))

    x = bld.tensor(main, "serving_default_x:0", [1, features])
    bld.op(main, ops.CALL_ONCE, [], [], *bld.options("CallOnceOptions", initSubgraphIndex=1))
    handle = bld.tensor(main, "handle", [], RESOURCE)
    bld.op(main, ops.VAR_HANDLE, [], [handle], *handle_opts)
    state = bld.tensor(main, "state", [1, hidden])
    bld.op(main, ops.READ_VARIABLE, [handle], [state], *bld.options("ReadVariableOptions"))
    proj = _fc(bld, main, x, rng.standard_normal((hidden, features)) / np.sqrt(features), "proj", [1, hidden])
    decayed = bld.tensor(main, "decayed", [1, hidden])
    bld.op(main, ops.MUL, [state, bld.const(main, "decay", np.array([0.5], np.float32))], [decayed],
           *bld.options("MulOptions"))
    total = bld.tensor(main, "total", [1, hidden])
    bld.op(main, ops.ADD, [proj, decayed], [total], *bld.options("AddOptions"))
    new_state = bld.tensor(main, "new_state", [1, hidden])
    bld.op(main, ops.TANH, [total], [new_state])
    bld.op(main, ops.ASSIGN_VARIABLE, [handle, new_state], [], *bld.options("AssignVariableOptions"))
    y = _fc(bld, main, new_state, rng.standard_normal((2, hidden)) / np.sqrt(hidden), "StatefulPartitionedCall:0", [1, 2])
    main.inputs, main.outputs = [x], [y]
    return bld.save(out)


def int8_slicing(out: Path, seed: int = 0) -> Path:
    """int8 [1, 6, 8, 12] → STRIDED_SLICE (begin/end masks, stride 2 on W) → SPLIT_V [4, −1, 3]
    on channels → ADD of two parts → CONCATENATION with the third: int8 throughout."""
    ops = _ops()
    bld = Builder()
    sub = bld.subgraph()
    q = ([0.05], [3], 0)
    x = bld.tensor(sub, "serving_default_x:0", [1, 6, 8, 12], INT8, quant=q)
    sliced = bld.tensor(sub, "sliced", [1, 5, 4, 12], INT8, quant=q)
    bld.op(sub, ops.STRIDED_SLICE, [x, bld.const(sub, "begin", np.array([0, 1, 0, 0], np.int32)),
                                    bld.const(sub, "end", np.array([1, 6, 8, 12], np.int32)),
                                    bld.const(sub, "strides", np.array([1, 1, 2, 1], np.int32))], [sliced],
           *bld.options("StridedSliceOptions", beginMask=0b1001, endMask=0b1001))
    parts = [bld.tensor(sub, f"part{i}", [1, 5, 4, c], INT8, quant=q) for i, c in enumerate((4, 5, 3))]
    bld.op(sub, ops.SPLIT_V, [sliced, bld.const(sub, "sizes", np.array([4, -1, 3], np.int32)),
                              bld.const(sub, "axis", np.array(-1, np.int32))], parts,
           *bld.options("SplitVOptions", numSplits=3))
    first = bld.tensor(sub, "first3", [1, 5, 4, 3], INT8, quant=q)
    bld.op(sub, ops.STRIDED_SLICE, [parts[0], bld.const(sub, "b2", np.array([0, 0, 0, 1], np.int32)),
                                    bld.const(sub, "e2", np.array([0, 0, 0, 4], np.int32)),
                                    bld.const(sub, "s2", np.array([1, 1, 1, 1], np.int32))], [first],
           *bld.options("StridedSliceOptions", beginMask=0b0111, endMask=0b0111))
    summed = bld.tensor(sub, "summed", [1, 5, 4, 3], INT8, quant=([0.07], [-2], 0))
    bld.op(sub, ops.ADD, [first, parts[2]], [summed], *bld.options("AddOptions"))
    y = bld.tensor(sub, "StatefulPartitionedCall:0", [1, 5, 4, 8], INT8, quant=([0.07], [-2], 0))
    requant = bld.tensor(sub, "requant", [1, 5, 4, 5], INT8, quant=([0.07], [-2], 0))
    bld.op(sub, ops.QUANTIZE, [parts[1]], [requant])
    bld.op(sub, ops.CONCATENATION, [summed, requant], [y], *bld.options("ConcatenationOptions", axis=3))
    sub.inputs, sub.outputs = [x], [y]
    return bld.save(out)


def saturated_bias_conv(out: Path, seed: int = 0) -> Path:
    """int8 [1, 6, 6, 8] (zero point 20) → CONV_2D 3×3 SAME, 16 channels, int8 weights per
    channel, as ai-edge-quantizer writes a layer with near-dead channels: channel 9's filter all
    zero and channel 5's a live one, both with a weight scale of 1e-9 and their bias saturated
    at −2³¹. Channel 5's sum leaves int32 (−2³¹ − 20·Σw + Σx·w): LiteRT's int32 accumulator wraps."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    x = bld.tensor(sub, "serving_default_x:0", [1, 6, 6, 8], INT8, quant=([0.05], [20], 0))
    w = rng.integers(-127, 128, (16, 3, 3, 8)).astype(np.int8)
    w[5] = np.abs(w[5])  # Σw > 0: −2³¹ − 20·Σw is below int32
    w[9] = 0
    scales = np.full(16, 0.004, np.float32)
    scales[[5, 9]] = np.float32(1e-9)
    bias = rng.integers(-2000, 2000, 16).astype(np.int32)
    bias[[5, 9]] = np.iinfo(np.int32).min
    weights = bld.tensor(sub, "conv/w", list(w.shape), INT8, data=w, quant=(list(scales), [0] * 16, 0))
    b = bld.tensor(sub, "conv/b", [16], INT32, data=bias, quant=(list(np.float32(0.05) * scales), [0] * 16, 0))
    y = bld.tensor(sub, "StatefulPartitionedCall:0", [1, 6, 6, 16], INT8, quant=([0.1], [-2], 0))
    bld.op(sub, ops.CONV_2D, [x, weights, b], [y], *bld.options("Conv2DOptions", padding=0, strideW=1, strideH=1))
    sub.inputs, sub.outputs = [x], [y]
    return bld.save(out)


def fp16_weights(out: Path, seed: int = 0) -> Path:
    """A 3×3 convolution and a dense layer whose weights and biases are float16 constants behind
    DEQUANTIZE, as TensorFlow's float16 quantization writes them."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    x = bld.tensor(sub, "serving_default_x:0", [1, 8, 8, 4])

    def half(name: str, value: np.ndarray) -> int:
        stored = bld.const(sub, f"{name}_fp16", value.astype(np.float16))
        full = bld.tensor(sub, name, list(value.shape))
        bld.op(sub, ops.DEQUANTIZE, [stored], [full])
        return full

    conv = bld.tensor(sub, "conv", [1, 8, 8, 6])
    bld.op(sub, ops.CONV_2D, [x, half("conv/w", rng.standard_normal((6, 3, 3, 4)) * 0.3), half("conv/b", rng.standard_normal(6) * 0.1)],
           [conv], *bld.options("Conv2DOptions", padding=0, strideW=1, strideH=1, fusedActivationFunction=1))
    flat = bld.tensor(sub, "flat", [1, 384])
    bld.op(sub, ops.RESHAPE, [conv, bld.const(sub, "flat_shape", np.array([1, 384], np.int32))], [flat],
           *bld.options("ReshapeOptions", newShape=[1, 384]))
    y = bld.tensor(sub, "StatefulPartitionedCall:0", [1, 5])
    bld.op(sub, ops.FULLY_CONNECTED, [flat, half("fc/w", rng.standard_normal((5, 384)) * 0.05), half("fc/b", np.zeros(5))], [y],
           *bld.options("FullyConnectedOptions"))
    sub.inputs, sub.outputs = [x], [y]
    return bld.save(out)


def hard_swish(out: Path, seed: int = 0) -> Path:
    """conv 3×3 → HARD_SWISH → conv 1×1 → HARD_SWISH (TVM's converter writes it as
    ``x · relu6(x + 3) / 6``)."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    shape = [1, 6, 7, 8]
    x = bld.tensor(sub, "serving_default_x:0", shape)
    src = x
    for n, k in ((1, 3), (2, 1)):
        c = bld.tensor(sub, f"conv{n}", shape)
        w = bld.const(sub, f"conv{n}/w", (rng.standard_normal((8, k, k, 8)) * 0.4).astype(np.float32))
        b = bld.const(sub, f"conv{n}/b", (rng.standard_normal(8) * 0.5).astype(np.float32))
        bld.op(sub, ops.CONV_2D, [src, w, b], [c], *bld.options("Conv2DOptions", padding=0, strideW=1, strideH=1))
        src = bld.tensor(sub, "StatefulPartitionedCall:0" if n == 2 else f"hswish{n}", shape)
        bld.op(sub, ops.HARD_SWISH, [c], [src])
    sub.inputs, sub.outputs = [x], [src]
    return bld.save(out)


def gelus(out: Path, seed: int = 0) -> Path:
    """FULLY_CONNECTED → GELU (exact) → FULLY_CONNECTED → GELU (``approximate``: the tanh form,
    what ai-edge-torch writes for torch's ``GELU(approximate="tanh")``), values over ±4."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    x = bld.tensor(sub, "serving_default_x:0", [1, 12, 16])
    src = x
    for n, approximate in ((1, False), (2, True)):
        h = _fc(bld, sub, src, rng.standard_normal((16, 16)).astype(np.float32), f"fc{n}", [1, 12, 16])
        src = bld.tensor(sub, "StatefulPartitionedCall:0" if n == 2 else f"gelu{n}", [1, 12, 16])
        bld.op(sub, ops.GELU, [h], [src], *bld.options("GeluOptions", approximate=approximate))
    sub.inputs, sub.outputs = [x], [src]
    return bld.save(out)


def _same_conv(bld: Builder, sub: Any, rng: np.random.Generator, name: str, src: int, k: int, shape: list[int],
               bias: float) -> int:
    """A k×k CONV_2D (SAME padding) from ``src`` to a tensor of ``shape`` (its channels both
    sides), weights ~N(0, 0.3²), biases ~N(0, ``bias``²)."""
    ops, c = _ops(), shape[-1]
    y = bld.tensor(sub, name, shape)
    w = bld.const(sub, f"{name}/w", (rng.standard_normal((c, k, k, c)) * 0.3).astype(np.float32))
    b = bld.const(sub, f"{name}/b", (rng.standard_normal(c) * bias).astype(np.float32))
    bld.op(sub, ops.CONV_2D, [src, w, b], [y], *bld.options("Conv2DOptions", padding=0, strideW=1, strideH=1))
    return y


def prelu_slopes(out: Path, seed: int = 0) -> Path:
    """conv 3×3 → PRELU (slope [1, 1, C]) → conv 1×1 → PRELU (slope [1]) → + input → PRELU
    (slope [H, W, C]); slopes of both signs."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    shape = [1, 6, 7, 8]
    x = bld.tensor(sub, "serving_default_x:0", shape)

    def conv(name: str, src: int, k: int) -> int:
        return _same_conv(bld, sub, rng, name, src, k, shape, bias=0.1)

    def prelu(name: str, src: int, slope: np.ndarray) -> int:
        y = bld.tensor(sub, name, shape)
        bld.op(sub, ops.PRELU, [src, bld.const(sub, f"{name}/alpha", slope.astype(np.float32))], [y])
        return y

    a = prelu("prelu1", conv("conv1", x, 3), rng.uniform(-0.5, 0.5, (1, 1, 8)))
    b = prelu("prelu2", conv("conv2", a, 1), np.array([0.25]))
    summed = bld.tensor(sub, "sum", shape)
    bld.op(sub, ops.ADD, [b, x], [summed], *bld.options("AddOptions"))
    y = prelu("StatefulPartitionedCall:0", summed, rng.uniform(-0.5, 0.5, shape[1:]))
    sub.inputs, sub.outputs = [x], [y]
    return bld.save(out)


def activated_adds(out: Path, seed: int = 0) -> Path:
    """conv 3×3 → ADD with the input, fused RELU6 → conv 1×1 → ADD with the first sum, fused
    RELU: residual adds as MediaPipe's pose landmark decoder has them."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    shape = [1, 6, 7, 8]
    x = bld.tensor(sub, "serving_default_x:0", shape)

    def conv(name: str, src: int, k: int) -> int:
        return _same_conv(bld, sub, rng, name, src, k, shape, bias=0.5)

    def add(name: str, a: int, b: int, activation: int) -> int:
        y = bld.tensor(sub, name, shape)
        bld.op(sub, ops.ADD, [a, b], [y], *bld.options("AddOptions", fusedActivationFunction=activation))
        return y

    first = add("sum1", conv("conv1", x, 3), x, 3)  # RELU6
    y = add("StatefulPartitionedCall:0", conv("conv2", first, 1), first, 1)  # RELU
    sub.inputs, sub.outputs = [x], [y]
    return bld.save(out)


def bilinear_upsamplings(out: Path, seed: int = 0) -> Path:
    """conv 3×3 → RESIZE_BILINEAR ×2 (half-pixel centres) → ADD with a skip conv's output → conv
    1×1 → RESIZE_BILINEAR to 17 × 9 (align-corners: weights that are not multiples of a power of
    two) → RESIZE_BILINEAR to 20 × 20 (TensorFlow's legacy asymmetric mapping): upsamplings as
    MediaPipe's segmentation decoders have them, in each of TFLite's three modes."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    small, large = [1, 5, 7, 8], [1, 10, 14, 8]
    x = bld.tensor(sub, "serving_default_x:0", small)
    skip = bld.tensor(sub, "serving_default_skip:0", large)

    def resize(name: str, src: int, size: list[int], **options: bool) -> int:
        y = bld.tensor(sub, name, [1, *size, 8])
        bld.op(sub, ops.RESIZE_BILINEAR, [src, bld.const(sub, f"{name}/size", np.array(size, np.int32))], [y],
               *bld.options("ResizeBilinearOptions", **options))
        return y

    up = resize("up", _same_conv(bld, sub, rng, "conv1", x, 3, small, bias=0.5), [10, 14], halfPixelCenters=True)
    summed = bld.tensor(sub, "sum", large)
    bld.op(sub, ops.ADD, [up, _same_conv(bld, sub, rng, "conv_skip", skip, 1, large, bias=0.5)], [summed],
           *bld.options("AddOptions"))
    corners = resize("corners", _same_conv(bld, sub, rng, "conv2", summed, 1, large, bias=0.5), [17, 9],
                     alignCorners=True)
    y = resize("StatefulPartitionedCall:0", corners, [20, 20])
    sub.inputs, sub.outputs = [x, skip], [y]
    return bld.save(out)


def dynamic_signature(out: Path, features: int = 16, hidden: int = 8, seed: int = 0) -> Path:
    """x [-1, -1, F] (stored [1, 1, F]) → dense per step → reshaped to [batch · steps, H] with a
    shape computed from SHAPE at run time, then back."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    x = bld.tensor(sub, "serving_default_x:0", [1, 1, features], signature=[-1, -1, features])
    dims = bld.tensor(sub, "dims", [3], INT32, signature=[3])
    bld.op(sub, ops.SHAPE, [x], [dims], *bld.options("ShapeOptions", outType=INT32))
    lead = bld.tensor(sub, "lead", [2], INT32, signature=[2])
    bld.op(sub, ops.STRIDED_SLICE, [dims, bld.const(sub, "b", np.array([0], np.int32)), bld.const(sub, "e", np.array([2], np.int32)),
                                    bld.const(sub, "s", np.array([1], np.int32))], [lead], *bld.options("StridedSliceOptions"))
    rows = bld.tensor(sub, "rows", [1], INT32, signature=[1])
    bld.op(sub, ops.REDUCE_PROD, [lead, bld.const(sub, "axis0", np.array([0], np.int32))], [rows],
           *bld.options("ReducerOptions", keepDims=True))
    flat_shape = bld.tensor(sub, "flat_shape", [2], INT32, signature=[2])
    bld.op(sub, ops.CONCATENATION, [rows, bld.const(sub, "feat", np.array([features], np.int32))], [flat_shape],
           *bld.options("ConcatenationOptions", axis=0))
    flat = bld.tensor(sub, "flat", [1, features], signature=[-1, features])
    bld.op(sub, ops.RESHAPE, [x, flat_shape], [flat], *bld.options("ReshapeOptions"))
    dense = bld.tensor(sub, "dense", [1, hidden], signature=[-1, hidden])
    weights = bld.const(sub, "w", (rng.standard_normal((hidden, features)) * 0.2).astype(np.float32))
    bld.op(sub, ops.FULLY_CONNECTED, [flat, weights, bld.const(sub, "bias", np.zeros(hidden, np.float32))], [dense],
           *bld.options("FullyConnectedOptions", fusedActivationFunction=1))
    back = bld.tensor(sub, "back_shape", [3], INT32, signature=[3])
    bld.op(sub, ops.CONCATENATION, [lead, bld.const(sub, "hid", np.array([hidden], np.int32))], [back],
           *bld.options("ConcatenationOptions", axis=0))
    y = bld.tensor(sub, "StatefulPartitionedCall:0", [1, 1, hidden], signature=[-1, -1, hidden])
    bld.op(sub, ops.RESHAPE, [dense, back], [y], *bld.options("ReshapeOptions"))
    sub.inputs, sub.outputs = [x], [y]
    return bld.save(out)


TFLITE = {"rfft_frontend": rfft_frontend, "streaming_state": streaming_state, "int8_slicing": int8_slicing,
          "fp16_weights": fp16_weights, "dynamic_signature": dynamic_signature}


def padded_depthwise(out: Path, seed: int = 0) -> Path:
    """As MediaPipe's networks pad before a strided depthwise layer: conv 1×1 16 → 32 (ReLU) →
    PAD (1, 1) on H and W → DEPTHWISE_CONV_2D 3×3 stride 2 VALID → conv 1×1 32 → 32 → PAD (0 /
    2 on H and W) → DEPTHWISE 3×3 stride 2 VALID, whose output is added to a 2 × 2-strided slice
    of the second conv's own output (that output used twice: its pad stays a kernel)."""
    ops, rng = _ops(), np.random.default_rng(seed)
    bld = Builder()
    sub = bld.subgraph()
    x = bld.tensor(sub, "serving_default_x:0", [1, 31, 32, 16])

    def conv(src: int, name: str, cin: int, shape: list[int], relu: bool) -> int:
        y = bld.tensor(sub, name, shape)
        w = bld.const(sub, f"{name}/w", (rng.standard_normal((32, 1, 1, cin)) * 0.3).astype(np.float32))
        b = bld.const(sub, f"{name}/b", (rng.standard_normal(32) * 0.2).astype(np.float32))
        bld.op(sub, ops.CONV_2D, [src, w, b], [y], *bld.options("Conv2DOptions", padding=1, strideW=1, strideH=1,
                                                                  fusedActivationFunction=1 if relu else 0))
        return y

    def pad(src: int, name: str, widths: list[list[int]], shape: list[int]) -> int:
        y = bld.tensor(sub, name, shape)
        bld.op(sub, ops.PAD, [src, bld.const(sub, f"{name}/p", np.array(widths, np.int32))], [y])
        return y

    def depthwise(src: int, name: str, shape: list[int]) -> int:
        y = bld.tensor(sub, name, shape)
        w = bld.const(sub, f"{name}/w", (rng.standard_normal((1, 3, 3, 32)) * 0.3).astype(np.float32))
        b = bld.const(sub, f"{name}/b", (rng.standard_normal(32) * 0.2).astype(np.float32))
        bld.op(sub, ops.DEPTHWISE_CONV_2D, [src, w, b], [y],
               *bld.options("DepthwiseConv2DOptions", padding=1, strideW=2, strideH=2, depthMultiplier=1))
        return y

    c1 = conv(x, "conv1", 16, [1, 31, 32, 32], True)
    d1 = depthwise(pad(c1, "pad1", [[0, 0], [1, 1], [1, 1], [0, 0]], [1, 33, 34, 32]), "dw1", [1, 16, 16, 32])
    c2 = conv(d1, "conv2", 32, [1, 16, 16, 32], False)
    d2 = depthwise(pad(c2, "pad2", [[0, 0], [0, 2], [0, 2], [0, 0]], [1, 18, 18, 32]), "dw2", [1, 8, 8, 32])
    s = bld.tensor(sub, "strided", [1, 8, 8, 32])
    consts = [bld.const(sub, f"s{i}", np.array(v, np.int32)) for i, v in enumerate(([0, 0, 0, 0], [1, 16, 16, 32], [1, 2, 2, 1]))]
    bld.op(sub, ops.STRIDED_SLICE, [c2, *consts], [s], *bld.options("StridedSliceOptions"))
    y = bld.tensor(sub, "StatefulPartitionedCall:0", [1, 8, 8, 32])
    bld.op(sub, ops.ADD, [d2, s], [y], *bld.options("AddOptions"))
    sub.inputs, sub.outputs = [x], [y]
    return bld.save(out)
