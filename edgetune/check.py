"""The reference check of a package: deterministic inputs and the reference runtime's outputs
stored beside the library (:func:`write_reference`), the tolerance measured on the model
(:func:`pending_check`, :mod:`.tolerance`), the check run where this host can (natively, on its
GPU, or under qemu: :func:`run_check`) and its outcome in the manifest (:func:`record_check`);
a failure as one message naming each output's error (:func:`mismatch`)."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

import edgetune_runtime
from edgetune_runtime import loader
from edgetune_runtime.loader import REFERENCE

from . import emulation, reference
from .errors import VerificationError
from .isolation import inside
from .model import ImportedModel
from .package_files import write_manifest
from .profiles import Profile
from .tolerance import measured_tolerance
from .toolchain import local_gpu

log = logging.getLogger(__name__)


def write_reference(root: Path, model: ImportedModel, seed: int) -> str:
    """Store deterministic inputs and the reference runtime's outputs in reference.npz (state
    inputs hold the model's initial state, stored as state.npz by :func:`package` itself)."""
    inputs = reference.make_inputs(model.inputs, seed, {s.input: s.initial for s in model.state})
    as_float = reference.qdq_as_float(model)  # decided once: on some hosts it parses the whole graph
    outputs = reference.run_reference(model, inputs, as_float)
    arrays = {f"input:{s.name}": a for s, a in zip(model.inputs, inputs)}
    arrays.update({f"output:{s.name}": a for s, a in zip(model.outputs, outputs)})
    np.savez(root / REFERENCE, **arrays)
    return reference.reference_label(model, as_float)


def run_check(root: Path, profile: Profile) -> tuple[dict[str, Any] | None, str]:
    """Run the package's reference check where this host can execute it.

    Returns (result of ``edgetune_runtime`` check, where it ran) or (None, why not).
    """
    gpu = local_gpu(profile)
    if profile.is_native or gpu:
        if inside() and loader.loaded_here():
            # a forked stage whose parent already ran TVM code: TVM's thread pool does not survive a
            # fork (the child's first parallel kernel waits for the parent's workers), so the check
            # runs in a process of its own
            return _check_in_subprocess(root), gpu.name if gpu else "host"
        return edgetune_runtime.load(root).check(), gpu.name if gpu else "host"
    reason = emulation.unavailable_reason(profile)
    if reason:
        return None, reason
    result = emulation.run_loader(profile, root, ["check"])
    if "passed" not in result:
        raise VerificationError(f"the package failed to run under emulation: {result}")
    return result, f"{profile.toolchain.emulator} (emulated {profile.arch})"


def _check_in_subprocess(root: Path) -> dict[str, Any]:
    """``python -m edgetune_runtime check`` on ``root`` in a fresh process; its JSON."""
    proc = subprocess.run([sys.executable, "-m", "edgetune_runtime", "check", str(root), "--json"],
                          capture_output=True, text=True)
    result = emulation.check_answer(proc)
    if result is None:
        why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise VerificationError(f"the package failed to run its reference check: {why[:300]}")
    return result


def pending_check(model: ImportedModel, opts: Any, ref_label: str, inputs: list[np.ndarray],
                  outputs: list[np.ndarray]) -> dict[str, Any]:
    """The manifest's ``verification`` before the check runs: the reference, the seed of the
    inputs and the tolerance — ``opts.rtol`` (default 1e-3) and ``opts.atol``, and per output a
    bound measured on the model where its arithmetic is not float32's (:mod:`.tolerance`: a
    float16 package, a dynamically quantized model), with why — for the reference's ``inputs``
    and ``outputs``."""
    graph = reference.onnx_graph(model)
    rtol = reference.RTOL if opts.rtol is None else opts.rtol
    tolerance: dict[str, Any] = {"rtol": rtol, "atol": opts.atol, "int_atol": 1}
    steps = reference.output_steps(model, graph)
    if steps:
        tolerance["steps"] = steps
    pending = {"status": "pending", "reference": ref_label, "seed": opts.seed, "tolerance": tolerance}
    measured = measured_tolerance(model, inputs, outputs, opts.precision, rtol, opts.atol)
    if measured is not None:
        tolerance["bounds"] = measured.bounds
        pending["spread"] = measured.spread
        rms = ""
        if measured.rms_bounds:
            tolerance["rms_bounds"] = measured.rms_bounds
            pending["rms_spread"] = measured.rms_spread
            rms = f", its root-mean-square error within {measured.rms_factor:g}× the spread's"
        pending["tolerance_why"] = (f"each output within {measured.factor:.3g}× its spread in {measured.how} ("
                                    + ", ".join(f"{k} {v:.3g}" for k, v in measured.spread.items())
                                    + f"){rms}, at least rtol {rtol:g}")
    return pending


