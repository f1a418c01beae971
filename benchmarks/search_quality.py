"""Best end-to-end latency vs trials for evolutionary search, Droplet descent and hybrid.

    .venv/bin/python benchmarks/search_quality.py [--seeds 0,1,2] [--evolutionary 3000] [--short 300]
                                                  [--width 64] [--size 56] [--batch 32]

The task set is one CNN (conv3x3/2 → conv3x3 → pool → linear, ``--width`` channels on a
``--size``² input: small_cnn_onnx from tests/models.py) tuned on this host. For each seed, with
fresh records each time: one evolutionary run to ``--evolutionary`` trials (its curve gives the
latency at every budget), one Droplet run and one hybrid run (half exploration, then descent) to
``--short`` trials. Latency is the tuner's estimate Σ calls × best kernel time, measured here.
Prints medians over seeds, writes benchmarks/results/search_quality.json and a PNG of the curves.
The claim under test: hybrid at 300 trials is at least as fast as evolutionary at 3,000.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _curves import REPO, at, curve, median, models, plot


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--evolutionary", type=int, default=3000)
    p.add_argument("--short", type=int, default=300)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--size", type=int, default=56)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--report", action="store_true", help="only rebuild the table and plot from the saved JSON "
                   "(e.g. after an interrupted run)")
    args = p.parse_args()
    out = REPO / "benchmarks" / "results"
    if args.report:
        saved = json.loads((out / "search_quality.json").read_text())
        args = argparse.Namespace(**saved["args"])
        runs = {s: {int(k): v for k, v in by_seed.items() if v} for s, by_seed in saved["curves"].items()}
        report({s: r for s, r in runs.items() if r}, args, out)
        return
    from edgetune.tuning.session import TuneOptions

    work = Path(tempfile.mkdtemp(prefix="search-quality-"))
    model = models.small_cnn_onnx(work / "cnn.onnx", width=args.width, size=args.size)
    out.mkdir(exist_ok=True)
    runs: dict[str, dict[int, list]] = {"evolutionary": {}, "droplet": {}, "hybrid": {}}
    for seed in (int(s) for s in args.seeds.split(",")):
        for search, budget in (("hybrid", args.short), ("droplet", args.short), ("evolutionary", args.evolutionary)):
            opts = TuneOptions(models=(model,), device="host", trials=budget, records=work / f"{search}-{seed}",
                               search=search, seed=seed, batch=args.batch)
            points, result = curve(opts)
            runs[search][seed] = points
            print(f"seed {seed} {search:12s} {result.snapshot.spent:5d} trials  {result.snapshot.elapsed_s:7.1f} s  "
                  f"best {points[-1][1][0]:.4f} ms  batches {result.batches}", flush=True)
            (out / "search_quality.json").write_text(json.dumps({"args": vars(args), "curves": runs}, indent=1))
    report(runs, args, out)


def report(runs: dict[str, dict[int, list]], args: argparse.Namespace, out: Path) -> None:
    """Medians over seeds at the checkpoints, the claim's verdict, JSON and PNG."""
    checkpoints = sorted({args.short, args.evolutionary, 100, 1000} & set(range(args.evolutionary + 1)))
    table = []
    for search, by_seed in runs.items():
        for c in checkpoints:
            if search != "evolutionary" and c > args.short:
                continue
            table.append({"search": search, "trials": c, "median_ms": median([at(pts, c) for pts in by_seed.values()]),
                          "per_seed_ms": [at(pts, c) for pts in by_seed.values()]})
    print("\n| search | trials | median estimated latency ms | per seed |\n|---|---|---|---|")
    for row in table:
        per = ", ".join(f"{v:.4f}" if v else "-" for v in row["per_seed_ms"])
        print(f"| {row['search']} | {row['trials']} | {row['median_ms']:.4f} | {per} |")
    hyb = median([at(p, args.short) for p in runs["hybrid"].values()])
    evo = median([at(p, args.evolutionary) for p in runs["evolutionary"].values()])
    verdict = hyb is not None and evo is not None and hyb <= evo
    print(f"\nhybrid@{args.short} {hyb:.4f} ms vs evolutionary@{args.evolutionary} {evo:.4f} ms: "
          f"claim {'holds' if verdict else 'does not hold'} here")
    first = sorted(runs["evolutionary"])[0]
    series = {f"{s} (seed {first})": [(t, lat[0]) for t, lat in runs[s].get(first, []) if lat[0] is not None] for s in runs}
    png = plot(out / "search_quality.png", "estimated latency vs trials", series, "ms")
    (out / "search_quality.json").write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "report"},
                                                         "table": table, "claim_holds": verdict,
                                                         "curves": runs, "plot": png.name if png else None}, indent=1))


if __name__ == "__main__":
    main()
