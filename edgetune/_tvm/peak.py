"""The CPU's practical fp32 peak, so kernel speeds can be shown as a share of it.

For the host it is measured: one thread runs independent vector FMA chains (as many accumulators
as hide the FMA latency and fit the register file), best of several runs, times the core count —
what a perfect kernel could reach, turbo included. One thread, not one per core: the figure also
bounds which measurements are believable (``record_check.impossible_time``), so it must not fall
when another process holds a core while it is measured (all cores in parallel measured 14 GFLOP/s
on a loaded 2-core host whose kernels then ran at 30–136). A board profile declares its own
(``[board] peak-gflops``), since it cannot be run here.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from .core import tvm
from .targets import target_to_json

log = logging.getLogger(__name__)


def measure_host_peak(target: Any, seconds: float = 0.05) -> float:
    """fp32 GFLOP/s of FMA chains on one core, times the cores (``target`` must be native)."""
    import numpy as np
    from tvm import tirx
    from tvm.script import tirx as T  # noqa: N812 — TVMScript's convention

    from .kernels.cpu import CpuFacts

    cpu = CpuFacts.of(target)
    lanes, cores = cpu.lanes, int(target.attrs.get("num-cores", 1))
    # two vector registers hold the constants; 12 chains on AVX2's 16 registers still cover
    # 2 pipes × 4 cycles, 16 fill the A72's 7-cycle pipe
    chains, steps = min(16, cpu.registers - 4), 100_000

    @T.prim_func
    def fma_chains(x: T.Buffer((chains, lanes), "float32")) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        acc = T.alloc_buffer((chains, lanes), "float32", scope="local")
        for k in T.unroll(chains):
            for v in T.vectorized(lanes):
                acc[k, v] = x[k, v]
        for _n in range(steps):
            for k in T.unroll(chains):
                for v in T.vectorized(lanes):
                    acc[k, v] = T.fma(acc[k, v], T.float32(0.99999), T.float32(0.00001))
        for k in T.unroll(chains):
            for v in T.vectorized(lanes):
                x[k, v] = acc[k, v]

    assert isinstance(fma_chains, tirx.PrimFunc)
    lib = tvm().compile(tvm().IRModule({"main": fma_chains}), target=target)
    data = tvm().runtime.tensor(np.ones((chains, lanes), "float32"))
    timer = lib.mod.time_evaluator("main", tvm().cpu(), number=3, repeat=5, min_repeat_ms=int(seconds * 1000))
    best = min(timer(data).results)
    return cores * steps * chains * lanes * 2 / best / 1e9


def host_peak(target: Any) -> float | None:
    """The host's measured peak, cached per target in the user cache (None if it cannot run)."""
    from ..util import cache_dir, write_atomic

    cache = cache_dir() / "host-peak.json"  # peak.json held all-core figures, low on loaded or AVX2 hosts
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
