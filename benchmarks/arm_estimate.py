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
import subprocess
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
from _stamp import stamp  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
OUT = RESULTS / "arm_estimate.json"
MODELS = ("squeezenet", "mobilenet_v3", "yolo", "ocr_cls", "face_detection", "vgg_cnn", "vgg_block", "bottleneck", "minilm@64",
          "yolo11n", "timm-mobilenetv3", "ppocr4_rec", "ppocr6_rec", "ppocr_cls")
# real files from packages (scripts/fetch_test_models.py) and exporters' output (tests/exporters.py), at these shapes
REAL = {"ppocr4_rec": ("ppocr4_rec.onnx", {"x": (1, 3, 48, 320)}), "ppocr6_rec": ("ppocr6_rec.onnx", {"x": (1, 3, 48, 320)}),
        "ppocr_cls": ("ppocr_cls.onnx", {"x": (1, 3, 48, 192)})}
# the sides of a row, by precision: edgetune, the framework's own runtime, and the runtimes Pi users pick
# (ncnn and MNN, converted from the same ONNX file); fp16: their half-precision modes
SIDES = {"fp32": ("edgetune", "baseline", "ncnn", "mnn"), "fp16": ("edgetune", "ncnn16", "mnn16"),
         "int8": ("edgetune", "baseline")}
HALF_BOARDS = ("pi5",)  # cores with float16 arithmetic (asimdhp)
# a side answers the same question as the reference when its outputs correlate with the reference's at least this
# much (fp16 sides drift by up to ~10 % of the range on random-weight CNNs, but keep the shape of the answer)
SAME_ANSWER = 0.99


def model_pair(name: str, work: Path, precision: str) -> tuple[Path, dict[str, tuple[int, ...]]]:
    """The model file for ``name`` at ``precision`` (int8: the quantizer users use on it) and the
    input shapes it is packaged at (real files with dynamic dimensions)."""
    if name in REAL:
        file, shapes = REAL[name]
        return REPO / "tests" / ".models" / file, shapes
    spec, quantized = vs.transformer_spec(name)
    if spec in vs.EXPORTED:
        return vs.exported_file(name, work), {}
    if spec.split("@")[0] in vs.FAMILIES:  # int8: dynamically quantized unless the name says -qdq
        return vs.transformer_file(name + ("-int8" if precision == "int8" and not quantized else ""), work)[0], {}
    if precision in ("fp32", "fp16") and name != "vgg_cnn":
        return vs.model_file(name, work), {}
    float_model, int8_model = int8_bench.models(name, work)
    return (int8_model if precision == "int8" else float_model), {}


