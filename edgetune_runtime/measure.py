"""Timing a package so the number can be trusted, and what makes it lie.

* :func:`system_state` reads what distorts timings on a board — CPU governor and clocks,
  temperature, throttling / under-voltage (a Pi's ``vcgencmd get_throttled`` or its sysfs
  twin), a Jetson's power mode, load average and the processes busy beside us — and
  :func:`warnings` turns it into plain sentences (throttled and busy are the serious ones).
* :func:`latency` warms up until the latency is stable, then samples single runs: p50/p90/p99
  and a 95 % confidence interval of the mean.
* :func:`profile` times every kernel call inside the network (a VM instrument), with the
  instrument's own cost per call measured and taken out, so the rows add up to the run.

Standard library and numpy only (TVM objects are passed in): this runs on the board.
"""

from __future__ import annotations

import glob
import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# Raspberry Pi firmware throttle bits (vcgencmd get_throttled): now (0-3) and since boot (16-19).
THROTTLE_BITS = {0: "under-voltage now", 1: "ARM frequency capped now", 2: "throttled now",
                 3: "soft temperature limit now", 16: "under-voltage has occurred", 17: "frequency capping has occurred",
                 18: "throttling has occurred", 19: "soft temperature limit has occurred"}
NOW_BITS = 0xF
HOT_C = 80.0  # a Pi 4 starts to throttle at 80 °C, a Pi 5 at 85 °C
BUSY_PROCESS_PCT = 20.0  # another process using this much of one core disturbs the timing


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cpu_clocks() -> dict[str, Any]:
    governors, cur, top = set(), [], []
    for cpu in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq")):
        if (g := _read(f"{cpu}/scaling_governor")) is not None:
            governors.add(g)
        for values, name in ((cur, "scaling_cur_freq"), (top, "cpuinfo_max_freq")):
            text = _read(f"{cpu}/{name}")
            if text and text.isdigit():
                values.append(int(text) / 1000)
    return {"governor": ",".join(sorted(governors)) or None,
            "freq_mhz": round(min(cur)) if cur else None, "max_freq_mhz": round(max(top)) if top else None}


def _temperature() -> float | None:
    temps = []
    for zone in glob.glob("/sys/class/thermal/thermal_zone*/temp"):
        text = _read(zone)
        if text and text.lstrip("-").isdigit():
            temps.append(int(text) / 1000)
    return max(temps) if temps else None


def _throttled() -> tuple[int | None, str]:
    """The firmware's throttle flags and where they came from (None: the board has none)."""
    if shutil.which("vcgencmd"):
        try:
            out = subprocess.run(["vcgencmd", "get_throttled"], capture_output=True, text=True, timeout=5).stdout
            return int(out.strip().partition("=")[2], 16), "vcgencmd"
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    for path in glob.glob("/sys/devices/platform/soc/soc:firmware/get_throttled") + \
            glob.glob("/sys/devices/platform/soc/*/firmware/get_throttled"):
        text = _read(path)
        if text:
            try:
                return int(text, 16), "sysfs"
            except ValueError:
                continue
    return None, ""


def _jetson() -> dict[str, Any]:
    if not Path("/etc/nv_tegra_release").exists() and not shutil.which("nvpmodel"):
        return {}
    mode = None
    if shutil.which("nvpmodel"):
        try:
            out = subprocess.run(["nvpmodel", "-q"], capture_output=True, text=True, timeout=5).stdout
            mode = next((line.partition(":")[2].strip() for line in out.splitlines() if "Power Mode" in line), None)
        except (OSError, subprocess.SubprocessError):
            pass
    gpu = _read("/sys/devices/gpu.0/devfreq/17000000.ga10b/cur_freq") or _read("/sys/devices/17000000.ga10b/devfreq/17000000.ga10b/cur_freq")
    return {"power_mode": mode, "gpu_freq_mhz": round(int(gpu) / 1e6) if gpu and gpu.isdigit() else None}


def _pids() -> list[int]:
    """Process ids from /proc. Under qemu-user with a sysroot (``-L``, a stand-in board), a
    listing of ``/proc`` shows the sysroot's empty directory; ``/proc/self/..`` is the real one."""
    for path in ("/proc", "/proc/self/.."):
        try:
            pids = [int(d) for d in os.listdir(path) if d.isdigit()]
        except OSError:
            continue
        if pids:
            return pids
    return []


