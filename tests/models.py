"""Test models made here: real CNNs from the onnx package with random weights, an exporter-style
ONNX graph, and TFLite flatbuffers (int8 and unsupported-op) written with the tflite schema."""

from __future__ import annotations

from pathlib import Path

import numpy as np

LIGHT = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet", "vgg19", "zfnet512")


def checked_package(model: Path, tmp_path: Path, device: str = "host", request=None):
    """``model`` packaged for ``device`` (an ARM profile: run under qemu, skipped without the
    cross compiler), its reference check passed within 1e-4 where it ran; the PackageResult."""
    import shutil

    import pytest

    from edgetune.package import PackageOptions, package

    if device != "host":
        request.getfixturevalue("qemu")
        if shutil.which("aarch64-linux-gnu-g++") is None:
            pytest.skip("aarch64-linux-gnu-g++ is not installed (scripts/install-system-deps.sh installs it)")
    result = package(PackageOptions(model=model, device=device, output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and v["max_rel_error"] < 1e-4, v
    assert device == "host" or "qemu-aarch64" in v["executed_on"], v
    return result


def light_path(name: str) -> Path:
    """Path of ``light_<name>.onnx`` shipped inside the onnx package."""
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


def randomized_light(name: str, out: Path, seed: int = 0) -> Path:
    """The light model with its ConstantOfShape(0.02) weights replaced by seeded He-scaled
    random initializers (the shipped weights make every output a constant vector)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(light_path(name)))
    rng = np.random.default_rng(seed)
    inits = {i.name: i for i in model.graph.initializer}
    keep, new = [], []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = numpy_helper.to_array(inits[node.input[0]]).astype(int)
            if len(shape) > 1:  # conv / fc weights: He-scaled, so activations neither vanish nor explode
                data = rng.standard_normal(shape) * np.sqrt(2.0 / int(np.prod(shape[1:])))
            else:  # per-channel biases and batch-norm scale/mean/variance: positive (variance must be)
                data = rng.uniform(0.5, 1.5, shape)
            data = data.astype(np.float32)
            new.append(numpy_helper.from_array(data, node.output[0]))
        else:
            keep.append(node)
    used = {i for n in keep for i in n.input}
    old = [i for i in model.graph.initializer if i.name in used]
    graph_inputs = [i for i in model.graph.input if i.name in used or i.name not in inits]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    del model.graph.initializer[:]
    model.graph.initializer.extend(old + new)
    del model.graph.input[:]
    model.graph.input.extend(graph_inputs)
    model.ir_version = max(model.ir_version, 4)  # IR 3 demands every initializer be an input
    onnx.save(model, str(out))
    return out


def exporter_style_onnx(out: Path, seed: int = 0) -> Path:
    """What torch.onnx.export writes for conv → relu → flatten → linear with a dynamic batch:
    a ``batch`` dim param and a Shape→Gather→Unsqueeze→Concat→Reshape chain, names with ``/``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "conv1/weight")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "conv1/bias")
    fw = numpy_helper.from_array((rng.standard_normal((10, 8 * 8 * 8)) * 0.05).astype(np.float32), "fc/weight")
    fb = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32) * 0.1, "fc/bias")
    zero = numpy_helper.from_array(np.array(0, dtype=np.int64), "/Constant_output_0")
    minus1 = numpy_helper.from_array(np.array([-1], dtype=np.int64), "/Constant_1_output_0")
    axes = numpy_helper.from_array(np.array([0], dtype=np.int64), "/axes")
    nodes = [
        helper.make_node("Conv", ["input/image:0", "conv1/weight", "conv1/bias"], ["/conv1/Conv_output_0"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["/conv1/Conv_output_0"], ["/relu/Relu_output_0"]),
        helper.make_node("Shape", ["/relu/Relu_output_0"], ["/Shape_output_0"]),
        helper.make_node("Gather", ["/Shape_output_0", "/Constant_output_0"], ["/Gather_output_0"], axis=0),
        helper.make_node("Unsqueeze", ["/Gather_output_0", "/axes"], ["/Unsqueeze_output_0"]),
        helper.make_node("Concat", ["/Unsqueeze_output_0", "/Constant_1_output_0"], ["/Concat_output_0"], axis=0),
        helper.make_node("Reshape", ["/relu/Relu_output_0", "/Concat_output_0"], ["/Reshape_output_0"]),
        helper.make_node("Gemm", ["/Reshape_output_0", "fc/weight", "fc/bias"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "exported",
        [helper.make_tensor_value_info("input/image:0", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [w, b, fw, fb, zero, minus1, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def small_cnn_onnx(out: Path, seed: int = 0, width: int = 16, size: int = 32, head: int = 10) -> Path:
    """A small real CNN for tuning tests: conv3x3/2 → relu → conv3x3 → relu → global average
    pool → linear. Two networks built with the same ``width``/``size`` share their first
    conv workload; a different ``head`` gives them one task apart."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        scale = np.sqrt(2.0 / int(np.prod(shape[1:]))) if len(shape) > 1 else 0.1
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [init("w1", (width, 3, 3, 3)), init("b1", (width,)), init("w2", (width, width, 3, 3)),
             init("b2", (width,)), init("fc", (head, width)), init("fcb", (head,))]
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, head])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def dense_onnx(out: Path, m: int = 32, k: int = 64, n: int = 64, seed: int = 0) -> Path:
    """One dense layer (MatMul + bias, then ReLU): a single kernel whose generic design space
    (``--rules generic``) is large, for search tests."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((k, n)) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal((n,)) * 0.1).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def dynamic_cnn_onnx(out: Path, input_name: str = "x", seed: int = 0) -> Path:
    """conv3x3 → relu → global average pool with a fully dynamic input ``[1, 3, h, w]``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", [input_name, "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "dynamic", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def unsupported_onnx(out: Path) -> Path:
    """A valid ONNX model using two ops TVM 0.27 cannot convert (Celu, LpNormalization)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Celu", ["x"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("LpNormalization", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "unsupported", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(out))
    return out


# ---------------------------------------------------------------- TFLite writer


def _schema(name: str):
    """The generated module ``tflite.<name>`` (the package re-exports same-named classes)."""
    import importlib

    return importlib.import_module(f"tflite.{name}")


class _TFLiteWriter:
    """A minimal TFLite flatbuffer writer (schema v3) on the tflite package's generated builders."""

    def __init__(self) -> None:
        import flatbuffers

        self.b = flatbuffers.Builder(1024)
        self.buffers: list[bytes] = [b""]  # buffer 0: the empty sentinel
        self.tensors: list[tuple] = []
        self.opcodes: list[tuple[int, str]] = []
        self.operators: list[tuple] = []

    def tensor(self, name: str, shape, dtype: int, data: bytes | None = None, quant=None) -> int:
        buf = 0
        if data is not None:
            self.buffers.append(data)
            buf = len(self.buffers) - 1
        self.tensors.append((name, list(shape), dtype, buf, quant))
        return len(self.tensors) - 1

    def op(self, code: int, inputs, outputs, options=None, custom: str = "") -> None:
        key = (code, custom)
        if key not in self.opcodes:
            self.opcodes.append(key)
        self.operators.append((self.opcodes.index(key), list(inputs), list(outputs), options))

    def _ivec(self, start, values, kind="int32") -> int:
        b = self.b
        start(b, len(values))
        for v in reversed(values):
            {"int32": b.PrependInt32, "int64": b.PrependInt64, "float": b.PrependFloat32}[kind](v)
        return b.EndVector()

    def _offsets(self, start, offsets) -> int:
        start(self.b, len(offsets))
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def _quant(self, quant) -> int:
        Q = _schema("QuantizationParameters")

        scales, zps, dim = quant
        s = self._ivec(Q.QuantizationParametersStartScaleVector, scales, "float")
        z = self._ivec(Q.QuantizationParametersStartZeroPointVector, zps, "int64")
        Q.QuantizationParametersStart(self.b)
        Q.QuantizationParametersAddScale(self.b, s)
        Q.QuantizationParametersAddZeroPoint(self.b, z)
        Q.QuantizationParametersAddQuantizedDimension(self.b, dim)
        return Q.QuantizationParametersEnd(self.b)

    def finish(self, inputs, outputs) -> bytes:
        Buffer, Model, Operator, OperatorCode, SubGraph, Tensor = (
            _schema(n) for n in ("Buffer", "Model", "Operator", "OperatorCode", "SubGraph", "Tensor"))

        b = self.b
        tensor_offs = []
        for name, shape, dtype, buf, quant in self.tensors:
            n = b.CreateString(name)
            sh = self._ivec(Tensor.TensorStartShapeVector, shape)
            q = self._quant(quant) if quant else None
            Tensor.TensorStart(b)
            Tensor.TensorAddShape(b, sh)
            Tensor.TensorAddType(b, dtype)
            Tensor.TensorAddBuffer(b, buf)
            Tensor.TensorAddName(b, n)
            if q is not None:
                Tensor.TensorAddQuantization(b, q)
            tensor_offs.append(Tensor.TensorEnd(b))
        op_offs = []
        for idx, ins, outs, options in self.operators:
            i = self._ivec(Operator.OperatorStartInputsVector, ins)
            o = self._ivec(Operator.OperatorStartOutputsVector, outs)
            opt = options(b) if options else None
            Operator.OperatorStart(b)
            Operator.OperatorAddOpcodeIndex(b, idx)
            Operator.OperatorAddInputs(b, i)
            Operator.OperatorAddOutputs(b, o)
            if opt:
                Operator.OperatorAddBuiltinOptionsType(b, opt[0])
                Operator.OperatorAddBuiltinOptions(b, opt[1])
            op_offs.append(Operator.OperatorEnd(b))
        t = self._offsets(SubGraph.SubGraphStartTensorsVector, tensor_offs)
        ops = self._offsets(SubGraph.SubGraphStartOperatorsVector, op_offs)
        si = self._ivec(SubGraph.SubGraphStartInputsVector, inputs)
        so = self._ivec(SubGraph.SubGraphStartOutputsVector, outputs)
        SubGraph.SubGraphStart(b)
        SubGraph.SubGraphAddTensors(b, t)
        SubGraph.SubGraphAddOperators(b, ops)
        SubGraph.SubGraphAddInputs(b, si)
        SubGraph.SubGraphAddOutputs(b, so)
        sub = SubGraph.SubGraphEnd(b)
        code_offs = []
        for code, custom in self.opcodes:
            c = b.CreateString(custom) if custom else None
            OperatorCode.OperatorCodeStart(b)
            OperatorCode.OperatorCodeAddBuiltinCode(b, code)
            OperatorCode.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            OperatorCode.OperatorCodeAddVersion(b, 1)
            if c:
                OperatorCode.OperatorCodeAddCustomCode(b, c)
            code_offs.append(OperatorCode.OperatorCodeEnd(b))
        buf_offs = []
        for data in self.buffers:
            d = None
            if data:
                b.StartVector(1, len(data), 16)
                b.head = b.head - len(data)
                b.Bytes[b.head:b.head + len(data)] = data
                d = b.EndVector()
            Buffer.BufferStart(b)
            if d is not None:
                Buffer.BufferAddData(b, d)
            buf_offs.append(Buffer.BufferEnd(b))
        subs = self._offsets(Model.ModelStartSubgraphsVector, [sub])
        codes = self._offsets(Model.ModelStartOperatorCodesVector, code_offs)
        bufs = self._offsets(Model.ModelStartBuffersVector, buf_offs)
        desc = b.CreateString("edgetune test model")
        Model.ModelStart(b)
        Model.ModelAddVersion(b, 3)
        Model.ModelAddOperatorCodes(b, codes)
        Model.ModelAddSubgraphs(b, subs)
        Model.ModelAddDescription(b, desc)
        Model.ModelAddBuffers(b, bufs)
        b.Finish(Model.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


INT8, INT32, FLOAT32 = 9, 2, 0


def _q(x: np.ndarray, scale: np.ndarray, axis: int) -> np.ndarray:
    shape = [1] * x.ndim
    shape[axis] = -1
    return np.clip(np.round(x / scale.reshape(shape)), -127, 127).astype(np.int8)


def int8_tflite(out: Path, seed: int = 0) -> Path:
    """A fully int8-quantized CNN in TFLite's conventions: per-channel symmetric conv and
    depthwise weights, int32 biases, CONV_2D → DEPTHWISE_CONV_2D → RESHAPE → FULLY_CONNECTED
    → LOGISTIC, with int8 input and output."""
    from tflite import BuiltinOperator as Op
    from tflite import BuiltinOptions as Opt

    C, D, F, R = (_schema(n) for n in ("Conv2DOptions", "DepthwiseConv2DOptions", "FullyConnectedOptions", "ReshapeOptions"))

    rng = np.random.default_rng(seed)
    w = _TFLiteWriter()
    s_in, s_c, s_d, s_fc = 1 / 64, 0.05, 0.05, 0.1
    x = w.tensor("serving_default_image:0", [1, 16, 16, 3], INT8, quant=([s_in], [0], 0))
    cw = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    cs = np.abs(cw).reshape(8, -1).max(1) / 127
    cwt = w.tensor("conv/w", [8, 3, 3, 3], INT8, _q(cw, cs, 0).tobytes(), (list(cs), [0] * 8, 0))
    cb = w.tensor("conv/b", [8], INT32, (rng.integers(-500, 500, 8).astype(np.int32)).tobytes(), (list(cs * s_in), [0] * 8, 0))
    c_out = w.tensor("conv/out", [1, 8, 8, 8], INT8, quant=([s_c], [-128], 0))
    dw = rng.standard_normal((1, 3, 3, 8)).astype(np.float32) * 0.5
    ds = np.abs(dw).reshape(-1, 8).max(0) / 127
    dwt = w.tensor("dw/w", [1, 3, 3, 8], INT8, _q(dw, ds, 3).tobytes(), (list(ds), [0] * 8, 3))
    db = w.tensor("dw/b", [8], INT32, (rng.integers(-200, 200, 8).astype(np.int32)).tobytes(), (list(ds * s_c), [0] * 8, 0))
    d_out = w.tensor("dw/out", [1, 8, 8, 8], INT8, quant=([s_d], [-128], 0))
    r_out = w.tensor("flatten", [1, 512], INT8, quant=([s_d], [-128], 0))
    shape_t = w.tensor("flatten/shape", [2], INT32, np.array([1, 512], np.int32).tobytes())
    fw = rng.standard_normal((10, 512)).astype(np.float32) * 0.05
    fs = float(np.abs(fw).max() / 127)
    fwt = w.tensor("fc/w", [10, 512], INT8, np.clip(np.round(fw / fs), -127, 127).astype(np.int8).tobytes(), ([fs], [0], 0))
    fbt = w.tensor("fc/b", [10], INT32, rng.integers(-1000, 1000, 10).astype(np.int32).tobytes(), ([fs * s_d], [0], 0))
    f_out = w.tensor("fc/out", [1, 10], INT8, quant=([s_fc], [0], 0))
    y = w.tensor("StatefulPartitionedCall:0", [1, 10], INT8, quant=([1 / 256], [-128], 0))

    def conv(b):
        C.Conv2DOptionsStart(b)
        C.Conv2DOptionsAddPadding(b, 0)
        C.Conv2DOptionsAddStrideW(b, 2)
        C.Conv2DOptionsAddStrideH(b, 2)
        C.Conv2DOptionsAddFusedActivationFunction(b, 1)
        C.Conv2DOptionsAddDilationWFactor(b, 1)
        C.Conv2DOptionsAddDilationHFactor(b, 1)
        return Opt.Conv2DOptions, C.Conv2DOptionsEnd(b)

    def dwconv(b):
        D.DepthwiseConv2DOptionsStart(b)
        D.DepthwiseConv2DOptionsAddPadding(b, 0)
        D.DepthwiseConv2DOptionsAddStrideW(b, 1)
        D.DepthwiseConv2DOptionsAddStrideH(b, 1)
        D.DepthwiseConv2DOptionsAddDepthMultiplier(b, 1)
        D.DepthwiseConv2DOptionsAddFusedActivationFunction(b, 1)
        D.DepthwiseConv2DOptionsAddDilationWFactor(b, 1)
        D.DepthwiseConv2DOptionsAddDilationHFactor(b, 1)
        return Opt.DepthwiseConv2DOptions, D.DepthwiseConv2DOptionsEnd(b)

    def reshape(b):
        R.ReshapeOptionsStartNewShapeVector(b, 2)
        b.PrependInt32(512)
        b.PrependInt32(1)
        vec = b.EndVector()
        R.ReshapeOptionsStart(b)
        R.ReshapeOptionsAddNewShape(b, vec)
        return Opt.ReshapeOptions, R.ReshapeOptionsEnd(b)

    def fc(b):
        F.FullyConnectedOptionsStart(b)
        F.FullyConnectedOptionsAddFusedActivationFunction(b, 0)
        return Opt.FullyConnectedOptions, F.FullyConnectedOptionsEnd(b)

    w.op(Op.CONV_2D, [x, cwt, cb], [c_out], conv)
    w.op(Op.DEPTHWISE_CONV_2D, [c_out, dwt, db], [d_out], dwconv)
    w.op(Op.RESHAPE, [d_out, shape_t], [r_out], reshape)
    w.op(Op.FULLY_CONNECTED, [r_out, fwt, fbt], [f_out], fc)
    w.op(Op.LOGISTIC, [f_out], [y])
    out.write_bytes(w.finish([x], [y]))
    return out


def float_cnn_tflite(out: Path, width: int = 64, size: int = 56, layers: int = 4, seed: int = 0) -> Path:
    """A float32 VGG-style TFLite CNN with wide layers, where integer dot products pay: a 3×3
    convolution 3 → ``width``, ``layers`` 3×3 ``width`` → ``width`` convolutions with ReLU (every
    other one with a residual ADD), a 1×1 to 2·``width``; ``size``² pixels, SAME padding. The
    float model ai-edge-quantizer turns into int8 (tests/quant_models.py)."""
    from tflite import ActivationFunctionType as Act
    from tflite import BuiltinOperator as Op
    from tflite import BuiltinOptions as Opt

    C, A = _schema("Conv2DOptions"), _schema("AddOptions")
    rng = np.random.default_rng(seed)
    w = _TFLiteWriter()

    def conv_options(b):
        C.Conv2DOptionsStart(b)
        C.Conv2DOptionsAddPadding(b, 0)  # SAME
        C.Conv2DOptionsAddStrideW(b, 1)
        C.Conv2DOptionsAddStrideH(b, 1)
        C.Conv2DOptionsAddFusedActivationFunction(b, Act.RELU)
        C.Conv2DOptionsAddDilationWFactor(b, 1)
        C.Conv2DOptionsAddDilationHFactor(b, 1)
        return Opt.Conv2DOptions, C.Conv2DOptionsEnd(b)

    def add_options(b):
        A.AddOptionsStart(b)
        A.AddOptionsAddFusedActivationFunction(b, Act.NONE)
        return Opt.AddOptions, A.AddOptionsEnd(b)

    def conv(x: int, cin: int, cout: int, k: int, name: str) -> int:
        weights = (rng.standard_normal((cout, k, k, cin)) * np.sqrt(2.0 / (k * k * cin))).astype(np.float32)
        wt = w.tensor(f"{name}/w", [cout, k, k, cin], FLOAT32, weights.tobytes())
        bt = w.tensor(f"{name}/b", [cout], FLOAT32, (rng.standard_normal(cout) * 0.1).astype(np.float32).tobytes())
        y = w.tensor(f"{name}/out", [1, size, size, cout], FLOAT32)
        w.op(Op.CONV_2D, [x, wt, bt], [y], conv_options)
        return y

    x = w.tensor("serving_default_image:0", [1, size, size, 3], FLOAT32)
    h = conv(x, 3, width, 3, "stem")
    for i in range(layers):
        y = conv(h, width, width, 3, f"conv{i}")
        if i % 2:
            s = w.tensor(f"add{i}", [1, size, size, width], FLOAT32)
            w.op(Op.ADD, [y, h], [s], add_options)
            y = s
        h = y
    out_t = conv(h, width, 2 * width, 1, "head")
    out.write_bytes(w.finish([x], [out_t]))
    return out


def unsupported_tflite(out: Path) -> Path:
    """A TFLite model whose two operators TVM cannot convert (a custom op, REDUCE_WINDOW)."""
    from tflite import BuiltinOperator as Op

    w = _TFLiteWriter()
    x = w.tensor("x", [1, 8], FLOAT32)
    t = w.tensor("t", [1, 8], FLOAT32)
    y = w.tensor("y", [1, 8], FLOAT32)
    w.op(Op.CUSTOM, [x], [t], custom="EdgetuneTestOp")
    w.op(Op.REDUCE_WINDOW, [t], [y])
    out.write_bytes(w.finish([x], [y]))
    return out


def detector_head_onnx(out: Path, channels: int = 8, sizes: tuple[int, ...] = (8, 4, 2)) -> Path:
    """A YOLO-style head alone: three scales' maps through a Sigmoid, flattened to
    ``(1, channels, h·w)`` and concatenated along the last axis (seams at 64 and 80 of 84)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([1, channels, -1], dtype=np.int64), "flat")
    nodes, inputs, flat = [], [], []
    for n, s in enumerate(sizes):
        inputs.append(helper.make_tensor_value_info(f"p{n}", TensorProto.FLOAT, [1, channels, s, s]))
        nodes.append(helper.make_node("Sigmoid", [f"p{n}"], [f"g{n}"]))
        nodes.append(helper.make_node("Reshape", [f"g{n}", "flat"], [f"f{n}"]))
        flat.append(f"f{n}")
    nodes.append(helper.make_node("Concat", flat, ["boxes"], axis=2))
    total = sum(s * s for s in sizes)
    graph = helper.make_graph(nodes, "head", inputs, [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, channels, total])],
                              [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out
