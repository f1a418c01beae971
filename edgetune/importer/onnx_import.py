"""ONNX → Relax, with the clean-ups real exporter output needs.

Steps: drop initializers listed as graph inputs; make ``--bind`` inputs constants; fix dynamic
input dims from ``--input-shape``; rewrite batch-major recurrent layers to time-major; fold
shape-computation subgraphs (Shape→Gather→Concat→Reshape) and ``If`` nodes whose condition is
then constant with onnxruntime's basic graph optimisation; check the recurrent layers
(:mod:`.onnx_graph`); spell QOperator int8 ops as QDQ (:mod:`.onnx_qlinear`, after the reference
copy is taken); sanitize tensor names TVM cannot carry (``gpu_0/data_0``); then convert.
"""

from __future__ import annotations

import logging
import re
import tempfile
from pathlib import Path
from typing import Any

from .. import _tvm
from ..errors import InputShapeError, ModelError, ModelFormatError, UnsupportedOpsError
from ..model import ImportedModel, TensorSpec
from ..onnx_proto import all_graphs, input_dims, op_key, opset, real_inputs, subgraphs
from ..onnx_proto import value_dtype as onnx_dtype
from ..util import range_variables, sha256_file
from . import onnx_contrib, onnx_lstm_int8, onnx_signal
from .onnx_graph import bind_inputs, check_recurrent, time_major, value_ranges
from .onnx_ifs import deciding_inputs, resolve_ifs
from .onnx_loops import unroll_loops
from .onnx_normalize import read
from .onnx_qlinear import expand_qlinear_ops, qlinear_hint
from .onnx_symbolic import drop_shape_casts, explicit_same_pads

log = logging.getLogger(__name__)

# Ops whose presence means the graph computes shapes at run time: fold before TVM sees it.
_SHAPE_OPS = {"Shape", "Size"}


def load_onnx(path: Path) -> Any:
    """Parse an ONNX file as onnxruntime would take it (:func:`.onnx_normalize.read`: external
    weights read, nodes sorted, unused opsets dropped); ModelFormatError for anything unreadable."""
    return read(path)[0]


def drop_initializer_inputs(model: Any) -> None:
    """Keep only the real inputs among the graph inputs (see :func:`real_inputs`), in place."""
    inputs = real_inputs(model)
    del model.graph.input[:]
    model.graph.input.extend(inputs)


