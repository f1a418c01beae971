"""``edgetune inspect``: what a model contains and whether TVM can take it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import _tvm
from .errors import EdgetuneError
from .importer import detect_format, import_model
from .model import TensorSpec
from .ranges import default_buckets, split
from .util import sha256_file


@dataclass(frozen=True)
class ModelReport:
    """Inputs/outputs, operator histogram, parameter count, FLOPs and unsupported ops."""

    path: Path
    format: str
    sha256: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    ops: dict[str, int]
    unsupported_ops: list[str]
    params: int
    param_bytes: int
    flops: float | None = None
    import_error: str | None = None
    notes: list[str] = field(default_factory=list)
    kernels: list[dict[str, Any]] | None = None  # with --device: how each kernel is scheduled untuned
    profile: str | None = None
    recurrent: list[dict[str, Any]] = field(default_factory=list)  # LSTM/GRU/RNN layers (ONNX)
    control_flow: list[dict[str, Any]] = field(default_factory=list)  # If nodes and what decides them
    bindable: list[str] = field(default_factory=list)  # inputs that only steer control flow or shapes
    bound: dict[str, Any] = field(default_factory=dict)  # --bind values applied
    quantization: dict[str, Any] | None = None  # int8 weights/activations, quantized layers, how they run

    def to_json(self) -> dict[str, Any]:
        """JSON form for ``--json``."""
        data = asdict(self)
        data["path"] = str(self.path)
        return data


def _onnx_facts(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, int], list[str], int, int]:
    from onnx import numpy_helper

    from .importer import onnx_import as ox

    model = ox.load_onnx(path)
    inputs = [{"name": vi.name, "shape": ox.input_dims(vi), "dtype": ox.onnx_dtype(vi)} for vi in ox.real_inputs(model)]
    outputs = [{"name": vi.name, "shape": ox.input_dims(vi), "dtype": ox.onnx_dtype(vi)} for vi in model.graph.output]
    arrays = [numpy_helper.to_array(t) for t in model.graph.initializer]
    params = sum(int(a.size) for a in arrays)
    nbytes = sum(int(a.nbytes) for a in arrays)
    return inputs, outputs, ox.op_histogram(model), ox.unsupported_ops(model), params, nbytes


def _onnx_structure(path: Path, input_shapes: dict[str, tuple[int, ...]],
                    bindings: dict[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Recurrent layers, control flow (with ``--bind`` applied, and the input shapes where they
    can be fixed) and the bindable inputs of the file as it is."""
    from .errors import InputShapeError
    from .importer import onnx_graph as og
    from .importer import onnx_import as ox

    model = ox.load_onnx(path)
    ox.drop_initializer_inputs(model)
    bindable = og.bindable_inputs(model)
    og.bind_inputs(model, bindings)
    try:
        ox._fix_shapes(model, input_shapes)
    except InputShapeError:
        pass  # the import reports it; steps stay unknown here
    return og.recurrent_layers(model), og.control_flow(model), bindable


def _tflite_facts(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, int], list[str], int, int]:
    from .importer import tflite_import as tl

    _, model = tl.load_tflite(path)
    sub = model.Subgraphs(0)

    def spec(index: int) -> dict[str, Any]:
        t = sub.Tensors(index)
        s: TensorSpec = tl.tensor_spec(t, tuple(int(d) for d in t.ShapeAsNumpy()))
        return {"name": s.original_name, "shape": list(s.shape), "dtype": s.dtype, "quantization": s.quantization}

    params = nbytes = 0
    for i in range(sub.TensorsLength()):
        t = sub.Tensors(i)
        size = model.Buffers(t.Buffer()).DataLength() if t.Buffer() < model.BuffersLength() else 0
        if size:
            params += int(max(1, abs(int(t.ShapeAsNumpy().prod())) if t.ShapeLength() else 1))
            nbytes += size
    inputs = [spec(sub.Inputs(i)) for i in range(sub.InputsLength())]
    outputs = [spec(sub.Outputs(i)) for i in range(sub.OutputsLength())]
    # what TVM is given: sparse weights densified, MediaPipe's transposed conv as a builtin, variables as
    # state; with the file's own shapes where they are not fixed yet (the import says what to fix)
    try:
        prepared = tl.prepare_tflite(path).model
    except EdgetuneError:
        prepared = model
    return inputs, outputs, tl.op_histogram(model), tl.unsupported_ops(prepared), params, nbytes


