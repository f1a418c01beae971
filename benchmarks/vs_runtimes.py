"""edgetune vs the runtime a user already has, untuned and after growing tuning budgets.

    .venv/bin/python benchmarks/vs_runtimes.py [--models squeezenet,resnet50,...|all]
        [--budgets 0,5,20,60] [--threads 2] [--rounds 3] [--runs 30] [--layout auto]
    .venv/bin/python benchmarks/vs_runtimes.py --models transformers --budgets 0   # the transformer rows
    .venv/bin/python benchmarks/vs_runtimes.py --models mediapipe --budgets 0      # MediaPipe's models
    .venv/bin/python benchmarks/vs_runtimes.py --models exported --budgets 0       # exporters' output (torch, timm, ultralytics)
    .venv/bin/python benchmarks/vs_runtimes.py --report      # table + PNG from the saved JSON

For each model, the budgets (minutes of ``edgetune tune --time``) are spent as one resumable
job, so the 20-minute row continues the 5-minute one and the tuning time is cumulative; the work
directory is kept, so a later run with ``--budgets 60`` continues from 20 minutes. A job that
ends before its budget (nothing left that pays: ``edgetune tune --skip-tail``) is marked
``converged`` and its row stands for the larger budgets. After
each budget the model is packaged for ``host`` with the records so far (budget 0: no records —
the default schedules) and timed through the on-device loader; the baseline is onnxruntime for
ONNX models (on the same cleaned model edgetune imports: initializers not listed as inputs) and
LiteRT with XNNPACK for TFLite, with the same thread count and inputs. Transformer rows
(``minilm@128``, ``bert-base@16``, ``vit-s16@64``, ``whisper-tiny@256``, ``…-int8`` / ``…-qdq``:
built by ``tests/zoo_transformers.py`` at that many tokens; ``-int8``: onnxruntime's dynamic
quantization, ``-qdq``: its static QDQ quantization, calibrated on seeded inputs)
take onnxruntime at its best: the faster of the model at graph optimization level all and the
model passed through ``onnxruntime.transformers``' optimizer (fused Attention, SkipLayerNorm,
BiasGelu). The MediaPipe rows (``mp-hand_landmark_full`` …: every solution model MediaPipe
0.10.14's wheel ships, fetched from PyPI into the work directory) run against XNNPACK. edgetune and the
baseline alternate for ``--rounds`` rounds; the best per-round median of each is kept. Tuning
runs as the CLI a user runs (a subprocess), so its trials, trials per minute and time breakdown
come from its ``--json`` summary.

Writes ``benchmarks/results/vs_runtimes.json`` after every row (an interrupted run keeps what
it measured; rows of other models are kept) and ``vs_runtimes.png`` (latency vs tuning time,
baselines as dashed lines). Never run it beside tests or another benchmark: on 2 cores
contention distorts both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import numpy as np  # noqa: E402
from _stamp import stamp  # noqa: E402

from edgetune.errors import EdgetuneError  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
OUT = RESULTS / "vs_runtimes.json"
LIGHT = ("squeezenet", "resnet50", "inception_v1", "densenet121", "shufflenet", "vgg19")
ZOO = ("mobilenet_v2", "mobilenet_v3", "yolo", "ocr_cls", "vgg_block", "bottleneck", "ocr_det")
DEFAULT_MODELS = ("squeezenet", "resnet50", "face_detection", "mobilenet_v3", "yolo", "ocr_cls", "vgg_block",
                  "bottleneck")
# family: (builder keyword arguments, onnxruntime optimizer model type, heads, hidden)
FAMILIES: dict[str, tuple[dict[str, int], str, int, int]] = {
    "bert-base": ({"layers": 12, "hidden": 768, "heads": 12, "vocab": 1000}, "bert", 12, 768),
    "minilm": ({"layers": 6, "hidden": 384, "heads": 12, "vocab": 1000}, "bert", 12, 384),
    "vit-s16": ({"layers": 12, "hidden": 384, "heads": 6, "patch": 16}, "vit", 6, 384),
    "whisper-tiny": ({"layers": 4, "hidden": 384, "heads": 6, "mels": 80}, "bert", 6, 384),
}
# MediaPipe's solution models as its wheel ships them (TFLite, against LiteRT + XNNPACK): ``mp-<stem>``
MEDIAPIPE_WHEEL = "mediapipe==0.10.14"
MEDIAPIPE_MODULES = {
    "face_detection_short_range": "face_detection", "face_detection_full_range_sparse": "face_detection",
    "face_landmark": "face_landmark", "face_landmark_with_attention": "face_landmark",
    "palm_detection_lite": "palm_detection", "palm_detection_full": "palm_detection",
    "hand_landmark_lite": "hand_landmark", "hand_landmark_full": "hand_landmark", "hand_recrop": "holistic_landmark",
    "pose_detection": "pose_detection", "pose_landmark_full": "pose_landmark", "iris_landmark": "iris_landmark",
    "selfie_segmentation": "selfie_segmentation", "selfie_segmentation_landscape": "selfie_segmentation",
}
MEDIAPIPE = tuple(f"mp-{stem}" for stem in MEDIAPIPE_MODULES)
# exporters' output (tests/exporters.py: random weights, as Ultralytics and torch write them); ``exported``
EXPORTED = {"yolo11n": lambda e: e.yolo("yolo11n.yaml", 320), "yolo26n": lambda e: e.yolo("yolo26n.yaml", 320),
            "timm-mobilenetv3": lambda e: e.timm_model("mobilenetv3_large_100", 224),
            # transformers through torch's dynamo exporter (opset 20: Gelu, LayerNormalization as ops)
            "timm-tinyvit": lambda e: e.timm_model("tiny_vit_5m_224", 224, dynamo=True),
            "timm-vits16": lambda e: e.timm_model("vit_small_patch16_224", 224, dynamo=True),
            "timm-swint": lambda e: e.timm_model("swin_tiny_patch4_window7_224", 224, dynamo=True)}
# exported transformers quantized as users quantize them (statically: -qdq, dynamically: -int8)
EXPORTED_QUANTIZED = ("timm-vits16-qdq", "timm-vits16-int8")
TOKENS = (16, 64, 128, 256)
QUANTIZED = ("-int8", "-qdq")  # a transformer row's suffix: dynamically / statically quantized
TRANSFORMERS = tuple(f"{f}@{t}{q}" for q in ("", *QUANTIZED) for f in FAMILIES for t in TOKENS)


def transformer_spec(name: str) -> tuple[str, str]:
    """``family@tokens`` and its quantization suffix ('' for float) of a transformer row's name."""
    for q in QUANTIZED:
        if name.endswith(q):
            return name.removesuffix(q), q
    return name, ""


