"""``edgetune package MODEL --device PROFILE -o OUT``."""

from __future__ import annotations

from pathlib import Path

import typer

from ._common import boundary, out, print_json, progress
from .inspect_cmd import BIND_HELP, INPUT_SHAPE_HELP, PRECISION_HELP


@boundary
def package(
    model: Path = typer.Argument(..., help="An .onnx or .tflite file."),
    device: str = typer.Option(..., "--device", "-d", help="Device profile (`edgetune targets`) or board (`edgetune devices list`)."),
    output: Path = typer.Option(..., "--output", "-o", help="Package directory to write."),
    input_shape: list[str] = typer.Option([], "--input-shape", metavar="NAME=DIMS", help=INPUT_SHAPE_HELP + " A dimension may be a "
                                          "range, LO..HI (input_ids=1,1..256): one package for every length in it; several "
                                          "dimensions may have ranges (input_ids=1..8,1..256: batch × length), each its own."),
    buckets: str = typer.Option("", "--buckets", help="Build a range package as fixed lengths, e.g. 32,64,128,256 "
                                "(a call is padded to the next; records of `edgetune tune --buckets` apply). Default "
                                "for ONNX: one library with symbolic shapes (records of `edgetune tune` with the range apply)."),
    bind: list[str] = typer.Option([], "--bind", metavar="NAME=VALUE", help=BIND_HELP),
    precision: str = typer.Option("fp32", "--precision", help=PRECISION_HELP),
    tar: bool = typer.Option(False, "--tar", help="Also write OUTPUT.tar.gz."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Check outputs against onnxruntime/LiteRT."),
    force: bool = typer.Option(False, "--force", help="Replace an existing package at OUTPUT."),
    rtol: float = typer.Option(None, help="Reference check: relative tolerance (of the output's max magnitude); "
                               "default 1e-3 for float32 (int8 and fp16 packages: measured on the model)."),
    atol: float = typer.Option(1e-5, help="Reference check: absolute tolerance."),
    records: Path = typer.Option(None, "--records", help="Tuning records directory (default: the profile's, if any)."),
    use_records: bool = typer.Option(True, "--records-apply/--no-records", help="Apply tuning records."),
    layout: str = typer.Option("auto", "--layout", help="auto (NHWC + packed weights on CPUs) | nhwc | nchw "
                               "(TVM's own NCHW kernels: what edgetune 0.1 built; its records apply only there)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Compile MODEL for a device profile and write a deployable package (tuned kernels from
    `edgetune tune` records are applied automatically)."""
    from ..package import PackageOptions
    from ..package import package as build_package
    from ..util import parse_bindings, parse_input_shapes, parse_lengths

    opts = PackageOptions(model=model, device=device, output=output,
                          input_shapes=parse_input_shapes(input_shape, ranges=True), bindings=parse_bindings(bind),
                          verify=verify, tar=tar, force=force, rtol=rtol, atol=atol, records=records,
                          use_records=use_records, layout=layout, buckets=parse_lengths(buckets, "--buckets"),
                          precision=precision)
    with progress(not json_out) as report:
        result = build_package(opts, report)
    if json_out:
        print_json({"path": str(result.path), "tarball": str(result.tarball) if result.tarball else None,
                    "timings": result.timings, "hints": result.hints, "manifest": result.manifest})
        return
    v = result.verification
    m = result.manifest
    out.print(f"[green]packaged[/] {m['model']['file']} for {m['profile']['name']} ({m['arch']}) → {result.path}")
    if v["status"] == "passed":
        out.print(f"  reference check passed on {v['executed_on']} vs {v['reference']}: "
                  f"max abs error {v['max_abs_error']:.3g}, max rel error {v['max_rel_error']:.3g}")
        if v.get("tolerance_why") and v["tolerance"].get("bounds"):
            out.print(f"  (tolerance {v['tolerance_why']})")
        elif v.get("tolerance_why"):
            out.print(f"  (tolerance rtol={v['tolerance']['rtol']:.3g}: {v['tolerance_why']})")
    else:
        out.print(f"  [yellow]reference check {v['status']}[/]: {v.get('reason', '')}")
    if m.get("kind") == "range":
        r = m["range"]
        lengths = ", ".join((v.get("lengths") or {}).keys())
        if r.get("symbolic") and len(r.get("vars") or {}) > 1:
            spans = " × ".join(f"{v} {lo}..{hi}" for v, (lo, hi) in r["vars"].items())
            out.print(f"  ranges {spans}: one library with symbolic shapes (a call runs at its own shape, nothing "
                      f"padded; checked at {lengths or '-'})")
        elif r.get("symbolic"):
            out.print(f"  lengths {r['min']}..{r['max']}: one library with symbolic shapes (a call runs at its own "
                      f"length, nothing padded; checked at lengths {lengths or '-'})")
        else:
            out.print(f"  lengths {r['min']}..{r['max']}: buckets {', '.join(map(str, r['buckets']))} (a call runs the "
                      f"next bucket up, padded; checked at lengths {lengths or '-'})")
    for note in m["model"].get("notes", []):
        out.print(f"  import: {note}")
    if m.get("bound_inputs"):
        out.print("  bound at package time (no longer inputs): "
                  + ", ".join(f"{k}={v}" for k, v in m["bound_inputs"].items()))
    t = m.get("tuning")
    sched = m.get("schedules") or {}
    if m.get("kind") == "range" and m["range"].get("symbolic") and not t:
        out.print("  untuned (default schedules): `edgetune tune` with the same range can make it faster, its kernels "
                  "timed at the lengths you weigh (--shape-weights)")
    elif m.get("kind") == "range" and not m["range"].get("symbolic"):
        tuned = {b: x["tuning"] for b, x in m["range"]["per_bucket"].items() if x["tuning"]}
        out.print(f"  tuned kernels per bucket: {tuned}" if tuned else
                  "  untuned (default schedules): `edgetune tune` at the buckets' lengths can make it faster")
    elif t:
        mean = " (the mean over the lengths tuned)" if m.get("kind") == "range" else ""
        est = (f", estimated {t['estimated_latency_ms']:.3f} ms on the board{mean}"
               if t.get("estimated_latency_ms") else "")
        out.print(f"  tuned kernels: {t['tuned_tasks']} of {t['total_tasks']} ({t['trials']} trials{est}); "
                  "the rest use default schedules")
    else:
        out.print("  untuned (default schedules): `edgetune tune` can make it faster on the board")
    if sched.get("naive"):
        out.print(f"  [yellow]{len(sched['naive'])} kernel(s) without a default schedule run as plain loops[/] "
                  f"({100 * sched['naive_flops_share']:.1f}% of the FLOPs): {', '.join(sched['naive'][:5])}")
        first = sched["naive"][0]
        if sched.get("naive_why", {}).get(first):
            out.print(f"    {first}: {sched['naive_why'][first]}")
    for note in sched.get("notes", []):
        out.print(f"  [yellow]note[/]: {note}")
    if result.tarball:
        out.print(f"  archive {result.tarball}")
    for hint in result.hints:
        out.print(f"  [cyan]hint[/]: {hint}")
    out.print(f"  run it on the board: python -m edgetune_runtime run {result.path} --input x.npy")
