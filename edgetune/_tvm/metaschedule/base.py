"""MetaSchedule itself, imported once after the version gate."""

from __future__ import annotations

from typing import Any

from ..core import tvm, tvm_module


def meta_schedule() -> Any:
    """``tvm.s_tir.meta_schedule`` (imported once, after the version gate), with edgetune's
    tensor intrinsics registered: stored traces that tensorize name them."""
    tvm()
    import tvm.s_tir.meta_schedule as _ms

    from ..kernels import dot_intrinsics

    dot_intrinsics.register()
    return _ms


def classes() -> Any:
    """``tvm.s_tir.meta_schedule`` for its classes only: without registering edgetune's tensor
    intrinsics (a second of TVMScript parsing), which a build that applies no records never needs."""
    return tvm_module("s_tir.meta_schedule")


def derived_object(cls: type) -> Any:
    """MetaSchedule's decorator for Python subclasses of its objects (``PyBuilder``,
    ``PyRunner``, ``PyRunnerFuture``)."""
    tvm()
    from tvm.ir.utils import derived_object as derive

    return derive(cls)