def _imported_facts(path: Path, input_shapes: dict[str, Any] | None, bindings: dict[str, str] | None,
                    device: str | None, layout: str) -> tuple[Any, list[str], Any, Any]:
    """What the import tells of a model: FLOPs, notes, with ``device`` its kernels there, and its
    quantization scheme (plain data: it runs isolated, :mod:`.isolation`)."""
    imported = import_model(path, input_shapes, bindings)
    target, kernels = None, None
    if device:
        from .devices import resolve_device

        target = _tvm.make_target(resolve_device(device).target_spec())
        kernels = kernel_report(imported, device, layout)
    quantization = _tvm.quantization_scheme(imported.mod, target)  # with a device: how it runs there
    return _tvm.estimate_flops(imported.mod), list(imported.notes), kernels, quantization


def inspect_model(path: Path, input_shapes: dict[str, tuple[int, ...]] | None = None,
                  device: str | None = None, layout: str = "auto",
                  bindings: dict[str, str] | None = None) -> ModelReport:
    """Report on a model file. Unsupported ops are reported, not raised; FLOPs need a full
    import. With ``device``, also the kernels an untuned package for it has and the default
    schedule each gets (``naive``: plain loops)."""

    fmt = detect_format(path)
    facts = _onnx_facts(path) if fmt == "onnx" else _tflite_facts(path)
    inputs, outputs, ops, unsupported, params, nbytes = facts
    flops, error, notes, kernels, quantization = None, None, [], None, None
    fixed, rng = split(input_shapes or {})
    if rng is not None and rng.multi:  # several ranges: one symbolic library, the figures at every range's end
        input_shapes = rng.shapes_at(rng.end, fixed)
        notes.append(f"ranges {rng.describe()}: a range package compiles one library with symbolic shapes"
                     + ("" if fmt == "onnx" else " (ONNX models only: a TFLite model takes one range)")
                     + f"; the figures here are for {'x'.join(map(str, rng.end))}")
    elif rng is not None:  # a length range: what a range package compiles, the figures at its longest
        input_shapes = rng.shapes_at(rng.hi, fixed)
        how = ("one library with symbolic shapes (--buckets: fixed lengths " if fmt == "onnx" else "buckets ")
        notes.append(f"length range {rng.lo}..{rng.hi}: a range package compiles {how}"
                     f"{', '.join(map(str, default_buckets(rng.lo, rng.hi)))}{')' if fmt == 'onnx' else ''}; "
                     f"the figures here are for length {rng.hi}")
    recurrent, control, bindable = _onnx_structure(path, input_shapes or {}, bindings or {}) if fmt == "onnx" else ([], [], [])
    if not unsupported:
        from .isolation import isolated

        try:
            flops, more, kernels, quantization = isolated("importing", path.name, _imported_facts, path, input_shapes,
                                                           bindings, device, layout)
            notes += more
        except EdgetuneError as err:  # a CrashError too: the report says what the file holds, and that
            error = f"{err.message} (hint: {err.hint})"
    return ModelReport(path, fmt, sha256_file(path), inputs, outputs, ops, unsupported, params, nbytes, flops, error,
                       notes, kernels, device, recurrent, control, bindable, dict(bindings or {}), quantization)


def kernel_report(model: Any, device: str, layout: str = "auto") -> list[dict[str, Any]]:
    """Per kernel of an untuned build for ``device``: name, calls, FLOPs, share of the model's
    FLOPs, and the default schedule it gets (``naive`` where no rule applies)."""
    from ._tvm import metaschedule as ms
    from .devices import resolve_device

    profile = resolve_device(device)
    target = _tvm.make_target(profile.target_spec())
    key = _tvm.lowering_for(target, layout).key
    rows: list[dict[str, Any]] = []  # (first: the kernels written scheduled — sparse, recurrent)
    for wl in ms.extract_workloads(model.mod, target, key, written=rows):
        found = _tvm.default_schedule(wl.mod, target, wl.name) if target.kind.name == "llvm" else None
        rows.append({"kernel": wl.name, "kind": found.kind if found else "gpu (DLight)", "calls": wl.weight, "flops": wl.flops,
                     **({"why": found.why} if found and found.sch is None else {})})
    total = sum(r["calls"] * r["flops"] for r in rows) or 1.0
    for r in rows:
        r["flops_share"] = r["calls"] * r["flops"] / total
    return sorted(rows, key=lambda r: -r["flops_share"])
