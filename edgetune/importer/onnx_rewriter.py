"""The machinery of edgetune's ONNX → ONNX rewrites (:mod:`.onnx_contrib`, :mod:`.onnx_signal`):
a node is replaced, in topological order, by standard nodes a rewrite function emits through a
:class:`Rewriter` — fresh names, constants as initializers, and the static shapes of everything
before the node (ONNX shape inference over the graph rewritten so far: every earlier node is
standard by then)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ModelError
from ..onnx_proto import node_label, op_key, opset


class Rewriter:
    """Emits replacement nodes and constants for one node at a time, with fresh names."""

    def __init__(self, model: Any):
        self.model = model
        self.opset = opset(model) or 13
        self.out: list[Any] = []
        self.count = 0
        self.prefix = "et"
        self._pending: list[Any] = []
        self._shapes: dict[str, list[int | None]] | None = None
        self._measured: dict[str, list[int] | None] = {}

    def fresh(self) -> str:
        self.count += 1
        return f"{self.prefix}__{self.count}"

    def op(self, kind: str, inputs: list[str], output: str | None = None, **kw: Any) -> str:
        from onnx import helper

        name = output or self.fresh()
        self.count += 1
        self.out.append(helper.make_node(kind, inputs, [name], name=f"{self.prefix}__{kind}_{self.count}", **kw))
        return name

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        from onnx import numpy_helper

        name = self.fresh()
        self.model.graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def ints(self, values: list[int]) -> str:
        return self.const(np.array(values, np.int64), np.int64)

    # ------------------------------------------------------------ shapes (standard ops only)

    def shape(self, name: str) -> list[int | None] | None:
        """Static shape of ``name`` as ONNX shape inference sees the graph rewritten so far
        (every node before the current one is standard by now), shape computations propagated."""
        if self._shapes is None:
            self._shapes = _infer(self.model, self.out + self._pending)
        return self._shapes.get(name)

    def fixed_shape(self, name: str) -> list[int | None] | None:
        """:meth:`shape`, for a rewrite that needs every dimension: where inference leaves one
        open although every graph input is fixed (an operator whose shape function ONNX lacks
        or cannot follow), the shape onnxruntime gives ``name`` when it runs the original graph
        (once per name)."""
        found = self.shape(name)
        if found is None or None in found:
            if name not in self._measured:
                self._measured[name] = _measured_shape(self.model, name)
            found = self._measured[name] or found
        return found

    def value(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is a constant (an initializer or a Constant node)."""
        from onnx import numpy_helper

        for init in self.model.graph.initializer:
            if init.name == name:
                return numpy_helper.to_array(init)
        for node in self.out:
            if node.op_type == "Constant" and node.output[0] == name and node.attribute[0].name == "value":
                return numpy_helper.to_array(node.attribute[0].t)
        return None

    def rank(self, name: str, node: Any) -> int:
        shape = self.shape(name)
        if shape is None:
            raise ModelError(f"{node_label(node)}: the rank of its input '{name}' is unknown",
                             "fix the model's input shapes with --input-shape")
        return len(shape)

    # ------------------------------------------------------------ building blocks

    def reduce_mean(self, x: str) -> str:
        if self.opset >= 18:
            return self.op("ReduceMean", [x, self.ints([-1])], keepdims=1)
        return self.op("ReduceMean", [x], axes=[-1], keepdims=1)

    def layer_norm(self, x: str, gamma: str, beta: str | None, eps: float, outputs: list[str]) -> None:
        """``outputs``: Y, mean, inverse std (only those named)."""
        y, mean_out, inv_out = (outputs + ["", "", ""])[:3]
        mean = self.reduce_mean(x)
        centred = self.op("Sub", [x, mean])
        var = self.reduce_mean(self.op("Mul", [centred, centred]))
        std = self.op("Sqrt", [self.op("Add", [var, self.const(eps)])])
        scaled = self.op("Mul", [self.op("Div", [centred, std]), gamma])
        self.op("Add", [scaled, beta], y) if beta else self.op("Identity", [scaled], y)
        if mean_out:
            self.op("Identity", [mean], mean_out)
        if inv_out:
            self.op("Reciprocal", [std], inv_out)

    def rms_norm(self, x: str, gamma: str, eps: float, outputs: list[str]) -> None:
        """``outputs``: Y, inverse std (only those named)."""
        y, inv_out = (outputs + ["", ""])[:2]
        std = self.op("Sqrt", [self.op("Add", [self.reduce_mean(self.op("Mul", [x, x])), self.const(eps)])])
        self.op("Mul", [self.op("Div", [x, std]), gamma], y)
        if inv_out:
            self.op("Reciprocal", [std], inv_out)

    def gelu(self, x: str, output: str) -> str:
        erf = self.op("Erf", [self.op("Div", [x, self.const(np.sqrt(2.0))])])
        return self.op("Mul", [self.op("Mul", [x, self.const(0.5)]), self.op("Add", [erf, self.const(1.0)])], output)

    def matmul_integer_to_float(self, a: str, b: str, a_scale: str, b_scale: str, a_zero: str, b_zero: str,
                                bias: str, output: str) -> str:
        acc = self.op("Cast", [self.op("MatMulInteger", [a, b, a_zero, b_zero])], to=1)
        y = self.op("Mul", [acc, self.op("Mul", [a_scale, b_scale])], None if bias else output)
        return self.op("Add", [y, bias], output) if bias else y


