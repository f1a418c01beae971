"""Raspberry Pi 4 (Cortex-A72) and Pi 5 (Cortex-A76) time per inference, estimated: edgetune's
package beside onnxruntime (ONNX models) and LiteRT + XNNPACK (TFLite models), all aarch64
builds run under qemu-user with the board's core, one thread, cycles from llvm-mca's core
models (method and limits: benchmarks/armsim/__init__.py and the README's "Raspberry Pi,
estimated").

    .venv/bin/python benchmarks/arm_estimate.py [--models squeezenet,mobilenet_v3,...] [--boards pi4,pi5]
        [--precisions fp32,int8] [--records squeezenet=DIR,...] [--runs 1] [--sides edgetune]
    .venv/bin/python benchmarks/arm_estimate.py --report        # table + PNG from the saved JSON

Models: the README's benchmark CNNs (squeezenet, the MobileNetV3 / YOLO-style / OCR classifier /
VGG block / ResNet bottleneck zoo models; ResNet-50 on request, ~10 min a side under qemu), the
MediaPipe face detector and a VGG-style TFLite CNN (LiteRT + XNNPACK), a MiniLM-style encoder
at 64 tokens; int8: onnxruntime's static QDQ quantization (ONNX),
ai-edge-quantizer's int8 recipe (TFLite), onnxruntime's dynamic quantization (the encoder) —
the quantizers users use (tests/quant_models.py). Each is packaged for the board untuned (or
with ``--records``), and every side runs on the package's reference inputs.

Per row: executed instructions per inference, estimated cycles and ms at the board's clock, the
share of vector multiply-accumulates (FMLA / SDOT …) among executed instructions, the share of
the core's multiply-accumulate issue slots each side fills and the share edgetune would need
for 0.8 of the runtime (above 100 %: only fewer multiplies get there), bytes loaded per
multiply-accumulate (high = memory-bound: the estimate flatters it), and for edgetune the
costliest kernels with the share of the core's multiply-accumulate issue slots they fill.
Counts are kept in ``--work``/counts: a change to the estimating re-estimates without emulation.

Instruction counts do not depend on the host's load, so this benchmark may run beside other work
(unlike the timing benchmarks). Writes benchmarks/results/arm_estimate.json after every row
(rows of other models, boards and sides are kept) and arm_estimate.png.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import armsim  # noqa: E402
import int8 as int8_bench  # noqa: E402
import vs_runtimes as vs  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
OUT = RESULTS / "arm_estimate.json"
MODELS = ("squeezenet", "mobilenet_v3", "yolo", "ocr_cls", "face_detection", "vgg_cnn", "vgg_block", "bottleneck", "minilm@64")


def model_pair(name: str, work: Path, precision: str) -> Path:
    """The model file for ``name`` at ``precision`` (int8: the quantizer users use on it)."""
    if name.split("@")[0] in vs.FAMILIES:
        return vs.transformer_file(name + ("-int8" if precision == "int8" else ""), work)[0]
    if precision == "fp32" and name != "vgg_cnn":
        return vs.model_file(name, work)
    float_model, int8_model = int8_bench.models(name, work)
    return int8_model if precision == "int8" else float_model


def package(model: Path, board: str, out: Path, records: Path | None) -> dict[str, Any]:
    """The board's package with reference inputs, without the emulated check (this benchmark
    measures cost, and the tests check correctness on the boards)."""
    from edgetune.importer import import_model
    from edgetune.package import PackageOptions, write_manifest, write_reference
    from edgetune.package import package as build

    result = build(PackageOptions(model=model, device=board, output=out, records=records,
                                  use_records=records is not None, verify=False, force=True))
    manifest = json.loads((out / "manifest.json").read_text())
    write_reference(out, import_model(model), 0)
    write_manifest(out, manifest)
    return result.manifest


def runtime_versions() -> dict[str, str]:
    from importlib import metadata

    return {"onnxruntime": metadata.version("onnxruntime"), "litert": metadata.version("ai-edge-litert")}


def measure(side: str, target: Path, inputs: Path, board: armsim.Board, runs: int, cache: Path) -> dict[str, Any]:
    counts = armsim.count(board, side, target, inputs, runs=runs, cache=cache)
    est = armsim.estimate(counts, [board])
    b = est.pop("boards")[board.name]
    row = {**est, **{k: b[k] for k in ("cycles", "ms", "ipc", "outside_isa", "core_model", "ghz")},
           "by_library": b["by_library"]}
    if side == "edgetune":
        row["kernels"] = b["kernels"]
    return row


def load_rows() -> list[dict[str, Any]]:
    return json.loads(OUT.read_text())["rows"] if OUT.is_file() else []


def save(rows: list[dict[str, Any]]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"host": platform.node(), "runtimes": runtime_versions(), "method": armsim.__doc__.split("\n\n")[0],
                               "rows": rows}, indent=1))


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    missing = armsim.missing_tools()
    if missing:
        raise SystemExit(f"missing: {', '.join(missing)} — run scripts/install-system-deps.sh (as root)")
    records = dict(item.split("=", 1) for item in args.records.split(",") if item)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = load_rows()
    for name in args.models.split(","):
        for precision in args.precisions.split(","):
            model = model_pair(name, work, precision)
            baseline = "onnxruntime" if model.suffix == ".onnx" else "litert"
            for board_name in args.boards.split(","):
                board = armsim.BOARDS[board_name]
                key = {"model": name, "precision": precision, "board": board_name}
                pkg = work / f"{name}-{precision}-{board_name}"
                rec = Path(records[name]) if name in records else None
                t0 = time.perf_counter()
                try:
                    package(model, board_name, pkg, rec)
                except Exception as err:  # noqa: BLE001 — a row that does not package is a result; the rest run
                    rows = [r for r in rows if not all(r.get(k) == v for k, v in key.items())]
                    rows.append({**key, "side": "edgetune", "error": f"{type(err).__name__}: {err}"[:400]})
                    save(rows)
                    print(f"{name} {precision} {board_name}: packaging failed: {err}")
                    continue
                inputs = armsim.package_inputs(pkg, work / f"{pkg.name}-inputs.npz")
                # onnxruntime on the model as edgetune imports it (old exporters list weights as graph
                # inputs, which keeps onnxruntime from folding them)
                theirs = vs.cleaned_onnx(model, work) if baseline == "onnxruntime" else model
                for side, target in (("edgetune", pkg), (baseline, theirs)):
                    if args.sides and side not in args.sides.split(","):
                        continue  # its row from an earlier run stands (counts repeat exactly)
                    try:
                        row = {**key, "side": side, "tuned": rec is not None if side == "edgetune" else None,
                               **measure(side, target, inputs, board, args.runs, work / "counts")}
                    except armsim.ArmsimError as err:
                        row = {**key, "side": side, "error": str(err)}
                    rows = [r for r in rows if not (all(r.get(k) == v for k, v in key.items()) and r["side"] == side)]
                    rows.append(row)
                    save(rows)
                    if "error" in row:
                        print(f"{name:14s} {precision} {board_name} {side:11s} failed: {row['error']}")
                    else:
                        print(f"{name:14s} {precision} {board_name} {side:11s} {row['instructions'] / 1e6:9.1f} M insns "
                              f"{row['cycles'] / 1e6:9.1f} M cycles {row['ms']:8.2f} ms  MAC {100 * row['mac_share']:4.1f}%"
                              f"  ({time.perf_counter() - t0:.0f} s)")
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """One line per model × precision × board: edgetune and the runtime, and their ratio."""
    lines = ["| model | prec. | board | edgetune M insns | runtime M insns | edgetune ms | runtime ms | ratio "
             "| MAC share (et / rt) | MAC issue use (et / rt) | et use at 0.8 | bytes per MAC (et / rt) |",
             "|" + "---|" * 12]
    groups: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["precision"], r["board"]), {})[r["side"]] = r
    for (model, precision, board), sides in sorted(groups.items()):
        ours = sides.get("edgetune", {})
        theirs = next((v for k, v in sides.items() if k != "edgetune"), {})
        name = next((k for k in sides if k != "edgetune"), "?")
        if "cycles" not in ours or "cycles" not in theirs:
            why = ours.get("error") or theirs.get("error") or "not measured"
            lines.append(f"| {model} | {precision} | {board} | — | — | — | — | — | {why[:80]} | | | |")
            continue

        def bpm(r: dict[str, Any]) -> str:
            return f"{r['bytes_loaded_per_mac']:.1f}" if r.get("bytes_loaded_per_mac") else "—"

        lines.append(
            f"| {model} | {precision} | {board} | {ours['instructions'] / 1e6:.1f} | {theirs['instructions'] / 1e6:.1f} "
            f"({name}) | {ours['ms']:.2f} | {theirs['ms']:.2f} | **{ours['cycles'] / theirs['cycles']:.2f}** | "
            f"{100 * ours['mac_share']:.0f} % / {100 * theirs['mac_share']:.0f} % | "
            f"{100 * mac_use(ours):.0f} % / {100 * mac_use(theirs):.0f} % | "
            f"{100 * mac_use(ours, 0.8 * theirs['cycles']):.0f} % | {bpm(ours)} / {bpm(theirs)} |")
    return "\n".join(lines)


def mac_use(row: dict[str, Any], cycles: float | None = None) -> float:
    """Share of the core's multiply-accumulate issue slots a side fills (its vector MACs per
    cycle over the board's MAC pipes) — with ``cycles``, the share it would have to fill to run
    in that many with the MACs it executes: above 100 % no schedule of the same instructions
    gets there, only fewer multiplies (Winograd, sparsity) or wider ones."""
    macs = row["instructions"] * row["mac_share"]
    return macs / (cycles or row["cycles"]) / armsim.BOARDS[row["board"]].vector_mac_pipes


def kernels_table(rows: list[dict[str, Any]], top: int = 5) -> str:
    lines = []
    for r in rows:
        if r.get("side") != "edgetune" or "kernels" not in r:
            continue
        lines.append(f"{r['model']} {r['precision']} {r['board']}: " + "; ".join(
            f"{k.split(':', 1)[1][:44]} {100 * v['cycles'] / r['cycles']:.0f}% (MAC use {100 * v['mac_use']:.0f}%)"
            for k, v in list(r["kernels"].items())[:top]))
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: pip install '.[bench]' for the PNG)")
        return
    groups: dict[tuple[str, str], dict[str, float]] = {}
    for r in rows:
        if r.get("side") == "edgetune" and "cycles" in r:
            theirs = next((x for x in rows if x.get("side") != "edgetune" and "cycles" in x
                           and all(x[k] == r[k] for k in ("model", "precision", "board"))), None)
            if theirs:
                groups.setdefault((r["model"], r["precision"]), {})[r["board"]] = r["cycles"] / theirs["cycles"]
    if not groups:
        return
    labels = [f"{m}\n{p}" for m, p in groups]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(labels)), 4))
    for i, board in enumerate(armsim.BOARDS):
        ax.bar([x + 0.38 * i for x in range(len(labels))], [g.get(board, 0) for g in groups.values()], 0.38,
               label=f"{board} ({armsim.BOARDS[board].qemu_cpu})")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(0.8, color="k", lw=0.8, ls="--")
    ax.set_xticks([x + 0.19 for x in range(len(labels))], labels, fontsize=7)
    ax.set_ylabel("edgetune / runtime, estimated cycles")
    ax.set_title("Raspberry Pi, one core, by qemu + llvm-mca (lower is better)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--boards", default="pi4,pi5")
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument("--records", default="", help="name=records-dir,… : package those models tuned")
    ap.add_argument("--sides", default="", help="edgetune,onnxruntime,litert: only these (default: all)")
    ap.add_argument("--runs", type=int, default=1, help="marked inferences per side (counts are exact: 1 is enough)")
    ap.add_argument("--work", default=str(RESULTS / "arm_estimate-work"))
    ap.add_argument("--report", action="store_true", help="only print the table and draw the PNG from the saved JSON")
    args = ap.parse_args()
    rows = load_rows() if args.report else run(args)
    print(table(rows))
    print(kernels_table(rows))
    plot(rows, RESULTS / "arm_estimate.png")


if __name__ == "__main__":
    main()
