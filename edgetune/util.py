"""Small shared helpers: hashing, cache locations, input-shape parsing."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot use the edgetune cache at {path}: {err.strerror or err}",
                         "set EDGETUNE_CACHE_DIR to a directory you can write") from err
    return path


def parse_input_shapes(items: list[str] | tuple[str, ...], ranges: bool = False) -> dict[str, tuple[Any, ...]]:
    """Parse ``NAME=1,3,224,224`` items — with ``ranges``, a dimension may be ``LO..HI``
    (``input_ids=1,1..256``), parsed as ``(LO, HI)``; UsageError with the offending item otherwise."""
    shapes: dict[str, tuple[Any, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        shape: tuple[Any, ...] = ()
        try:
            shape = tuple(_dimension(d) for d in dims.replace("x", ",").split(","))
        except ValueError:
            pass
        flat = [x for d in shape for x in (d if isinstance(d, tuple) else (d,))]
        if not sep or not name or not shape or any(x <= 0 for x in flat) or \
                any(isinstance(d, tuple) and d[0] > d[1] for d in shape):
            raise UsageError(
                f"malformed --input-shape '{item}'",
                "write it as NAME=D1,D2,... with positive integers, e.g. --input-shape input=1,3,224,224"
                + (" (a length range as LO..HI: input_ids=1,1..256)" if ranges else ""),
            )
        if not ranges and any(isinstance(d, tuple) for d in shape):
            raise UsageError(f"--input-shape '{item}' has a range: ranges are for `edgetune package`, `tune` and `inspect`",
                             "give one length here (tune each length a range package compiles: its buckets)")
        shapes[name] = shape
    return shapes


def parse_lengths(text: str, option: str) -> tuple[int, ...]:
    """``32,64,128`` → (32, 64, 128); empty → (); UsageError for anything but positive integers."""
    if not text.strip():
        return ()
    try:
        lengths = tuple(int(x) for x in text.split(","))
    except ValueError:
        lengths = (0,)
    if any(n <= 0 for n in lengths):
        raise UsageError(f"malformed {option} '{text}'", f"write it as positive integers: {option} 32,64,128,256")
    return lengths


def parse_shape_weights(text: str) -> dict[Any, float]:
    """``16=1,64=4,256=1`` (``--shape-weights``: length=weight) → {16: 1.0, 64: 4.0, 256: 1.0};
    with several ranges, a point per item, its values in the ranges' order (``4x128=1``: keys
    (4, 128)); a length alone weighs 1; empty → {}; UsageError for anything else."""
    out: dict[Any, float] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        length, sep, weight = item.partition("=")
        try:
            values = tuple(int(v) for v in length.split("x"))
            w = float(weight) if sep else 1.0
        except ValueError:
            values, w = (0,), 0.0
        n = values[0] if len(values) == 1 else values
        if min(values) <= 0 or not w > 0 or n in out or (out and isinstance(n, int) != isinstance(next(iter(out)), int)):
            raise UsageError(f"malformed --shape-weights '{text}'",
                             "write it as distinct lengths with positive weights: --shape-weights 16=1,64=4,256=1 "
                             "(with several ranges, one value per range: 4x128=1)")
        out[n] = w
    return out


LENGTH = "length"  # the variable of a range package's one range (its records' kernels name it)


def range_variables(shapes: Any) -> tuple[dict[str, dict[int, str]], dict[str, tuple[int, int]]]:
    """The variables of ``--input-shape`` ranges: per ranged input, its axes' variables, and
    each variable's span, in order of appearance. Axes of different inputs with the same range
    are one variable (``input_ids`` and ``attention_mask`` share their length); axes of one
    input are different ones (height and width, batch and length). One variable is named
    ``length``, several ``length0``, ``length1``, …. UsageError where a range is ambiguous (one
    input has it on two axes, another on one)."""
    per_input: dict[str, dict[int, tuple[int, int]]] = {}
    for name, dims in shapes.items():
        ranged = {i: (int(d[0]), int(d[1])) for i, d in enumerate(dims) if isinstance(d, tuple)}
        if ranged:
            per_input[name] = ranged
    keys: dict[str, dict[int, Any]] = {}
    order: list[Any] = []
    repeated = {span for ranged in per_input.values() for span in ranged.values()
                if list(ranged.values()).count(span) > 1}
    for name, ranged in per_input.items():
        keys[name] = {}
        for axis, span in ranged.items():
            key = (span, axis) if span in repeated else (span, None)
            keys[name][axis] = key
            if key not in order:
                order.append(key)
    for span in repeated:
        holders = [n for n, ranged in per_input.items() if span in ranged.values()]
        if len(holders) > 1:
            raise UsageError(f"the range {span[0]}..{span[1]} is on two axes of one input and also on "
                             f"{', '.join(holders)}: which axes share a length is ambiguous",
                             "give the axes that differ different ranges (e.g. 32..640 and 32..641)")
    names = {key: LENGTH if len(order) == 1 else f"{LENGTH}{i}" for i, key in enumerate(order)}
    return ({n: {axis: names[key] for axis, key in k.items()} for n, k in keys.items()},
            {names[key]: key[0] for key in order})


def _dimension(text: str) -> int | tuple[int, int]:
    lo, sep, hi = text.partition("..")
    return (int(lo), int(hi)) if sep else int(text)


def parse_bindings(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Parse ``NAME=VALUE`` items (``--bind``); the value stays text until the input's dtype is known."""
    bound: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(f"malformed --bind '{item}'", "write it as NAME=VALUE, e.g. --bind sr=16000")
        bound[name.strip()] = value.strip()
    return bound


@contextlib.contextmanager
def file_lock(path: Path, timeout: float = 1800.0, what: str = "") -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created) while building a shared cache entry; a second
    process waits for the first instead of building the same thing over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with path.open("a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UsageError(f"{what or path} is locked by another edgetune process for {timeout:.0f} s",
                                     f"if no other edgetune runs, remove {path}") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write a file so that readers see the old or the new content, never a part."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data)
    os.replace(tmp, path)


def to_ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds (None stays None)."""
    return None if seconds is None else seconds * 1e3
