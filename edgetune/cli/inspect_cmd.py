"""``edgetune inspect MODEL``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ._common import boundary, out, print_json

INPUT_SHAPE_HELP = ("Fix an input's dimensions: NAME=1,3,224,224 (repeatable); with several models, NET:NAME=... "
                    "applies to network NET (the file stem) only, a plain NAME to every model with that input.")


@boundary
def inspect(
    model: Path = typer.Argument(..., help="An .onnx or .tflite file."),
    input_shape: list[str] = typer.Option([], "--input-shape", help=INPUT_SHAPE_HELP),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show inputs/outputs, operator histogram, parameters, FLOPs and unsupported operators."""
    from ..report import inspect_model
    from ..util import parse_input_shapes

    report = inspect_model(model, parse_input_shapes(input_shape))
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
    for note in report.notes:
        out.print(f"note: {note}")
    if report.unsupported_ops:
        out.print(f"[red]TVM 0.27 cannot convert:[/] {', '.join(report.unsupported_ops)}")
    if report.import_error:
        out.print(f"[red]import fails:[/] {report.import_error}")
