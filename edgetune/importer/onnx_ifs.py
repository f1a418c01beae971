"""``If`` nodes whose condition the fixed shapes and bound inputs decide, replaced by the branch
they take — before onnxruntime or TVM look at the graph.

Exporters write ``If`` for what a model decides from its input's shape or a setting (silero-vad:
the sample rate; inside each branch, the rank of an intermediate result). Once ``--input-shape``
fixes the shapes and ``--bind`` the settings, each such condition is a constant, but both branches
are still in the graph, and shape inference runs through both: the branch the shapes do not take
can be inconsistent at those shapes (silero-vad 6's 8 kHz branch at 512 samples: an LSTM over a
rank-5 tensor), so onnxruntime's own folding refused the model and, inlining a taken branch, failed
on its outer names.

A condition is evaluated when it depends on nothing but constants, bound inputs and the *shapes*
of tensors (``Shape`` / ``Size`` of a tensor whose shape ONNX's shape inference fixes): that
sub-graph, each such ``Shape`` replaced by its value, runs in ONNX's reference evaluator. The
taken branch's nodes then take the ``If``'s place (their names kept apart from the graph's), its
outputs under the ``If``'s. Repeated until no ``If`` is decided: a nested one is decided once its
parent is inlined. An ``If`` decided by an input's values stays (TVM converts it to ``relax.If``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

MAX_CONDITION_NODES = 256  # a condition computed by more than this many nodes is left to run-time
_DATA_SHAPED = {"NonZero", "Unique", "Compress", "NonMaxSuppression", "TopK", "Loop", "If", "Scan",
                "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def resolve_ifs(model: Any) -> int:
    """Inline every ``If`` of the main graph the constants and static shapes decide (in place);
    returns how many were inlined."""
    count = 0
    while True:
        shapes = _static_shapes(model)
        done = False
        for node in list(model.graph.node):
            if node.op_type != "If":
                continue
            taken = _condition(model.graph, node.input[0], shapes, list(model.opset_import))
            if taken is None:
                continue
            _inline(model.graph, node, bool(taken))
            count += 1
            done = True
            break  # the graph changed: shapes again
        if not done:
            return count


def _static_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    """Each main-graph tensor whose shape ONNX's inference fixes → that shape."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 — an inconsistent branch or a contrib op: the graph's own shapes only
        inferred = model
    out = {}
    graph = inferred.graph
    for vi in (*graph.input, *graph.value_info, *graph.output):
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else None
        if dims is not None and vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            out[vi.name] = tuple(int(d.dim_value) for d in dims)
    return out


def _condition(graph: Any, name: str, shapes: dict[str, tuple[int, ...]], opsets: list[Any]) -> Any | None:
    """The value of ``name`` where constants and static shapes decide it, else None."""
    from onnx import helper, numpy_helper

    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name: i for i in graph.initializer}
    inputs = {i.name for i in graph.input} - set(inits)
    nodes, consts, seen = [], {}, set()

    def visit(tensor: str) -> bool:
        if not tensor or tensor in seen:
            return True
        seen.add(tensor)
        if tensor in inits:
            consts[tensor] = inits[tensor]
            return True
        if tensor in inputs:
            return False  # decided by an input's values
        node = producer.get(tensor)
        if node is None or node.op_type in _DATA_SHAPED or len(nodes) > MAX_CONDITION_NODES:
            return False
        if node.op_type in ("Shape", "Size"):
            shape = shapes.get(node.input[0])
            if shape is None:
                return False
            value = np.array(shape, np.int64)
            if node.op_type == "Size":
                value = np.array(int(np.prod(shape)), np.int64)
            else:
                a = {x.name: x.i for x in node.attribute}
                value = value[a.get("start", 0):a.get("end", len(shape))] if ("start" in a or "end" in a) else value
            consts[tensor] = numpy_helper.from_array(value, tensor)
            return True
        if not all(visit(i) for i in node.input):
            return False
        nodes.append(node)
        return True

    if not visit(name):
        return None
    from onnx.reference import ReferenceEvaluator

    out = helper.make_tensor_value_info(name, 0, None)
    sub = helper.make_graph(nodes, "condition", [], [out], list(consts.values()))
    try:
        model = helper.make_model(sub, opset_imports=opsets)
        (value,) = ReferenceEvaluator(model).run(None, {})
    except Exception as err:  # noqa: BLE001 — the reference evaluator lacks an op: decided at run time
        log.debug("If condition %s not evaluated: %s", name, err)
        return None
    value = np.asarray(value)
    return bool(value.reshape(-1)[0]) if value.size == 1 else None


def _inline(graph: Any, node: Any, taken: bool) -> None:
    """``node`` (an If) replaced by its ``then`` or ``else`` branch, in place."""
    from onnx import helper

    branch = next(a.g for a in node.attribute if a.name == ("then_branch" if taken else "else_branch"))
    taken_names = set()
    for n in graph.node:
        taken_names.update(n.output)
    taken_names.update(i.name for i in graph.initializer)
    taken_names.update(i.name for i in graph.input)
    local = {o for n in branch.node for o in n.output} | {i.name for i in branch.initializer}
    rename = {name: _fresh(name, taken_names) for name in local if name in taken_names}

    def renamed(names: Any) -> list[str]:
        return [rename.get(n, n) for n in names]

    def fix(g: Any) -> None:  # a nested branch reads the inlined branch's names too
        for n in g.node:
            n.input[:] = renamed(n.input)
            for a in n.attribute:
                if a.HasField("g"):
                    fix(a.g)
                for sub in a.graphs:
                    fix(sub)

    new_nodes = []
    for n in branch.node:
        copy = type(n)()
        copy.CopyFrom(n)
        copy.input[:] = renamed(copy.input)
        copy.output[:] = renamed(copy.output)
        for a in copy.attribute:
            if a.HasField("g"):
                fix(a.g)
            for sub in a.graphs:
                fix(sub)
        new_nodes.append(copy)
    for init in branch.initializer:
        copy = type(init)()
        copy.CopyFrom(init)
        copy.name = rename.get(init.name, init.name)
        graph.initializer.append(copy)
    for out, result in zip(node.output, branch.output):
        new_nodes.append(helper.make_node("Identity", [rename.get(result.name, result.name)], [out]))
    at = list(graph.node).index(node)
    kept = list(graph.node)
    del graph.node[:]
    graph.node.extend(kept[:at] + new_nodes + kept[at + 1:])


def _fresh(name: str, taken: set[str]) -> str:
    k = 1
    while f"{name}__inlined{k}" in taken:
        k += 1
    taken.add(f"{name}__inlined{k}")
    return f"{name}__inlined{k}"


def deciding_inputs(model: Any) -> list[str]:
    """The graph inputs whose values decide an ``If`` of the main graph (``resolve_ifs`` left it:
    its condition reads them), in graph order."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    inputs = [i.name for i in graph.input if i.name not in {x.name for x in graph.initializer}]
    found: set[str] = set()
    for node in graph.node:
        if node.op_type != "If":
            continue
        stack, seen = [node.input[0]], set()
        while stack:
            tensor = stack.pop()
            if tensor in seen or not tensor:
                continue
            seen.add(tensor)
            if tensor in inputs:
                found.add(tensor)
            elif tensor in producer and producer[tensor].op_type not in ("Shape", "Size"):
                stack.extend(producer[tensor].input)
    return [name for name in inputs if name in found]