def _cpu_ticks() -> dict[int, tuple[str, int]]:
    ticks = {}
    for pid in _pids():
        text = _read(f"/proc/{pid}/stat")
        if not text:
            continue
        try:
            name = text[text.index("(") + 1:text.rindex(")")]
            fields = text[text.rindex(")") + 2:].split()
            ticks[pid] = (name, int(fields[11]) + int(fields[12]))  # utime + stime
        except (ValueError, IndexError):
            continue
    return ticks


def busy_processes(window_s: float = 0.5) -> list[dict[str, Any]]:
    """Other processes using CPU over ``window_s`` (percent of one core), busiest first."""
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    own = {os.getpid(), os.getppid()}
    before = _cpu_ticks()
    time.sleep(window_s)
    after = _cpu_ticks()
    busy = []
    for pid, (name, ticks) in after.items():
        if pid in own or pid not in before:
            continue
        pct = 100.0 * (ticks - before[pid][1]) / hz / window_s
        if pct >= 5.0:
            busy.append({"pid": pid, "name": name, "cpu_pct": round(pct, 1)})
    return sorted(busy, key=lambda p: -p["cpu_pct"])


def system_state(window_s: float = 0.5, busy: bool = True) -> dict[str, Any]:
    """What this machine reports about the things that distort a timing (``busy``: also sample
    the other processes for ``window_s``)."""
    flags, source = _throttled()
    load1, load5, _ = os.getloadavg() if hasattr(os, "getloadavg") else (None, None, None)
    return {"cpus": os.cpu_count(), **_cpu_clocks(), "temperature_c": _temperature(),
            "throttled": None if flags is None else hex(flags), "throttled_source": source,
            "throttle_flags": [text for bit, text in THROTTLE_BITS.items() if flags and flags & (1 << bit)],
            "load_1m": load1, "load_5m": load5, "busy": busy_processes(window_s) if busy else [], **_jetson()}


def describe(state: dict[str, Any]) -> str:
    """One line: governor, clocks, temperature, throttle flags, load."""
    return ", ".join([
        f"governor {state.get('governor') or 'unknown'}",
        f"{state['freq_mhz']}/{state['max_freq_mhz']} MHz" if state.get("freq_mhz") else "clocks unknown",
        f"{state['temperature_c']:.0f} °C" if state.get("temperature_c") is not None else "temperature unknown",
        f"throttled {state['throttled']}" if state.get("throttled") else "no throttle flags",
        f"load {state['load_1m']:.2f}" if state.get("load_1m") is not None else "load unknown"])


def warnings(state: dict[str, Any]) -> list[dict[str, str]]:
    """Plain sentences about ``state``; level ``bad`` (the numbers are not trustworthy: ``--strict``
    refuses) or ``note`` (worth knowing)."""
    out = []

    def add(level: str, text: str) -> None:
        out.append({"level": level, "text": text})

    flags = int(state["throttled"], 16) if state.get("throttled") else 0
    if flags & NOW_BITS:
        add("bad", "the board is throttled now (" + ", ".join(t for t in state["throttle_flags"] if t.endswith("now")) + ")")
    elif flags:
        add("note", "throttling happened since boot (" + ", ".join(state["throttle_flags"]) + "): check power supply and cooling")
    if state.get("temperature_c") is not None and state["temperature_c"] >= HOT_C:
        add("bad", f"the CPU is at {state['temperature_c']:.0f} °C: it throttles soon, if not already")
    busy = [p for p in state.get("busy", []) if p["cpu_pct"] >= BUSY_PROCESS_PCT]
    if busy:
        names = ", ".join(f"{p['name']} (pid {p['pid']}, {p['cpu_pct']:.0f} %)" for p in busy[:3])
        add("bad", f"the machine is busy: {names}")
    elif state.get("load_1m") is not None and state["cpus"] and state["load_1m"] > 0.75 * state["cpus"]:
        add("note", f"load average {state['load_1m']:.2f} on {state['cpus']} CPUs: something ran recently")
    if state.get("governor") and state["governor"] not in ("performance",):
        add("note", f"CPU governor '{state['governor']}': clocks ramp with load; 'performance' gives steadier numbers")
    if state.get("freq_mhz") and state.get("max_freq_mhz") and state["freq_mhz"] < 0.9 * state["max_freq_mhz"] and \
            state.get("governor") == "performance":
        add("bad", f"CPU at {state['freq_mhz']} of {state['max_freq_mhz']} MHz under the performance governor: capped")
    return out


