"""Trials needed to meet two latency targets: objective ``targets`` vs ``sum``.

    .venv/bin/python benchmarks/objectives.py [--seeds 0,1] [--budget 600] [--calibrate 160]
                                              [--loose 1.4] [--tight 0.9] [--batch 16]

Two CNNs of different widths (small_cnn_onnx from tests/models.py) are tuned together on this
host. A calibration run (objective sum, ``--calibrate`` trials) gives latencies L_a, L_b; the
targets are then T_a = loose × L_a (met early) and T_b = tight × L_b (needs more work). For each
seed and objective, with fresh records, the job runs to ``--budget`` trials (``targets`` stops by
itself once both are met) and we note the first trial count at which both estimates meet their
targets. Prints a table, writes benchmarks/results/objectives.json and objectives.png.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _curves import REPO, curve, median, models, plot
from _stamp import stamp  # noqa: E402


def first_met(points: list, targets: list[float]) -> int | None:
    for spent, lat in points:
        if all(v is not None and v <= t for v, t in zip(lat, targets)):
            return spent
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--budget", type=int, default=600)
    p.add_argument("--calibrate", type=int, default=160)
    p.add_argument("--loose", type=float, default=1.4)
    p.add_argument("--tight", type=float, default=0.9)
    p.add_argument("--batch", type=int, default=16)
    args = p.parse_args()
    from edgetune.tuning.session import TuneOptions

    work = Path(tempfile.mkdtemp(prefix="objectives-"))
    nets = (models.small_cnn_onnx(work / "a.onnx", width=32, size=56),
            models.small_cnn_onnx(work / "b.onnx", seed=1, width=48, size=56))
    base = dict(models=nets, device="host", batch=args.batch)
    cal, _ = curve(TuneOptions(**base, trials=args.calibrate, records=work / "calibrate", objective="sum"))
    la, lb = cal[-1][1]
    if la is None or lb is None:
        raise SystemExit(f"--calibrate {args.calibrate} trials did not measure every task once; give more")
    targets = [args.loose * la, args.tight * lb]
    print(f"calibration ({args.calibrate} trials, sum): a {la:.4f} ms, b {lb:.4f} ms → targets a {targets[0]:.4f} ms, "
          f"b {targets[1]:.4f} ms", flush=True)
    rows, curves = [], {}
    for seed in (int(s) for s in args.seeds.split(",")):
        for objective in ("targets", "sum"):
            opts = TuneOptions(**base, trials=args.budget, records=work / f"{objective}-{seed}", objective=objective,
                               seed=seed, targets={"a": targets[0] / 1e3, "b": targets[1] / 1e3})
            points, result = curve(opts)
            met = first_met(points, targets)
            curves[f"{objective}-{seed}"] = points
            rows.append({"objective": objective, "seed": seed, "trials_to_meet": met, "spent": result.snapshot.spent,
                         "final_ms": points[-1][1], "stop_reason": result.stop_reason})
            print(f"seed {seed} {objective:8s} met after {met if met is not None else '-'} trials "
                  f"(ran {result.snapshot.spent}, {result.stop_reason}); final a {points[-1][1][0]:.4f} b {points[-1][1][1]:.4f} ms",
                  flush=True)
    out = REPO / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    summary = {o: median([r["trials_to_meet"] for r in rows if r["objective"] == o]) for o in ("targets", "sum")}
    print("\n| objective | seed | trials to meet both targets | trials run | stop |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['objective']} | {r['seed']} | {r['trials_to_meet'] if r['trials_to_meet'] is not None else 'not met'} | "
              f"{r['spent']} | {r['stop_reason']} |")
    print(f"median trials to meet: targets {summary['targets']}, sum {summary['sum']}")
    series = {}
    for key, pts in curves.items():
        if key.endswith("-" + args.seeds.split(",")[0]):
            for j, name in enumerate("ab"):
                series[f"{key.rsplit('-', 1)[0]}: {name} / target"] = [(t, lat[j] / targets[j]) for t, lat in pts if lat[j]]
    png = plot(out / "objectives.png", "latency / target vs trials (below 1: met)", series, "latency / target", {"target": 1.0})
    (out / "objectives.json").write_text(json.dumps({"stamp": stamp(), "args": vars(args), "targets_ms": targets, "rows": rows,
                                                     "median_trials_to_meet": summary, "curves": curves,
                                                     "plot": png.name if png else None}, indent=1))


if __name__ == "__main__":
    main()
