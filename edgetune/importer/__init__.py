"""Model import: ONNX and TFLite files → :class:`~edgetune.model.ImportedModel`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from ..errors import ModelFormatError
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


def import_model(path: Path | str, input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> ImportedModel:
    """Read a model file and convert it to Relax.

    ``input_shapes`` fixes dynamic dimensions by input name (original name). Returns an
    ImportedModel; raises ModelFormatError, UnsupportedOpsError, InputShapeError or ModelError.
    """
    path = Path(path)
    fmt = detect_format(path)
    if fmt == "onnx":
        from .onnx_import import import_onnx

        return import_onnx(path, dict(input_shapes or {}))
    from .tflite_import import import_tflite

    return import_tflite(path, dict(input_shapes or {}))
