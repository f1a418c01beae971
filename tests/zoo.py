"""Real-shaped CNNs for tests and benchmarks, written as ONNX graphs with seeded weights.

Each mirrors the structure of a network people deploy on boards (layer kinds, channel counts,
activations, branches), at the published input sizes, so speed and coverage measured on them
transfer. No model hub is reachable here; these are built from the architecture descriptions:

* ``mobilenet_v2``: MobileNetV2-style, as a PyTorch export writes it (ReLU6 as ``Clip``, batch
  norms folded into biases).
* ``mobilenet_v3``: MobileNetV3-Large-style — inverted residuals with depthwise 3×3/5×5,
  hard-swish, squeeze-and-excitation (GlobalAveragePool → 1×1 → ReLU → 1×1 → HardSigmoid → Mul).
* ``yolo``: a YOLOv8n-style detector — Conv-BN-SiLU, C2f blocks (Split/Concat), SPPF (max pools),
  an FPN/PAN neck with nearest Resize + Concat, and per-scale decoupled heads.
* ``ocr_cls``: a PaddleOCR text-direction-classifier-style CNN on a 48×320 strip — stride (2, 1)
  pooling keeps the width, depthwise blocks, then a linear layer.
* ``ocr_det``: a PP-OCRv4-mobile-detector-style DBNet on a 640² page — a depthwise-separable
  backbone to 1/32, an FPN neck (nearest Resize ×2 top-down, ×8/×4/×2 to 1/4, Concat), and the DB
  head's two 2×2 stride-2 transposed convolutions back to full size.
* ``vgg_block``: 3×3-heavy (VGG-style stacks); ``bottleneck``: 1×1-heavy (ResNet bottlenecks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


class Graph:
    """A tiny ONNX graph builder: every conv gets He-scaled weights and (optionally) a BN."""

    def __init__(self, name: str, seed: int):
        self.name, self.rng = name, np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def _n(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, value: np.ndarray, prefix: str = "c") -> str:
        from onnx import numpy_helper

        name = self._n(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, kind: str, inputs: list[str], outputs: int = 1, **attrs: Any) -> Any:
        from onnx import helper

        names = [self._n(kind.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(kind, inputs, names, **attrs))
        return names[0] if outputs == 1 else names

    def conv(self, x: str, cin: int, cout: int, k: int = 1, s: int | tuple[int, int] = 1, groups: int = 1,
             bn: bool = True, act: str | None = "relu", bias: bool = False) -> str:
        strides = list(s) if isinstance(s, tuple) else [s, s]
        w = self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / (cin // groups * k * k))
        inputs = [x, self.const(w.astype(np.float32), "w")]
        if bias:
            inputs.append(self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b"))
        y = self.op("Conv", inputs, kernel_shape=[k, k], strides=strides, pads=[k // 2] * 4, group=groups)
        if bn:
            y = self.op("BatchNormalization", [y, *(self.const(self.rng.uniform(lo, hi, cout).astype(np.float32))
                                                    for lo, hi in ((0.8, 1.2), (-0.1, 0.1), (-0.1, 0.1), (0.5, 1.5)))])
        return self.act(y, act)

    def act(self, x: str, kind: str | None) -> str:
        if kind is None:
            return x
        if kind == "relu":
            return self.op("Relu", [x])
        if kind == "hswish":
            return self.op("HardSwish", [x])
        if kind == "relu6":  # as PyTorch exports it: Clip with its bounds as inputs
            return self.op("Clip", [x, self.const(np.array(0.0, np.float32)), self.const(np.array(6.0, np.float32))])
        if kind == "silu":
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        raise ValueError(kind)

    def save(self, out: Path, inputs: dict[str, tuple[int, ...]], outputs: list[str]) -> Path:
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()], [], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="edgetune-zoo")
        model.ir_version = 8
        inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
        model.graph.output.extend(inferred[o] for o in outputs)  # outputs with their inferred shapes
        onnx.checker.check_model(model)
        onnx.save(model, str(out))
        return out


# ---------------------------------------------------------------- MobileNetV3-Large style

# (kernel, expansion, out, squeeze-excite, activation, stride) — the published table
_MBV3_LARGE = [
    (3, 16, 16, False, "relu", 1), (3, 64, 24, False, "relu", 2), (3, 72, 24, False, "relu", 1),
    (5, 72, 40, True, "relu", 2), (5, 120, 40, True, "relu", 1), (5, 120, 40, True, "relu", 1),
    (3, 240, 80, False, "hswish", 2), (3, 200, 80, False, "hswish", 1), (3, 184, 80, False, "hswish", 1),
    (3, 184, 80, False, "hswish", 1), (3, 480, 112, True, "hswish", 1), (3, 672, 112, True, "hswish", 1),
    (5, 672, 160, True, "hswish", 2), (5, 960, 160, True, "hswish", 1), (5, 960, 160, True, "hswish", 1),
]


def _squeeze_excite(g: Graph, x: str, c: int) -> str:
    mid = max(8, (c // 4 + 7) // 8 * 8)
    s = g.op("GlobalAveragePool", [x])
    s = g.conv(s, c, mid, bn=False, act="relu", bias=True)
    s = g.conv(s, mid, c, bn=False, act=None, bias=True)
    s = g.op("HardSigmoid", [s], alpha=1.0 / 6, beta=0.5)
    return g.op("Mul", [x, s])


def mobilenet_v3(out: Path, seed: int = 0, size: int = 224, classes: int = 1000) -> Path:
    """MobileNetV3-Large-style classifier (≈0.22 GFLOPs at 224²)."""
    g = Graph("mobilenet_v3", seed)
    x = g.conv("input", 3, 16, 3, 2, act="hswish")
    c = 16
    for k, exp, cout, se, act, s in _MBV3_LARGE:
        y = g.conv(x, c, exp, act=act) if exp != c else x
        y = g.conv(y, exp, exp, k, s, groups=exp, act=act)
        if se:
            y = _squeeze_excite(g, y, exp)
        y = g.conv(y, exp, cout, act=None)
        x = g.op("Add", [x, y]) if s == 1 and c == cout else y
        c = cout
    x = g.conv(x, c, 960, act="hswish")
    x = g.op("GlobalAveragePool", [x])
    x = g.conv(x, 960, 1280, bn=False, act="hswish", bias=True)
    x = g.op("Flatten", [x])
    w = (g.rng.standard_normal((classes, 1280)) * np.sqrt(1 / 1280)).astype(np.float32)
    y = g.op("Gemm", [x, g.const(w), g.const(np.zeros(classes, np.float32))], transB=1)
    return g.save(out, {"input": (1, 3, size, size)}, [y])


# ---------------------------------------------------------------- MobileNetV2 style

# (expansion t, out c, repeats n, first stride s) — the published table
_MBV2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def mobilenet_v2(out: Path, seed: int = 0, size: int = 224, classes: int = 1000) -> Path:
    """MobileNetV2-style classifier (≈0.3 GFLOPs at 224²) as a PyTorch export writes it: batch
    norms folded into the convolutions' biases, ReLU6 as ``Clip`` with input bounds."""
    g = Graph("mobilenet_v2", seed)
    x = g.conv("input", 3, 32, 3, 2, bn=False, act="relu6", bias=True)
    c = 32
    for t, cout, n, s in _MBV2:
        for i in range(n):
            stride = s if i == 0 else 1
            y = g.conv(x, c, c * t, bn=False, act="relu6", bias=True) if t != 1 else x
            y = g.conv(y, c * t, c * t, 3, stride, groups=c * t, bn=False, act="relu6", bias=True)
            y = g.conv(y, c * t, cout, bn=False, act=None, bias=True)
            x = g.op("Add", [x, y]) if stride == 1 and c == cout else y
            c = cout
    x = g.conv(x, c, 1280, bn=False, act="relu6", bias=True)
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x])
    w = (g.rng.standard_normal((classes, 1280)) * np.sqrt(1 / 1280)).astype(np.float32)
    y = g.op("Gemm", [x, g.const(w), g.const(np.zeros(classes, np.float32))], transB=1)
    return g.save(out, {"input": (1, 3, size, size)}, [y])