def transformer_file(name: str, work: Path) -> tuple[Path, Path | None]:
    """A transformer row's model (``family@tokens``, ``-int8``: dynamically quantized, ``-qdq``:
    statically) and its onnxruntime-optimizer twin (None where the optimizer fails on it)."""
    import quant_models
    import zoo_transformers as zt

    spec, quantized = transformer_spec(name)
    family, tokens = spec.split("@")
    kw, model_type, heads, hidden = FAMILIES[family]
    out = work / f"{spec}.onnx"
    if family == "vit-s16":  # (image / 16)² patches + the class token: 17, 65, 122, 257 tokens
        model = zt.vit(out, image=16 * max(2, round((int(tokens) - 1) ** 0.5)), **kw)
    elif family == "whisper-tiny":  # the convolution front end halves the frames
        model = zt.whisper_encoder(out, frames=2 * int(tokens), **kw)
    else:
        model = zt.bert(out, seq=int(tokens), **kw)
    if quantized == "-int8":
        model = zt.dynamic_int8(model, work / f"{spec}-int8.onnx")
    elif quantized == "-qdq":
        model = quant_models.qdq_onnx(model, work / f"{spec}-qdq.onnx")
    try:
        optimized = zt.ort_optimized(model, work / f"{model.stem}-ortopt.onnx", model_type, heads, hidden)
    except Exception as err:  # noqa: BLE001 — the optimizer's failures are many types; the plain model stays
        print(f"(onnxruntime's optimizer failed on {name}: {err}; level all only)")
        optimized = None
    return model, optimized


