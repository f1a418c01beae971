"""Typed, immutable results of the import stage."""

from __future__ import annotations

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
    # a model imported for a range of lengths (symbolic): the axis whose extent follows the
    # length (``shape`` holds the longest); an input's extent is the length itself
    range_axis: int | None = None
    # every axis that follows a range, and what it follows: the range's variable (``length``;
    # several ranges: ``length0``, ``length1``, …), for an output also an expression of them
    range_axes: tuple[tuple[int, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON form used in manifests."""
        data = asdict(self)
        data["shape"] = list(self.shape)
        data["quantization"] = list(self.quantization) if self.quantization else None
        data["value_range"] = list(self.value_range) if self.value_range else None
        if self.range_axis is None:
            del data["range_axis"]
        if self.range_axes:
            data["range_axes"] = {str(axis): var for axis, var in self.range_axes}
        else:
            del data["range_axes"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TensorSpec":
        """Inverse of :meth:`to_json`."""
        quant, span = data.get("quantization"), data.get("value_range")
        return cls(
            data["name"], data["original_name"], tuple(data["shape"]), data["dtype"],
            (float(quant[0]), int(quant[1])) if quant else None,
            (int(span[0]), int(span[1])) if span else None,
            data.get("range_axis"),
            tuple((int(axis), str(var)) for axis, var in (data.get("range_axes") or {}).items()),
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
    # imported for ranges of lengths (symbolic shapes): each range's variable and its (min, max),
    # {"length": (1, 256)}; several ranges, several
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False)

    @property
    def length_range(self) -> tuple[int, int] | None:
        """(min, max) of the length, for a model imported for one range."""
        return next(iter(self.ranges.values())) if len(self.ranges) == 1 else None


def save_state(path: Path, state: tuple[StateSpec, ...]) -> None:
    """Initial state values, keyed by state input name."""
    import numpy as np

    np.savez(path, **{s.input: s.initial for s in state})
