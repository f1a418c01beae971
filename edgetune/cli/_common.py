"""Shared CLI plumbing: consoles, the error boundary, progress and JSON output."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import EdgetuneError


def _width(stream: Any) -> int | None:
    """Terminals: their own width. Pipes and logs: wide enough that tables do not wrap."""
    return None if stream.isatty() or os.environ.get("COLUMNS") else 160


out = Console(highlight=False, soft_wrap=True, width=_width(sys.stdout))
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_width(sys.stderr))

F = TypeVar("F", bound=Callable[..., Any])


def debug_enabled() -> bool:
    """EDGETUNE_DEBUG=1 shows tracebacks."""
    return os.environ.get("EDGETUNE_DEBUG", "") not in ("", "0")


def boundary(func: F) -> F:
    """Turn domain errors into one line + a hint on stderr and a non-zero exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except EdgetuneError as exc:
            if debug_enabled():
                traceback.print_exc()
            err.print(f"[bold red]error:[/] {escape(exc.message)}", markup=True)
            err.print(f"[dim]hint:[/] {escape(exc.hint)}", markup=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
        except typer.Exit:
            raise
        except Exception as exc:  # noqa: BLE001 — a bug: say so plainly, keep the traceback for EDGETUNE_DEBUG
            if debug_enabled():
                traceback.print_exc()
            err.print(f"[bold red]internal error:[/] {escape(type(exc).__name__ + ': ' + (str(exc).strip().splitlines() or [''])[0])}", markup=True)
            err.print("[dim]hint:[/] rerun with EDGETUNE_DEBUG=1 and report the traceback", markup=True)
            raise typer.Exit(70) from None

    return wrapper  # type: ignore[return-value]


def setup_logging(verbose: bool) -> None:
    """Library loggers → stderr; warnings by default, everything with --verbose."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    root = logging.getLogger("edgetune")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)


@contextmanager
def progress(enabled: bool) -> Iterator[Callable[[str], None]]:
    """A phase reporter: a spinner on a TTY, plain lines otherwise, nothing when disabled."""
    if not enabled:
        yield lambda _msg: None
        return
    if err.is_terminal:
        with err.status("starting") as status:
            yield lambda msg: status.update(escape(f"{msg} …"))
        return
    yield lambda msg: err.print(f"edgetune: {msg}", markup=False)


def print_json(data: Any) -> None:
    """Machine output on stdout, nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
