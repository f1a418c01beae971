"""Reading ONNX files as exporters write them: what onnxruntime accepts, edgetune accepts.

* **Weights in an external data file** (``model.onnx`` + ``model.onnx.data``, what exporters
  write past 2 GB or on request) are read from beside the model; a missing data file is named.
* **Nodes out of topological order** (onnxruntime sorts them itself; ``onnx.checker`` refuses
  them) are sorted here, branches and loop bodies included; a real cycle names its nodes.
* **Opset domains declared but unused** (``ai.onnx.ml``, ``com.microsoft`` …) are dropped.
* **Validation**: ``onnx.checker`` first; where it refuses what onnxruntime runs (its own ops in
  the standard domain, such as ``LayerNormalization`` below opset 17 written by its optimizer),
  onnxruntime's own loader decides, and its refusal is what the user sees.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..errors import ModelFormatError
from ..onnx_proto import all_graphs, node_label, outer_names, subgraphs

log = logging.getLogger(__name__)


def read(path: Path) -> tuple[Any, list[str]]:
    """Parse, sort and validate an ONNX file; returns the model and a note per change made.
    ModelFormatError for anything unreadable, naming the node or file at fault."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, OSError) as err:
        raise ModelFormatError(f"'{path.name}' is not a valid ONNX model: {_first_line(err)}",
                               "the file may be truncated or corrupt; export it again") from err
    if not model.graph.node:
        raise ModelFormatError(f"'{path.name}' has an empty graph", "export the model again")
    notes = []
    external = _load_external_data(model, path)
    if external:
        notes.append(f"weights read from external data file(s): {', '.join(external)}")
    moved = sum(topological_sort(g) for g in all_graphs(model.graph))
    if moved:
        notes.append(f"{moved} node(s) out of topological order sorted (onnxruntime sorts them too)")
    dropped = drop_unused_opsets(model)
    if dropped:
        notes.append(f"unused opset domain(s) dropped: {', '.join(dropped)}")
    validate(model, path)
    return model, notes


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(err).__name__)[:300]


def _load_external_data(model: Any, path: Path) -> list[str]:
    """Read tensors stored in files beside the model into the model; returns those files' names."""
    from onnx import external_data_helper as ext

    tensors = [t for g in all_graphs(model.graph) for t in [*g.initializer, *_attribute_tensors(g)]]
    locations = sorted({ext.ExternalDataInfo(t).location for t in tensors if ext.uses_external_data(t)})
    if not locations:
        return []
    for location in locations:
        where = (path.parent / location).resolve()
        if not where.is_relative_to(path.parent.resolve()):
            raise ModelFormatError(f"'{path.name}' points its weights outside its folder ({location})",
                                   "keep the model and its .data file in one folder")
        if not where.is_file():
            raise ModelFormatError(f"'{path.name}' keeps its weights in '{location}', which is not beside it",
                                   f"copy {location} into {path.parent} with the model")
    try:
        ext.load_external_data_for_model(model, str(path.parent))
    except (OSError, ValueError) as err:
        raise ModelFormatError(f"'{path.name}': its external weights could not be read: {_first_line(err)}",
                               "the .data file may be truncated; export the model again") from err
    return locations


def _attribute_tensors(graph: Any) -> list[Any]:
    from onnx import AttributeProto

    return [a.t for n in graph.node for a in n.attribute if a.type == AttributeProto.TENSOR]


def topological_sort(graph: Any) -> int:
    """Order ``graph``'s nodes so each comes after the producers of what it reads (a node with
    branches reads what its branches read from outside); among ready nodes the file's order is
    kept, so a sorted graph is left as it is. Returns how many nodes moved. ModelFormatError on
    a cycle."""
    import heapq

    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waiting = [0] * len(nodes)
    users: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        reads = set(node.input) | set().union(*(outer_names(s) for s in subgraphs(node)))
        deps = {producer[name] for name in reads if name in producer and producer[name] != i}
        waiting[i] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(nodes):
        stuck = [node_label(n) for i, n in enumerate(nodes) if waiting[i]]
        raise ModelFormatError(f"the graph has a cycle through {', '.join(stuck[:5])}"
                               + (f" and {len(stuck) - 5} more node(s)" if len(stuck) > 5 else ""),
                               "export the model again")
    moved = sum(1 for pos, i in enumerate(order) if pos != i)
    if moved:
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)
    return moved


def drop_unused_opsets(model: Any) -> list[str]:
    """Remove ``opset_import`` entries of domains no node uses; returns the dropped domains."""
    used = {n.domain or "" for g in all_graphs(model.graph) for n in g.node}
    used |= {"ai.onnx" if "" in used else ""}
    keep = [e for e in model.opset_import if (e.domain or "") in used or e.domain in ("", "ai.onnx")]
    dropped = [e.domain for e in model.opset_import if e not in keep]
    if dropped:
        del model.opset_import[:]
        model.opset_import.extend(keep)
    return dropped


def validate(model: Any, path: Path) -> None:
    """``onnx.checker``, falling back to onnxruntime's loader where the checker refuses
    (ModelFormatError with the checker's words when onnxruntime refuses too)."""
    import onnx

    try:
        onnx.checker.check_model(model)
        return
    except (onnx.checker.ValidationError, ValueError) as err:
        checker_error = err
    if _onnxruntime_loads(model):
        log.debug("onnx.checker refused %s but onnxruntime loads it: %s", path.name, _first_line(checker_error))
        return
    raise ModelFormatError(f"'{path.name}' is not a valid ONNX model: {_first_line(checker_error)}",
                           "onnxruntime refuses it too; export the model again") from checker_error


def _onnxruntime_loads(model: Any) -> bool:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 — onnxruntime raises its own Fail/InvalidGraph/… types
        return False
    return True
