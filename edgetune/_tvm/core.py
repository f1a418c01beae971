"""The TVM import gate: the one place ``tvm`` is imported (every other module of ``_tvm`` asks
:func:`tvm` for it), its version pinned, and helpers for its objects and errors."""

from __future__ import annotations

import functools
import importlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from ..errors import ToolchainError

log = logging.getLogger(__name__)


TVM_VERSION = "0.27.0.post1"
TVM_FFI_VERSION = "0.1.14.post1"


@functools.cache
def tvm() -> Any:
    """Import TVM once, refusing versions edgetune was not built and tested against."""
    from importlib import metadata

    try:
        import tvm as _tvm  # noqa: PLC0415
    except ImportError as err:
        raise ToolchainError(
            f"Apache TVM is not importable: {err}",
            f"install it with `pip install apache-tvm=={TVM_VERSION}`",
        ) from err
    found = {name: metadata.version(name) for name in ("apache-tvm", "apache-tvm-ffi")}
    wanted = {"apache-tvm": TVM_VERSION, "apache-tvm-ffi": TVM_FFI_VERSION}
    if found != wanted and not os.environ.get("EDGETUNE_ALLOW_TVM_MISMATCH"):
        raise ToolchainError(
            f"edgetune needs {wanted} but found {found}",
            f"pip install apache-tvm=={TVM_VERSION} apache-tvm-ffi=={TVM_FFI_VERSION}",
        )
    return _tvm


@functools.cache
def tensor_intrinsics() -> None:
    """Register TVM's tensor intrinsics (``tvm.s_tir.tensor_intrin``: CUDA, ROCm, Arm, x86, …),
    which MetaSchedule's ``TuneContext`` imports on first use.

    TVMScript's ``prim_func`` decorator calls ``inspect.stack()`` for each of the ~120
    intrinsics, and that looks up the module of every frame on the stack, each lookup a scan of
    ``sys.modules`` (import machinery frames have no file to match): 24 s on this host at the
    start of every tuning run. The import runs with a stack whose first three frames carry their
    source lines (the decorator reads the third, to tell a class body) and the rest only their
    frames, names and line numbers (all it reads of them): 5 s, the same intrinsics.
    """
    import inspect
    import sys

    tvm()
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return

    def stack(context: int = 1) -> list[inspect.FrameInfo]:
        frames, frame = [], sys._getframe(1)
        while frame is not None:
            if len(frames) < 3:
                info = inspect.getframeinfo(frame, context)
                frames.append(inspect.FrameInfo(frame, *info, positions=info.positions))
            else:
                frames.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None, None))
            frame = frame.f_back
        return frames

    full, inspect.stack = inspect.stack, stack
    try:
        importlib.import_module("tvm.s_tir.tensor_intrin")
    finally:
        inspect.stack = full


def tvm_module(name: str) -> Any:
    """``tvm.<name>`` behind the version gate, for modules that need TVM when they are imported
    (the graph passes define their mutators at module level; only builds import them)."""
    tvm()
    return importlib.import_module(f"tvm.{name}")


def version() -> str:
    """The TVM version string, without importing TVM."""
    from importlib import metadata

    return metadata.version("apache-tvm")


def plain(value: Any) -> Any:
    """A TVM object as plain Python: immediates unwrapped, maps as dicts, arrays as lists, anything else as text."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if hasattr(value, "value"):  # IntImm, FloatImm, StringImm
        return plain(value.value)
    if hasattr(value, "items"):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "__iter__"):
        return [plain(v) for v in value]
    return str(value)


_SKIP_FIELDS = frozenset({"span", "ty", "dtype", "buffer", "op", "annotations"})


def ir_nodes(root: Any) -> Iterator[Any]:
    """Every node of a TVM IR tree — TIR statements and expressions — pre-order. TVM 0.27 gives
    Python no TIR visitor; the FFI's reflection lists each node's fields, which this walks
    (types, spans, buffers and operators are leaves: what they hold is not the computation)."""
    import tvm_ffi

    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, (list, tuple, tvm_ffi.Array)):
            stack.extend(reversed(list(node)))
            continue
        if not isinstance(node, tvm_ffi.Object) or isinstance(node, tvm_ffi.Array):
            continue
        yield node
        children = []
        info = getattr(type(node), "__tvm_ffi_type_info__", None)
        while info is not None:
            children = [getattr(node, f.name) for f in info.fields if f.name not in _SKIP_FIELDS] + children
            info = info.parent_type_info
        stack.extend(reversed(children))


def copy_module(mod: Any) -> Any:
    """A new IRModule with ``mod``'s functions and attributes (replacing one leaves ``mod`` as is)."""
    return tvm().IRModule(dict(mod.functions_items()), attrs=mod.attrs)


def last_line(err: BaseException) -> str:
    import re

    text = re.sub(r"In ir\.Op\(.*?support_level=\d+\),\s*", "", str(err))  # an operator's whole description
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__
