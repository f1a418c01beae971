"""``edgetune targets``: list device profiles."""

from __future__ import annotations

import typer
from rich.table import Table

from ._common import boundary, out, print_json


@boundary
def targets(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List device profiles (builtin targets/*.toml plus ~/.config/edgetune/targets)."""
    from ..profiles import load_profiles

    profiles = load_profiles()
    if json_out:
        print_json([{"name": p.name, "description": p.description, "arch": p.arch, "runtime": p.runtime,
                     "target": p.target, "source": p.source} for p in profiles.values()])
        return
    table = Table("profile", "arch", "runtime", "cpu", "cores", "description", box=None, header_style="bold")
    for p in profiles.values():
        cpu_target = p.target.get("host", p.target)
        table.add_row(p.name, p.arch, p.runtime + (f" {p.target.get('arch')}" if p.runtime == "cuda" else ""),
                      str(cpu_target.get("mcpu", "")), str(cpu_target.get("num-cores", "")),
                      p.description + ("" if p.source == "builtin" else f" [{p.source}]"))
    out.print(table)