def op_histogram(model: Any) -> dict[str, int]:
    """Count of each op type, ``domain::Op`` for non-default domains; nodes inside ``If``
    branches count too."""
    counts: dict[str, int] = {}
    for graph in all_graphs(model.graph):
        for node in graph.node:
            counts[op_key(node)] = counts.get(op_key(node), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _with_qlinear_expanded(model: Any) -> Any:
    """``model``, or a copy with its QLinear ops expanded when it has any (the import expands them
    only after the reference copy is taken)."""
    if not any(n.op_type.startswith("QLinear") or n.op_type == "QGemm" for n in model.graph.node):
        return model
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    expand_qlinear_ops(probe)
    return probe


def unsupported_ops(model: Any) -> list[str]:
    """Op types neither TVM's ONNX frontend nor edgetune's rewrites convert (``domain::Op`` for
    other domains; QLinear ops edgetune expands count as what they expand to)."""
    supported = _tvm.onnx_supported_ops()
    probe = _with_qlinear_expanded(model)
    version = opset(probe)
    missing = set()
    for graph in all_graphs(probe.graph):
        for node in graph.node:
            if op_key(node) not in supported and node.op_type != "Loop" and not any(t.convertible(node, version) for t in _REWRITES):
                missing.add(op_key(node))
    return sorted(missing)


def _fix_shapes(model: Any, overrides: dict[str, tuple[int, ...]]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """Apply ``overrides`` to the graph inputs; returns the static shapes and notes."""
    inputs = real_inputs(model)
    names = [i.name for i in inputs]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise InputShapeError(
            f"--input-shape names unknown input(s) {', '.join(unknown)}",
            f"the model's inputs are: {', '.join(names)}",
        )
    shapes, notes = {}, []
    known = _named_dims(inputs, overrides)
    for vi in inputs:
        dims = [known.get(d, d) if isinstance(d, str) else d for d in input_dims(vi)]
        if vi.name in overrides:
            shape = overrides[vi.name]
            _check_override(vi.name, input_dims(vi), shape)
        elif all(isinstance(d, (int, tuple)) for d in dims):  # (a named dimension another input ranges)
            shape = tuple(dims)  # type: ignore[arg-type]
        elif all(isinstance(d, int) or _BATCH.match(d) for d in dims) or all(isinstance(d, int) for d in dims[1:]):
            batch = [d for i, d in enumerate(dims) if isinstance(d, str)]
            shape = tuple(d if isinstance(d, int) else 1 for d in dims)
            notes.append(f"input '{vi.name}': dynamic batch dimension '{batch[0]}' set to 1")
            known.update({d: 1 for d in batch})
        else:
            example = ",".join(str(d) if isinstance(d, int) else "N" for d in dims)
            raise InputShapeError(
                f"input '{vi.name}' has dynamic dimensions {input_dims(vi)}",
                f"fix them with --input-shape {vi.name}={example.replace('N', '1')} (use your real sizes)",
            )
        shapes[vi.name] = shape
    axes, _spans = range_variables(shapes)
    for vi in inputs:
        _set_dims(vi, shapes[vi.name], axes.get(vi.name, {}))
    return shapes, notes


# Symbolic dimension names that mean "batch": a batch of one unless --input-shape says otherwise.
_BATCH = re.compile(r"^(batch|batch_size|batchsize|bs|n|b|num_batches)$", re.IGNORECASE)


def _named_dims(inputs: list[Any], overrides: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Symbolic dimension name → size, from the inputs ``--input-shape`` fixes: a name means the
    same size wherever it appears (``batch`` of an audio input and of its state)."""
    known: dict[str, int] = {}
    for vi in inputs:
        shape = overrides.get(vi.name)
        if shape is None:
            continue
        for dim, size in zip(input_dims(vi), shape):
            if isinstance(dim, str) and dim != "?":
                known.setdefault(dim, size if isinstance(size, tuple) else int(size))
    return known


def _check_override(name: str, dims: list[int | str], shape: tuple[int, ...]) -> None:
    if dims and len(dims) != len(shape):
        raise InputShapeError(
            f"--input-shape for '{name}' has {len(shape)} dimensions, the model's input has {len(dims)} {dims}"
        )
    clash = [(d, s) for d, s in zip(dims, shape) if isinstance(d, int) and d != s]
    if clash:
        raise InputShapeError(
            f"--input-shape {name}={','.join(map(str, shape))} contradicts the model's fixed dims {dims}"
        )


def _set_dims(value_info: Any, shape: tuple[Any, ...], variables: dict[int, str]) -> None:
    """An input's dimensions as the model file's: a ranged one as its variable (the symbolic
    dimension every input with that range shares: :func:`~edgetune.util.range_variables`)."""
    tensor_shape = value_info.type.tensor_type.shape
    del tensor_shape.dim[:]
    for i, d in enumerate(shape):
        if isinstance(d, tuple):
            tensor_shape.dim.add().dim_param = variables[i]
        else:
            tensor_shape.dim.add().dim_value = d


def fold_shape_subgraphs(model: Any, symbolic: bool = False) -> Any:
    """Constant-fold run-time shape computations with onnxruntime (basic level) and reload.
    ``symbolic`` (a range of lengths): without onnxruntime's transpose optimizer, which turns
    ``Shape(Transpose(x))`` into a gather of ``Shape(x)`` by the permutation — a tensor TVM's
    frontend cannot follow as a shape, so every shape after it was lost (a speech encoder's
    positions sliced to its frame count)."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="edgetune-fold-") as tmp:
        folded = Path(tmp) / "folded.onnx"
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = str(folded)
        opts.log_severity_level = 3
        try:
            ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"],
                                 **({"disabled_optimizers": ["TransposeOptimizer"]} if symbolic else {}))
        except Exception as err:  # onnxruntime raises its own Fail/InvalidGraph types
            deciding = deciding_inputs(model)
            if deciding and "If" in str(err):
                raise InputShapeError(
                    f"at these input shapes not every branch of the model's If can be built ({str(err).splitlines()[0][:200]}); "
                    f"input(s) {', '.join(deciding)} decide which branch runs",
                    f"bind them to the value your input shapes are for (e.g. --bind {deciding[0]}=VALUE): only the "
                    "branch that value takes is built") from err
            raise InputShapeError(
                f"onnxruntime cannot run the model with these input shapes: {str(err).splitlines()[0][:300]}",
            ) from err
        return onnx.load(str(folded))


def sanitize_names(model: Any) -> dict[str, str]:
    """Rename every tensor to a C identifier in place; returns original → new."""
    mapping: dict[str, str] = {}
    taken: set[str] = set()

    def fix(name: str) -> str:
        if not name:
            return name
        if name not in mapping:
            clean = re.sub(r"\W", "_", name)
            if not clean or clean[0].isdigit():
                clean = f"t_{clean}"
            while clean in taken:
                clean += "_"
            taken.add(clean)
            mapping[name] = clean
        return mapping[name]

    def rename(graph: Any) -> None:  # branches and loop bodies read outer names too
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            vi.name = fix(vi.name)
        for init in graph.initializer:
            init.name = fix(init.name)
        for node in graph.node:
            node.input[:] = [fix(n) for n in node.input]
            node.output[:] = [fix(n) for n in node.output]
            for sub in subgraphs(node):
                rename(sub)

    rename(model.graph)
    return mapping


def import_onnx(path: Path, overrides: dict[str, tuple[int, ...]],
                bindings: dict[str, str] | None = None) -> ImportedModel:
    """Convert an ONNX file; see the module docstring for the steps."""
    model, notes = read(path)
    drop_initializer_inputs(model)
    bound = bind_inputs(model, bindings) if bindings else {}
    shapes, shape_notes = _fix_shapes(model, overrides)
    notes += shape_notes
    missing = unsupported_ops(model)
    if missing:
        raise UnsupportedOpsError(missing, "ONNX", qlinear_hint(model, missing))
    if time_major(model):
        notes.append("batch-major (layout=1) recurrent layers rewritten to time-major")
    decided = resolve_ifs(model)
    if decided:
        notes.append(f"{decided} If node(s) decided by the fixed shapes and bound inputs: their branch inlined")
    ops = {n.op_type for n in model.graph.node}
    axes, spans = range_variables(shapes)
    span = spans or None
    if ops & (_SHAPE_OPS | {"If"}) or shape_notes or overrides or bound:
        model = fold_shape_subgraphs(model, symbolic=span is not None)
        notes.append("shape subgraphs and constant If conditions folded with onnxruntime (basic graph optimisation)")
    check_recurrent(model, symbolic=span is not None)
    if bound:
        notes.append("bound at package time: " + ", ".join(f"{k}={v}" for k, v in bound.items()))
    reference = model.SerializeToString()  # onnxruntime runs its own ops and the QLinear ops themselves
    ranges = value_ranges(model)
    model = _for_tvm(model, notes, symbolic=span is not None)
    originals = {vi.name: onnx_dtype(vi) for vi in model.graph.input}
    out_names = [vi.name for vi in model.graph.output]
    mapping = sanitize_names(model)
    try:
        mod = _tvm.onnx_to_relax(
            model,
            {mapping[k]: tuple(axes[k][i] if isinstance(d, tuple) else d for i, d in enumerate(v)) for k, v in shapes.items()},
            {mapping[k]: v for k, v in originals.items()},
            span,
        )
    except ModelError as err:
        if len(spans) < 2 or type(err) is not ModelError:
            raise
        # (several ranges: perhaps one length given two ranges, which the model cannot tell apart)
        raise ModelError(err.message, f"the ranges are {len(spans)} independent variables "
                        f"({', '.join(f'{v} {lo}..{hi}' for v, (lo, hi) in spans.items())}): where the model needs "
                        "two axes equal (input_ids' and attention_mask's length), give them the same range") from err
    return _imported(path, mod, mapping, list(shapes), out_names, reference, notes, bound, ranges, span)


_REWRITES = (onnx_contrib.TABLE, onnx_signal.TABLE, onnx_lstm_int8.TABLE)


def _for_tvm(model: Any, notes: list[str], symbolic: bool = False) -> Any:
    """The rewrites only TVM needs, after the reference copy is taken: loops unrolled
    (:mod:`.onnx_loops`), onnxruntime's own ops as standard ops (:mod:`.onnx_contrib`), DFT/STFT
    as products with constant matrices (:mod:`.onnx_signal`), QOperator int8 ops as QDQ
    (:mod:`.onnx_qlinear`)."""
    loops, kept = unroll_loops(model)
    if loops:
        notes.append("Loop unrolled: " + ", ".join(f"'{name}' × {count}" for name, count in loops.items()))
    for name, why in kept.items():
        notes.append(f"Loop '{name}' kept as a real loop ({why}): a recursive function beside main")
    contrib = {**onnx_contrib.standard_ops(model), **onnx_lstm_int8.standard_ops(model)}
    for kind, count in sorted(contrib.items()):
        notes.append(f"onnxruntime ops as standard ops: {kind} ×{count} → {onnx_contrib.BECOMES[kind.split('::')[-1]]}")
    integer = {op: sum(n.op_type == op for n in model.graph.node) for op in ("MatMulInteger", "ConvInteger")}
    if any(integer.values()):
        notes.append("dynamic quantization: " + ", ".join(f"{n} {op}" for op, n in integer.items() if n)
                     + " as exact int32 products; DynamicQuantizeLinear as onnxruntime computes it")
    signal = onnx_signal.standard_ops(model)
    if signal:
        notes.append("Fourier transforms as products with constant cos/sin matrices: "
                     + ", ".join(f"{n} {k}" for k, n in sorted(signal.items())))
    if (loops or contrib or signal) and any(n.op_type in _SHAPE_OPS for n in model.graph.node):
        model = fold_shape_subgraphs(model, symbolic)
    if symbolic and (casts := drop_shape_casts(model)):
        notes.append(f"{casts} integer cast(s) of shape computations dropped (the shapes stay symbolic in int64)")
    if symbolic and (same := explicit_same_pads(model)):
        notes.append(f"{same} stride-1 auto_pad SAME node(s) with explicit pads (the same at every size)")
    expanded = expand_qlinear_ops(model)
    if expanded:
        kinds = ", ".join(f"{expanded.count(k)} {k}" for k in sorted(set(expanded)))
        notes.append(f"QOperator int8 ops spelled as DequantizeLinear → op → QuantizeLinear: {kinds}")
    return model


def _imported(path, mod, mapping, in_names, out_names, reference, notes, bound, ranges, spans=None) -> ImportedModel:
    sig_in, sig_out = _tvm.relax_signature(mod)
    if len(sig_in) != len(in_names):
        raise ModelFormatError(f"'{path.name}': TVM's module expects {len(sig_in)} inputs, the graph has {len(in_names)}")
    in_axes, out_axes = _tvm.symbolic_axes(mod) if spans else ([{}] * len(sig_in), [{}] * len(sig_out))
    if len(spans or {}) == 1 and any(len(a) > 1 for a in [*in_axes, *out_axes]):
        raise InputShapeError("a tensor of the model has more than one axis that follows the length",
                              "package the lengths you need one at a time (--input-shape NAME=...,LENGTH)")
    # by position: TVM's parameters follow the graph's inputs, under names TVM may have changed
    inputs = tuple(TensorSpec(name, n, shape, dtype, value_range=ranges.get(n), **_range_fields(axes))
                   for n, (name, shape, dtype), axes in zip(in_names, sig_in, in_axes))
    outputs = tuple(
        TensorSpec(mapping.get(n, n), n, shape, dtype, **_range_fields(axes))
        for n, (shape, dtype), axes in zip(out_names, sig_out, out_axes)
    )
    notes = [*notes, *_tvm.quantization_notes(mod)]
    return ImportedModel(path, "onnx", sha256_file(path), inputs, outputs, mod, reference, tuple(notes), bound,
                         ranges=dict(spans or {}))


def _range_fields(axes: dict[int, str]) -> dict[str, Any]:
    """A tensor's ``range_axis`` (its one axis that follows a range) and ``range_axes`` (each
    such axis and what it follows: a variable, or an expression of them such as ``length * 2``)."""
    return {"range_axis": next(iter(axes)) if len(axes) == 1 else None, "range_axes": tuple(axes.items())}
