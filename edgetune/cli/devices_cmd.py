"""``edgetune devices add|list|remove|check|setup``: the board inventory and its boards."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ._common import boundary, out, print_json, progress

app = typer.Typer(help="Boards: where packages run (SSH + TVM RPC).", no_args_is_help=True, rich_markup_mode=None)


@app.command("add")
@boundary
def add(
    name: str = typer.Argument(..., help="A name for the board."),
    profile: str = typer.Option(..., "--profile", "-p", help="Device profile (see `edgetune targets`)."),
    host: str = typer.Option(..., "--host", help="Address or ~/.ssh/config Host alias."),
    user: str = typer.Option(None, "--user", "-u", help="SSH user (default: ~/.ssh/config, then yours)."),
    port: int = typer.Option(None, "--port", help="SSH port (default: ~/.ssh/config, then 22)."),
    key: Path = typer.Option(None, "--key", help="SSH private key file."),
    rpc_key: str = typer.Option(None, "--rpc-key", help="Tracker key for this board (default: its profile)."),
    strict: bool = typer.Option(False, "--strict-host-key", help="Refuse unknown host keys instead of accepting new ones."),
    force: bool = typer.Option(False, "--force", help="Replace a board of the same name."),
) -> None:
    """Add a board to the inventory (~/.config/edgetune/devices.toml)."""
    from ..remote.inventory import Board, add_board

    board = Board(name, profile, host, user, port, str(key.expanduser().resolve()) if key else None, rpc_key,
                  "strict" if strict else "accept-new")
    path = add_board(board, replace_existing=force)
    out.print(f"added board [bold]{name}[/] ({profile}) to {path}; next: edgetune devices check {name}")


@app.command("list")
@boundary
def list_(json_out: bool = typer.Option(False, "--json")) -> None:
    """List boards."""
    from ..remote.inventory import inventory_path, load_inventory

    boards = load_inventory()
    if json_out:
        print_json([{"name": b.name, **b.to_toml()} for b in boards.values()])
        return
    if not boards:
        out.print(f"no boards yet ({inventory_path()}); add one with `edgetune devices add`")
        return
    table = Table("board", "profile", "host", "user", "port", "rpc key", box=None, header_style="bold")
    for b in boards.values():
        table.add_row(b.name, b.profile, b.host, b.user or "", str(b.port or ""), b.tracker_key)
    out.print(table)


@app.command("remove")
@boundary
def remove(name: str) -> None:
    """Remove a board from the inventory."""
    from ..remote.inventory import remove_board

    remove_board(name)
    out.print(f"removed board {name}")


@app.command("check", short_help="Is the board reachable and ready to time packages?")
@boundary
def check(name: str, json_out: bool = typer.Option(False, "--json")) -> None:
    """Reachable? Architecture matches the profile? Python, runtime, disk, CPU?"""
    from ..remote.board import check_board
    from ..remote.inventory import get_board

    with progress(not json_out) as report:
        report(f"checking {name}")
        result = check_board(get_board(name))
    if json_out:
        print_json({"board": result.board, "ok": result.ok, "items": [i.__dict__ for i in result.items], "facts": result.facts})
    else:
        for item in result.items:
            mark = "[green]ok[/]  " if item.ok else "[red]FAIL[/]"
            out.print(f"{mark} {item.name:8} {item.detail}")
    if not result.ok:
        raise typer.Exit(1)


@app.command("setup", short_help="Install the runtime on a board (no compiler needed).")
@boundary
def setup(
    name: str,
    force: bool = typer.Option(False, "--force", help="Reinstall even if present."),
    baselines: bool = typer.Option(False, "--baselines", help="Also install onnxruntime and LiteRT (XNNPACK) for "
                                   "`bench --baseline` (about 40 MB pushed, once)."),
) -> None:
    """Install the edgetune runtime on the board (pushed from here: the board needs no internet)."""
    from ..remote.board import setup_board
    from ..remote.inventory import get_board

    with progress(True) as report:
        report(f"installing the runtime{' and the baselines' if baselines else ''} on {name}")
        result = setup_board(get_board(name), force=force, baselines=baselines)
    what = f"runtime {result.runtime}" + (f" and {result.baselines}" if result.baselines else "")
    if result.already_installed:
        out.print(f"{name}: {what} already installed (--force reinstalls)")
    else:
        out.print(f"{name}: installed {what} ({result.uploaded_mb:.1f} MB pushed)")