def exported_file(name: str, work: Path | None = None) -> Path:
    """An exporter's model (:data:`EXPORTED`), exported once into tests/.models/exported; with a
    suffix of :data:`QUANTIZED` (and ``work``), that model quantized into ``work`` as users
    quantize it (its weights inline, the exporter's shape annotations dropped: onnxruntime's
    quantizer re-infers them and refuses stale ones)."""
    import exporters
    import onnx
    import quant_models
    import zoo_transformers as zt

    base, quantized = transformer_spec(name)
    source = EXPORTED[base](exporters)
    if not quantized:
        return source
    if work is None:
        raise ValueError(f"{name}: quantizing needs a work directory")
    out = work / f"{name}.onnx"
    if not out.is_file():
        proto = onnx.load(str(source))
        del proto.graph.value_info[:]
        inline = work / f"{base}-inline.onnx"
        onnx.save(proto, str(inline))
        if quantized == "-int8":
            zt.dynamic_int8(inline, out)
        else:
            quant_models.qdq_onnx(inline, out)
    return out


def mediapipe_file(name: str, work: Path) -> Path:
    """A MediaPipe model (``mp-<stem>``) from MediaPipe's wheel, extracted once into the work dir."""
    import importlib.util

    folder = work / "mediapipe"
    stem = name.removeprefix("mp-")
    if not (folder / f"{stem}.tflite").is_file():
        spec = importlib.util.spec_from_file_location("fetch_test_models", REPO / "scripts" / "fetch_test_models.py")
        fetcher = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fetcher)
        members = {f"{s}.tflite": f"mediapipe/modules/{m}/{s}.tflite" for s, m in MEDIAPIPE_MODULES.items()}
        with tempfile.TemporaryDirectory() as tmp:
            fetcher.fetch(MEDIAPIPE_WHEEL, members, folder, Path(tmp))
    return folder / f"{stem}.tflite"


def model_file(name: str, work: Path) -> Path:
    """The model file for a benchmark name (built with seeded weights where it is made here)."""
    import models
    import zoo

    if name in LIGHT:
        return models.randomized_light(name, work / f"{name}.onnx")
    if name in ZOO:
        return zoo.ZOO[name](work / f"{name}.onnx")
    if name == "face_detection":
        return REPO / "examples" / "face_detection_short_range.tflite"
    if name.removeprefix("mp-") in MEDIAPIPE_MODULES:
        return mediapipe_file(name, work)
    spec = transformer_spec(name)[0]
    if spec in EXPORTED:
        return exported_file(name, work)
    if spec.split("@")[0] in FAMILIES:
        return transformer_file(name, work)[0]
    raise SystemExit(f"unknown model '{name}': choose from {', '.join(LIGHT + ZOO + ('face_detection',) + MEDIAPIPE + tuple(EXPORTED))} "
                     f"(an exported one -int8 / -qdq: quantized) or family@tokens[-int8|-qdq] of {', '.join(FAMILIES)}")


# ---------------------------------------------------------------- baselines


def cleaned_onnx(model: Path, work: Path) -> Path:
    """The model without initializers listed as graph inputs (old exporters list weights as inputs,
    which stops onnxruntime from treating them as constants) — what edgetune imports."""
    import onnx

    m = onnx.load(str(model))
    inits = {i.name for i in m.graph.initializer}
    keep = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    out = work / f"{model.stem}-baseline.onnx"
    onnx.save(m, str(out))
    return out


