"""What a range package costs: one package for a range of lengths against a package built for
each length, on this host.

    .venv/bin/python benchmarks/ranges.py [--model minilm|speech|ocr|ocr-mobile] [--lengths ...] [--runs 30] [--rounds 3]
                                          [--tune 10m]

Models (built by the tests' generators with their length axis dynamic, as exporters write it):

- ``minilm``: the MiniLM-like encoder of ``benchmarks/vs_runtimes.py`` (6 × 384, 12 heads),
  tokens 1..256, timed at 16, 40, 64, 100, 128, 200, 256;
- ``speech``: a Whisper-tiny-like speech encoder without a mask (4 × 384, 80 mels, two conv1d
  front-end layers, the second of stride 2), frames 16..1000, timed at 100, 250, 500, 1000;
- ``ocr``: the CRNN text recognizer of the tests (conv stack, 2-layer BiLSTM) on 32-pixel lines,
  widths 32..480, timed at 160 and 320 pixels;
- ``ocr-mobile``: a PP-OCR-style recognizer (``tests/zoo.py: ocr_rec``: inverted residuals with
  depthwise convolutions, a CTC head), 3 × 32-pixel lines, widths 32..960, timed at 160, 320, 640;
- ``minilm-batch``: the MiniLM-like encoder with two ranges, batch 1..8 × tokens 1..128 (one
  symbolic library, two variables), timed at 1x16, 4x64, 8x128 (``--lengths`` takes such points).

Three packages serve the range, all untuned for ``host``: the symbolic one (the default: one
library), the bucket one (``--buckets``, the range's default buckets; only where padding is
exact: ``minilm``) and, per length, a fixed-length package. Per length, all are timed through the
loader's ``run`` (what a caller pays: the bucket package's padding and cutting back included),
alternating for ``--rounds`` rounds of ``--runs`` calls, the best round's median kept.

``--tune TIME`` also tunes the range as ``edgetune tune`` does (one network of symbolic shape,
its kernels timed at the benchmark's lengths, weighted equally: ``--shape-weights``) for that
long on this host, and times the symbolic package built with those records beside the others
("tuned"): what tuning a range package buys at each length.

Prints a table; writes ``benchmarks/results/ranges[-MODEL].json``. Never run it beside the tests
or another benchmark.

``--estimate pi4|pi5`` instead builds the packages for that board and compares them by the
Raspberry Pi estimate (``benchmarks/arm_estimate.py``'s method: instructions counted under
qemu, cycles from llvm-mca, one core): the symbolic package and a package for each length, on
the same inputs of that length. Counts repeat exactly, so this may run beside other work; it
writes ``benchmarks/results/ranges-MODEL-BOARD.json``.
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
from _stamp import stamp  # noqa: E402


def _minilm(work: Path) -> tuple[Path, dict[str, tuple[Any, ...]], Any]:
    import zoo_transformers as zt

    model = zt.bert(work / "minilm.onnx", layers=6, hidden=384, heads=12, vocab=1000, seq=16, dynamic=True)

    def inputs(length: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(length)
        return {"input_ids": rng.integers(0, 1000, (1, length)).astype("int64"),
                "attention_mask": np.ones((1, length), "int64"), "token_type_ids": np.zeros((1, length), "int64")}
    return model, {n: (1, "L") for n in NAMES}, inputs


def _minilm_batch(work: Path) -> tuple[Path, dict[str, tuple[Any, ...]], Any]:
    model, _template, _inputs = _minilm(work)

    def inputs(point: tuple[int, int]) -> dict[str, np.ndarray]:
        batch, length = point
        rng = np.random.default_rng(batch * 1000 + length)
        return {"input_ids": rng.integers(0, 1000, (batch, length)).astype("int64"),
                "attention_mask": np.ones((batch, length), "int64"), "token_type_ids": np.zeros((batch, length), "int64")}
    return model, {n: ("B", "L") for n in NAMES}, inputs


def _speech(work: Path) -> tuple[Path, dict[str, tuple[Any, ...]], Any]:
    import zoo_transformers as zt

    model = zt.whisper_encoder(work / "speech.onnx", layers=4, hidden=384, heads=6, mels=80, dynamic=True)
    return model, {"input_features": (1, 80, "L")}, lambda n: {
        "input_features": np.random.default_rng(n).standard_normal((1, 80, n)).astype("float32")}


def _ocr(work: Path) -> tuple[Path, dict[str, tuple[Any, ...]], Any]:
    import onnx
    import rnn_models

    model = rnn_models.crnn(work / "crnn.onnx", width=128)
    proto = onnx.load(str(model))  # the width axis dynamic, as exporters write it
    for vi, axis, label in ((proto.graph.input[0], 3, "width"), (proto.graph.output[0], 0, "steps")):
        vi.type.tensor_type.shape.dim[axis].dim_param = label
    onnx.save(proto, str(model))
    return model, {"image": (1, 1, 32, "L")}, lambda n: {
        "image": np.random.default_rng(n).uniform(0, 1, (1, 1, 32, n)).astype("float32")}


def _ocr_mobile(work: Path) -> tuple[Path, dict[str, tuple[Any, ...]], Any]:
    import zoo

    model = zoo.ocr_rec(work / "ocr_rec.onnx")
    return model, {"x": (1, 3, 32, "L")}, lambda n: {
        "x": np.random.default_rng(n).uniform(-1, 1, (1, 3, 32, n)).astype("float32")}


MODELS = {"minilm": (_minilm, (1, 256), "16,40,64,100,128,200,256", True),
          "speech": (_speech, (16, 1000), "100,250,500,1000", False),
          "ocr": (_ocr, (32, 480), "160,320", False),
          "ocr-mobile": (_ocr_mobile, (32, 960), "160,320,640", False),
          "minilm-batch": (_minilm_batch, ((1, 8), (1, 128)), "1x16,4x64,8x128", False)}


def _shapes(template: dict[str, tuple[Any, ...]], length: Any) -> dict[str, tuple[Any, ...]]:
    """The template's ``L`` at ``length`` (a length or a range); a template with ``B`` and ``L``
    takes a pair of them (batch, length)."""
    two = any("B" in dims for dims in template.values())
    values = dict(zip("BL", length)) if two else {"L": length}
    return {name: tuple(values.get(d, d) if isinstance(d, str) else d for d in dims) for name, dims in template.items()}


def _label(point: Any) -> str:
    return "x".join(map(str, point)) if isinstance(point, tuple) else str(point)


def _point(text: str) -> Any:
    """``64`` → 64; ``4x64`` → (4, 64)."""
    values = tuple(int(v) for v in text.split("x"))
    return values if len(values) > 1 else values[0]


def _median_ms(model: Any, inputs: dict[str, np.ndarray], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        model.run(**inputs)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def estimate(model_name: str, board_name: str, lengths: list[Any], rows: int = 0) -> None:
    """Symbolic package vs a package per length on a Raspberry Pi, by the armsim estimate."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import armsim

    from edgetune.package import PackageOptions, package

    missing = armsim.missing_tools()
    if missing:
        raise SystemExit(f"missing: {', '.join(missing)} — run scripts/install-system-deps.sh (as root)")
    make, (lo, hi), _default, _exact = MODELS[model_name]
    board = armsim.BOARDS[board_name]
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model, template, make_inputs = make(work)

        def build(name: str, shapes: dict[str, tuple[Any, ...]], variants: Any = None) -> Path:
            return package(PackageOptions(model=model, device=board_name, output=work / name, input_shapes=shapes,
                                          use_records=False, verify=False, conv_variants=variants)).path

        def cycles(target: Path, length: int) -> float:
            inputs = work / f"in-{_label(length)}.npz"
            np.savez(inputs, **{f"in_{i}": a for i, a in enumerate(make_inputs(length).values())})
            counts = armsim.count(board, "edgetune", target, inputs, runs=1)
            return float(armsim.estimate(counts, [board])["boards"][board.name]["cycles"])

        symbolic = build("symbolic", _shapes(template, (lo, hi)))
        tiles = build("rows", _shapes(template, (lo, hi)), {"rows": str(rows)}) if rows else None
        for length in lengths:
            fixed_c, sym_c = cycles(build(f"L{_label(length)}", _shapes(template, length)), length), cycles(symbolic, length)
            out.append({"length": length, "fixed_mcycles": fixed_c / 1e6, "symbolic_mcycles": sym_c / 1e6,
                        "ratio": sym_c / fixed_c})
            if tiles:
                rows_c = cycles(tiles, length)
                out[-1].update(rows=rows, rows_mcycles=rows_c / 1e6, rows_ratio=rows_c / fixed_c)
            print(f"{model_name} {board_name} length {_label(length)}: fixed {fixed_c / 1e6:.2f} M cycles, symbolic "
                  f"{sym_c / 1e6:.2f} M ({sym_c / fixed_c:.2f})"
                  + (f", rows{rows} {rows_c / 1e6:.2f} M ({rows_c / fixed_c:.2f})" if tiles else ""), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"ranges-{model_name}-{board_name}.json"
    path.write_text(json.dumps({"stamp": stamp(), "model": model_name, "board": board_name, "range": [lo, hi],
                               "method": armsim.__doc__.split("\n\n")[0], "rows": out}, indent=2))
    print(f"\n{'length':>6} {'fixed Mcyc':>11} {'symbolic':>9} {'ratio':>6}")
    for r in out:
        print(f"{_label(r['length']):>6} {r['fixed_mcycles']:>11.2f} {r['symbolic_mcycles']:>9.2f} {r['ratio']:>6.2f}")
    print(f"wrote {path}")


def _tuned(model: Path, ranged: dict[str, tuple[Any, ...]], lengths: list[int], budget: str, work: Path) -> Any:
    """The symbolic range package with records of ``edgetune tune`` for ``budget`` on this host,
    its kernels timed at ``lengths`` (equal weights; the network check as the CLI runs it)."""
    from edgetune.package import PackageOptions, package
    from edgetune.tuning.options import parse_duration
    from edgetune.tuning.session import TuneOptions, tune

    records = work / "records"
    result = tune(TuneOptions(models=(model,), device="host", time_s=parse_duration(budget), records=records,
                              input_shapes=ranged, shape_weights={n: 1.0 for n in lengths}),
                  notice=lambda m: print(f"  tune: {m}", flush=True))
    net = result.snapshot.networks[0]
    print(f"  tuned {result.snapshot.spent_now} trials: estimate {net.before_ms:.3f} → {net.estimate_ms:.3f} ms "
          f"(mean over lengths {', '.join(map(str, lengths))})", flush=True)
    return package(PackageOptions(model=model, device="host", output=work / "tuned", input_shapes=ranged, records=records))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="minilm")
    p.add_argument("--lengths", default="")
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--estimate", choices=("pi4", "pi5"), default="", help="a Raspberry Pi by estimate, not this host")
    p.add_argument("--tune", default="", metavar="TIME", help="also tune the symbolic range for this long (e.g. 10m)")
    p.add_argument("--rows", type=int, default=0, metavar="N",
                   help="also time the symbolic package built with every register-tile height over the length at N")
    args = p.parse_args()
    make, (lo, hi), default_lengths, exact_padding = MODELS[args.model]
    lengths = [_point(x) for x in (args.lengths or default_lengths).split(",")]
    if args.estimate:
        estimate(args.model, args.estimate, lengths, args.rows)
        return

    import edgetune_runtime
    from edgetune.package import PackageOptions, package
    from edgetune.ranges import default_buckets

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model, template, make_inputs = make(work)
        ranged = _shapes(template, (lo, hi))
        start = time.perf_counter()
        symbolic = package(PackageOptions(model=model, device="host", output=work / "symbolic", input_shapes=ranged,
                                          use_records=False))
        symbolic_build_s = time.perf_counter() - start
        packages = {"symbolic": edgetune_runtime.load(symbolic.path)}
        if args.rows:  # every symbolic kernel's tile height at --rows (what a tuned build may choose)
            tiles = package(PackageOptions(model=model, device="host", output=work / "rows", input_shapes=ranged,
                                           use_records=False, conv_variants={"rows": str(args.rows)}))
            packages["rows"] = edgetune_runtime.load(tiles.path)
        tune_s = None
        if args.tune:
            start = time.perf_counter()
            packages["tuned"] = edgetune_runtime.load(_tuned(model, ranged, lengths, args.tune, work).path)
            tune_s = time.perf_counter() - start
        buckets, buckets_build_s = (default_buckets(lo, hi) if exact_padding else None), None
        if exact_padding:
            start = time.perf_counter()
            bucketed = package(PackageOptions(model=model, device="host", output=work / "buckets", input_shapes=ranged,
                                              use_records=False, buckets=tuple(buckets)))
            buckets_build_s = time.perf_counter() - start
            packages["buckets"] = edgetune_runtime.load(bucketed.path)
        span = " × ".join(f"{a}..{b}" for a, b in (lo, hi)) if isinstance(lo, tuple) else f"{lo}..{hi}"
        print(f"{args.model} {span}: symbolic package built in {symbolic_build_s:.0f} s"
              + (f", buckets {buckets} in {buckets_build_s:.0f} s" if buckets_build_s else ""), flush=True)
        for length in lengths:
            start = time.perf_counter()
            fixed = package(PackageOptions(model=model, device="host", output=work / f"L{_label(length)}",
                                           input_shapes=_shapes(template, length), use_records=False))
            build_s = time.perf_counter() - start
            models = {"fixed": edgetune_runtime.load(fixed.path), **packages}
            inputs = make_inputs(length)
            for m in models.values():
                _median_ms(m, inputs, 5)  # warm-up: the bucket's first load, buffers, the thread pool
            times: dict[str, list[float]] = {k: [] for k in models}
            for _ in range(args.rounds):
                for k, m in models.items():
                    times[k].append(_median_ms(m, inputs, args.runs))
            best = {k: min(v) for k, v in times.items()}
            row = {"length": length, "fixed_ms": best["fixed"], "symbolic_ms": best["symbolic"],
                   "symbolic_ratio": best["symbolic"] / best["fixed"], "fixed_build_s": round(build_s, 1)}
            if "buckets" in best:
                row.update(bucket=next(b for b in buckets if b >= length), buckets_ms=best["buckets"],
                           buckets_ratio=best["buckets"] / best["fixed"])
            if "tuned" in best:
                row.update(tuned_ms=best["tuned"], tuned_ratio=best["tuned"] / best["fixed"])
            if "rows" in best:
                row.update(rows=args.rows, rows_ms=best["rows"], rows_ratio=best["rows"] / best["fixed"])
            rows.append(row)
            print(f"length {_label(length):>4}: fixed {row['fixed_ms']:.3f} ms, symbolic {row['symbolic_ms']:.3f} ms "
                  f"({row['symbolic_ratio']:.2f})" + (f", bucket {row['bucket']} {row['buckets_ms']:.3f} ms "
                                                       f"({row['buckets_ratio']:.2f})" if "bucket" in row else "")
                  + (f", tuned symbolic {row['tuned_ms']:.3f} ms ({row['tuned_ratio']:.2f})" if "tuned" in row else "")
                  + (f", symbolic rows{args.rows} {row['rows_ms']:.3f} ms ({row['rows_ratio']:.2f})" if "rows" in row else ""),
                  flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = OUT if args.model == "minilm" else OUT.with_name(f"ranges-{args.model}.json")
    out.write_text(json.dumps({"stamp": stamp(), "host": platform.processor() or platform.machine(), "model": args.model,
                               "range": [lo, hi], "buckets": buckets if exact_padding else None,
                               "symbolic_build_s": round(symbolic_build_s, 1),
                               "buckets_build_s": round(buckets_build_s, 1) if buckets_build_s else None,
                               "tune": args.tune or None, "tune_s": round(tune_s, 1) if tune_s else None,
                               "runs": args.runs, "rounds": args.rounds, "rows": rows}, indent=2))
    print(f"\n{'length':>6} {'fixed ms':>9} {'symbolic':>9} {'ratio':>6}" + (f" {'bucket':>6} {'padded':>9} {'ratio':>6}"
                                                                             if exact_padding else "")
          + (f" {'tuned':>9} {'ratio':>6}" if args.tune else ""))
    for r in rows:
        print(f"{_label(r['length']):>6} {r['fixed_ms']:>9.3f} {r['symbolic_ms']:>9.3f} {r['symbolic_ratio']:>6.2f}"
              + (f" {r['bucket']:>6} {r['buckets_ms']:>9.3f} {r['buckets_ratio']:>6.2f}" if "bucket" in r else "")
              + (f" {r['tuned_ms']:>9.3f} {r['tuned_ratio']:>6.2f}" if "tuned_ms" in r else ""))
    if tune_s:
        print(f"tuned for {args.tune} ({tune_s:.0f} s with its package)")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
