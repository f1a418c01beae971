"""TFLite → Relax (float and int8 models)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .. import _tvm
from ..errors import InputShapeError, ModelFormatError, UnsupportedOpsError
from ..model import ImportedModel, TensorSpec
from ..util import sha256_file

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
            f"'{path.name}' is a damaged TFLite file ({type(err).__name__})",
            "the file may be truncated; export it again",
        ) from err
    return data, model


def prepare_tflite(path: Path) -> tuple[Any, tuple[str, ...], bytes]:
    """``load_tflite``, then the rewrites TVM needs (sparse weights densified, MediaPipe's
    transposed convolution as a builtin: :mod:`.tflite_rewrite`): the model TVM converts, a
    note per rewrite, and the bytes LiteRT computes the reference from — the original file,
    unless it holds a custom op LiteRT cannot run (then the rewritten one; the tests check that
    rewrite against MediaPipe's own loop)."""
    import tflite

    from . import tflite_rewrite

    data, model = load_tflite(path)
    if not tflite_rewrite.needs_rewrite(model):
        return model, (), data
    new, notes = tflite_rewrite.rewrite(data)
    custom = any(tflite_rewrite.MEDIAPIPE_DECONV in n for n in notes)
    return tflite.Model.GetRootAsModel(new, 0), notes, new if custom else data


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
    if not missing:
        missing.update(_tvm.tflite_unsupported(model))
    return sorted(missing)


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


def _input_shapes(sub: Any, overrides: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    names = [sub.Tensors(sub.Inputs(i)).Name().decode() for i in range(sub.InputsLength())]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise InputShapeError(
            f"--input-shape names unknown input(s) {', '.join(unknown)}",
            f"the model's inputs are: {', '.join(names)}",
        )
    shapes = {}
    for i, name in enumerate(names):
        tensor = sub.Tensors(sub.Inputs(i))
        shape = tuple(int(d) for d in tensor.ShapeAsNumpy())
        if name in overrides:
            if len(overrides[name]) != len(shape):
                raise InputShapeError(
                    f"--input-shape for '{name}' has {len(overrides[name])} dimensions, the model's input has {len(shape)}"
                )
            shape = overrides[name]
        shapes[name] = shape
    return shapes


def import_tflite(path: Path, overrides: dict[str, tuple[int, ...]]) -> ImportedModel:
    """Convert a .tflite file; UnsupportedOpsError lists every operator TVM lacks at once."""
    model, rewrites, data = prepare_tflite(path)
    if model.SubgraphsLength() < 1:
        raise ModelFormatError(f"'{path.name}' has no subgraph")
    missing = unsupported_ops(model)
    if missing:
        raise UnsupportedOpsError(missing, "TFLite")
    sub = model.Subgraphs(0)
    shapes = _input_shapes(sub, overrides)
    inputs = tuple(
        tensor_spec(sub.Tensors(sub.Inputs(i)), shape) for i, shape in enumerate(shapes.values())
    )
    mod = _tvm.tflite_to_relax(model, shapes, {t.original_name: t.dtype for t in inputs})
    mod = _tvm.rename_inputs(mod, {t.original_name: t.name for t in inputs})
    _, sig_out = _tvm.relax_signature(mod)
    outputs = tuple(
        tensor_spec(sub.Tensors(sub.Outputs(i)), shape)
        for i, (shape, _dtype) in zip(range(sub.OutputsLength()), sig_out)
    )
    notes = rewrites + (("input shapes overridden",) if overrides else ()) + tuple(_tvm.quantization_notes(mod))
    return ImportedModel(path, "tflite", sha256_file(path), inputs, outputs, mod, data, notes)
