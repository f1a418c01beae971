"""Small helpers over ONNX protobufs, shared by the import stages (a leaf: imports no other
edgetune module, and TVM nowhere)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

DEFAULT_DOMAINS = ("", "ai.onnx")


def subgraphs(node: Any) -> list[Any]:
    """The graphs a node carries as attributes (``If`` branches, ``Loop``/``Scan`` bodies)."""
    from onnx import AttributeProto

    out = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            out.append(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            out.extend(attr.graphs)
    return out


def all_graphs(graph: Any) -> Iterator[Any]:
    """``graph`` and every graph nested in its nodes, outermost first."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from all_graphs(sub)


def outer_names(graph: Any) -> set[str]:
    """Names a (branch or body) graph reads that it does not define itself."""
    defined = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    read: set[str] = set()
    for node in graph.node:
        read |= {n for n in node.input if n and n not in defined}
        for sub in subgraphs(node):
            read |= outer_names(sub) - defined
        defined |= set(node.output)
    return read


def attrs(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values (bytes for strings, TensorProto for tensors)."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def text(value: Any) -> str:
    """A string attribute as ``str`` (ONNX keeps them as bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def is_default_domain(node: Any) -> bool:
    """Whether ``node`` is a standard ONNX operator (not ``com.microsoft`` or another domain)."""
    return node.domain in DEFAULT_DOMAINS


def op_key(node: Any) -> str:
    """``Op`` for standard operators, ``domain::Op`` for every other domain."""
    return node.op_type if is_default_domain(node) else f"{node.domain}::{node.op_type}"


def constants(graph: Any) -> dict[str, Any]:
    """Constant tensors (initializers, ``Constant`` nodes with a tensor value) by name, as
    TensorProtos: converting every weight to numpy would cost seconds when one value is wanted."""
    consts = {i.name: i for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            consts[node.output[0]] = node.attribute[0].t
    return consts


def constant_value(consts: dict[str, Any], name: str) -> np.ndarray | None:
    """The numpy value of constant ``name`` (None when it is not a constant)."""
    from onnx import numpy_helper

    return numpy_helper.to_array(consts[name]) if name in consts else None


def real_inputs(model: Any) -> list[Any]:
    """Graph inputs that are not initializers (old exporters list weights as inputs too)."""
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def input_dims(value_info: Any) -> list[int | str]:
    """Dims of a graph input: ints, or the symbolic name (``?`` when unnamed)."""
    dims: list[int | str] = []
    for d in value_info.type.tensor_type.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?"))
    return dims


def np_dtype(elem_type: int) -> np.dtype:
    """numpy dtype of an ONNX tensor element type."""
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def value_dtype(value_info: Any) -> str:
    """numpy dtype name of a graph input/output."""
    return str(np_dtype(value_info.type.tensor_type.elem_type))


def opset(model: Any, domain: str = "") -> int:
    """The model's opset version for ``domain`` (the standard domain by default); 0 if absent."""
    for entry in model.opset_import:
        if entry.domain == domain or (domain == "" and entry.domain == "ai.onnx"):
            return int(entry.version)
    return 0


def node_label(node: Any) -> str:
    """How a user finds a node: its name, or its first output when it has none."""
    return f"{node.op_type} '{node.name or (node.output[0] if node.output else '?')}'"