def verify(root: Path, profile: Profile, manifest: dict[str, Any], ref_label: str, opts: Any,
            model: ImportedModel) -> None:
    with np.load(root / REFERENCE) as data:
        inputs = [data[f"input:{s.name}"] for s in model.inputs]
        outputs = [data[f"output:{s.name}"] for s in model.outputs]
    manifest["verification"] = pending_check(model, opts, ref_label, inputs, outputs)
    tol = manifest["verification"]["tolerance"]
    write_manifest(root, manifest)
    result, where = run_check(root, profile)
    if result is None:
        manifest["verification"].update(status="skipped", reason=where)
        log.warning("reference check skipped: %s", where)
        return
    record_check(manifest["verification"], result, where)
    if not result["passed"]:
        steps = tol.get("steps", {})
        raise VerificationError(*mismatch(result["outputs"], steps, ref_label, tol["rtol"], opts.atol))


def mismatch(outputs: dict[str, Any], steps: dict[str, float], ref_label: str, rtol: float,
             atol: float) -> tuple[str, str | None]:
    """The message and hint of a failed reference check: each failing output's largest error,
    in quantization steps where the output is int8 values dequantized (``steps``: output → its
    step), and for those a hint that says why a deep int8 network drifts by steps and how to
    allow it (None: the default hint)."""
    parts, drift = [], 0.0
    for name, v in outputs.items():
        if v["passed"]:
            continue
        error = v.get("max_abs_error", v.get("error"))
        text = f"{name}: max abs {error:.4g}" if isinstance(error, float) else f"{name}: {error}"
        if v.get("rms_bound") and v["rms_error"] > v["rms_bound"]:
            text += f", root-mean-square {v['rms_error']:.3g} ({v['margin']:.1f}× its bound {v['rms_bound']:.3g})"
        elif v.get("bound"):
            text += f" ({v['margin']:.1f}× its bound {v['bound']:.3g})"
        if name in steps and isinstance(error, (int, float)):
            count = error / steps[name]
            text += f" ({count:.0f} quantization steps of {steps[name]:.4g})"
            drift = max(drift, error)
        parts.append(text)
    message = f"package output disagrees with {ref_label} beyond tolerance (rtol={rtol}, atol={atol}): {', '.join(parts)}"
    if not drift:
        return message, None
    digit = 10.0 ** (math.floor(math.log10(drift)) - 2)  # three significant digits, rounded up
    return message, (f"the reference's float path sums each int8 layer in float32 where edgetune sums it exactly: a "
                     f"rounding tie decided the other way moves that value by a step, and a deep network carries "
                     f"such steps on; if this drift is expected, allow it with --atol {math.ceil(drift / digit) * digit:.3g} "
                     f"(or check with --no-verify and compare on real inputs)")


def record_check(verification: dict[str, Any], result: dict[str, Any], where: str) -> None:
    """A reference check's outcome in the manifest's ``verification``: status, where it ran,
    the worst errors and each output's comparison."""
    outputs = result["outputs"]
    verification.update(
        status="passed" if result["passed"] else "failed",
        executed_on=where,
        max_abs_error=max((o.get("max_abs_error", float("inf")) for o in outputs.values()), default=0.0),
        max_rel_error=max((o.get("max_rel_error", float("inf")) for o in outputs.values()), default=0.0),
        outputs=outputs,
    )
