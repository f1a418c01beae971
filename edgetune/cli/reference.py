"""The CLI reference as Markdown, written from the Typer app itself (the documentation site's
``reference/cli.md`` is generated from it at build time: ``docs/hooks.py``)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import typer

from .main import app


def commands() -> Iterator[tuple[list[str], Any]]:
    """Every command of ``edgetune``, depth first: (its words after ``edgetune``, the command)."""

    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown() -> str:
    """One section per command: what it does, its usage line and a table of its parameters."""
    lines = ["# CLI reference", "",
             "Generated from the `edgetune` command itself (`edgetune/cli/reference.py`); "
             "`edgetune COMMAND --help` prints the same.", ""]
    for path, cmd in commands():
        words = " ".join(["edgetune", *path])
        ctx = typer.Context(cmd, info_name=words)
        depth = "#" * min(len(path) + 1, 4)
        lines += [f"#{depth} `{words}`", "", inspect.cleandoc(cmd.help or ""), ""]
        lines += ["```text", f"{words} {' '.join(cmd.collect_usage_pieces(ctx))}".rstrip(), "```", ""]
        records = [r for p in cmd.get_params(ctx) if p.name != "help" and (r := p.get_help_record(ctx))]
        if records:
            lines += ["| parameter | what it does |", "|---|---|"]
            lines += [f"| `{_cell(name)}` | {_cell(text)} |" for name, text in records]
            lines.append("")
        if getattr(cmd, "commands", None):
            lines += ["| command | what it does |", "|---|---|"]
            lines += [f"| `{words} {n}` | {_cell(c.get_short_help_str(limit=200))} |" for n, c in cmd.commands.items()]
            lines.append("")
    return "\n".join(lines)
