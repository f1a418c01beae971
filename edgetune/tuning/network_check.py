"""Tuning never leaves a package slower: the network check that ends ``edgetune tune``.

Tuning picks each kernel's record by the kernel's own time: run alone, over and over, its inputs
hot in cache. Inside the network the same kernel runs after its neighbours, on data they left
wherever they left it, and a schedule that won alone can lose there (a YOLO-style detector went
0.76× → 0.84× onnxruntime after tuning, ResNet-50 16.7 → 18.3 ms). So for every network tuned,
the check

1. packages the network with default schedules and with the records (the reference check runs
   on both: a wrong tuned kernel is caught here, not on the user's board) — and, where the
   records chose another variant for a convolution (Winograd or direct) than the default build
   runs, with default schedules and the records' variants, so each kernel has a twin;
2. times the packages on the tuning device with the per-kernel profile inside the network,
   alternating (``ROUNDS`` rounds each, the fastest round of each kept);
3. vetoes each record whose kernel ran slower inside the network than its twin with the default
   schedule (by more than 5 % and the profile's 2 µs resolution: the same schedule inside the
   network measures within that), joined by kernel name (the manifest has each one's workload);
4. if anything was vetoed, packages the network with the records kept and times the three
   packages again side by side (default, every record, records kept): the vetoes stand only if
   the network is faster with them than with every record, and if the network is not faster
   with its records than with default schedules, every record of it is vetoed.

Where the device is a tracker farm there is no per-kernel profile (TVM RPC times whole calls),
so only step 4's rule applies: records are kept for a network only when it is faster with them.
So too where a ``--time`` budget is too short for steps 1–3 (:meth:`NetworkChecker.expected_s`):
then only the default package and the one with every record are built and timed. The budget's
end is a deadline for the check as well: each step is taken only where the build and timing
times measured before the search say it fits (per-kernel verdicts, else the network's time
alone, else no check: the records are kept as they are and the CLI says so).

Vetoes are written to the records directory (:meth:`RecordStore.record_vetoes`); ``edgetune
package`` leaves a vetoed kernel at its default schedule and says so. A veto holds until its
workload gets a faster record than the one vetoed — the next tune's check then decides again.
Networks are checked one after another with the vetoes so far applied, so a record shared by
two networks is kept only where it helps both.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import EdgetuneError
from .options import TuneOptions
from .records import RecordStore
from .tasks import networks_of

ROUNDS = 2  # alternating rounds per package; the fastest round of each side is kept
RUNS = 30  # calls per round (the loader's bench: median of these)
# a kernel is slower with its record when it takes more than this share longer, and by more
# than FLOOR_MS (the per-kernel profile's resolution: what is left after the hook's own cost)
SLOWER = 1.05
FLOOR_MS = 0.002


@dataclass(frozen=True)
class KernelVerdict:
    """One tuned kernel inside one network: its time there with the record and without."""

    kernel: str
    workload: str
    default_ms: float | None  # inside the network, default schedule (None: not in the profile)
    tuned_ms: float | None  # inside the network, with the record
    kept: bool
    why: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class NetworkCheck:
    """The check of one network: the package's time without records, with all of them and with
    the ones kept (p50 ms on the tuning device), and the verdict on each tuned kernel."""

    network: str
    default_ms: float | None = None
    tuned_ms: float | None = None
    kept_ms: float | None = None
    kernels: tuple[KernelVerdict, ...] = ()
    error: str | None = None  # the check could not run (then nothing was vetoed for this network)
    skipped: str | None = None  # nothing to check (no record applies to the network)
    seconds: float = 0.0

    @property
    def vetoed(self) -> list[KernelVerdict]:
        return [k for k in self.kernels if not k.kept]

    def to_json(self) -> dict[str, Any]:
        return {"network": self.network, "default_ms": self.default_ms, "tuned_ms": self.tuned_ms,
                "kept_ms": self.kept_ms, "kernels": [k.to_json() for k in self.kernels], "error": self.error,
                "skipped": self.skipped, "seconds": round(self.seconds, 1)}


@dataclass
class _Timing:
    """The fastest round of one package: p50 ms of the whole call, and per kernel ms per call."""

    p50_ms: float = float("inf")
    kernels: dict[str, float] = field(default_factory=dict)

    def add(self, p50_ms: float, kernels: dict[str, float]) -> None:
        if p50_ms < self.p50_ms:
            self.p50_ms = p50_ms
        for name, ms in kernels.items():
            self.kernels[name] = min(ms, self.kernels.get(name, float("inf")))


class NetworkChecker:
    """Runs the check for the networks of one tuning job (see the module docstring). Used as a
    context manager: :meth:`prepare` packages every network with default schedules before the
    search starts (so a time budget can keep room for the rest), :meth:`run` ends the job."""

    def __init__(self, opts: TuneOptions, store: RecordStore, notice: Callable[[str], None]):
        self.opts, self.store, self.notice = opts, store, notice
        self.nets = networks_of(opts.models, opts.input_shapes, opts.buckets, opts.shape_weights)
        self.defaults: dict[str, Any] = {}
        self.failed: dict[str, str] = {}
        self.per_kernel = True  # False: only the network's time decides (a budget too short for more)
        self.where = opts.device if not opts.tracker and opts.device in _boards() else "host"  # where bench times
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._cost: dict[str, tuple[float, float]] = {}  # network → (one build, one timing) as prepare measured
        self.deadline: float | None = None  # the end of a time budget (run's argument)

    def __enter__(self) -> NetworkChecker:
        self._tmp = tempfile.TemporaryDirectory(prefix="edgetune-check-")
        return self

    def __exit__(self, *_exc: Any) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    @property
    def work(self) -> Path:
        assert self._tmp is not None, "use NetworkChecker as a context manager"
        return Path(self._tmp.name)

    def prepare(self, time_it: bool = False) -> None:
        """Package every network with default schedules (and with ``time_it`` time each once, so
        :meth:`expected_s` can say what the check after the search will cost)."""
        self.notice(f"packaging {len(self.nets)} network(s) with default schedules, for the network check at the end")
        for net in self.nets:
            path, name, shapes = net.path, net.name, net.shapes
            try:
                t0 = time.monotonic()
                self.defaults[name] = self._package(path, shapes, self.work / name / "default", records=False)
                t1 = time.monotonic()
                if time_it:
                    self._once(self.defaults[name].path, profile=True)
                self._cost[name] = (t1 - t0, time.monotonic() - t1)
            except EdgetuneError as err:
                self.failed[name] = _say(err)

    def expected_s(self, per_kernel: bool) -> float:
        """Seconds the check after the search is expected to take, from what :meth:`prepare`
        measured: per network with per-kernel verdicts up to three builds (every record, its
        convolution variants with default schedules, the records kept) and two timing phases of
        three packages; without, one build and one phase of two."""
        build_s = sum(b for b, _m in self._cost.values())
        measure_s = sum(m for _b, m in self._cost.values())
        if per_kernel:
            return 3 * build_s + 2 * 3 * ROUNDS * measure_s
        return build_s + 2 * ROUNDS * measure_s

    def run(self, deadline: float | None = None) -> list[NetworkCheck]:
        """Check every network (Ctrl-C stops after the vetoes written so far: the networks not
        checked keep their records as they are). With a ``deadline`` (``time.monotonic``: the
        end of a time budget) each step is taken only where what :meth:`prepare` measured says
        it fits: judging each kernel, else only the network's time, else nothing."""
        self.deadline = deadline
        out: list[NetworkCheck] = []
        for net in self.nets:
            path, name, shapes = net.path, net.name, net.shapes
            t0 = time.monotonic()
            try:
                check = (NetworkCheck(name, error=f"its package with default schedules failed: {self.failed[name]}")
                         if name in self.failed else self._check(path, name, shapes))
            except EdgetuneError as err:
                check = NetworkCheck(name, error=_say(err))
            except KeyboardInterrupt:
                self.notice(f"network check interrupted at {name}: the networks not checked keep their records")
                return out
            if check.error:
                self.notice(f"network check of {name} failed, its records left as they are: {check.error}")
            out.append(replace(check, seconds=time.monotonic() - t0))
        return out

    # ---- one network

    def _fits(self, name: str, builds: int, timings: int) -> bool:
        """Whether ``builds`` packages and ``timings`` timed calls of this network fit before the
        deadline (always, without one)."""
        if self.deadline is None:
            return True
        build_s, once_s = self._cost.get(name, (0.0, 0.0))
        return time.monotonic() + builds * build_s + timings * once_s <= self.deadline

    def _check(self, path: Path, name: str, shapes: dict[str, Any]) -> NetworkCheck:
        work = self.work / name
        default = self.defaults[name]  # (prepare built it)
        if not self._fits(name, 1, 2 * ROUNDS):
            return NetworkCheck(name, skipped="no time left in the budget for it: its records are kept as they are "
                                "(run the same command with a larger --time: the job goes on for the difference, "
                                "then checks)")
        tuned = self._package(path, shapes, work / "tuned", records=True)
        if not (tuned.manifest.get("tuning") or {}).get("tuned_tasks"):
            return NetworkCheck(name, skipped="no record applies to it")
        self.notice(f"checking {name}'s records inside the network: timing it with and without them")
        if not self.per_kernel or not self._fits(name, 1, 3 * ROUNDS):
            base, with_all = self._time([default.path, tuned.path], profile=False)
            return self._network_rule(name, base, with_all.p50_ms, self._verdicts(tuned.manifest, base, with_all))
        # each kernel is judged against its default schedule in a package of the same convolution
        # variants (a record may have chosen Winograd where the default package runs direct)
        variants = tuned.manifest["tuning"].get("variants") or {}
        same = self._package(path, shapes, work / "same", records=False, variants=variants) if variants else default
        timed = self._time([default.path, tuned.path] + ([same.path] if same is not default else []))
        base, with_all, untuned = timed[0], timed[1], timed[-1] if same is not default else timed[0]
        verdicts = self._verdicts(tuned.manifest, untuned, with_all)
        vetoed = [v for v in verdicts if not v.kept]
        kept_ms = with_all.p50_ms
        if vetoed and not self._fits(name, 1, 3 * ROUNDS):
            # no time to show the vetoes pay off for the whole network: only its time decides
            why = "kept: no time left in the budget to check the vetoes against the whole network"
            verdicts = [replace(v, kept=True, why=why) if not v.kept else v for v in verdicts]
            vetoed = []
        if vetoed:
            # the kernels' verdicts must pay off for the whole network too: the default package,
            # every record and the records kept are timed again side by side, and the fastest wins
            self._veto(name, vetoed)
            kept = self._package(path, shapes, work / "kept", records=True)
            base, with_all, without = self._time([default.path, tuned.path, kept.path])
            kept_ms = without.p50_ms
            if with_all.p50_ms < without.p50_ms:
                self.store.drop_vetoes([v.workload for v in vetoed])
                why = (f"kept: {name} was faster with every record ({with_all.p50_ms:.3f} ms) than without the "
                       f"ones its kernels' times would veto ({without.p50_ms:.3f} ms)")
                verdicts = [replace(v, kept=True, why=why) if not v.kept else v for v in verdicts]
                kept_ms = with_all.p50_ms
        return replace(self._network_rule(name, base, kept_ms, verdicts), tuned_ms=with_all.p50_ms)

    def _network_rule(self, name: str, base: _Timing, kept_ms: float, verdicts: list[KernelVerdict]) -> NetworkCheck:
        """Every record of the network vetoed if it is not faster with the ones kept (``kept_ms``)
        than with default schedules."""
        tuned_ms = kept_ms
        if kept_ms >= base.p50_ms and any(v.kept for v in verdicts):
            why = (f"{name} was not faster with its records ({kept_ms:.3f} ms against {base.p50_ms:.3f} ms "
                   "with default schedules)")
            rest = [replace(v, kept=False, why=why) for v in verdicts if v.kept]
            self._veto(name, rest)
            verdicts = [v for v in verdicts if not v.kept] + rest
            kept_ms = base.p50_ms
        return NetworkCheck(name, base.p50_ms, tuned_ms, kept_ms, tuple(verdicts))

    def _package(self, model: Path, shapes: dict[str, Any], out: Path, records: bool,
                 variants: dict[str, str] | None = None) -> Any:
        from ..package import PackageOptions, package

        # a symbolic range is timed at the points its kernels were tuned at, weighted alike
        weights = next((n.lengths for n in self.nets if n.path == model and n.shapes == shapes), {})
        return package(PackageOptions(model=model, device=self.opts.device, output=out, input_shapes=shapes,
                                      bindings=self.opts.bindings, records=self.store.dir, use_records=records,
                                      layout=self.opts.layout, precision=self.opts.precision, seed=self.opts.seed,
                                      conv_variants=variants,
                                      shape_weights=weights))

    def _time(self, packages: list[Path], profile: bool = True) -> list[_Timing]:
        """Each package's fastest round, the packages alternating."""
        out = [_Timing() for _ in packages]
        for _ in range(ROUNDS):
            for timing, pkg in zip(out, packages):
                timing.add(*self._once(pkg, profile))
        return out

    def _once(self, pkg: Path, profile: bool) -> tuple[float, dict[str, float]]:
        from ..remote.bench import MeasureOptions, bench_on_tracker, measure_package

        if self.opts.tracker:
            result = bench_on_tracker(pkg, self.opts.tracker, self.opts.key or "", number=5, repeat=RUNS // 5)
            return result.p50_ms, {}
        m = measure_package(MeasureOptions(pkg, self.where, runs=RUNS, profile=profile, max_warmup_s=5.0, check=False))
        timed = list((m.buckets or {}).values()) or [{"latency": m.latency, "profile": m.profile}]
        # a symbolic range package is timed at the points it was tuned at: their weighted mean
        # (a bucket package's buckets weigh alike: each is a network of its own in the job)
        weights = _timed_weights(pkg, len(timed))
        p50 = sum(w * float(t["latency"]["p50_ms"]) for w, t in zip(weights, timed))
        kernels: dict[str, float] = {}
        for w, t in zip(weights, timed):
            for r in (t.get("profile") or {}).get("kernels", []):
                if r.get("kind") != "runtime":
                    kernels[r["name"]] = kernels.get(r["name"], 0.0) + w * float(r["ms"])
        return p50, kernels

    def _verdicts(self, manifest: dict[str, Any], base: _Timing, tuned: _Timing) -> list[KernelVerdict]:
        """Per tuned kernel: kept unless it ran slower inside the network than the default schedule.
        Without a per-kernel profile (a tracker) every kernel is kept here; the network's time
        decides for all of them."""
        out = []
        for kernel, facts in sorted((manifest.get("kernels") or {}).items()):
            if not facts.get("tuned"):
                continue
            t0, t1 = base.kernels.get(kernel), tuned.kernels.get(kernel)
            workload = facts.get("workload", "")
            if t0 is None or t1 is None:
                out.append(KernelVerdict(kernel, workload, t0, t1, True, "not in both profiles" if base.kernels else ""))
            elif t1 > t0 * SLOWER and t1 - t0 > FLOOR_MS:
                out.append(KernelVerdict(kernel, workload, t0, t1, False, f"slower inside the network with its record "
                                         f"({t1:.4f} ms against {t0:.4f} ms with the default schedule)"))
            else:
                out.append(KernelVerdict(kernel, workload, t0, t1, True))
        return out

    def _veto(self, network: str, verdicts: list[KernelVerdict]) -> None:
        best = {h: s.best_ms for h, s in self.store.stats().items()}
        self.store.record_vetoes({v.workload: {"network": network, "kernel": v.kernel, "best_ms": best.get(v.workload),
                                               "default_in_network_ms": v.default_ms, "tuned_in_network_ms": v.tuned_ms,
                                               "why": v.why, "at": time.time()}
                                  for v in verdicts if v.workload and best.get(v.workload) is not None})


def _say(err: Exception) -> str:
    return f"{err.message} ({err.hint})" if isinstance(err, EdgetuneError) else str(err)


def _boards() -> set[str]:
    from ..remote.inventory import load_inventory

    return set(load_inventory())


def _timed_weights(pkg: Path, n: int) -> list[float]:
    """The shares of a package's ``n`` timings in its time: a symbolic range package's
    ``timed_weights`` (normalised), else equal."""
    try:
        weights = json.loads((pkg / "manifest.json").read_text()).get("range", {}).get("timed_weights") or []
    except (OSError, ValueError):
        weights = []
    if len(weights) != n or not sum(weights) > 0:
        weights = [1.0] * n
    return [float(w) / sum(weights) for w in weights]