def package(model: Path, board: str, out: Path, records: Path | None, precision: str = "fp32",
            shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
    """The board's package with reference inputs, without the emulated check (this benchmark
    measures cost, and the tests check correctness on the boards: each side's outputs are
    compared with the reference here)."""
    from edgetune.check import write_reference
    from edgetune.importer import import_model
    from edgetune.package import PackageOptions
    from edgetune.package import package as build
    from edgetune.package_files import write_manifest

    result = build(PackageOptions(model=model, device=board, output=out, records=records, input_shapes=shapes or {},
                                  use_records=records is not None, verify=False, force=True,
                                  precision="fp16" if precision == "fp16" else "fp32"))
    manifest = json.loads((out / "manifest.json").read_text())
    write_reference(out, import_model(model, shapes or {}), 0)
    write_manifest(out, manifest)
    return result.manifest


def runtime_versions() -> dict[str, str]:
    from importlib import metadata

    names = ("onnxruntime", "ai-edge-litert", "ncnn", "MNN")
    return {name: metadata.version(name) for name in names if _installed(name)}


def _installed(name: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def peer_model(side: str, model: Path, work: Path, shapes: dict[str, tuple[int, ...]]) -> Path:
    """The model converted for ncnn (``pnnx model.onnx fp16=0``: fp32 weights, as the fp32 and
    fp16 modes both read them) or MNN (``mnnconvert -f ONNX``), from the ONNX file onnxruntime
    runs (fixed to ``shapes`` first where it has dynamic dimensions)."""
    folder = work / "peers" / model.stem
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "model.onnx"  # (pnnx rewrites other characters of a file name than letters, digits and _)
    if not source.is_file():
        _fixed(model, shapes, source)
    bin_dir = Path(sys.executable).parent
    if side.startswith("ncnn"):
        out = folder / "model.ncnn.param"
        cmd = [str(bin_dir / "pnnx"), source.name, "fp16=0"]
        if shapes:
            cmd.append("inputshape=" + ",".join(f"[{','.join(map(str, v))}]f32" for v in shapes.values()))
    else:
        out = folder / "model.mnn"
        cmd = [str(bin_dir / "mnnconvert"), "-f", "ONNX", "--modelFile", source.name, "--MNNModel", out.name, "--bizCode", "x"]
    if not out.is_file():
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=1800)
        if proc.returncode or not out.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise armsim.ArmsimError(f"{cmd[0].rsplit('/', 1)[-1]} could not convert the model: {' / '.join(tail)[:300]}")
    return out


def _fixed(model: Path, shapes: dict[str, tuple[int, ...]], out: Path) -> None:
    """``model`` with its initializers out of the graph inputs and ``shapes`` written into its
    inputs (what edgetune imports and onnxruntime runs), as one file."""
    import onnx

    m = onnx.load(str(model))
    inits = {i.name for i in m.graph.initializer}
    keep = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for i in m.graph.input:
        if i.name in shapes:
            for d, v in zip(i.type.tensor_type.shape.dim, shapes[i.name]):
                d.Clear()
                d.dim_value = v
    onnx.save(m, str(out))


def answer(reference: list[Any], got: list[Any], same: float = SAME_ANSWER) -> dict[str, Any]:
    """How a side's outputs compare with the reference's (float32 onnxruntime / LiteRT on the
    same inputs): the worst output's max abs error over its range, its correlation, whether the
    top-1 class agrees (class scores), and whether it answers the same question (correlation at
    least ``same``: :data:`SAME_ANSWER`, or :func:`same_answer_floor`'s for a quantized model).
    Outputs are matched by position, else by size (converters may reorder them)."""
    import numpy as np

    worst: dict[str, Any] = {"rel_error": 0.0, "correlation": 1.0}
    pool = list(got)
    for ref in reference:
        ref = np.asarray(ref, np.float64).reshape(-1)
        match = next((g for g in pool if np.asarray(g).size == ref.size), None)
        if match is None:
            return {"same_answer": False, "why": f"no output of {ref.size} values"}
        pool.remove(match)
        out = np.asarray(match, np.float64).reshape(-1)
        if not np.isfinite(out).all():
            return {"same_answer": False, "why": "inf or NaN in the outputs"}
        span = float(ref.max() - ref.min()) or 1.0
        rel = float(np.abs(out - ref).max()) / span
        if ref.size < 2 or not ref.std():
            corr = 1.0 if np.allclose(out, ref, rtol=1e-2, atol=1e-2 * span) else 0.0
        else:
            corr = float(np.corrcoef(out, ref)[0, 1]) if out.std() else 0.0
        worst["rel_error"] = max(worst["rel_error"], rel)
        worst["correlation"] = min(worst["correlation"], corr)
        if ref.size > 1 and len(reference) == 1:
            worst["top1"] = bool(out.argmax() == ref.argmax())
    return {**worst, "same_answer": worst["correlation"] >= same}


def same_answer_floor(model: Path, pkg: Path, reference: list[Any], precision: str) -> float:
    """The correlation a side must reach to answer the same question: :data:`SAME_ANSWER`, or for
    an int8 ONNX model the reference's own — onnxruntime with its QDQ layers in float (graph
    optimizations off) against its int8 kernels, on the same inputs — with twice its distance from
    1 (a random-weight QDQ ViT-S/16's near-flat logits: onnxruntime's two levels correlate at
    0.986, so 0.99 would refuse onnxruntime itself)."""
    if precision != "int8" or model.suffix != ".onnx":
        return SAME_ANSWER
    import numpy as np
    import onnxruntime as ort

    manifest = json.loads((pkg / "manifest.json").read_text())
    with np.load(pkg / "reference.npz") as data:
        feeds = {i["original_name"]: data[f"input:{i['name']}"] for i in manifest["inputs"]}
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    own = answer(reference, session.run(None, feeds))["correlation"]
    return min(SAME_ANSWER, 1 - 2 * (1 - own))


def measure(side: str, target: Path, inputs: Path, board: armsim.Board, runs: int, cache: Path,
            reference: list[Any], same: float = SAME_ANSWER) -> dict[str, Any]:
    import numpy as np

    outputs = inputs.with_name(f"{inputs.stem}-{side}-outputs.npz")
    counts = armsim.count(board, side, target, inputs, runs=runs, cache=cache, outputs=outputs)
    with np.load(outputs) as data:
        got = [data[f"out_{i}"] for i in range(len(data.files))]
    check = answer(reference, got, same)
    est = armsim.estimate(counts, [board])
    b = est.pop("boards")[board.name]
    row = {**est, **{k: b[k] for k in ("cycles", "ms", "ipc", "outside_isa", "core_model", "ghz")},
           "by_library": b["by_library"], "answer": check}
    if side == "edgetune":
        row["kernels"] = b["kernels"]
    return row


def load_rows() -> list[dict[str, Any]]:
    return json.loads(OUT.read_text())["rows"] if OUT.is_file() else []


def save(rows: list[dict[str, Any]]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    # the versions of the runtimes whose stored rows are kept (a run of some sides does not
    # install the others), updated by those installed now; a kept row without a stamp of its
    # own was measured in the run the file's stamp names
    before = json.loads(OUT.read_text()) if OUT.is_file() else {}
    rows = [r if "stamp" in r or "stamp" not in before else {**r, "stamp": before["stamp"]} for r in rows]
    OUT.write_text(json.dumps({"stamp": stamp(), "runtimes": {**before.get("runtimes", {}), **runtime_versions()},
                               "method": armsim.__doc__.split("\n\n")[0], "rows": rows}, indent=1))


def _sides(precision: str, model: Path, wanted: str) -> list[str]:
    sides = [s for s in SIDES[precision] if model.suffix == ".onnx" or s in ("edgetune", "baseline")]
    return [s for s in sides if not wanted or s in wanted.split(",")]


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import numpy as np

    missing = armsim.missing_tools()
    if missing:
        raise SystemExit(f"missing: {', '.join(missing)} — run scripts/install-system-deps.sh (as root)")
    records = dict(item.split("=", 1) for item in args.records.split(",") if item)
    measured = stamp()  # each row says where and when it was measured (rows of earlier runs are kept)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = load_rows()
    for name in args.models.split(","):
        for precision in args.precisions.split(","):
            model, shapes = model_pair(name, work, precision)
            baseline = "onnxruntime" if model.suffix == ".onnx" else "litert"
            for board_name in args.boards.split(","):
                if precision == "fp16" and board_name not in HALF_BOARDS:
                    continue  # the Pi 4's Cortex-A72 has no float16 arithmetic: edgetune refuses it, ncnn runs fp32
                board = armsim.BOARDS[board_name]
                key = {"model": name, "precision": precision, "board": board_name}
                pkg = work / f"{name}-{precision}-{board_name}"
                rec = Path(records[name]) if name in records else None
                t0 = time.perf_counter()
                try:
                    package(model, board_name, pkg, rec, precision, shapes)
                except Exception as err:  # noqa: BLE001 — a row that does not package is a result; the rest run
                    rows = [r for r in rows if not all(r.get(k) == v for k, v in key.items())]
                    rows.append({**key, "side": "edgetune", "error": f"{type(err).__name__}: {err}"[:400], "stamp": measured})
                    save(rows)
                    print(f"{name} {precision} {board_name}: packaging failed: {err}")
                    continue
                inputs = armsim.package_inputs(pkg, work / f"{pkg.name}-inputs.npz")
                with np.load(pkg / "reference.npz") as data:
                    reference = [data[k] for k in data.files if k.startswith("output:")]
                same = same_answer_floor(model, pkg, reference, precision)
                for side in _sides(precision, model, args.sides):
                    kind = baseline if side == "baseline" else side
                    try:
                        # onnxruntime on the model as edgetune imports it (old exporters list weights as graph
                        # inputs, which keeps onnxruntime from folding them); ncnn / MNN on conversions of it
                        target = (pkg if side == "edgetune" else
                                  vs.cleaned_onnx(model, work) if kind == "onnxruntime" else
                                  model if kind == "litert" else peer_model(side, model, work, shapes))
                        row = {**key, "side": kind, "tuned": rec is not None if side == "edgetune" else None,
                               **measure(kind, target, inputs, board, args.runs, work / "counts", reference, same)}
                        if not row["answer"]["same_answer"]:
                            row = {**key, "side": kind, "error": f"wrong answer: {row['answer']}", "answer": row["answer"]}
                    except armsim.ArmsimError as err:
                        row = {**key, "side": kind, "error": str(err)}
                    rows = [r for r in rows if not (all(r.get(k) == v for k, v in key.items()) and r["side"] == kind)]
                    rows.append({**row, "stamp": measured})
                    save(rows)
                    if "error" in row:
                        print(f"{name:14s} {precision} {board_name} {kind:11s} failed: {row['error'][:200]}")
                    else:
                        print(f"{name:14s} {precision} {board_name} {kind:11s} {row['instructions'] / 1e6:9.1f} M insns "
                              f"{row['cycles'] / 1e6:9.1f} M cycles {row['ms']:8.2f} ms  MAC {100 * row['mac_share']:4.1f}%"
                              f"  error {row['answer']['rel_error']:.2e}  ({time.perf_counter() - t0:.0f} s)")
    return rows


RUNTIMES = ("onnxruntime", "litert")
PEERS = {"fp32": ("ncnn", "mnn"), "fp16": ("ncnn16", "mnn16")}


def grouped(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, dict[str, Any]]]:
    """Rows by (model, precision, board), then by side."""
    out: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["model"], r["precision"], r["board"]), {})[r["side"]] = r
    return out


