"""ONNX ``Loop`` nodes unrolled: TVM 0.27's frontend has no ``Loop``, and exporters write one for
every Python ``for`` over a tensor's length (frame loops in audio front ends, decoders that step
a fixed number of times). Once input shapes are fixed and the shape subgraphs folded, the trip
count of most such loops is a constant; the body is then copied once per iteration — the
iteration number a constant, the loop-carried values threaded from one copy to the next, each
scan output stacked along a new first axis — and TVM sees plain nodes (which fuse and tune like
any others).

A loop whose trip count stays data-dependent, or whose condition can turn false inside the body
(an early exit), stays a real loop (:mod:`edgetune._tvm.frontend.onnx_loop`: a recursive Relax function) —
unless it has scan outputs, whose shape would then not be fixed: that loop is refused naming the
node, as is one whose copies would exceed ``MAX_UNROLLED_NODES`` nodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError
from ..onnx_proto import constants, node_label, subgraphs
from .onnx_rewriter import refusal

MAX_UNROLLED_NODES = 50_000


class RunTimeLoop(Exception):  # noqa: N818 — a finding, not an error: the loop stays a loop
    """The loop's trip count or exit is decided by the data."""


def unroll_loops(model: Any) -> tuple[dict[str, int], dict[str, str]]:
    """Unroll every ``Loop`` of the main graph whose trip count is constant, in place; returns
    (loop name → iterations unrolled, loop name → why it stays a real loop)."""
    graph = model.graph
    if not any(n.op_type == "Loop" for n in graph.node):
        return {}, {}
    consts = constants(graph)
    done: dict[str, int] = {}
    kept: dict[str, str] = {}
    problems: list[ModelError] = []
    new_nodes: list[Any] = []
    for node in graph.node:
        if node.op_type != "Loop":
            new_nodes.append(node)
            continue
        label = node.name or node.output[0]
        try:
            count = _trip_count(node, consts)
        except RunTimeLoop as why:
            body = next(a.g for a in node.attribute if a.name == "body")
            if len(body.output) > len(node.input) - 1:  # scan outputs: no fixed shape at run time
                problems.append(ModelError(f"{node_label(node)}: {why}, and its scan outputs would have no fixed shape",
                                           "fix the input shapes with --input-shape (a loop over a length then unrolls), "
                                           "or export the loop with a fixed number of steps"))
            else:
                kept[label] = str(why)
            new_nodes.append(node)
            continue
        except ModelError as err:
            problems.append(err)
            continue
        new_nodes += _unrolled(graph, node, count, label)
        done[label] = count
    if problems:
        raise refusal(problems)
    del graph.node[:]
    graph.node.extend(new_nodes)
    return done, kept


def _trip_count(node: Any, consts: dict[str, Any]) -> int:
    """The constant trip count of a loop without an early exit; RunTimeLoop when the data
    decides either; ModelError for a loop too large to unroll."""
    from onnx import numpy_helper

    trip, cond = (node.input[i] if len(node.input) > i else "" for i in (0, 1))
    if not trip or trip not in consts:
        raise RunTimeLoop("its trip count is decided at run time")
    if cond and (cond not in consts or not bool(numpy_helper.to_array(consts[cond]).reshape(()))):
        raise RunTimeLoop("its condition is computed at run time")
    body = next(a.g for a in node.attribute if a.name == "body")
    if not _condition_stays_true(body):
        raise RunTimeLoop("it can exit early (its body computes the condition)")
    count = int(numpy_helper.to_array(consts[trip]).reshape(()))
    if count * max(1, len(body.node)) > MAX_UNROLLED_NODES:
        raise ModelError(f"{node_label(node)}: {count} iterations of a {len(body.node)}-node body is too large to unroll "
                         f"(limit {MAX_UNROLLED_NODES} nodes)")
    return count


def _condition_stays_true(body: Any) -> bool:
    """Whether the body's condition output is its condition input passed through (directly or by
    Identity) or a constant true."""
    from onnx import numpy_helper

    cond_in, cond_out = body.input[1].name, body.output[0].name
    producers = {o: n for n in body.node for o in n.output}
    name = cond_out
    while name in producers and producers[name].op_type == "Identity":
        name = producers[name].input[0]
    if name == cond_in:
        return True
    consts = constants(body)
    return name in consts and bool(numpy_helper.to_array(consts[name]).reshape(()))


def _unrolled(graph: Any, node: Any, count: int, label: str) -> list[Any]:
    from onnx import helper, numpy_helper

    body = next(a.g for a in node.attribute if a.name == "body")
    carried = [n for n in node.input[2:]]
    n_carried = len(carried)
    scans: list[list[str]] = [[] for _ in body.output[1 + n_carried:]]
    if count == 0 and scans:
        raise ModelError(f"{node_label(node)}: a loop of zero iterations with scan outputs is not supported")
    nodes = []
    local = {o for n in body.node for o in n.output} | {i.name for i in body.initializer}
    for step in range(count):
        suffix = f"__{label}_it{step}"
        names = {name: name + suffix for name in local}
        names[body.input[0].name] = f"{label}_iter{step}"
        graph.initializer.append(numpy_helper.from_array(np.array(step, np.int64), f"{label}_iter{step}"))
        names[body.input[1].name] = f"{label}_cond{step}"
        graph.initializer.append(numpy_helper.from_array(np.array(True), f"{label}_cond{step}"))
        for value_in, value in zip(body.input[2:], carried):
            names[value_in.name] = value
        for init in body.initializer:
            copy = numpy_helper.from_array(numpy_helper.to_array(init), names[init.name])
            graph.initializer.append(copy)
        for original in body.node:
            nodes.append(_renamed(original, names, suffix))
        carried = [names.get(o.name, o.name) for o in body.output[1:1 + n_carried]]
        for k, out in enumerate(body.output[1 + n_carried:]):
            scans[k].append(names.get(out.name, out.name))
    outputs = list(node.output)
    for value, name in zip(carried, outputs[:n_carried]):
        if name:
            nodes.append(helper.make_node("Identity", [value], [name], name=f"{label}__final_{name}"))
    axes = f"{label}__scan_axes"
    if scans:
        graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), axes))
    for k, (values, name) in enumerate(zip(scans, outputs[n_carried:])):
        if not name:
            continue
        stacked = [f"{v}__stack" for v in values]
        for value, item in zip(values, stacked):
            nodes.append(helper.make_node("Unsqueeze", [value, axes], [item], name=f"{item}_node"))
        nodes.append(helper.make_node("Concat", stacked, [name], name=f"{label}__scan{k}", axis=0))
    return nodes


def _renamed(node: Any, names: dict[str, str], suffix: str) -> Any:
    """A copy of ``node`` with every name in ``names`` replaced (inside its subgraphs too)."""
    import onnx

    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.name = (node.name or node.output[0]) + suffix
    copy.input[:] = [names.get(n, n) for n in copy.input]
    copy.output[:] = [names.get(n, n) for n in copy.output]
    for sub in subgraphs(copy):
        _rename_graph(sub, names)
    return copy


def _rename_graph(graph: Any, names: dict[str, str]) -> None:
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        for sub in subgraphs(node):
            _rename_graph(sub, names)
    for out in graph.output:
        out.name = names.get(out.name, out.name)
