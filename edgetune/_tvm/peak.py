"""The CPU's practical fp32 peak, so kernel speeds can be shown as a share of it.

For the host it is measured: one thread per core runs independent vector FMA chains (as many
accumulators as hide the FMA latency) — what a perfect kernel could reach, turbo included. A
board profile declares its own (``[board] peak-gflops``), since it cannot be run here.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from .core import tvm
from .targets import target_to_json

log = logging.getLogger(__name__)


def measure_host_peak(target: Any, seconds: float = 0.05) -> float:
    """fp32 GFLOP/s of FMA chains on all cores of this machine (``target`` must be native)."""
    import numpy as np
    from tvm import tirx
    from tvm.script import tirx as T  # noqa: N812 — TVMScript's convention

    from .kernels.cpu import CpuFacts

    lanes = CpuFacts.of(target).lanes
    cores = int(target.attrs.get("num-cores", 1))
    chains, steps = 16, 100_000

    @T.prim_func
    def fma_chains(x: T.Buffer((cores, chains, lanes), "float32")) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for c in T.parallel(cores):
            acc = T.alloc_buffer((chains, lanes), "float32", scope="local")
            for k in T.unroll(chains):
                for v in T.vectorized(lanes):
                    acc[k, v] = x[c, k, v]
            for _n in range(steps):
                for k in T.unroll(chains):
                    for v in T.vectorized(lanes):
                        acc[k, v] = T.fma(acc[k, v], T.float32(0.99999), T.float32(0.00001))
            for k in T.unroll(chains):
                for v in T.vectorized(lanes):
                    x[c, k, v] = acc[k, v]

    assert isinstance(fma_chains, tirx.PrimFunc)
    lib = tvm().compile(tvm().IRModule({"main": fma_chains}), target=target)
    data = tvm().runtime.tensor(np.ones((cores, chains, lanes), "float32"))
    timer = lib.mod.time_evaluator("main", tvm().cpu(), number=3, repeat=3, min_repeat_ms=int(seconds * 1000))
    best = min(timer(data).results)
    return cores * steps * chains * lanes * 2 / best / 1e9


def host_peak(target: Any) -> float | None:
    """The host's measured peak, cached per target in the user cache (None if it cannot run)."""
    from ..util import cache_dir, write_atomic

    cache = cache_dir() / "peak.json"
    key = json.dumps(target_to_json(target), sort_keys=True)
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return float(known[key])
    try:
        value = measure_host_peak(target)
    except Exception as err:  # noqa: BLE001 — a report without % of peak is still a report
        log.debug("could not measure the host's peak: %s", err)
        return None
    known[key] = round(value, 1)
    write_atomic(cache, json.dumps(known, indent=1))
    return value


def peak_gflops(profile: Any, target: Any) -> float | None:
    """fp32 GFLOP/s a perfect kernel reaches on the profile's CPU: declared by a board profile
    (``[board] peak-gflops``), measured once on the host, None when neither is known."""
    declared = profile.board.get("peak-gflops")
    if declared:
        return float(declared)
    if profile.is_native and target.kind.name == "llvm":
        return host_peak(target)
    return None