def best_peer(sides: dict[str, dict[str, Any]], precision: str) -> tuple[str, dict[str, Any]] | None:
    """The fastest of ncnn and MNN (at ``precision``) that ran and answered, with its row."""
    ran = [(s, sides[s]) for s in PEERS.get(precision, ()) if "cycles" in sides.get(s, {})]
    return min(ran, key=lambda kv: kv[1]["cycles"]) if ran else None


def peer_ratio(sides: dict[str, dict[str, Any]], precision: str) -> float | None:
    """edgetune's cycles over the faster peer's (:func:`best_peer`), None where either is missing."""
    peer, ours = best_peer(sides, precision), sides.get("edgetune", {})
    return ours["cycles"] / peer[1]["cycles"] if peer and "cycles" in ours else None


def runtime_side(sides: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The row of the model's own runtime (onnxruntime or LiteRT), None where it has none."""
    return next((sides[r] for r in RUNTIMES if r in sides), None)


def runtime_ratio(sides: dict[str, dict[str, Any]]) -> float | None:
    """edgetune's cycles over its own runtime's (:func:`runtime_side`), None where either is missing."""
    ours, theirs = sides.get("edgetune", {}), runtime_side(sides) or {}
    return ours["cycles"] / theirs["cycles"] if "cycles" in ours and "cycles" in theirs else None


def _cell(row: dict[str, Any] | None) -> str:
    if not row:
        return "—"
    return f"{row['cycles'] / 1e6:.1f}" if "cycles" in row else "fails"


def table(rows: list[dict[str, Any]]) -> str:
    """M cycles per inference, one line per model × board: edgetune beside onnxruntime / LiteRT,
    ncnn and MNN in fp32, and in fp16 beside ncnn's and MNN's half precision; the ratios to the
    faster of ncnn and MNN, and each fp16 side's error against the float32 reference (max abs
    over the output's range)."""
    g = grouped(rows)
    lines = ["| model | board | edgetune fp32 | onnxruntime / LiteRT | ncnn fp32 | MNN fp32 | **fp32 / best peer** "
             "| edgetune fp16 | ncnn fp16 | MNN fp16 | **fp16 / best peer** | fp16 error (et / ncnn / MNN) |",
             "|" + "---|" * 12]
    for model, board in sorted({(m, b) for m, p, b in g if p in ("fp32", "fp16")}):
        s32, s16 = g.get((model, "fp32", board), {}), g.get((model, "fp16", board), {})
        runtime = runtime_side(s32)

        def ratio(sides: dict[str, dict[str, Any]], precision: str) -> str:
            value = peer_ratio(sides, precision)
            return "—" if value is None else f"**{value:.2f}**"

        def err(row: dict[str, Any] | None) -> str:
            return f"{row['answer']['rel_error']:.1e}" if row and "answer" in row and "rel_error" in row["answer"] else "—"

        lines.append(f"| {model} | {board} | {_cell(s32.get('edgetune'))} | {_cell(runtime)} | {_cell(s32.get('ncnn'))} | "
                     f"{_cell(s32.get('mnn'))} | {ratio(s32, 'fp32')} | {_cell(s16.get('edgetune'))} | "
                     f"{_cell(s16.get('ncnn16'))} | {_cell(s16.get('mnn16'))} | {ratio(s16, 'fp16')} | "
                     f"{err(s16.get('edgetune'))} / {err(s16.get('ncnn16'))} / {err(s16.get('mnn16'))} |")
    int8 = [(k, v) for k, v in sorted(g.items()) if k[1] == "int8"]
    if int8:
        lines += ["", "| model | board | edgetune int8 | runtime int8 | ratio |", "|---|---|---|---|---|"]
        for (model, _p, board), sides in int8:
            value = runtime_ratio(sides)
            ratio = f"**{value:.2f}**" if value is not None else "—"
            lines.append(f"| {model} | {board} | {_cell(sides.get('edgetune'))} | {_cell(runtime_side(sides))} | {ratio} |")
    failed = [r for r in rows if "error" in r]
    if failed:
        lines += ["", "Not measured: " + "; ".join(f"{r['model']} {r['precision']} {r['board']} {r['side']}: {r['error'][:120]}"
                                                   for r in failed)]
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
    for (model, precision, board), sides in sorted(grouped(rows).items()):
        ours = sides.get("edgetune", {})
        peer = best_peer(sides, precision)
        # fp32 / fp16 against the faster peer only (a model no peer answered has no bar); int8 against the runtime
        theirs = peer[1] if peer else (runtime_side(sides) or {}) if precision == "int8" else {}
        if "cycles" in ours and "cycles" in theirs:
            groups.setdefault((model, precision), {})[board] = ours["cycles"] / theirs["cycles"]
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
    ax.set_ylabel("edgetune / fastest peer (ncnn, MNN; int8: the runtime)")
    ax.set_title("Raspberry Pi, one core, by qemu + llvm-mca (lower is better)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--boards", default="pi4,pi5")
    ap.add_argument("--precisions", default="fp32,fp16,int8")
    ap.add_argument("--records", default="", help="name=records-dir,… : package those models tuned")
    ap.add_argument("--sides", default="", help="edgetune,baseline,ncnn,mnn,ncnn16,mnn16: only these (default: all)")
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