class Baseline:
    """onnxruntime or LiteRT (XNNPACK) on one model, ``threads`` threads."""

    def __init__(self, model: Path, threads: int, work: Path):
        self.kind = "onnxruntime" if model.suffix == ".onnx" else "litert-xnnpack"
        if self.kind == "onnxruntime":
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.log_severity_level = 3
            self.sess = ort.InferenceSession(str(cleaned_onnx(model, work)), so, providers=["CPUExecutionProvider"])
            self.names = [i.name for i in self.sess.get_inputs()]
        else:
            from ai_edge_litert.interpreter import Interpreter

            # XNNPACK is LiteRT's default CPU delegate for float models.
            self.interp = Interpreter(model_path=str(model), num_threads=threads)
            self.interp.allocate_tensors()
            self.inputs = self.interp.get_input_details()

    def run(self, arrays: list[np.ndarray]) -> None:
        if self.kind == "onnxruntime":
            self.sess.run(None, dict(zip(self.names, arrays)))
            return
        for d, a in zip(self.inputs, arrays):
            self.interp.set_tensor(d["index"], a)
        self.interp.invoke()

    def median_ms(self, arrays: list[np.ndarray], runs: int) -> float:
        for _ in range(5):
            self.run(arrays)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            self.run(arrays)
            times.append(time.perf_counter() - t0)
        return float(np.median(times) * 1e3)


def edgetune_median_ms(package: Path, runs: int) -> float:
    """Median latency of a package through the on-device loader, on its reference inputs."""
    import edgetune_runtime

    model = edgetune_runtime.load(package)
    model.benchmark(number=1, repeat=5)  # warm-up: first-touch of buffers and the thread pool
    return float(model.benchmark(number=1, repeat=runs)["p50_ms"])


def measure_one(kind: str, path: Path, inputs: Path, threads: int, runs: int) -> float:
    """One side, in this (fresh) process: two runtimes' spinning thread pools in one process
    slowed each other (ORT up to 2× in alternation, measured), so each side gets its own."""
    if kind == "edgetune":
        return edgetune_median_ms(path, runs)
    with np.load(inputs) as data:
        arrays = [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]
    # (the baseline's cleaned copy of the model — 330 MB for BERT-base — goes with the directory:
    # left behind, two runs of the transformer rows filled 7 GB of the temporary folder)
    with tempfile.TemporaryDirectory(prefix="baseline-") as work:
        return Baseline(path, threads, Path(work)).median_ms(arrays, runs)