# ---------------------------------------------------------------- YOLOv8n style


def _c2f(g: Graph, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
    hidden = cout // 2
    y = g.conv(x, cin, 2 * hidden, act="silu")
    parts = g.op("Split", [y, g.const(np.array([hidden, hidden], np.int64))], outputs=2, axis=1)
    outs = list(parts)
    cur = outs[-1]
    for _ in range(n):
        z = g.conv(g.conv(cur, hidden, hidden, 3, act="silu"), hidden, hidden, 3, act="silu")
        cur = g.op("Add", [cur, z]) if shortcut else z
        outs.append(cur)
    return g.conv(g.op("Concat", outs, axis=1), (2 + n) * hidden, cout, act="silu")


def _sppf(g: Graph, x: str, c: int) -> str:
    hidden = c // 2
    y = g.conv(x, c, hidden, act="silu")
    pools = [y]
    for _ in range(3):
        pools.append(g.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1]))
    return g.conv(g.op("Concat", pools, axis=1), 4 * hidden, c, act="silu")


def _up(g: Graph, x: str, factor: int = 2) -> str:
    scales = g.const(np.array([1, 1, factor, factor], np.float32))
    return g.op("Resize", [x, "", scales], mode="nearest")


def yolo(out: Path, seed: int = 0, size: int = 320, classes: int = 80) -> Path:
    """YOLOv8n-style detector: backbone, SPPF, PAN neck, three decoupled heads (box + class)."""
    g = Graph("yolo", seed)
    w = [16, 32, 64, 128, 256]
    x = g.conv("images", 3, w[0], 3, 2, act="silu")
    x = g.conv(x, w[0], w[1], 3, 2, act="silu")
    x = _c2f(g, x, w[1], w[1], 1, True)
    x = g.conv(x, w[1], w[2], 3, 2, act="silu")
    p3 = _c2f(g, x, w[2], w[2], 2, True)
    x = g.conv(p3, w[2], w[3], 3, 2, act="silu")
    p4 = _c2f(g, x, w[3], w[3], 2, True)
    x = g.conv(p4, w[3], w[4], 3, 2, act="silu")
    x = _c2f(g, x, w[4], w[4], 1, True)
    p5 = _sppf(g, x, w[4])
    n4 = _c2f(g, g.op("Concat", [_up(g, p5), p4], axis=1), w[4] + w[3], w[3], 1, False)
    n3 = _c2f(g, g.op("Concat", [_up(g, n4), p3], axis=1), w[3] + w[2], w[2], 1, False)
    d4 = _c2f(g, g.op("Concat", [g.conv(n3, w[2], w[2], 3, 2, act="silu"), n4], axis=1), w[2] + w[3], w[3], 1, False)
    d5 = _c2f(g, g.op("Concat", [g.conv(d4, w[3], w[3], 3, 2, act="silu"), p5], axis=1), w[3] + w[4], w[4], 1, False)
    outs = []
    for feat, c in ((n3, w[2]), (d4, w[3]), (d5, w[4])):
        box = g.conv(g.conv(g.conv(feat, c, 64, 3, act="silu"), 64, 64, 3, act="silu"), 64, 64, bn=False, act=None, bias=True)
        cls_c = max(c, classes)
        cls = g.conv(g.conv(g.conv(feat, c, cls_c, 3, act="silu"), cls_c, cls_c, 3, act="silu"), cls_c, classes,
                     bn=False, act=None, bias=True)
        outs.append(g.op("Concat", [box, g.op("Sigmoid", [cls])], axis=1))
    flat = [g.op("Reshape", [o, g.const(np.array([1, 64 + classes, -1], np.int64))]) for o in outs]
    y = g.op("Concat", flat, axis=2)
    return g.save(out, {"images": (1, 3, size, size)}, [y])