def _infer(model: Any, nodes: list[Any]) -> dict[str, list[int | None]]:
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.node[:]
    probe.graph.node.extend(nodes)
    inferred = onnx.shape_inference.infer_shapes(probe, data_prop=True)
    shapes: dict[str, list[int | None]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if vi.type.tensor_type.HasField("shape"):
            shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
    for init in inferred.graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def _measured_shape(model: Any, name: str) -> list[int] | None:
    """The shape of ``name`` when onnxruntime runs ``model`` (as it stands: its nodes are the
    original ones until the rewrite ends) on zeros of its inputs' fixed shapes; None where an
    input's shape is not fixed or onnxruntime cannot run it."""
    import onnx
    import onnxruntime as ort

    initializers = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        if None in dims or not vi.type.tensor_type.elem_type:
            return None
        feeds[vi.name] = np.zeros(dims, onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    if name not in {o.name for o in probe.graph.output}:
        probe.graph.output.append(onnx.ValueInfoProto(name=name))
    try:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 3
        session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        value = session.run([name], feeds)[0]
    except Exception:  # noqa: BLE001 — onnxruntime's errors are many kinds; the caller refuses the node
        return None
    return [int(d) for d in np.shape(value)]


def inp(node: Any, i: int) -> str:
    """Input ``i`` of ``node`` ("" when absent)."""
    return node.input[i] if len(node.input) > i else ""


def out(node: Any, i: int) -> str:
    """Output ``i`` of ``node`` ("" when absent)."""
    return node.output[i] if len(node.output) > i else ""


@dataclass(frozen=True)
class Table:
    """Which rewrite applies to a node (None: the node stays): ``lookup(node, model_opset)``."""

    lookup: Callable[[Any, int], Callable[[Rewriter, Any], None] | None]

    def convertible(self, node: Any, model_opset: int) -> bool:
        """Whether a rewrite applies to ``node``."""
        return self.lookup(node, model_opset) is not None


def rewrite_nodes(model: Any, table: Table, domain: str | None = None) -> dict[str, int]:
    """Replace every node of the main graph ``table`` has a rewrite for, in place; returns how
    many of each kind (``domain::Op``) were replaced. ``domain``: an opset domain to drop from
    the model when no node uses it any more."""
    rw = Rewriter(model)
    counts: dict[str, int] = {}
    problems: list[ModelError] = []
    nodes = list(model.graph.node)
    for index, node in enumerate(nodes):
        rewrite = table.lookup(node, rw.opset)
        if rewrite is None:
            rw.out.append(node)
            continue
        rw.prefix = f"{(node.name or node.output[0])}__et"
        rw._pending, rw._shapes = nodes[index + 1:], None
        kept = len(rw.out)
        try:
            rewrite(rw, node)
        except ModelError as err:  # keep going: the refusal names every node at once
            del rw.out[kept:]
            rw.out.append(node)
            problems.append(err)
            continue
        counts[op_key(node)] = counts.get(op_key(node), 0) + 1
    if problems:
        raise refusal(problems)
    if counts:
        del model.graph.node[:]
        model.graph.node.extend(rw.out)
        if domain is not None and not any(n.domain == domain for n in model.graph.node):
            from .onnx_normalize import drop_unused_opsets

            drop_unused_opsets(model)
    return counts


def refusal(problems: list[ModelError]) -> ModelError:
    """One ModelError listing every refused node (the first one's hint)."""
    if len(problems) == 1:
        return problems[0]
    return ModelError(f"{len(problems)} nodes cannot be converted: " + "; ".join(p.message for p in problems), problems[0].hint)
