"""Recurrent models: compile time and speed of edgetune packages against onnxruntime.

    .venv/bin/python benchmarks/recurrent.py [--threads 2] [--rounds 3] [--runs 50]

Models (built by ``tests/rnn_models.py`` with seeded weights):

* ``crnn-h48`` / ``crnn-h256``: a CRNN text recognizer on a 32×320 line (80 columns), two
  bidirectional LSTM layers of hidden size 48 (PP-OCR-like) and 256 (EasyOCR-like).
* ``vad``: one streaming step of a Silero-style voice-activity detector (512 samples, LSTM
  state in and out), packaged with ``--bind sr=16000``; onnxruntime gets ``sr`` as an input.

For the CRNNs both recurrence forms are built: ``loop`` (the default beyond 32 steps: one TIR
kernel per direction) and ``unrolled`` (every step as Relax ops, forced here), to show what the
choice costs in compile time and latency. Each package passes its reference check first. Both
sides run in fresh processes, alternating, ``--threads`` threads each; the best per-round median
is kept. Writes ``benchmarks/results/recurrent.json``. Never run it beside tests or another
benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

import numpy as np  # noqa: E402
from _stamp import stamp  # noqa: E402

OUT = REPO / "benchmarks" / "results" / "recurrent.json"


def build(model: Path, out: Path, unroll_max: int | None, bindings: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """Package for host (reference check included); (seconds, manifest)."""
    from edgetune._tvm.frontend import recurrent
    from edgetune.package import PackageOptions, package

    saved = recurrent.UNROLL_MAX_STEPS
    if unroll_max is not None:
        recurrent.UNROLL_MAX_STEPS = unroll_max
    try:
        t0 = time.perf_counter()
        result = package(PackageOptions(model=model, device="host", output=out, force=True, rtol=1e-4,
                                        bindings=bindings))
        seconds = time.perf_counter() - t0
    finally:
        recurrent.UNROLL_MAX_STEPS = saved
    if result.verification["status"] != "passed":
        raise SystemExit(f"{model.name}: reference check {result.verification}")
    return seconds, result.manifest


def timed_pair(package: Path, model: Path, extra: dict[str, np.ndarray], args: argparse.Namespace) -> tuple[float, float]:
    """(edgetune ms, onnxruntime ms): alternating fresh processes; ``extra`` are inputs only
    onnxruntime takes (bound in the package)."""
    import onnx
    import vs_runtimes

    import edgetune_runtime

    ours = edgetune_runtime.load(package).reference_inputs()
    mine = package.parent / f"{package.name}-inputs.npz"
    np.savez(mine, **{f"in_{n}": a for n, a in enumerate(ours)})
    names = [i.name for i in onnx.load(str(model)).graph.input]
    given = dict(zip([s["original_name"] for s in edgetune_runtime.read_manifest(package)["inputs"]], ours))
    given.update(extra)
    theirs = package.parent / f"{package.name}-ort-inputs.npz"
    np.savez(theirs, **{f"in_{n}": given[name] for n, name in enumerate(names)})
    a, b = [], []
    for _ in range(args.rounds):
        a.append(vs_runtimes._in_subprocess("edgetune", package, mine, args.threads, args.runs))
        b.append(vs_runtimes._in_subprocess("baseline", model, theirs, args.threads, args.runs))
    return min(a), min(b)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | recurrence runs as | compile s | package s | edgetune ms | onnxruntime ms | ratio | max rel error |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['form']} | {r['compile_s']:.2f} | {r['package_s']:.2f} | {r['edgetune_ms']:.3f} | "
              f"{r['onnxruntime_ms']:.3f} | {r['ratio']:.2f} | {r['max_rel_error']:.1e} |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    import rnn_models as rm

    work = Path(tempfile.mkdtemp(prefix="edgetune-recurrent-"))
    cases = [("crnn-h48", rm.crnn(work / "crnn-h48.onnx", width=320, hidden=48), {}, {}),
             ("crnn-h256", rm.crnn(work / "crnn-h256.onnx", width=320, hidden=256), {}, {}),
             ("vad", rm.streaming_vad(work / "vad.onnx"), {"sr": "16000"}, {"sr": np.array(16000)})]
    rows = []
    for name, model, bindings, extra in cases:
        forms = [("loop", None), ("unrolled", 10_000)] if name.startswith("crnn") else [("unrolled", None)]
        for form, unroll_max in forms:
            pkg = work / f"{name}-{form}"
            seconds, manifest = build(model, pkg, unroll_max, bindings)
            ours, theirs = timed_pair(pkg, model, extra, args)
            row = {"model": name, "form": form, "compile_s": round(manifest["build"]["compile_s"], 2),
                   "package_s": round(seconds, 2), "max_rel_error": manifest["verification"]["max_rel_error"],
                   "edgetune_ms": round(ours, 4), "onnxruntime_ms": round(theirs, 4),
                   "ratio": round(ours / theirs, 3), "kernels": manifest["schedules"]["kinds"]}
            rows.append(row)
            print(f"{name:10} {form:9} compile {row['compile_s']:6.2f} s  edgetune {ours:8.3f} ms  "
                  f"onnxruntime {theirs:8.3f} ms  ratio {row['ratio']:.2f}  max rel err {row['max_rel_error']:.2e}",
                  flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"stamp": stamp(), "threads": args.threads, "rounds": args.rounds,
                               "runs": args.runs, "rows": rows}, indent=2))
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