# ------------------------------------------------------------------ latency


def _t95(n: int) -> float:
    """Two-sided 95 % Student t quantile for n samples (n - 1 degrees of freedom)."""
    table = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23,
             12: 2.18, 15: 2.13, 20: 2.09, 25: 2.06, 30: 2.04, 40: 2.02, 60: 2.00, 120: 1.98}
    df = max(n - 1, 1)
    return next((v for k, v in table.items() if df <= k), 1.96)


def summarize(samples_ms: list[float]) -> dict[str, Any]:
    """p50/p90/p99, mean, std and the 95 % confidence interval of the mean, in ms."""
    a = np.asarray(samples_ms, dtype=np.float64)
    half = _t95(a.size) * float(a.std(ddof=1)) / math.sqrt(a.size) if a.size > 1 else float("nan")
    return {"mean_ms": float(a.mean()), "p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p99_ms": float(np.percentile(a, 99)), "min_ms": float(a.min()), "std_ms": float(a.std()),
            "ci95_ms": [float(a.mean() - half), float(a.mean() + half)], "runs": int(a.size)}


def _warm(run: Callable[[], Any], max_warmup_s: float, tolerance: float) -> dict[str, Any]:
    """Run until three successive blocks agree within ``tolerance`` (their medians), or
    ``max_warmup_s``."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    block = max(1, min(20, int(0.05 / max(first, 1e-6))))  # ~50 ms per block
    medians: list[float] = []
    while True:
        times = []
        for _ in range(block):
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        medians.append(float(np.median(times)))
        last = medians[-3:]
        stable = len(last) == 3 and (max(last) - min(last)) <= tolerance * min(last)
        if stable or time.perf_counter() - start > max_warmup_s:
            return {"runs": 1 + block * len(medians), "seconds": round(time.perf_counter() - start, 3), "stable": stable}


def _sample(run: Callable[[], Any], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def latency(run: Callable[[], Any], runs: int = 50, max_warmup_s: float = 20.0, tolerance: float = 0.03) -> dict[str, Any]:
    """Warm up until stable (:func:`_warm`), then time ``runs`` single runs. ``run`` must return
    when the work is done (synchronize a GPU inside it)."""
    warmup = _warm(run, max_warmup_s, tolerance)
    return dict(summarize(_sample(run, runs)), warmup=warmup)


def side_by_side(ours: Callable[[], Any], theirs: Callable[[], Any], runs: int = 50, rounds: int = 5,
                 max_warmup_s: float = 20.0, tolerance: float = 0.03) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both warmed up, then timed in alternating blocks (``rounds`` each), so a change in the
    machine's state during the measurement hits both alike."""
    warm = (_warm(ours, max_warmup_s, tolerance), _warm(theirs, max_warmup_s, tolerance))
    a: list[float] = []
    b: list[float] = []
    rounds = max(1, min(rounds, runs))
    for i in range(rounds):  # exactly ``runs`` each: the first ``runs % rounds`` blocks one longer
        per = runs // rounds + (i < runs % rounds)
        a += _sample(ours, per)
        b += _sample(theirs, per)
    return dict(summarize(a), warmup=warm[0]), dict(summarize(b), warmup=warm[1])


# ------------------------------------------------------------------ per-kernel profile


# Functions the VM calls to compute a symbolic-shape package's sizes (Relax's VMShapeLower): the
# calibration pass must run them, or the next allocation reads sizes that were never written.
_SHAPE_FUNCS = ("shape_func",)