def _in_subprocess(kind: str, path: Path, inputs: Path, threads: int, runs: int) -> float:
    env = dict(os.environ, TVM_NUM_THREADS=str(threads))
    cmd = [sys.executable, __file__, "--measure-one", kind, str(path), str(inputs), str(threads), str(runs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"measuring {kind} failed:\n{proc.stderr[-2000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def measure(package: Path, baselines: dict[str, Path], runs: int, rounds: int, threads: int) -> tuple[float, dict[str, float]]:
    """edgetune and each baseline, alternating ``rounds`` times, each in a fresh process; the best
    median of each (the round least disturbed by the rest of the machine)."""
    import edgetune_runtime

    inputs = package.parent / f"{package.name}-inputs.npz"
    arrays = edgetune_runtime.load(package).reference_inputs()
    np.savez(inputs, **{f"in_{n}": a for n, a in enumerate(arrays)})
    ours: list[float] = []
    theirs: dict[str, list[float]] = {name: [] for name in baselines}
    for _ in range(rounds):
        ours.append(_in_subprocess("edgetune", package, inputs, threads, runs))
        for name, model in baselines.items():
            theirs[name].append(_in_subprocess("baseline", model, inputs, threads, runs))
    return min(ours), {name: min(times) for name, times in theirs.items()}


# ---------------------------------------------------------------- tuning and packaging


def tune(model: Path, records: Path, minutes: float, layout: str) -> dict[str, Any]:
    """``edgetune tune --time`` as a user runs it; its --json summary."""
    cmd = [sys.executable, "-m", "edgetune", "tune", str(model), "--device", "host", "--records", str(records),
           "--time", f"{minutes * 60:.0f}s", "--layout", layout, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"tuning failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def package(model: Path, out: Path, records: Path | None, layout: str) -> dict[str, Any]:
    from edgetune.package import PackageOptions
    from edgetune.package import package as build

    result = build(PackageOptions(model=model, device="host", output=out, records=records,
                                  use_records=records is not None, layout=layout, force=True))
    return result.manifest


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    names = (list(DEFAULT_MODELS) if args.models == "default" else list(LIGHT + ZOO + ("face_detection",))
             if args.models == "all" else list(TRANSFORMERS) if args.models == "transformers"
             else list(MEDIAPIPE) if args.models == "mediapipe" else [*EXPORTED, *EXPORTED_QUANTIZED] if args.models == "exported"
             else args.models.split(","))
    budgets = [float(b) for b in args.budgets.split(",")]
    earlier = json.loads(OUT.read_text())["rows"] if OUT.is_file() else []
    rows = [r for r in earlier if not (r["model"] in names and r["budget_min"] in budgets)]
    measured = stamp()  # each row says where and when it was measured (rows of earlier runs are kept)
    work = Path(args.work)  # kept: a later run with larger budgets continues the same tuning jobs
    work.mkdir(parents=True, exist_ok=True)
    for name in names:
        model = model_file(name, work)
        baseline_kind = "onnxruntime" if model.suffix == ".onnx" else "litert-xnnpack"
        baselines = {baseline_kind: model}
        if transformer_spec(name)[0].split("@")[0] in FAMILIES:
            optimized = transformer_file(name, work)[1]
            if optimized is not None:
                baselines["onnxruntime+optimizer"] = optimized
        records = work / f"records-{name}"
        for minutes in budgets:
            summary: dict[str, Any] = {}
            if minutes:
                summary = tune(model, records, minutes, args.layout)
            try:
                manifest = package(model, work / f"{name}-{minutes:g}", records if minutes else None, args.layout)
            except EdgetuneError as err:  # a row that does not package is a result too; the next rows run
                rows = [r for r in rows if not (r["model"] == name and r["budget_min"] == minutes)]
                rows.append({"model": name, "format": model.suffix[1:], "budget_min": minutes, "error": str(err)})
                print(f"{name:20s} {minutes:5g} min  does not package: {err}", flush=True)
                save(rows, args)
                break
            ours, times = measure(work / f"{name}-{minutes:g}", baselines, args.runs, args.rounds, args.threads)
            baseline_kind = min(times, key=times.__getitem__)
            theirs = times[baseline_kind]
            row = {"model": name, "format": model.suffix[1:], "budget_min": minutes, "layout": args.layout,
                   "trials": summary.get("trials_total", 0), "tuning_s": summary.get("job_elapsed_s", 0.0),
                   "trials_per_min": summary.get("trials_per_min"), "time_breakdown_s": summary.get("time_breakdown_s"),
                   "edgetune_ms": round(ours, 4), "baseline": baseline_kind, "baseline_ms": round(theirs, 4),
                   "baselines_ms": {k: round(v, 4) for k, v in times.items()},
                   "ratio": round(ours / theirs, 3), "schedules": manifest.get("schedules"),
                   "stop_reason": summary.get("stop_reason"), "tasks": summary.get("tasks"),
                   "network_checks": summary.get("network_checks"),  # tune's check: with every record, with those kept
                   "stamp": measured}
            row["converged"] = bool(minutes) and summary["stop_reason"].startswith("no task left")
            rows.append(row)
            rows.sort(key=lambda r: (r["model"], r["budget_min"]))
            print(f"{name:20s} {minutes:5g} min  trials {row['trials']:5d}  edgetune {ours:9.3f} ms  "
                  f"{baseline_kind} {theirs:9.3f} ms  ratio {ours / theirs:6.2f}", flush=True)
            for c in row["network_checks"] or []:
                if c.get("default_ms"):
                    print(f"{'':20s} network check: default {c['default_ms']:.3f} ms, every record {c['tuned_ms']:.3f} ms, "
                          f"kept records {c['kept_ms']:.3f} ms ({sum(not k['kept'] for k in c['kernels'])} of "
                          f"{len(c['kernels'])} vetoed)", flush=True)
            save(rows, args)
            if row["converged"]:  # the job ended before its budget: larger budgets would end the same
                print(f"{name:15s} tuning ended after {row['tuning_s'] / 60:.1f} min ({summary['stop_reason']}); "
                      "this row stands for the larger budgets", flush=True)
                break
    return rows


def save(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    RESULTS.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"stamp": stamp(), "threads": args.threads, "rounds": args.rounds, "runs": args.runs, "rows": rows},
                              indent=1))


def table(rows: list[dict[str, Any]]) -> str:
    """The saved rows as a Markdown table, then the geometric mean ratio per budget."""
    lines = ["| model | budget (min) | tuned (min) | trials | trials/min | edgetune ms | baseline | baseline ms | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    failed = [r for r in rows if "error" in r]
    rows = [r for r in rows if "error" not in r]
    for r in failed:
        lines.append(f"| {r['model']} | {r['budget_min']:g} | does not package: {r['error'][:150]} | | | | | | |")
    for r in rows:
        tpm = f"{r['trials_per_min']:.0f}" if r.get("trials_per_min") else "-"
        ended = " (ended: nothing left pays)" if r.get("converged") else ""
        lines.append(f"| {r['model']} | {r['budget_min']:g}{ended} | {r['tuning_s'] / 60:.1f} | {r['trials']} | {tpm} | "
                     f"{r['edgetune_ms']:.3f} | {r['baseline']} | {r['baseline_ms']:.3f} | {r['ratio']:.2f} |")
    lines.append("")
    for minutes in sorted({r["budget_min"] for r in rows} | {20.0, 60.0}):
        ratios = [r["ratio"] for r in (_at_budget(rows, name, minutes) for name in sorted({r["model"] for r in rows}))
                  if r is not None]
        if not ratios:
            continue
        gmean = float(np.exp(np.mean(np.log(ratios))))
        lines.append(f"budget {minutes:g} min: geometric mean ratio {gmean:.2f}, worst {max(ratios):.2f} "
                     f"over {len(ratios)} models  ")
    return "\n".join(lines)


def report(rows: list[dict[str, Any]]) -> None:
    print("\n" + table(rows))
    plot(rows, RESULTS / "vs_runtimes.png")


def _at_budget(rows: list[dict[str, Any]], name: str, minutes: float) -> dict[str, Any] | None:
    """The model's row for a budget: its own, or the row where its tuning job ended earlier."""
    mine = [r for r in rows if r["model"] == name and (r["budget_min"] == minutes or
                                                      (r.get("converged") and r["budget_min"] < minutes))]
    return min(mine, key=lambda r: r["budget_min"]) if mine else None


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: `pip install '.[bench]'` for the plot)")
        return
    names = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        mine = sorted((r for r in rows if r["model"] == name), key=lambda r: r["tuning_s"])
        ax.plot([r["tuning_s"] / 60 for r in mine], [r["edgetune_ms"] for r in mine], "o-", label="edgetune")
        ax.axhline(min(r["baseline_ms"] for r in mine), linestyle="--", color="gray", label=mine[0]["baseline"])
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("tuning (min)")
        ax.set_ylabel("latency (ms)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="default", help="comma list, 'default', 'all', 'transformers' or 'mediapipe'")
    parser.add_argument("--budgets", default="0,5,20,60", help="tuning minutes, cumulative")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--layout", default="auto")
    parser.add_argument("--work", default=str(RESULTS / "vs_runtimes-work"),
                        help="models, records and packages; kept so larger budgets continue the tuning jobs")
    parser.add_argument("--report", action="store_true", help="only print the table and plot from the saved JSON")
    parser.add_argument("--measure-one", nargs=5, metavar=("KIND", "PATH", "INPUTS", "THREADS", "RUNS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_one:
        kind, path, inputs, threads, runs = args.measure_one
        print(measure_one(kind, Path(path), Path(inputs), int(threads), int(runs)))
        return
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    rows = json.loads(OUT.read_text())["rows"] if args.report else run(args)
    report(rows)


if __name__ == "__main__":
    main()
