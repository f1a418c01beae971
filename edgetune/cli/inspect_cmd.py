"""``edgetune inspect MODEL``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ._common import boundary, out, print_json

INPUT_SHAPE_HELP = ("Fix an input's dimensions: NAME=1,3,224,224 (repeatable); with several models, NET:NAME=... "
                    "applies to network NET (the file stem) only, a plain NAME to every model with that input.")
BIND_HELP = ("Make an input a constant: NAME=VALUE (e.g. sr=16000; repeatable, NET:NAME=... scopes it). Branches "
             "that depend on it fold away and the package no longer asks for it (ONNX).")
PRECISION_HELP = ("fp32 (default) | fp16: what the kernels compute in. fp16 stores weights and activations as "
                  "float16 and multiplies 8 lanes a NEON register (the Pi 5's Cortex-A76, Jetson GPUs); the package's "
                  "inputs and outputs keep the model's dtypes. Refused on boards without float16 arithmetic (Pi 4).")


@boundary
def inspect(
    model: Path = typer.Argument(..., help="An .onnx or .tflite file."),
    input_shape: list[str] = typer.Option([], "--input-shape", metavar="NAME=DIMS", help=INPUT_SHAPE_HELP),
    bind: list[str] = typer.Option([], "--bind", metavar="NAME=VALUE", help=BIND_HELP),
    device: str = typer.Option(None, "--device", "-d", help="Also list the kernels a package for this profile or board "
                               "has, and the default schedule each gets."),
    layout: str = typer.Option("auto", "--layout", help="auto | nhwc | nchw (as `package --layout`)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show inputs/outputs, operator histogram, parameters, FLOPs and unsupported operators
    (and, with --device, how each kernel of a package would be scheduled before tuning)."""
    from ..report import inspect_model
    from ..util import parse_bindings, parse_input_shapes

    report = inspect_model(model, parse_input_shapes(input_shape, ranges=True), device, layout, parse_bindings(bind))
    if json_out:
        print_json(report.to_json())
        return
    out.print(f"[bold]{report.path.name}[/]  {report.format}  sha256 {report.sha256[:16]}…")
    io = Table("", "name", "shape", "dtype", box=None, header_style="bold")
    for kind, specs in (("in", report.inputs), ("out", report.outputs)):
        for s in specs:
            io.add_row(kind, s["name"], str(s["shape"]), s["dtype"] + (f" q={s['quantization']}" if s.get("quantization") else ""))
    out.print(io)
    gflops = f"{report.flops / 1e9:.3f} GFLOPs" if report.flops is not None else "FLOPs unknown"
    out.print(f"params {report.params:,} ({report.param_bytes / 1e6:.2f} MB)   {gflops}")
    ops = Table("operator", "count", "", box=None, header_style="bold")
    for name, count in report.ops.items():
        ops.add_row(name, str(count), "[red]unsupported[/]" if name in report.unsupported_ops else "")
    out.print(ops)
    _render_structure(report)
    if report.quantization:
        q = report.quantization
        layers = ", ".join(f"{n} {kind}" for kind, n in q["layers"].items())
        out.print(f"quantized: weights {'; '.join(q['weights'])}; activations {'; '.join(q['activations'])}; layers {layers}")
        adds = f", {q['fixed_point_adds']} int8 adds in LiteRT's fixed point" if q["fixed_point_adds"] else ""
        adds += f", {q['fixed_point_resizes']} int8 bilinear resizes as XNNPACK's" if q.get("fixed_point_resizes") else ""
        adds += f", {q['relus']} int8 ReLUs without a division" if q.get("relus") else ""
        adds += f", {q['prelus']} int8 PReLUs without a division" if q.get("prelus") else ""
        adds += f", {q['rescales']} int8 rescales as a multiply" if q.get("rescales") else ""
        adds += f", {q['tables']} int8 → int8 elementwise chains as 256-entry lookups" if q.get("tables") else ""
        out.print(f"  exact integer sums: {q['exact']} of {sum(q['layers'].values())} layers"
                  + (f" (requantized as {q['requantized_as']} does; {q['exact_bounded']} provably below 2^24)" if q["exact"] else "")
                  + f"{adds}")
        if q.get("integer"):
            out.print(f"  int8 × int8 → int32 convolutions: {q['integer']} of {q['exact']} exact layers (full, depthwise, dense)")
        out.print(f"  runs as {q['runs_as']}")
    for note in report.notes:
        out.print(f"note: {note}")
    if report.unsupported_ops:
        out.print(f"[red]TVM 0.27 cannot convert:[/] {', '.join(report.unsupported_ops)}")
    if report.import_error:
        out.print(f"[red]import fails:[/] {report.import_error}")
    if report.kernels is not None:
        _render_kernels(report.kernels, report.profile or "")


def _render_structure(report: object) -> None:
    """Recurrent layers, If nodes and the inputs --bind can fix."""
    if report.recurrent:
        table = Table("recurrent layer", "op", "direction", "hidden", "steps", "batch", "runs as", "state",
                      box=None, header_style="bold")
        for r in report.recurrent:
            table.add_row(r["node"], r["op"], r["direction"], str(r["hidden"]), str(r["steps"] or "?"),
                          str(r["batch"] or "?"), r["runs_as"] or "?", "input/output" if r["state_input"] else "")
        out.print(table)
    for c in report.control_flow:
        reads = c["condition_reads"]
        decided = (f"condition reads input(s) {', '.join(reads)}" if reads
                   else "condition is constant (fixed shapes, bound inputs): folds at import")
        out.print(f"control flow: {c['op']} '{c['node']}' ({' / '.join(c['branches'])}): {decided}")
    if report.bindable:
        out.print(f"bindable inputs (only steer control flow or shapes): {', '.join(report.bindable)} "
                  f"— fix one with --bind NAME=VALUE")
    if report.bound:
        out.print("bound: " + ", ".join(f"{k}={v}" for k, v in report.bound.items()))


def _render_kernels(kernels: list[dict], profile: str) -> None:
    table = Table("kernel", "default schedule", "calls", "GFLOP", "% of FLOPs", box=None, header_style="bold")
    for k in kernels:
        kind = "[yellow]naive (plain loops)[/]" if k["kind"] == "naive" else k["kind"]
        table.add_row(k["kernel"], kind, str(k["calls"]), f"{k['flops'] / 1e9:.4f}", f"{100 * k['flops_share']:.1f}")
    out.print(table)
    naive = [k for k in kernels if k["kind"] == "naive"]
    share = sum(k["flops_share"] for k in naive)
    out.print(f"{len(kernels)} kernels for {profile}: {len(naive)} without a default schedule "
              f"({100 * share:.1f}% of the FLOPs)" + ("" if not naive else f": {', '.join(k['kernel'] for k in naive[:5])}"))
    for k in naive[:3]:
        if k.get("why"):
            out.print(f"  {k['kernel']}: {k['why']}")
