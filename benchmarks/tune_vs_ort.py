"""Tuned TVM vs onnxruntime on this host, at growing tuning budgets.

    .venv/bin/python benchmarks/tune_vs_ort.py [--models squeezenet,resnet50] [--budgets 0,200,1000,3000]
                                               [--threads 2] [--batch 32] [--search evolutionary]

For each model (a light CNN from the onnx package with seeded random weights) the budgets are
spent as one resumable tuning job: budget 1000 continues where 200 stopped, so the tuning time
column is cumulative. After each budget the model is packaged with the records so far and its
end-to-end latency measured with the on-device loader, then onnxruntime's latency on the same
input in the same process (both limited to --threads), alternating three times and keeping the
best median of each. Prints a table and writes benchmarks/results/tune_vs_ort.json (rewritten
after every row, so an interrupted run keeps what it measured). ``--remeasure WORKDIR`` measures
an earlier run's packages again, e.g. once the machine is quiet.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from _stamp import stamp  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import models  # noqa: E402
import numpy as np  # noqa: E402


def _weights_not_inputs(model: Path) -> Path:
    """The light models list weights as graph inputs too, which stops onnxruntime from treating
    them as constants (no constant folding); give it the model without them, as edgetune does."""
    import onnx

    m = onnx.load(str(model))
    inits = {i.name for i in m.graph.initializer}
    keep = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    out = model.with_name(model.stem + "-ort.onnx")
    onnx.save(m, str(out))
    return out


def ort_latency_ms(model: Path, inputs: dict[str, np.ndarray], threads: int, runs: int) -> float:
    """Median of ``runs`` onnxruntime inferences (after warm-up) with ``threads`` intra-op threads."""
    import onnxruntime as ort

    model = _weights_not_inputs(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, inputs)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, inputs)
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def tvm_latency_ms(package: Path, runs: int) -> tuple[float, dict[str, np.ndarray]]:
    """Median latency of the package through the on-device loader, and its reference inputs."""
    import edgetune_runtime

    model = edgetune_runtime.load(package)
    stats = model.benchmark(number=max(1, runs // 10), repeat=10)
    inputs = model.reference_inputs()
    names = [s["original_name"] for s in model.inputs]
    return float(stats["p50_ms"]), dict(zip(names, inputs))


def measure_pair(package: Path, onnx_path: Path, threads: int, runs: int, rounds: int = 3) -> tuple[float, float]:
    """TVM and onnxruntime latency, alternating ``rounds`` times; the best median of each (on a
    shared machine, the round least disturbed by others is the closest to the truth for both)."""
    tvm_runs, ort_runs = [], []
    for _ in range(rounds):
        tvm_ms, inputs = tvm_latency_ms(package, runs)
        tvm_runs.append(tvm_ms)
        ort_runs.append(ort_latency_ms(onnx_path, inputs, threads, runs))
    return min(tvm_runs), min(ort_runs)


def remeasure(args: argparse.Namespace) -> list[dict]:
    """Measure the packages of an earlier run again (``--remeasure WORKDIR``), e.g. when the
    machine is quiet; tuning times are kept from that run's JSON."""
    out = REPO / "benchmarks" / "results" / "tune_vs_ort.json"
    data = json.loads(out.read_text())
    work = Path(args.remeasure)
    for row in data["rows"]:
        pkg = work / f"{row['model']}-{row['budget']}"
        tvm_ms, ort_ms = measure_pair(pkg, work / f"{row['model']}.onnx", args.threads, args.runs)
        row.update(tvm_ms=round(tvm_ms, 3), ort_ms=round(ort_ms, 3), tvm_over_ort=round(tvm_ms / ort_ms, 2), remeasured=True)
        print(f"{row['model']:12s} budget {row['budget']:5d}  tvm {tvm_ms:9.3f} ms  ort {ort_ms:8.3f} ms  "
              f"ratio {tvm_ms / ort_ms:6.2f}", flush=True)
    data["stamp"] = stamp()
    out.write_text(json.dumps(data, indent=2))
    return data["rows"]


def run(args: argparse.Namespace) -> list[dict]:
    from edgetune.package import PackageOptions, package
    from edgetune.tuning.session import TuneOptions, tune

    out = REPO / "benchmarks" / "results" / "tune_vs_ort.json"
    out.parent.mkdir(exist_ok=True)
    names = args.models.split(",")
    earlier = json.loads(out.read_text())["rows"] if out.is_file() else []
    rows: list[dict] = [r for r in earlier if r["model"] not in names]  # other models' rows are kept
    work = Path(tempfile.mkdtemp(prefix="tune-vs-ort-"))
    for name in names:
        onnx_path = models.randomized_light(name, work / f"{name}.onnx")
        records = work / f"records-{name}"
        tuning_s = 0.0
        for budget in (int(b) for b in args.budgets.split(",")):
            if budget:
                t0 = time.perf_counter()
                result = tune(TuneOptions(models=(onnx_path,), device="host", trials=budget, records=records,
                                          batch=args.batch, search=args.search, seed=args.seed),
                              notice=lambda m: print(f"  {m}", file=sys.stderr))
                tuning_s += time.perf_counter() - t0
                spent = result.snapshot.spent
            else:
                spent = 0
            pkg = work / f"{name}-{budget}"
            package(PackageOptions(model=onnx_path, device="host", output=pkg, records=records if budget else None,
                                   use_records=bool(budget)))
            tvm_ms, ort_ms = measure_pair(pkg, onnx_path, args.threads, args.runs)
            row = {"model": name, "budget": budget, "trials": spent, "tuning_s": round(tuning_s, 1),
                   "tvm_ms": round(tvm_ms, 3), "ort_ms": round(ort_ms, 3), "tvm_over_ort": round(tvm_ms / ort_ms, 2)}
            rows.append(row)
            print(f"{name:12s} budget {budget:5d}  trials {spent:5d}  tuning {tuning_s:8.1f} s  "
                  f"tvm {tvm_ms:9.3f} ms  ort {ort_ms:8.3f} ms  ratio {tvm_ms / ort_ms:6.2f}", flush=True)
            out.write_text(json.dumps({"stamp": stamp(), "host": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                                       "threads": args.threads, "search": args.search, "batch": args.batch,
                                       "rows": rows}, indent=2))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="squeezenet,resnet50")
    parser.add_argument("--budgets", default="0,200,1000,3000")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--search", default="evolutionary")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--remeasure", metavar="WORKDIR", help="only measure the packages of an earlier run again")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    rows = remeasure(args) if args.remeasure else run(args)
    print("\n| model | budget | trials | tuning s | tuned TVM ms | onnxruntime ms | TVM / ORT |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['budget']} | {r['trials']} | {r['tuning_s']} | {r['tvm_ms']} | {r['ort_ms']} | {r['tvm_over_ort']} |")


if __name__ == "__main__":
    main()
