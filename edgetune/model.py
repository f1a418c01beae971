"""Typed, immutable results of the import stage."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output.

    ``name`` is what TVM sees (sanitized); ``original_name`` is the model file's name, which
    users and the runtime loader accept. ``quantization`` is (scale, zero_point) for
    per-tensor quantized TFLite tensors. ``value_range`` is [low, high) of an integer input whose
    values index a table (token ids into an embedding) or are a 0/1 mask: what the reference
    check and benchmarks feed it.
    """

    name: str
    original_name: str
    shape: tuple[int, ...]
    dtype: str
    quantization: tuple[float, int] | None = None
    value_range: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form used in manifests."""
        data = asdict(self)
        data["shape"] = list(self.shape)
        data["quantization"] = list(self.quantization) if self.quantization else None
        data["value_range"] = list(self.value_range) if self.value_range else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TensorSpec":
        """Inverse of :meth:`to_json`."""
        quant, span = data.get("quantization"), data.get("value_range")
        return cls(
            data["name"], data["original_name"], tuple(data["shape"]), data["dtype"],
            (float(quant[0]), int(quant[1])) if quant else None,
            (int(span[0]), int(span[1])) if span else None,
        )


@dataclass(frozen=True)
class StateSpec:
    """State a model carries from one call to the next as an input and an output (a TFLite
    resource variable): feed ``output``'s value back as ``input`` on the next call, ``initial``
    on the first."""

    input: str  # original names
    output: str
    initial: Any = field(compare=False)  # numpy array

    def to_json(self) -> dict[str, Any]:
        """JSON form used in manifests (the initial value is stored beside it, ``state.npz``)."""
        return {"input": self.input, "output": self.output, "shape": list(self.initial.shape),
                "dtype": str(self.initial.dtype)}


@dataclass(frozen=True)
class ImportedModel:
    """A model converted to Relax: the IRModule (weights embedded as constants) and its I/O.

    ``source_bytes`` is the model as the reference runtime should run it (the original file,
    or for ONNX the shape-fixed version), so the reference check needs nothing else.
    ``bound`` holds the inputs made constants with ``--bind`` (no longer inputs of the model);
    ``state`` the input/output pairs that carry state between calls.
    """

    source: Path
    format: str  # "onnx" | "tflite"
    sha256: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    mod: Any = field(repr=False, compare=False)
    source_bytes: bytes = field(repr=False, compare=False, default=b"")
    notes: tuple[str, ...] = ()
    bound: dict[str, Any] = field(default_factory=dict, compare=False)  # --bind: input → value
    state: tuple[StateSpec, ...] = field(default=(), compare=False)

    def meta(self) -> dict[str, Any]:
        """Everything but the IRModule, as JSON data."""
        return {
            "source": str(self.source),
            "format": self.format,
            "sha256": self.sha256,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "notes": list(self.notes),
            "bound": dict(self.bound),
            "state": [s.to_json() for s in self.state],
        }

    def save(self, directory: Path) -> Path:
        """Write ``imported.json``, ``module.json`` and the reference model into ``directory``."""
        from . import _tvm

        directory.mkdir(parents=True, exist_ok=True)
        _tvm.save_ir(self.mod, directory / "module.json")
        (directory / f"reference.{self.format}").write_bytes(self.source_bytes)
        (directory / "imported.json").write_text(json.dumps(self.meta(), indent=2))
        if self.state:
            save_state(directory / STATE_FILE, self.state)
        return directory

    @classmethod
    def load(cls, directory: Path) -> "ImportedModel":
        """Read what :meth:`save` wrote."""
        from . import _tvm

        meta = json.loads((directory / "imported.json").read_text())
        return cls(
            Path(meta["source"]), meta["format"], meta["sha256"],
            tuple(TensorSpec.from_json(t) for t in meta["inputs"]),
            tuple(TensorSpec.from_json(t) for t in meta["outputs"]),
            _tvm.load_ir(directory / "module.json"),
            (directory / f"reference.{meta['format']}").read_bytes(),
            tuple(meta.get("notes", ())),
            dict(meta.get("bound", {})),
            load_state(directory / STATE_FILE, meta.get("state", [])),
        )


STATE_FILE = "state.npz"


def save_state(path: Path, state: tuple[StateSpec, ...]) -> None:
    """Initial state values, keyed by state input name."""
    import numpy as np

    np.savez(path, **{s.input: s.initial for s in state})


def load_state(path: Path, specs: list[dict[str, Any]]) -> tuple[StateSpec, ...]:
    """What :func:`save_state` wrote, with the pairs from ``specs`` (manifest form)."""
    if not specs:
        return ()
    import numpy as np

    with np.load(path) as arrays:
        return tuple(StateSpec(s["input"], s["output"], np.array(arrays[s["input"]])) for s in specs)
