"""MetaSchedule itself, imported once after the version gate."""

from __future__ import annotations

import logging
from typing import Any

from ..constants import FAILED_RUN_SECS, RECORDS_FILE, WORKLOADS_FILE  # noqa: F401 — re-exported
from ..core import tvm

log = logging.getLogger(__name__)


def ms() -> Any:
    """``tvm.s_tir.meta_schedule`` (imported once, after the version gate), with edgetune's
    tensor intrinsics registered: stored traces that tensorize name them."""
    tvm()
    import tvm.s_tir.meta_schedule as _ms

    from ..kernels import dot

    dot.register()
    return _ms
