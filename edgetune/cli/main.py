"""The ``edgetune`` command: one thin sub-command per stage.

Each command parses its options, builds an options object, calls one library function and
renders the result. Heavy imports happen inside the commands so ``--help`` stays instant.
"""

from __future__ import annotations

import typer

from .. import __version__
from . import devices_cmd, inspect_cmd, package_cmd, records_cmd, remote_cmd, targets_cmd, tune_cmd
from ._common import setup_logging

app = typer.Typer(
    name="edgetune",
    help="Ahead-of-time deployment packager for edge boards (Apache TVM).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"edgetune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log everything the library does to stderr."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    setup_logging(verbose)


app.command("targets", short_help="List device profiles.")(targets_cmd.targets)
app.command("inspect", short_help="Inputs, operators, FLOPs; how a package would build.")(inspect_cmd.inspect)
app.command("tune", short_help="Auto-tune models for a device; records persist.")(tune_cmd.tune)
app.command("package", short_help="Compile a model into a verified package.")(package_cmd.package)
app.command("deploy", short_help="Push a package to a board and check it there.")(remote_cmd.deploy)
app.command("bench", short_help="Latency of a package, and whether to trust it.")(remote_cmd.bench)
app.add_typer(devices_cmd.app, name="devices")
app.add_typer(remote_cmd.tracker_app, name="tracker")
app.add_typer(records_cmd.app, name="records")


def main() -> None:
    """Console-script entry point."""
    app()
