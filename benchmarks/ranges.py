"""What a range package costs: one package for lengths 1..256 against a package built for each
length, on this host.

    .venv/bin/python benchmarks/ranges.py [--lengths 16,40,64,100,128,200,256] [--runs 30] [--rounds 3]

The model is the MiniLM-like encoder of ``benchmarks/vs_runtimes.py`` (6 layers × 384, 12
heads; built by ``tests/zoo_transformers.py`` with a dynamic sequence axis, as exporters write
it). Three packages serve the range, all untuned for ``host``: the symbolic one (the default:
one library, ``--input-shape NAME=1,1..256`` for its three inputs), the bucket one (``--buckets``,
the default buckets 16..256) and, per ``--lengths`` entry, a fixed-length package. Per length,
all three are timed through the loader's ``run`` (what a caller pays: the bucket package's
padding to its bucket and cutting back included), alternating for ``--rounds`` rounds of
``--runs`` calls, the best round's median kept.

Prints a table; writes ``benchmarks/results/ranges.json``. Never run it beside the tests or
another benchmark.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
RESULTS = REPO / "benchmarks" / "results"
OUT = RESULTS / "ranges.json"
NAMES = ("input_ids", "attention_mask", "token_type_ids")

import numpy as np  # noqa: E402


def _inputs(length: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(length)
    return {"input_ids": rng.integers(0, 1000, (1, length)).astype("int64"),
            "attention_mask": np.ones((1, length), "int64"), "token_type_ids": np.zeros((1, length), "int64")}


def _median_ms(model: Any, inputs: dict[str, np.ndarray], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        model.run(**inputs)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", default="16,40,64,100,128,200,256")
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]

    import zoo_transformers as zt

    import edgetune_runtime
    from edgetune.package import PackageOptions, package
    from edgetune.ranges import default_buckets

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = zt.bert(work / "minilm.onnx", layers=6, hidden=384, heads=12, vocab=1000, seq=16, dynamic=True)
        ranged = {n: (1, (1, 256)) for n in NAMES}
        start = time.perf_counter()
        symbolic = package(PackageOptions(model=model, device="host", output=work / "symbolic", input_shapes=ranged,
                                          use_records=False))
        symbolic_build_s = time.perf_counter() - start
        buckets = default_buckets(1, 256)
        start = time.perf_counter()
        bucketed = package(PackageOptions(model=model, device="host", output=work / "buckets", input_shapes=ranged,
                                          use_records=False, buckets=tuple(buckets)))
        buckets_build_s = time.perf_counter() - start
        print(f"range 1..256: symbolic package built in {symbolic_build_s:.0f} s, buckets {buckets} in "
              f"{buckets_build_s:.0f} s", flush=True)
        sym_model, bucket_model = edgetune_runtime.load(symbolic.path), edgetune_runtime.load(bucketed.path)
        for length in lengths:
            start = time.perf_counter()
            fixed = package(PackageOptions(model=model, device="host", output=work / f"L{length}",
                                           input_shapes={n: (1, length) for n in NAMES}, use_records=False))
            build_s = time.perf_counter() - start
            fixed_model = edgetune_runtime.load(fixed.path)
            inputs = _inputs(length)
            models = {"fixed": fixed_model, "symbolic": sym_model, "buckets": bucket_model}
            for m in models.values():
                _median_ms(m, inputs, 5)  # warm-up: the bucket's first load, buffers, the thread pool
            times: dict[str, list[float]] = {k: [] for k in models}
            for _ in range(args.rounds):
                for k, m in models.items():
                    times[k].append(_median_ms(m, inputs, args.runs))
            best = {k: min(v) for k, v in times.items()}
            bucket = next(b for b in buckets if b >= length)
            row = {"length": length, "bucket": bucket, "fixed_ms": best["fixed"], "symbolic_ms": best["symbolic"],
                   "buckets_ms": best["buckets"], "symbolic_ratio": best["symbolic"] / best["fixed"],
                   "buckets_ratio": best["buckets"] / best["fixed"], "fixed_build_s": round(build_s, 1)}
            rows.append(row)
            print(f"length {length:4d}: fixed {row['fixed_ms']:.3f} ms, symbolic {row['symbolic_ms']:.3f} ms "
                  f"({row['symbolic_ratio']:.2f}), bucket {bucket} {row['buckets_ms']:.3f} ms ({row['buckets_ratio']:.2f})",
                  flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"host": platform.processor() or platform.machine(), "model": "MiniLM-like 6 x 384",
                               "range": [1, 256], "buckets": buckets, "symbolic_build_s": round(symbolic_build_s, 1),
                               "buckets_build_s": round(buckets_build_s, 1), "runs": args.runs, "rounds": args.rounds,
                               "rows": rows}, indent=2))
    print(f"\n{'length':>6} {'fixed ms':>9} {'symbolic':>9} {'ratio':>6} {'bucket':>6} {'padded':>9} {'ratio':>6}")
    for r in rows:
        print(f"{r['length']:>6} {r['fixed_ms']:>9.3f} {r['symbolic_ms']:>9.3f} {r['symbolic_ratio']:>6.2f} "
              f"{r['bucket']:>6} {r['buckets_ms']:>9.3f} {r['buckets_ratio']:>6.2f}")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