# ---------------------------------------------------------------- OCR classifier on a text strip


def ocr_cls(out: Path, seed: int = 0, height: int = 48, width: int = 320, classes: int = 2) -> Path:
    """PaddleOCR-direction-classifier-style CNN: pooling with stride (2, 1) keeps the strip wide."""
    g = Graph("ocr_cls", seed)
    x = g.conv("x", 3, 16, 3, 2, act="hswish")
    c = 16
    for cout, s, exp in ((16, 1, 16), (24, (2, 1), 64), (24, 1, 72), (40, (2, 1), 72), (40, 1, 120),
                         (48, 1, 120), (96, (2, 1), 288), (96, 1, 576)):
        y = g.conv(x, c, exp, act="hswish")
        y = g.conv(y, exp, exp, 3, s, groups=exp, act="hswish")
        y = g.conv(y, exp, cout, act=None)
        x = g.op("Add", [x, y]) if s == 1 and c == cout else y
        c = cout
    x = g.conv(x, c, 288, act="hswish")
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x])
    w = (g.rng.standard_normal((classes, 288)) * 0.05).astype(np.float32)
    y = g.op("Softmax", [g.op("Gemm", [x, g.const(w), g.const(np.zeros(classes, np.float32))], transB=1)], axis=1)
    return g.save(out, {"x": (1, 3, height, width)}, [y])


def ocr_rec(out: Path, seed: int = 0, height: int = 32, width: int | str = "width", classes: int = 97) -> Path:
    """PP-OCR-recognizer-style line model: the text-direction classifier's backbone (inverted
    residuals with depthwise convolutions and hard-swish, strides (2, 1) keeping the line wide),
    the height averaged away, a CTC head over the W/2 columns; ``width`` a name: dynamic, as
    PaddleOCR exports it (lines of any length)."""
    g = Graph("ocr_rec", seed)
    x = g.conv("x", 3, 16, 3, 2, act="hswish")
    c = 16
    for cout, s, exp in ((16, 1, 16), (24, (2, 1), 64), (24, 1, 72), (40, (2, 1), 72), (40, 1, 120),
                         (48, 1, 120), (96, (2, 1), 288)):
        y = g.conv(x, c, exp, act="hswish")
        y = g.conv(y, exp, exp, 3, s, groups=exp, act="hswish")
        y = g.conv(y, exp, cout, act=None)
        x = g.op("Add", [x, y]) if s == 1 and c == cout else y
        c = cout
    x = g.op("ReduceMean", [x], axes=[2], keepdims=0)  # [1, C, W/2]
    x = g.op("Transpose", [x], perm=[0, 2, 1])
    w = (g.rng.standard_normal((c, classes)) * 0.05).astype(np.float32)
    y = g.op("Softmax", [g.op("Add", [g.op("MatMul", [x, g.const(w)]), g.const(np.zeros(classes, np.float32))])], axis=-1)
    return g.save(out, {"x": (1, 3, height, width)}, [y])


