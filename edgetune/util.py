"""Small shared helpers: hashing, cache locations, input-shape parsing."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .errors import UsageError


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cache_dir(*parts: str) -> Path:
    """``$EDGETUNE_CACHE_DIR`` or ``~/.cache/edgetune``, joined with ``parts`` and created."""
    base = os.environ.get("EDGETUNE_CACHE_DIR") or Path(
        os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")
    ) / "edgetune"
    path = Path(base).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def parse_input_shapes(items: list[str] | tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Parse ``NAME=1,3,224,224`` items; UsageError with the offending item otherwise."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(","))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d <= 0 for d in shape):
            raise UsageError(
                f"malformed --input-shape '{item}'",
                "write it as NAME=D1,D2,... with positive integers, e.g. --input-shape input=1,3,224,224",
            )
        shapes[name] = shape
    return shapes
