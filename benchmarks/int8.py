"""int8 against fp32, and against the runtimes users run int8 models with.

For each network: the float model and its int8 version made with the quantizer users use
(onnxruntime's static QDQ quantization for ONNX, ai-edge-quantizer's static int8 recipe for
TFLite; tests/quant_models.py, calibrated on 8 random inputs; ``vgg_cnn`` is a float TFLite CNN
of wide 3×3 layers made by tests/models.py). Both are packaged for this host
(tuned for ``--minutes`` each first, the same time for both, or untuned with 0) and timed side by
side with the framework runtime on the same model: onnxruntime (QDQ → its QLinear int8 kernels)
or LiteRT + XNNPACK (its qs8 kernels) — all four alternating, each run in a fresh process,
``--threads`` threads. The int8 package's outputs are compared with that runtime's in quantization steps.

Goal (issue 13): int8 package ≥ 1.5× faster than the fp32 package, ≤ 1.0× the runtime's int8
latency, within one quantization step of it.

    .venv/bin/python benchmarks/int8.py [--models squeezenet,mobilenet_v3,face_detection,vgg_cnn] [--minutes 0]

Prints a table; writes benchmarks/results/int8.json. Never run it beside the tests or another
benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = REPO / "benchmarks" / "results"
OUT = RESULTS / "int8.json"

import numpy as np  # noqa: E402
import vs_runtimes as vs  # noqa: E402
from _stamp import stamp  # noqa: E402

MODELS = ("squeezenet", "mobilenet_v3", "face_detection", "vgg_cnn")


def models(name: str, work: Path) -> tuple[Path, Path]:
    """(float model, int8 model) for ``name`` (``vgg_cnn``: tests/models.py's VGG-style float
    TFLite CNN, 56×56, 64-channel 3×3 layers — where integer dot products have work to do)."""
    import quant_models

    if name == "vgg_cnn":
        import models as test_models

        float_model = test_models.float_cnn_tflite(work / "vgg_cnn.tflite")
    else:
        float_model = vs.model_file(name, work)
    if float_model.suffix == ".onnx":
        int8 = quant_models.qdq_onnx(float_model, work / f"{name}-qdq.onnx")
    else:
        int8 = quant_models.int8_tflite_from_float(float_model, work / f"{name}-int8.tflite")
    return float_model, int8


def package_unverified(model: Path, out: Path, records: Path | None) -> dict[str, Any]:
    """The package and its reference outputs, without refusing it when they disagree: the
    disagreement is measured here (in quantization steps) instead."""
    from edgetune.check import write_reference
    from edgetune.importer import import_model
    from edgetune.package import PackageOptions, package
    from edgetune.package_files import write_manifest

    result = package(PackageOptions(model=model, device="host", output=out, records=records,
                                    use_records=records is not None, verify=False, force=True))
    manifest = json.loads((out / "manifest.json").read_text())
    write_reference(out, import_model(model), 0)
    write_manifest(out, manifest)
    return result.manifest


def steps(package: Path, model: Path) -> dict[str, float]:
    """Largest difference from the reference runtime per output, in quantization steps: int8
    outputs directly, float outputs dequantized from int8 (QDQ ONNX) over their step; other
    outputs in their own unit."""
    import edgetune_runtime
    from edgetune.importer import import_model
    from edgetune.reference import onnx_graph, output_steps

    imported = import_model(model)
    unit = output_steps(imported, onnx_graph(imported))
    loaded = edgetune_runtime.load(package)
    outs = loaded.run(*loaded.reference_inputs())
    with np.load(package / "reference.npz") as data:  # stored under sanitized names ("head/out" → "head_out")
        ref = {s["original_name"]: data[f"output:{s['name']}"] for s in loaded.outputs}
    return {name: round(float(np.max(np.abs(outs[name].astype(np.float64) - ref[name].astype(np.float64)))) / unit.get(name, 1.0), 3)
            for name in outs}


def measure(packages: dict[str, Path], models: dict[str, Path], runs: int, rounds: int, threads: int) -> dict[str, float]:
    """The fp32 and int8 packages and the runtime on each model, all four alternating
    ``rounds`` times, each run in a fresh process; the best median of each. (Timed a pair at a
    time, minutes apart, the fp32 / int8 ratio moved by up to 1.3× between runs on this VM.)"""
    import edgetune_runtime

    inputs = {}
    for kind, pkg in packages.items():
        inputs[kind] = pkg.parent / f"{pkg.name}-inputs.npz"
        arrays = edgetune_runtime.load(pkg).reference_inputs()
        np.savez(inputs[kind], **{f"in_{n}": a for n, a in enumerate(arrays)})
    best: dict[str, float] = {}
    for _ in range(rounds):
        for kind in packages:
            for side, path in ((kind, packages[kind]), (f"{kind}-baseline", models[kind])):
                ms = vs._in_subprocess("edgetune" if side == kind else "baseline", path, inputs[kind], threads, runs)
                best[side] = min(best.get(side, ms), ms)
    return best


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        float_model, int8_model = models(name, work)
        row: dict[str, Any] = {"model": name, "format": float_model.suffix[1:], "minutes": args.minutes}
        sides = {"fp32": float_model, "int8": int8_model}
        packages = {}
        for kind, model in sides.items():
            records = None
            if args.minutes:
                records = work / f"records-{name}-{kind}"
                shutil.rmtree(records, ignore_errors=True)  # a job left from an earlier run would resume, spent
                summary = vs.tune(model, records, args.minutes, "auto")
                row[f"{kind}_trials"] = summary.get("trials_total", 0)
            packages[kind] = work / f"{name}-{kind}-{args.minutes:g}"
            package_unverified(model, packages[kind], records)
        times = measure(packages, sides, args.runs, args.rounds, args.threads)
        for kind in sides:
            row[f"{kind}_ms"], row[f"{kind}_baseline_ms"] = round(times[kind], 4), round(times[f"{kind}-baseline"], 4)
        row["int8_max_diff"] = steps(packages["int8"], int8_model)
        row["baseline"] = "onnxruntime" if row["format"] == "onnx" else "litert-xnnpack"
        row["int8_speedup"] = round(row["fp32_ms"] / row["int8_ms"], 3)
        row["int8_vs_baseline_int8"] = round(row["int8_ms"] / row["int8_baseline_ms"], 3)
        rows.append(row)
        print(f"{name:15s} fp32 {row['fp32_ms']:8.3f} ms  int8 {row['int8_ms']:8.3f} ms ({row['int8_speedup']:.2f}×)  "
              f"{row['baseline']} fp32 {row['fp32_baseline_ms']:8.3f} int8 {row['int8_baseline_ms']:8.3f}  "
              f"int8 ratio {row['int8_vs_baseline_int8']:.2f}  max diff {row['int8_max_diff']}", flush=True)
        RESULTS.mkdir(exist_ok=True)
        OUT.write_text(json.dumps({"stamp": stamp(), "threads": args.threads, "rounds": args.rounds, "runs": args.runs, "rows": rows}, indent=1))
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | tuned (min each) | fp32 pkg ms | int8 pkg ms | int8 speedup | runtime | its fp32 ms | its int8 ms | "
             "int8 pkg / its int8 | int8 max diff (steps) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        diff = ", ".join(f"{v:g}" for v in r["int8_max_diff"].values())
        lines.append(f"| {r['model']} | {r['minutes']:g} | {r['fp32_ms']:.3f} | {r['int8_ms']:.3f} | {r['int8_speedup']:.2f}× | "
                     f"{r['baseline']} | {r['fp32_baseline_ms']:.3f} | {r['int8_baseline_ms']:.3f} | "
                     f"{r['int8_vs_baseline_int8']:.2f} | {diff} |")
    return "\n".join(lines)


def report(rows: list[dict[str, Any]]) -> None:
    print("\n" + table(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--minutes", type=float, default=0.0, help="tuning time per package (fp32 and int8 alike); 0: untuned")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--work", default=str(RESULTS / "int8-work"))
    parser.add_argument("--report", action="store_true", help="only print the table from the saved JSON")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    rows = json.loads(OUT.read_text())["rows"] if args.report else run(args)
    report(rows)


if __name__ == "__main__":
    main()