def ocr_det(out: Path, seed: int = 0, size: int = 640) -> Path:
    """PP-OCRv4-mobile-detector-style DBNet: depthwise-separable backbone (hard-swish), FPN neck
    of 96 channels, DB head ending in two transposed convolutions and a sigmoid probability map."""
    g = Graph("ocr_det", seed)
    x = g.conv("x", 3, 16, 3, 2, act="hswish")
    c, feats = 16, []
    for cout, blocks in ((32, 1), (64, 1), (128, 2), (256, 2)):  # 1/4, 1/8, 1/16, 1/32
        x = g.conv(g.conv(x, c, c, 3, 2, groups=c, act="hswish"), c, cout, act="hswish")
        c = cout
        for _ in range(blocks):
            x = g.conv(g.conv(x, c, c, 5, groups=c, act="hswish"), c, c, act="hswish")
        feats.append((x, c))
    lateral = [g.conv(f, cf, 96, bn=False, act=None) for f, cf in feats]
    for i in (2, 1, 0):  # top-down
        lateral[i] = g.op("Add", [lateral[i], _up(g, lateral[i + 1])])
    smooth = [g.conv(lat, 96, 24, 3, bn=False, act=None) for lat in lateral]
    fused = g.op("Concat", [_up(g, smooth[3], 8), _up(g, smooth[2], 4), _up(g, smooth[1], 2), smooth[0]], axis=1)
    y = g.conv(fused, 96, 24, 3, act="relu")
    for cout, last in ((24, False), (1, True)):
        w = (g.rng.standard_normal((24, cout, 2, 2)) * np.sqrt(2.0 / 96)).astype(np.float32)
        y = g.op("ConvTranspose", [y, g.const(w, "w"), g.const(np.zeros(cout, np.float32), "b")],
                 kernel_shape=[2, 2], strides=[2, 2])
        y = g.op("Sigmoid", [y]) if last else g.act(g.op("BatchNormalization", [y, *(
            g.const(g.rng.uniform(lo, hi, cout).astype(np.float32))
            for lo, hi in ((0.8, 1.2), (-0.1, 0.1), (-0.1, 0.1), (0.5, 1.5)))]), "relu")
    return g.save(out, {"x": (1, 3, size, size)}, [y])


# ---------------------------------------------------------------- kernel-shape-heavy stacks


def vgg_block(out: Path, seed: int = 0, size: int = 112) -> Path:
    """3×3-heavy: VGG-style stacks of 3×3 convolutions with max pools."""
    g = Graph("vgg_block", seed)
    x, c = "input", 3
    for cout, reps in ((64, 2), (128, 2), (256, 3), (512, 2)):
        for _ in range(reps):
            x = g.conv(x, c, cout, 3, bn=False, bias=True)
            c = cout
        x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    w = (g.rng.standard_normal((100, c)) * 0.05).astype(np.float32)
    y = g.op("Gemm", [x, g.const(w), g.const(np.zeros(100, np.float32))], transB=1)
    return g.save(out, {"input": (1, 3, size, size)}, [y])


def bottleneck(out: Path, seed: int = 0, size: int = 56) -> Path:
    """1×1-heavy: ResNet bottlenecks with wide 1×1 expansions on a 56² feature map."""
    g = Graph("bottleneck", seed)
    x = g.conv("input", 64, 256, act="relu")
    c = 256
    for mid, cout, s in ((64, 256, 1), (64, 256, 1), (128, 512, 2), (128, 512, 1), (256, 1024, 2), (256, 1024, 1)):
        y = g.conv(g.conv(g.conv(x, c, mid, s=s), mid, mid, 3), mid, cout, act=None)
        short = g.conv(x, c, cout, s=s, act=None) if (s != 1 or c != cout) else x
        x = g.op("Relu", [g.op("Add", [short, y])])
        c = cout
    return g.save(out, {"input": (1, 64, size, size)}, [x])


ZOO = {"mobilenet_v2": mobilenet_v2, "mobilenet_v3": mobilenet_v3, "yolo": yolo, "ocr_cls": ocr_cls, "vgg_block": vgg_block,
       "bottleneck": bottleneck, "ocr_det": ocr_det}
