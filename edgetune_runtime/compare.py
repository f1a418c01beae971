"""What the loader checks a package against: the manifest's file list (names inside the
package, sha256 digests) and a run's outputs against the stored reference outputs, under the
package's tolerance (:func:`tolerance`, :func:`compare`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .errors import LoaderError

_HEX = set("0123456789abcdef")


def validate_files(manifest: dict[str, Any]) -> None:
    """Refuse a manifest whose files are not a map of names inside the package to sha256 digests."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) and len(v) == 64 and set(v) <= _HEX
                                              for k, v in files.items()):
        raise LoaderError("the package's manifest is malformed: 'files' is not a map of file names to sha256 digests",
                          "package the model again")
    for name in files:
        parts = Path(name).parts
        if not name or Path(name).is_absolute() or ".." in parts:
            raise LoaderError(f"the package's manifest is malformed: file name {name!r} leaves the package directory",
                              "package the model again")


# Floats: |out - ref| <= atol + rtol * max|ref|. Integer (quantized) outputs: within int_atol steps,
# as are float outputs dequantized from integers (``steps``: output name → the step's size).
DEFAULT_TOLERANCE = {"rtol": 1e-3, "atol": 1e-5, "int_atol": 1}


def tolerance(manifest: dict[str, Any], rtol: float | None = None, atol: float | None = None) -> dict[str, Any]:
    """The check's tolerance: the defaults, the package's own (its manifest), then the caller's."""
    tol = dict(DEFAULT_TOLERANCE, **manifest.get("verification", {}).get("tolerance", {}))
    if rtol is not None:
        tol["rtol"] = rtol
    if atol is not None:
        tol["atol"] = atol
    return tol


def compare(expected: dict[str, np.ndarray], got: dict[str, np.ndarray], rtol: float, atol: float, int_atol: int = 1,
            steps: dict[str, float] | None = None, bounds: dict[str, float] | None = None,
            rms_bounds: dict[str, float] | None = None) -> dict[str, Any]:
    """Per-output max abs / relative error and a pass flag, under the tolerance above: ``atol``
    + ``rtol`` × the output's magnitude, or a measured bound where larger (``bounds``: output →
    its absolute bound, e.g. a float16 package's), and where given a bound on the root-mean-square
    error (``rms_bounds``: a dynamically quantized model's); each output's ``margin`` is its error
    over its bound, the larger of the two (above 1: outside). Class scores ([rows, classes]) also
    say how many rows' top-1 class agrees (``top1_agree``)."""
    outputs, passed = {}, True
    for name, ref in expected.items():
        out = got[name]
        if out.shape != ref.shape:
            outputs[name] = {"passed": False, "error": f"shape {out.shape} != reference {ref.shape}"}
            passed = False
            continue
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        scale = float(np.abs(ref.astype(np.float64)).max()) if ref.size else 0.0
        max_abs = float(diff.max()) if diff.size else 0.0
        bound = int_atol if ref.dtype.kind in "iub" else atol + rtol * scale
        if steps and name in steps:  # both sides are k·step in float32: allow their rounding too
            bound = max(bound, int_atol * steps[name] * (1 + 1e-4))
        if bounds and name in bounds:
            bound = max(bound, bounds[name])
        ok = bool(np.isfinite(out.astype(np.float64)).all()) and max_abs <= bound
        margin = max_abs / bound if bound else (0.0 if max_abs == 0 else float("inf"))
        outputs[name] = {"max_abs_error": max_abs, "max_rel_error": max_abs / scale if scale else max_abs,
                         "bound": bound, "margin": margin, "passed": ok}
        if rms_bounds and name in rms_bounds:
            rms = float(np.sqrt((diff ** 2).mean())) if diff.size else 0.0
            outputs[name].update(rms_error=rms, rms_bound=rms_bounds[name])
            outputs[name]["margin"] = max(margin, rms / rms_bounds[name] if rms_bounds[name] else float(rms > 0))
            outputs[name]["passed"] = ok = ok and rms <= rms_bounds[name]
        if ref.dtype.kind == "f" and ref.ndim == 2 and ref.shape[-1] > 1:
            outputs[name]["top1_agree"] = float(np.mean(np.argmax(out, -1) == np.argmax(ref, -1)))
        passed &= ok
    result = {"passed": passed, "rtol": rtol, "atol": atol, "int_atol": int_atol, "outputs": outputs}
    if bounds:
        result["bounds"] = bounds
    return dict(result, steps=steps) if steps else result