def profile(vm: Any, call: Callable[[], Any], sync: Callable[[], None] | None, runs: int = 20) -> dict[str, Any]:
    """Per-call times inside the network (ms per inference), through the VM's instrument hook.

    The hook costs time inside each measured interval: returning into the VM before the call,
    and converting the call's arguments to enter it again after. That cost is measured per call
    site in a calibration pass that skips the kernels (the hook can tell the VM to): from the
    moment a skipped kernel's hook starts to the next hook entry is exactly that return plus one
    entry. It is subtracted per site. (The VM's builtins cannot be skipped; their rows are only
    counted here — :func:`rank` gives the VM one row, the time the kernels leave.)"""
    skip_gaps: dict[str, list[int]] = {}
    pending: list[Any] = [None]  # (name, start) of a kernel skipped in the calibration pass

    def calibrate(_func: Any, name: str, before: bool, _ret: Any, *_args: Any) -> int:
        now = time.perf_counter_ns()
        if pending[0] is not None:
            skip_gaps.setdefault(pending[0][0], []).append(now - pending[0][1])
            pending[0] = None
        name = str(name)
        if before and not name.startswith("vm.builtin.") and not name.startswith(_SHAPE_FUNCS):
            pending[0] = (name, time.perf_counter_ns())
            return 1  # VMInstrumentReturnKind.kSkipRun
        return 0

    intervals: dict[str, list[int]] = {}
    started: list[int] = [0]

    def hook(_func: Any, name: str, before: bool, _ret: Any, *_args: Any) -> int:
        now = time.perf_counter_ns()
        if before:
            started[0] = now
        else:
            if sync is not None:  # a GPU kernel has only been launched
                sync()
                now = time.perf_counter_ns()
            intervals.setdefault(str(name), []).append(now - started[0])
        return 0

    try:
        vm.set_instrument(calibrate)
        for _ in range(max(3, runs // 4)):
            call()
            pending[0] = None  # a kernel last in the run has no next hook: its gap would span runs
        vm.set_instrument(hook)
        for _ in range(runs):
            call()
    finally:
        vm.set_instrument(None)
        call()  # the skipped pass left garbage in the buffers: one real run puts them right
    builtin = [t for name, ts in intervals.items() if name.startswith("vm.builtin.") for t in ts]
    every = [t for ts in intervals.values() for t in ts]
    floor = float(np.percentile(builtin, 10)) if builtin else float(min(every, default=0))
    rows = []
    for name, ts in intervals.items():
        cost = float(np.median(skip_gaps[name])) if name in skip_gaps else floor
        # per call the median, as the end-to-end time is a median: a run the OS interrupted
        # inflates a mean, and the kernels then add up to more than the runs they were timed in
        per_call = max(0.0, float(np.median(ts)) - cost)
        rows.append({"name": name, "calls": len(ts) // runs, "ms": per_call * len(ts) / runs / 1e6})
    rows.sort(key=lambda r: -r["ms"])
    sites = [float(np.median(v)) for v in skip_gaps.values()]
    return {"rows": rows, "hook_overhead_us": (float(np.median(sites)) if sites else floor) / 1e3, "runs": runs}


def rank(rows: list[dict[str, Any]], kernels: dict[str, dict[str, Any]], end_to_end_ms: float) -> dict[str, Any]:
    """Profile rows joined with the manifest's kernel facts (kind, FLOPs, tuned, trials), shares
    of the run, and the kernel worth tuning next. Kernel rows are measured; the VM's own work
    (dispatch, tensor views, shape checks: calls too cheap to time through the hook) is one row,
    the end-to-end time minus the kernels — so a kernel sum above the run is visible as such."""
    out, vm_calls = [], 0
    for r in rows:
        if r["name"].startswith("vm.builtin."):
            vm_calls += r["calls"]
            continue
        k = kernels.get(r["name"], {})
        flops = k.get("flops") or 0.0
        out.append({**r, "kind": k.get("kind"), "gflops": flops * r["calls"] / (r["ms"] * 1e6) if flops and r["ms"] else None,
                    "tuned": k.get("tuned"), "trials": k.get("trials")})
    kernels_ms = sum(r["ms"] for r in out)
    out.append({"name": "(runtime: VM dispatch, tensor views, shape checks)", "calls": vm_calls,
                "ms": max(0.0, end_to_end_ms - kernels_ms), "kind": "runtime", "gflops": None, "tuned": None, "trials": None})
    total = sum(r["ms"] for r in out) or 1.0
    for r in out:
        r["pct"] = 100.0 * r["ms"] / total
    out.sort(key=lambda r: -r["ms"])
    candidates = [r for r in out if r["kind"] != "runtime"]
    untuned = [r for r in candidates if r["tuned"] is False]
    pick = (untuned or candidates or [None])[0]
    advice = None
    if pick is not None:
        why = "the slowest untuned kernel" if untuned else "the slowest kernel (all are tuned: give tuning more time)"
        advice = {"kernel": pick["name"], "pct": round(pick["pct"], 1), "why": why}
    return {"kernels": out, "kernels_ms": kernels_ms, "sum_ms": sum(r["ms"] for r in out), "end_to_end_ms": end_to_end_ms,
            "next": advice}
