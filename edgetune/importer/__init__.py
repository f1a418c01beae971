"""Model import: ONNX and TFLite files → :class:`~edgetune.model.ImportedModel`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InputShapeError, ModelError, ModelFormatError
from ..model import ImportedModel

log = logging.getLogger(__name__)

FORMATS = {".onnx": "onnx", ".tflite": "tflite"}


def detect_format(path: Path) -> str:
    """``onnx`` or ``tflite`` from the file extension; ModelFormatError otherwise."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ModelFormatError(
            f"cannot tell the model format of '{path.name}' (extension '{path.suffix}')",
            "edgetune reads .onnx and .tflite files; rename the file if it is one of those",
        )
    if not path.is_file():
        raise ModelFormatError(f"model file not found: {path}", "check the path")
    return fmt


def import_model(path: Path | str, input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                 bindings: Mapping[str, str] | None = None) -> ImportedModel:
    """Read a model file and convert it to Relax.

    ``input_shapes`` fixes dynamic dimensions by input name (original name); ``bindings``
    (ONNX) makes inputs constants (``--bind NAME=VALUE``: the value as text). Returns an
    ImportedModel; raises ModelFormatError, UnsupportedOpsError, InputShapeError or ModelError.
    """
    path = Path(path)
    fmt = detect_format(path)
    if fmt == "onnx":
        from .onnx_import import import_onnx

        return import_onnx(path, dict(input_shapes or {}), dict(bindings or {}))
    if bindings:
        raise ModelError("--bind is for ONNX models", "TFLite models fix their inputs when they are converted")
    from .tflite_import import import_tflite

    return import_tflite(path, dict(input_shapes or {}))


def input_names(path: Path) -> list[str]:
    """The model file's input names (ONNX: graph inputs that are not initializers)."""
    if detect_format(path) == "onnx":
        from .onnx_import import load_onnx, real_inputs

        return [vi.name for vi in real_inputs(load_onnx(path))]
    from .tflite_import import load_tflite

    _buf, model = load_tflite(path)
    sub = model.Subgraphs(0)
    return [sub.Tensors(sub.Inputs(i)).Name().decode() for i in range(sub.InputsLength())]


def shapes_per_model(paths: list[Path], networks: list[str],
                     given: Mapping[str, tuple[int, ...]]) -> list[dict[str, tuple[int, ...]]]:
    """``--input-shape`` for each of several models: ``NET:NAME=…`` applies to network NET (the
    file stem) only, a plain ``NAME=…`` to every model that has an input NAME. An unscoped name
    that no model has is an InputShapeError (a typo must not pass silently)."""
    return per_model(paths, networks, given, "--input-shape")


def bindings_per_model(paths: list[Path], networks: list[str], given: Mapping[str, str]) -> list[dict[str, str]]:
    """``--bind`` for each of several models, scoped like ``--input-shape``."""
    return per_model(paths, networks, given, "--bind")


def per_model(paths: list[Path], networks: list[str], given: Mapping[str, Any], option: str) -> list[dict[str, Any]]:
    """Split ``option``'s NAME / NET:NAME keys between the models (see :func:`shapes_per_model`)."""
    scoped: dict[str, dict[str, Any]] = {}
    unscoped: dict[str, Any] = {}
    for key, value in given.items():
        net, sep, name = key.partition(":")
        if sep and net in networks:
            scoped.setdefault(net, {})[name] = value
        else:
            unscoped[key] = value
    out, used, names_by_net = [], set(), {}
    for path, net in zip(paths, networks):
        have = input_names(path) if unscoped else []
        names_by_net[net] = have
        mine = {k: v for k, v in unscoped.items() if k in have}
        used |= set(mine)
        mine.update(scoped.get(net, {}))
        out.append(mine)
    unknown = sorted(set(unscoped) - used)
    if unknown:
        listing = "; ".join(f"{net}: {', '.join(names) or '-'}" for net, names in names_by_net.items())
        raise InputShapeError(f"{option} names unknown input(s) {', '.join(unknown)}",
                              f"the models' inputs are — {listing} (scope one with NET:NAME=…)")
    return out
