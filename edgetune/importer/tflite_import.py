"""TFLite → Relax (float and int8 models)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _tvm
from .._tvm.constants import QUANTIZED_DATA_MOVEMENT
from ..errors import InputShapeError, ModelFormatError, UnsupportedOpsError
from ..model import ImportedModel, StateSpec, TensorSpec
from ..util import sha256_file
from .tflite_state import StateVariable

# tflite.TensorType enum → numpy dtype name
_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16", 9: "int8", 10: "float64"}


def load_tflite(path: Path) -> tuple[bytes, Any]:
    """Read and parse a .tflite flatbuffer; ModelFormatError if it is not one."""
    import tflite

    data = path.read_bytes()
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelFormatError(
            f"'{path.name}' is not a TFLite flatbuffer (no TFL3 identifier)",
            "the file may be truncated, or be another format with a .tflite name",
        )
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        subgraph = model.Subgraphs(0)
        for i in range(subgraph.TensorsLength()):
            subgraph.Tensors(i).ShapeAsNumpy()
        for i in range(model.OperatorCodesLength()):
            model.OperatorCodes(i).BuiltinCode()
    except Exception as err:  # flatbuffers raises IndexError/struct.error/TypeError on damage
        raise ModelFormatError(
            f"'{path.name}' is a damaged TFLite file ({type(err).__name__} reading its tables)",
            "the file may be truncated; export it again",
        ) from err
    _verify_flatbuffer(path, data)
    return data, model


def _verify_flatbuffer(path: Path, data: bytes) -> None:
    """The flatbuffer verifier LiteRT runs before it reads a model (every offset and vector
    inside the buffer): a damaged file whose fields the reads above happened to survive is
    refused here rather than inside a later stage. Other refusals (custom operators LiteRT has
    no kernel for) are not this check's business."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    try:
        Interpreter(model_content=data, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    except ValueError as err:
        if "flatbuffer" in str(err).lower():
            raise ModelFormatError(f"'{path.name}' is a damaged TFLite file (its flatbuffer does not verify)",
                                   "the file may be truncated or altered; export it again") from err
    except RuntimeError:
        pass


@dataclass(frozen=True)
class Prepared:
    """A TFLite file made ready for TVM: ``data``/``model`` what TVM converts, ``reference``
    the bytes LiteRT computes the reference from, ``shapes`` the input shapes, ``state`` the
    variables turned into state inputs/outputs, a note per rewrite."""

    data: bytes
    model: Any
    reference: bytes
    shapes: dict[str, tuple[int, ...]]
    state: tuple[StateVariable, ...]
    notes: tuple[str, ...]


def prepare_tflite(path: Path, overrides: dict[str, tuple[int, ...]] | None = None) -> Prepared:
    """``load_tflite``, then the rewrites TVM needs, in order: sparse weights densified and
    MediaPipe's transposed convolution as a builtin (:mod:`.tflite_rewrite`); resource variables
    as state inputs and outputs (:mod:`.tflite_state`); shapes fixed and shape computations
    folded (:mod:`.tflite_shapes`). LiteRT computes the reference from the original file — or
    from the rewritten one where the original has a custom op LiteRT cannot run, or variables
    (whose state the original keeps to itself)."""
    import tflite

    from . import tflite_rewrite, tflite_shapes, tflite_state

    data, model = load_tflite(path)
    reference, notes, state = data, [], ()
    if tflite_rewrite.needs_rewrite(model):
        data, rewrites = tflite_rewrite.rewrite(data)
        notes += rewrites
        if any(tflite_rewrite.MEDIAPIPE_DECONV in n for n in rewrites):
            reference = data
        model = tflite.Model.GetRootAsModel(data, 0)
    if tflite_state.has_variables(model):
        data, state = tflite_state.variables_as_state(data)
        reference = data
        model = tflite.Model.GetRootAsModel(data, 0)
        notes.append("resource variables as state inputs/outputs (feed each output back as its input on the next "
                      "call): " + ", ".join(f"{v.input} → {v.output}" for v in state))
    shapes, shape_notes = tflite_shapes.choose_shapes(model, dict(overrides or {}))
    notes += shape_notes
    if tflite_shapes.needs_freezing(model, shapes):
        data, frozen = tflite_shapes.freeze(data, shapes)
        notes += frozen
        model = tflite.Model.GetRootAsModel(data, 0)
    return Prepared(data, model, reference, shapes, state, tuple(notes))


def op_name(model: Any, op: Any) -> str:
    """Builtin operator name of ``op`` (``CUSTOM:name`` for custom ops)."""
    from tflite.BuiltinOperator import BuiltinOperator

    code = model.OperatorCodes(op.OpcodeIndex())
    value = max(code.DeprecatedBuiltinCode(), code.BuiltinCode())
    names = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
    name = names.get(value, f"BUILTIN_{value}")
    if name == "CUSTOM":
        return f"CUSTOM:{(code.CustomCode() or b'?').decode(errors='replace')}"
    return name


def op_histogram(model: Any) -> dict[str, int]:
    """Count of each operator in subgraph 0."""
    sub = model.Subgraphs(0)
    counts: dict[str, int] = {}
    for i in range(sub.OperatorsLength()):
        name = op_name(model, sub.Operators(i))
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def unsupported_ops(model: Any) -> list[str]:
    """Operators TVM rejects, including sparse weights (which its DENSIFY path mishandles)."""
    supported = _tvm.tflite_supported_ops()
    missing = {op for op in op_histogram(model) if op not in supported}
    sub = model.Subgraphs(0)
    if any(sub.Tensors(i).Sparsity() is not None for i in range(sub.TensorsLength())):
        missing.add("DENSIFY (sparse weights)")
    missing |= _requantizing_moves(model)
    if not missing:
        missing.update(_tvm.tflite_unsupported(model))
    return sorted(missing)


def _requantizing_moves(model: Any) -> set[str]:
    """Quantized data-movement operators whose output is on another scale or zero point than
    their input (they would have to requantize; the converter only moves values)."""
    sub = model.Subgraphs(0)
    out = set()
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        name = op_name(model, op)
        if name not in QUANTIZED_DATA_MOVEMENT or not op.InputsLength() or not op.OutputsLength():
            continue
        params = [_quantization(sub.Tensors(int(t))) for t in (op.Inputs(0), *op.OutputsAsNumpy())]
        if params[0] is not None and any(p != params[0] for p in params[1:]):
            out.add(f"{name} (int8, requantizing)")
    return out


def _quantization(tensor: Any) -> tuple[tuple[float, ...], tuple[int, ...]] | None:
    q = tensor.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    return tuple(float(v) for v in q.ScaleAsNumpy()), tuple(int(v) for v in q.ZeroPointAsNumpy())


def tensor_spec(tensor: Any, shape: tuple[int, ...]) -> TensorSpec:
    """TensorSpec of a TFLite tensor with its per-tensor quantization, if any."""
    name = tensor.Name().decode()
    dtype = _DTYPES.get(tensor.Type())
    if dtype is None:
        raise ModelFormatError(f"tensor '{name}' has unsupported TFLite type {tensor.Type()}")
    quant = None
    q = tensor.Quantization()
    if q is not None and q.ScaleLength() == 1:
        quant = (float(q.Scale(0)), int(q.ZeroPoint(0)))
    return TensorSpec(sanitize(name), name, shape, dtype, quant)


def sanitize(name: str) -> str:
    """A C identifier for a tensor name (TVM's CUDA codegen breaks on ``/`` and ``:``)."""
    clean = re.sub(r"\W", "_", name)
    return clean if clean and not clean[0].isdigit() else f"t_{clean}"


def import_tflite(path: Path, overrides: dict[str, tuple[int, ...]]) -> ImportedModel:
    """Convert a .tflite file; UnsupportedOpsError lists every operator TVM lacks at once."""
    _check_input_names(path, overrides)
    try:
        prepared = prepare_tflite(path, overrides)
    except InputShapeError as err:  # LiteRT ran the model to learn its shapes: a custom op it
        custom = _foreign_custom_ops(path)  # lacks is the model's problem, not its input shapes
        if custom:
            raise _unsupported(custom) from err
        raise
    model = prepared.model
    if model.SubgraphsLength() < 1:
        raise ModelFormatError(f"'{path.name}' has no subgraph")
    missing = unsupported_ops(model)
    if missing:
        raise _unsupported(missing)
    sub = model.Subgraphs(0)
    shapes = prepared.shapes
    inputs = tuple(tensor_spec(sub.Tensors(sub.Inputs(i)), shape) for i, shape in enumerate(shapes.values()))
    mod = _tvm.tflite_to_relax(model, shapes, {t.original_name: t.dtype for t in inputs})
    mod = _tvm.rename_inputs(mod, {t.original_name: t.name for t in inputs})
    _, sig_out = _tvm.relax_signature(mod)
    outputs = tuple(
        tensor_spec(sub.Tensors(sub.Outputs(i)), shape)
        for i, (shape, _dtype) in zip(range(sub.OutputsLength()), sig_out)
    )
    notes = prepared.notes + (("input shapes overridden",) if overrides else ()) + tuple(_tvm.quantization_notes(mod))
    state = tuple(StateSpec(v.input, v.output, v.initial) for v in prepared.state)
    return ImportedModel(path, "tflite", sha256_file(path), inputs, outputs, mod, prepared.reference, notes, state=state)


def _unsupported(ops: list[str]) -> UnsupportedOpsError:
    if any(op.startswith("CUSTOM:") for op in ops):
        return UnsupportedOpsError(ops, "TFLite", "CUSTOM ops belong to the framework that made the model "
                                   "(MediaPipe's op resolver, …): neither TVM nor LiteRT alone runs them; export the "
                                   "model without them, or run `edgetune inspect MODEL` for the full operator table")
    return UnsupportedOpsError(ops, "TFLite")


def _foreign_custom_ops(path: Path) -> list[str]:
    """Custom operators of ``path`` that no rewrite of edgetune's replaces."""
    from .tflite_rewrite import MEDIAPIPE_DECONV

    _, model = load_tflite(path)
    return [op for op in op_histogram(model) if op.startswith("CUSTOM:") and op != f"CUSTOM:{MEDIAPIPE_DECONV}"]


def _check_input_names(path: Path, overrides: dict[str, tuple[int, ...]]) -> None:
    _, model = load_tflite(path)
    sub = model.Subgraphs(0)
    names = [sub.Tensors(sub.Inputs(i)).Name().decode() for i in range(sub.InputsLength())]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise InputShapeError(
            f"--input-shape names unknown input(s) {', '.join(unknown)}",
            f"the model's inputs are: {', '.join(names)}",
        )
