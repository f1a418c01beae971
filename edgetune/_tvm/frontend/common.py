"""What both frontends share: TVM's frontend noise kept out of the terminal, and a failing
node named in the error."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

from ...errors import ModelError

log = logging.getLogger(__name__)


@contextlib.contextmanager
def quiet_frontend() -> Iterator[None]:
    """TVM frontends warn per initializer and print a failing node's inputs (whole IR
    snippets) to stdout; keep both out of the user's terminal (debug log)."""
    import io

    printed = io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(printed):
            warnings.simplefilter("always")
            yield
    finally:
        for w in caught:
            log.debug("tvm frontend: %s", w.message)
        if printed.getvalue():
            log.debug("tvm frontend printed: %s", printed.getvalue()[:2000])


class NodeConversionError(Exception):
    """TVM's frontend failed on one node (the message names it)."""


def reason(err: BaseException) -> str:
    """The line of a TVM error that says what went wrong: not its traceback, not the "Metadata
    omitted" footer TVM prints after an IR snippet."""
    import re

    text = re.sub(r"In ir\.Op\(.*?support_level=\d+\),\s*", "", str(err))  # an operator's whole description
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    noise = ("Metadata omitted", "File \"", "Traceback", "^", "~~~")
    useful = [ln for ln in lines if not ln.startswith(noise) and not ln.startswith(("#", "@", "R.", "def ", "return "))]
    checks = [ln for ln in useful if "Check failed" in ln or "Error" in ln.split(":")[0]]
    text = (checks or useful or [type(err).__name__])[-1]
    return text[:300] + ("…" if len(text) > 300 else "")


def conversion_error(frontend: str, err: BaseException) -> ModelError:
    """The one-line error for a model TVM's ``frontend`` ("ONNX", "TFLite") could not convert:
    the node that failed where known."""
    return ModelError(
        f"TVM's {frontend} frontend failed on {err}" if isinstance(err, NodeConversionError)
        else f"TVM's {frontend} frontend failed: {reason(err)}",
        "EDGETUNE_DEBUG=1 shows TVM's traceback; `edgetune inspect MODEL` lists the model's operators",
    )
