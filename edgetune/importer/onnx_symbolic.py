"""Rewrites for imports whose shapes stay symbolic (a range of lengths), where TVM's frontend
needs a static answer that the graph states in a form it cannot follow.

**Integer casts inside shape computations** (:func:`drop_shape_casts`). Exporters that compute shapes in int32 (Paddle's ``paddle2onnx``: PP-OCR's recognizers) write
``Shape → Cast(int32) → Slice → Cast(int64) → Concat → Reshape``. With fixed shapes onnxruntime
folds the chain away; with a range of lengths it stays, and TVM's frontend turns a cast of a shape
into a tensor, after which the ``Reshape`` cannot read its new shape ("Reshape requires the input
new shape to be Shape"). A dimension fits int64 as well as int32, so where such a chain computes
only shapes — every value in it reaches the rest of the graph through a cast back to int64 — its
casts are dropped and its int32 constants widened: the chain is the same shape arithmetic, in the
dtype TVM follows as a shape.

**``auto_pad`` SAME of stride 1** (:func:`explicit_same_pads`). TVM computes SAME padding from
the input's size with ``int()``, which fails on a symbolic width (PP-OCRv5/v6 recognizers' 2×2
max pool). At stride 1 the padding is ``dilation · (kernel − 1)`` whatever the size: written as
explicit pads, split as ONNX splits it (SAME_UPPER: the odd one at the end).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# ops that move shape values without computing on them: (the inputs that carry them)
_MOVES = {"Slice": (0,), "Gather": (0,), "Concat": None, "Squeeze": (0,), "Unsqueeze": (0,), "Identity": (0,)}
_INTS = (6, 7)  # TensorProto.INT32, INT64


def drop_shape_casts(model: Any) -> int:
    """Drop the integer casts of shape chains in ``model.graph`` (see the module docstring), in
    place; returns how many casts went."""
    from onnx import numpy_helper

    graph = model.graph
    consumers: dict[str, list[Any]] = {}
    producers: dict[str, Any] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
        for name in node.output:
            producers[name] = node
    int64 = {vi.name for vi in list(graph.value_info) + list(graph.input) if vi.type.tensor_type.elem_type == 7}
    int64 |= {n.output[0] for n in graph.node if n.op_type == "Shape" or (_int_cast(n) and _cast_to(n) == 7)}
    outputs = {o.name for o in graph.output}
    constants = {i.name: i for i in graph.initializer}
    constants.update({n.output[0]: n for n in graph.node if n.op_type == "Constant"})
    shaped = _shape_values(graph, constants)
    dropped: dict[int, Any] = {}
    moved: set[str] = set()
    widen: set[str] = set()
    for cast in graph.node:
        if id(cast) in dropped or not _int_cast(cast) or cast.input[0] not in shaped:
            continue
        if _cast_to(cast) == 7 and cast.input[0] in int64:  # int64 to int64: nothing
            dropped[id(cast)] = cast
            moved.add(cast.output[0])
            continue
        region = _region(cast, consumers, constants, outputs, int64)
        if region is None:
            continue
        nodes, ints = region
        dropped.update({k: n for k, n in nodes.items() if n.op_type == "Cast"})
        moved |= {n.output[0] for n in nodes.values()}
        widen |= ints
    if not dropped:
        return 0
    for name in widen:  # int32 constants concatenated into a chain now in int64
        const = constants[name]
        if const.__class__.__name__ == "TensorProto":  # an initializer
            const.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(const).astype(np.int64), name))
        else:
            value = next(a for a in const.attribute if a.name == "value")
            value.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(value.t).astype(np.int64), value.t.name))
    renames: dict[str, str] = {}
    keep = []
    for node in graph.node:
        if id(node) in dropped:
            renames[node.output[0]] = renames.get(node.input[0], node.input[0])
        else:
            keep.append(node)
    for node in keep:
        for i, name in enumerate(node.input):
            if name in renames:
                node.input[i] = renames[name]
    del graph.node[:]
    graph.node.extend(keep)
    stale = moved | widen  # their dtypes changed: shape inference tells them again
    info = [vi for vi in graph.value_info if vi.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(info)
    return len(dropped)


def _int_cast(node: Any) -> bool:
    return node.op_type == "Cast" and any(a.name == "to" and a.i in _INTS for a in node.attribute)


def _cast_to(node: Any) -> int:
    return next(a.i for a in node.attribute if a.name == "to")


def _shape_values(graph: Any, constants: dict[str, Any]) -> set[str]:
    """The tensors computed from ``Shape`` outputs (and constants) by moves and integer casts."""
    shaped: set[str] = set()
    for node in graph.node:  # (topological order)
        if node.op_type == "Shape":
            shaped.add(node.output[0])
            continue
        carried = _carried(node)
        if carried is None:
            continue
        ins = [node.input[i] for i in carried if i < len(node.input) and node.input[i]]
        if ins and any(i in shaped for i in ins) and all(i in shaped or i in constants for i in ins):
            shaped.add(node.output[0])
    return shaped


def _carried(node: Any) -> tuple[int, ...] | None:
    if _int_cast(node):
        return (0,)
    if node.op_type not in _MOVES:
        return None
    return _MOVES[node.op_type] or tuple(range(len(node.input)))


def _region(cast: Any, consumers: dict[str, list[Any]], constants: dict[str, Any], outputs: set[str],
            int64: set[str]) -> tuple[dict[int, Any], set[str]] | None:
    """From an integer cast of a shape value: the moves and casts its value flows through to the
    casts back to int64 where it leaves (every exit must be one; those casts included), and the
    int32 constants that join it; None where it reaches anything else, or meets a value that is
    neither a constant nor known to be int64."""
    nodes: dict[int, Any] = {id(cast): cast}
    ints: set[str] = set()
    flowing = {cast.output[0]}
    todo = [cast.output[0]]
    while todo:
        name = todo.pop()
        if name in outputs:
            return None
        for user in consumers.get(name, []):
            if id(user) in nodes:
                continue
            nodes[id(user)] = user
            if _int_cast(user) and _cast_to(user) == 7:
                continue  # an exit: int64 again
            carried = _carried(user)
            if carried is None or any(i not in carried for i, x in enumerate(user.input) if x in flowing):
                return None
            flowing.add(user.output[0])
            todo.append(user.output[0])
    exits = [n for n in nodes.values() if n is not cast and _int_cast(n) and _cast_to(n) == 7]
    if not exits:
        return None
    for node in nodes.values():
        if node in exits or node is cast:
            continue
        for i in _carried(node) or ():
            other = node.input[i] if i < len(node.input) else ""
            if not other or other in flowing or other in int64:
                continue
            if other in constants and _const_dtype(constants[other]) in _INTS:
                if _const_dtype(constants[other]) == 6:
                    ints.add(other)
                continue
            return None
    return nodes, ints


def _const_dtype(const: Any) -> int:
    if const.__class__.__name__ == "TensorProto":
        return const.data_type
    return next(a.t.data_type for a in const.attribute if a.name == "value")


_PADDED = ("Conv", "ConvInteger", "MaxPool", "AveragePool", "LpPool", "QLinearConv", "ConvTranspose")


def explicit_same_pads(model: Any) -> int:
    """Stride-1 ``auto_pad`` SAME_UPPER / SAME_LOWER nodes with their pads written out (see the
    module docstring), in place; returns how many."""
    from onnx import helper

    count = 0
    for node in model.graph.node:
        if node.op_type not in _PADDED or node.op_type == "ConvTranspose":
            continue
        attrs = {a.name: a for a in node.attribute}
        mode = attrs["auto_pad"].s.decode() if "auto_pad" in attrs else "NOTSET"
        if mode not in ("SAME_UPPER", "SAME_LOWER") or "kernel_shape" not in attrs:
            continue
        kernel = list(attrs["kernel_shape"].ints)
        strides = list(attrs["strides"].ints) if "strides" in attrs else [1] * len(kernel)
        dilations = list(attrs["dilations"].ints) if "dilations" in attrs else [1] * len(kernel)
        if any(s != 1 for s in strides):
            continue  # the padding depends on the size modulo the stride
        total = [d * (k - 1) for k, d in zip(kernel, dilations)]
        small = [t // 2 for t in total]
        begin, end = (small, [t - b for t, b in zip(total, small)])
        if mode == "SAME_LOWER":
            begin, end = end, begin
        keep = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
        del node.attribute[:]
        node.attribute.extend(keep + [helper.make_attribute("pads", begin + end)])
        count += 1
    return count
