"""ONNX graph preparation for recurrent layers and control flow (TVM is not imported here).

* ``--bind NAME=VALUE`` turns a graph input into a constant (:func:`bind_inputs`), so the
  ``If`` nodes and shapes that depend on it fold away with the rest of the constant
  subgraphs (onnxruntime's basic graph optimisation inlines an ``If`` whose condition is
  constant). :func:`bindable_inputs` names the inputs that only steer control flow or shapes.
* ``LSTM`` / ``GRU`` / ``RNN`` nodes are checked against what edgetune converts
  (:func:`check_recurrent`; anything else is refused naming the node, never run wrong) and
  batch-major ones (``layout=1``) are rewritten to the time-major form with transposes
  (:func:`time_major`): one form for the converter, and one onnxruntime can run as the
  reference (it refuses ``layout=1``).
* :func:`recurrent_layers` and :func:`control_flow` describe both for ``edgetune inspect``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._tvm.constants import ACTIVATIONS, GATES, UNROLL_MAX_STEPS
from ..errors import ModelError
from ..onnx_proto import attrs as node_attrs
from ..onnx_proto import constants, input_dims, np_dtype, outer_names, real_inputs, subgraphs, text

RECURRENT = GATES

# Ops through which a bound scalar still only computes a condition or a shape.
_SCALAR_OPS = {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Not", "And", "Or", "Xor",
               "Cast", "Identity", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Min", "Max",
               "Unsqueeze", "Squeeze", "Reshape", "Concat", "Gather", "Slice", "Floor", "Ceil", "Sqrt"}
# (op, input index) pairs that take a shape or an index, not data.
_SHAPE_INPUTS = {("Reshape", 1), ("Expand", 1), ("ConstantOfShape", 0), ("Tile", 1), ("Range", 0),
                 ("Range", 1), ("Range", 2), ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4),
                 ("Resize", 1), ("Resize", 2), ("Resize", 3), ("Pad", 1), ("Unsqueeze", 1), ("Squeeze", 1),
                 ("ReduceMean", 1), ("ReduceSum", 1), ("ReduceMax", 1), ("TopK", 1), ("OneHot", 1)}




def parse_value(text: str, dtype: np.dtype) -> np.ndarray:
    """``16000``, ``0.5``, ``true`` or ``1,2,3`` as an array of ``dtype``."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError("empty value")
    if dtype == np.bool_:
        words = {"true": True, "1": True, "false": False, "0": False}
        values = [words[t.lower()] for t in items]
    elif dtype.kind in "iu":
        values = [int(t) for t in items]
    else:
        values = [float(t) for t in items]
    return np.array(values if len(values) > 1 else values[0], dtype=dtype)


def bind_inputs(model: Any, bindings: dict[str, str]) -> dict[str, Any]:
    """Make each named graph input a constant initializer; returns name → bound value (JSON)."""
    from onnx import numpy_helper

    inputs = {vi.name: vi for vi in real_inputs(model)}
    unknown = sorted(set(bindings) - set(inputs))
    if unknown:
        raise ModelError(f"--bind names unknown input(s) {', '.join(unknown)}",
                         f"the model's inputs are: {', '.join(inputs)}")
    bound: dict[str, Any] = {}
    for name, given in bindings.items():
        vi = inputs[name]
        dtype = np_dtype(vi.type.tensor_type.elem_type)
        dims = input_dims(vi)
        try:
            value = parse_value(given, dtype)
            if dims and all(isinstance(d, int) for d in dims):
                value = value.reshape(dims)
        except (ValueError, KeyError, OverflowError) as err:
            raise ModelError(f"--bind {name}={given}: not a value for input '{name}' "
                             f"({dtype.name}, shape {dims}): {err}",
                             "give a number, true/false, or a comma-separated list") from None
        model.graph.input.remove(vi)
        model.graph.initializer.append(numpy_helper.from_array(value, name))
        bound[name] = value.tolist()
    return bound


