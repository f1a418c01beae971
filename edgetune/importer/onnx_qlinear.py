"""QOperator-format int8 ONNX (``QLinearConv``, ``QLinearMatMul`` and onnxruntime's
``com.microsoft`` QLinear ops and ``QGemm``, what ``quantize_static(quant_format=QOperator)`` and older int8
model zoos write) spelled as the QDQ graph it stands for: ``DequantizeLinear`` on each quantized
input, the float op, ``QuantizeLinear`` on the output. TVM 0.27's ONNX frontend converts none of
these ops; the QDQ form it converts, and edgetune's int8 pass (``_tvm.passes.int8_layers``) then computes
the convolutions and matrix products as integer sums requantized as onnxruntime's QLinear
kernels do.

Only ops whose scales and zero points are constants are expanded (a run-time scale has no QDQ
form TVM folds); anything else stays and is reported as an unsupported operator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_MS = "com.microsoft"


def _opset(model: Any) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def expand_qlinear_ops(model: Any) -> list[str]:
    """Rewrite ``model``'s top-level QLinear nodes in place; returns the op types expanded (one
    entry per node), empty when there were none."""
    from onnx import helper, numpy_helper

    graph = model.graph
    consts = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    per_channel_ok = _opset(model) >= 13  # DequantizeLinear's axis attribute
    new_inits: list[Any] = []
    expanded: list[str] = []
    counter = [0]

    def fresh(base: str) -> str:
        counter[0] += 1
        return f"{base}__qdq{counter[0]}"

    def constant(*names: str) -> bool:
        return all(n in consts for n in names)

    def dq(x: str, scale: str, zero: str, out: list[Any], axis: int | None = None) -> str:
        name = fresh(f"{x}_dq")
        attrs = {"axis": axis} if axis is not None and consts[scale].size > 1 else {}
        out.append(helper.make_node("DequantizeLinear", [x, scale, zero], [name], **attrs))
        return name

    def bias_scale(bias: str, x_scale: str, w_scale: str) -> tuple[str, str]:
        """New constants for an int32 bias: its scale ``x_scale · w_scale`` and zero points 0."""
        value = (consts[x_scale].astype(np.float32) * consts[w_scale].astype(np.float32)).astype(np.float32)
        scale, zero = fresh(f"{bias}_scale"), fresh(f"{bias}_zero")
        for name, array in ((scale, value), (zero, np.zeros(value.shape, np.int32))):
            new_inits.append(numpy_helper.from_array(array, name))
            consts[name] = array
        return scale, zero

    def q(x: str, scale: str, zero: str, y: str, out: list[Any]) -> None:
        out.append(helper.make_node("QuantizeLinear", [x, scale, zero], [y]))

    def expand(node: Any) -> list[Any] | None:
        ins, attrs = list(node.input), {a.name: helper.get_attribute_value(a) for a in node.attribute}
        out: list[Any] = []
        if node.op_type == "QLinearConv" and node.domain in ("", "ai.onnx"):
            x, xs, xz, w, ws, wz, ys, yz = ins[:8]
            if not constant(xs, xz, w, ws, wz, ys, yz) or (consts[ws].size > 1 and not per_channel_ok):
                return None
            args = [dq(x, xs, xz, out), dq(w, ws, wz, out, axis=0)]
            if len(ins) > 8 and ins[8]:
                if ins[8] not in consts:
                    return None
                args.append(dq(ins[8], *bias_scale(ins[8], xs, ws), out, axis=0))
            y = fresh(f"{node.output[0]}_f")
            out.append(helper.make_node("Conv", args, [y], **attrs))
            q(y, ys, yz, node.output[0], out)
            return out
        if node.op_type == "QLinearMatMul" and node.domain in ("", "ai.onnx"):
            a, as_, az, b, bs, bz, ys, yz = ins
            if not constant(as_, az, bs, bz, ys, yz) or consts[as_].size > 1 or (consts[bs].size > 1 and not per_channel_ok):
                return None
            y = fresh(f"{node.output[0]}_f")
            out.append(helper.make_node("MatMul", [dq(a, as_, az, out), dq(b, bs, bz, out, axis=-1)], [y]))
            q(y, ys, yz, node.output[0], out)
            return out
        if node.domain != _MS:
            return None
        if node.op_type in ("QLinearAdd", "QLinearMul"):
            a, as_, az, b, bs, bz, ys, yz = ins
            if not constant(as_, az, bs, bz, ys, yz) or any(consts[s].size > 1 for s in (as_, bs, ys)):
                return None
            y = fresh(f"{node.output[0]}_f")
            out.append(helper.make_node(node.op_type.removeprefix("QLinear"), [dq(a, as_, az, out), dq(b, bs, bz, out)], [y]))
            q(y, ys, yz, node.output[0], out)
            return out
        if node.op_type == "QGemm":  # A, a_scale, a_zero, B, b_scale, b_zero, [C], [y_scale, y_zero]
            a, as_, az, b, bs, bz = ins[:6]
            c = ins[6] if len(ins) > 6 and ins[6] else None
            ys, yz = (ins[7], ins[8]) if len(ins) > 8 and ins[7] else (None, None)
            if (not constant(as_, az, bs, bz, *(n for n in (ys, yz) if n)) or consts[as_].size > 1
                    or (consts[bs].size > 1 and not per_channel_ok) or (c is not None and c not in consts)):
                return None
            args = [dq(a, as_, az, out), dq(b, bs, bz, out, axis=0 if attrs.get("transB", 0) else 1)]
            if c is not None:
                args.append(dq(c, *bias_scale(c, as_, bs), out, axis=0))
            gemm = {k: v for k, v in attrs.items() if k in ("alpha", "transA", "transB")}
            y = fresh(f"{node.output[0]}_f") if ys else node.output[0]
            out.append(helper.make_node("Gemm", args, [y], **gemm))
            if ys:
                q(y, ys, yz, node.output[0], out)
            return out
        if node.op_type == "QLinearConcat":
            ys, yz, rest = ins[0], ins[1], ins[2:]
            triples = [rest[i:i + 3] for i in range(0, len(rest), 3)]
            if not constant(ys, yz, *(t[1] for t in triples), *(t[2] for t in triples)):
                return None
            y = fresh(f"{node.output[0]}_f")
            out.append(helper.make_node("Concat", [dq(x, s, z, out) for x, s, z in triples], [y], axis=attrs["axis"]))
            q(y, ys, yz, node.output[0], out)
            return out
        if node.op_type == "QLinearGlobalAveragePool":
            x, xs, xz, ys, yz = ins
            if not constant(xs, xz, ys, yz) or attrs.get("channels_last", 0):
                return None
            y = fresh(f"{node.output[0]}_f")
            out.append(helper.make_node("GlobalAveragePool", [dq(x, xs, xz, out)], [y]))
            q(y, ys, yz, node.output[0], out)
            return out
        return None

    nodes: list[Any] = []
    for node in graph.node:
        replacement = expand(node) if node.op_type.startswith("QLinear") or node.op_type == "QGemm" else None
        if replacement is None:
            nodes.append(node)
            continue
        nodes.extend(replacement)
        expanded.append(node.op_type)
    if expanded:
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(new_inits)
    return expanded


def qlinear_hint(model: Any, missing: list[str]) -> str | None:
    """Why QLinear ops were left unexpanded, as a next step for the user (None: no such op)."""
    left = [op for op in missing if op.split("::")[-1].startswith("QLinear") or op.endswith("QGemm")]
    if not left:
        return None
    if _opset(model) < 13:
        return (f"{', '.join(left)} with per-channel scales need opset 13 (DequantizeLinear's axis), and constant "
                f"scales; this file is opset {_opset(model)}: convert it with "
                "onnx.version_converter.convert_version(model, 13), or quantize with quant_format=QDQ")
    return "their scales and zero points must be constants (initializers); or quantize with quant_format=QDQ"