def _consumers(graph: Any) -> dict[str, list[tuple[Any, int]]]:
    uses: dict[str, list[tuple[Any, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append((node, i))
        for sub in subgraphs(node):
            for name in outer_names(sub):
                uses.setdefault(name, []).append((node, -1))  # read inside a branch: data
    return uses






def bindable_inputs(model: Any) -> list[str]:
    """Graph inputs that are small and feed only ``If`` conditions or shape arguments."""
    uses = _consumers(model.graph)
    outputs = {o.name for o in model.graph.output}

    def steers_only(name: str, seen: set[str]) -> bool:
        if name in outputs or name in seen:
            return name not in outputs
        seen.add(name)
        found = False
        for node, index in uses.get(name, []):
            found = True
            if node.op_type == "If" and index == 0 or (node.op_type, index) in _SHAPE_INPUTS:
                continue
            if node.op_type not in _SCALAR_OPS or index < 0:
                return False
            if not all(steers_only(out, seen) for out in node.output):
                return False
        return found

    small = [vi for vi in real_inputs(model)
             if all(isinstance(d, int) for d in input_dims(vi)) and int(np.prod(input_dims(vi) or [1])) <= 16]
    return [vi.name for vi in small if steers_only(vi.name, set())]


# ---------------------------------------------------------------- recurrent layers






def _shapes(model: Any) -> dict[str, list[int | None]]:
    """Every tensor's shape that shape inference knows (dims as ints, None when unknown)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    out: dict[str, list[int | None]] = {}
    for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    for init in inferred.graph.initializer:
        out[init.name] = list(init.dims)
    return out




def _refuse(node: Any, what: str, hint: str | None = None) -> None:
    raise ModelError(f"{node.op_type} node '{node.name or node.output[0]}': {what}",
                     hint or "edgetune converts LSTM/GRU/RNN with constant weights, Sigmoid/Tanh/Relu "
                             "activations and full-length sequences (see README: Recurrent models)")


def recurrent_layers(model: Any) -> list[dict[str, Any]]:
    """Each LSTM/GRU/RNN node: name, op, direction, hidden size, steps, batch, how it runs
    (``unrolled`` / ``loop``) and whether its initial state is a graph input (streaming)."""
    nodes = [n for n in model.graph.node if n.op_type in RECURRENT]
    if not nodes:
        return []
    shapes = _shapes(model)
    depends_on = input_dependencies(model, shapes)
    out = []
    for node in nodes:
        at = node_attrs(node)
        x = shapes.get(node.input[0]) or [None, None, None]
        layout = int(at.get("layout", 0))
        steps, batch = (x[1], x[0]) if layout else (x[0], x[1])
        states = [n for n in node.input[5:7] if n]
        out.append({
            "node": node.name or node.output[0],
            "op": node.op_type,
            "direction": text(at.get("direction", b"forward")),
            "hidden": int(at.get("hidden_size", 0)),
            "steps": steps,
            "batch": batch,
            "runs_as": None if steps is None else ("unrolled" if steps <= UNROLL_MAX_STEPS else "loop"),
            "state_input": any(depends_on(n) for n in states),
        })
    return out


def check_recurrent(model: Any, symbolic: bool = False) -> None:
    """Refuse, naming the node, every recurrent node edgetune cannot run exactly. ``symbolic``:
    the model is imported for a range of lengths, and its sequences may be as long as that."""
    if not any(n.op_type in RECURRENT for n in model.graph.node):
        return  # shape inference costs seconds on big CNNs
    shapes = _shapes(model)
    consts = constants(model.graph)
    for node in (n for n in model.graph.node if n.op_type in RECURRENT):
        at = node_attrs(node)
        direction = text(at.get("direction", b"forward"))
        if direction not in ("forward", "reverse", "bidirectional"):
            _refuse(node, f"direction '{direction}' is not an ONNX direction")
        ndir = 2 if direction == "bidirectional" else 1
        names = [text(a) for a in at.get("activations", [])]
        odd = sorted(set(names) - set(ACTIVATIONS))
        if odd:
            _refuse(node, f"activation(s) {', '.join(odd)} are not supported")
        per = len(names) // ndir if names else 0
        if names and per * ndir != len(names):
            _refuse(node, f"{len(names)} activations for {ndir} direction(s)")
        for index, what in ((1, "W"), (2, "R"), (3, "B"), (7, "P")):
            name = node.input[index] if len(node.input) > index else ""
            if name and name not in consts:
                _refuse(node, f"its {what} weights are computed at run time, not constants",
                        "export the model with its weights as initializers")
        x = shapes.get(node.input[0])
        layout = int(at.get("layout", 0))
        if not x or len(x) != 3 or None in [d for i, d in enumerate(x) if not symbolic or i != layout]:
            _refuse(node, "the sequence length is not fixed", "fix the input's shape with --input-shape")
        steps = x[1] if layout else x[0]
        seq = node.input[4] if len(node.input) > 4 else ""
        if seq and steps is None:
            _refuse(node, "sequence_lens with a sequence whose length is chosen at run time",
                    "export without sequence_lens, or package one length at a time")
        if seq:
            if seq not in consts:
                _refuse(node, "sequence_lens is a run-time input: only sequences as long as the input "
                              f"({steps} steps) are supported",
                        "export without sequence_lens, or --bind it to the full length")
            from onnx import numpy_helper

            lens = numpy_helper.to_array(consts[seq]).reshape(-1)
            if (lens != steps).any():
                _refuse(node, f"sequence_lens {lens.tolist()} is shorter than the sequence ({steps} steps); "
                              "only full-length sequences are supported")


def time_major(model: Any) -> int:
    """Rewrite every ``layout=1`` recurrent node to ``layout=0`` between transposes; returns how
    many were rewritten. Outputs keep their names and batch-major shapes."""
    from onnx import helper

    graph = model.graph
    rewritten = 0
    new_nodes = []
    for node in graph.node:
        at = node_attrs(node)
        if node.op_type not in RECURRENT or int(at.get("layout", 0)) == 0:
            new_nodes.append(node)
            continue
        rewritten += 1
        tag = (node.name or node.output[0]) + "__tm"
        ins = list(node.input)
        perms = {0: [1, 0, 2], 5: [1, 0, 2], 6: [1, 0, 2]}
        for index, perm in perms.items():
            if len(ins) > index and ins[index]:
                new_nodes.append(helper.make_node("Transpose", [ins[index]], [f"{tag}_in{index}"], perm=perm))
                ins[index] = f"{tag}_in{index}"
        outs = list(node.output)
        out_perms = {0: [2, 0, 1, 3], 1: [1, 0, 2], 2: [1, 0, 2]}
        finals = []
        for index, perm in out_perms.items():
            if len(outs) > index and outs[index]:
                finals.append(helper.make_node("Transpose", [f"{tag}_out{index}"], [outs[index]], perm=perm))
                outs[index] = f"{tag}_out{index}"
        keep = [a for a in node.attribute if a.name != "layout"]
        copy = helper.make_node(node.op_type, ins, outs, name=node.name)
        copy.attribute.extend(keep)
        new_nodes += [copy, *finals]
    if rewritten:
        del graph.node[:]
        graph.node.extend(new_nodes)
    return rewritten


# ---------------------------------------------------------------- control flow


def input_dependencies(model: Any, shapes: dict[str, list[int | None]] | None = None) -> Any:
    """A function: tensor name → the graph inputs its value depends on. The shape of a tensor
    whose shape is static depends on nothing (``Shape``/``Size`` fold). ``shapes``: what
    :func:`_shapes` returns, when the caller has it already."""
    inputs = {vi.name for vi in model.graph.input}
    producers = {o: n for n in model.graph.node for o in n.output}
    consts = set(constants(model.graph))
    shapes = _shapes(model) if shapes is None else shapes

    def depends_on(name: str, seen: set[str] | None = None) -> set[str]:
        seen = set() if seen is None else seen
        if name in inputs:
            return {name}
        if name in consts or name in seen or name not in producers:
            return set()
        seen.add(name)
        node = producers[name]
        if node.op_type in ("Shape", "Size") and None not in (shapes.get(node.input[0]) or [None]):
            return set()
        return set().union(*(depends_on(i, seen) for i in node.input if i))

    return depends_on


def control_flow(model: Any) -> list[dict[str, Any]]:
    """Each ``If`` / ``Loop`` / ``Scan`` node of the main graph and the inputs its condition reads
    (none: it folds at import)."""
    nodes = [n for n in model.graph.node if n.op_type in ("If", "Loop", "Scan")]
    if not nodes:
        return []  # no shape inference for the common case
    depends_on = input_dependencies(model)
    out = []
    for node in nodes:
        reads = sorted(depends_on(node.input[0])) if node.input else []
        out.append({"node": node.name or node.output[0], "op": node.op_type, "condition_reads": reads,
                    "branches": [g.name for g in subgraphs(node)]})
    return out



# ---------------------------------------------------------------- integer inputs

# Ops an index passes through unchanged in value.
_INDEX_PASS = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose"}
# (op, input index) → (input index of the table, its axis attribute or fixed axis)
_INDEXED = {("Gather", 1): (0, None), ("EmbedLayerNormalization", 0): (2, 0), ("EmbedLayerNormalization", 1): (4, 0),
            ("EmbedLayerNormalization", 8): (3, 0)}


def value_ranges(model: Any) -> dict[str, tuple[int, int]]:
    """Integer graph inputs whose values a model expects in a range: indices into a constant
    table (token ids into an embedding: [0, rows)), and 0/1 masks (inputs named ``*mask*``).
    Random values outside make the runtime reject the input, so the reference check and the
    benchmarks feed these ranges."""
    consts = constants(model.graph)
    uses = _consumers(model.graph)
    out: dict[str, tuple[int, int]] = {}
    for vi in real_inputs(model):
        if np_dtype(vi.type.tensor_type.elem_type).kind not in "iu":
            continue
        rows = _table_rows(vi.name, uses, consts, set())
        if rows:
            out[vi.name] = (0, min(rows))
        elif "mask" in vi.name.lower():
            out[vi.name] = (0, 2)
    return out


def _table_rows(name: str, uses: dict[str, list[tuple[Any, int]]], consts: dict[str, Any], seen: set[str]) -> list[int]:
    if name in seen:
        return []
    seen.add(name)
    rows = []
    for node, index in uses.get(name, []):
        if node.op_type in _INDEX_PASS and index == 0:
            rows += [r for out in node.output for r in _table_rows(out, uses, consts, seen)]
        elif (node.op_type, index) in _INDEXED:
            table, fixed = _INDEXED[(node.op_type, index)]
            source = node.input[table] if len(node.input) > table else ""
            if source in consts:
                axis = fixed if fixed is not None else int(node_attrs(node).get("axis", 0))
                rows.append(int(list(consts[source].dims)[axis]))
    return rows
