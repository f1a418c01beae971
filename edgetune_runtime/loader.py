"""Load and run an edgetune package with the TVM runtime."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

import numpy as np

from . import ranges
from .compare import compare, tolerance, validate_files
from .errors import InputError, LoaderError, PackageMismatchError
from .ranges import manifest_ranges, point_of, point_values, range_axes
from .ranges import symbol as _symbol

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
REFERENCE = "reference.npz"
STATE = "state.npz"


def read_manifest(package: str | Path) -> dict[str, Any]:
    """The parsed manifest.json of a package directory."""
    path = Path(package) / MANIFEST
    if not path.is_file():
        raise LoaderError(f"{package} is not an edgetune package (no {MANIFEST})", "pass the directory `edgetune package` wrote")
    try:
        manifest = json.loads(path.read_bytes().decode())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, OSError) as err:
        raise LoaderError(f"{path} is not valid JSON: {str(err)[:200]}", "rebuild the package") from err
    if not isinstance(manifest, dict):
        raise LoaderError(f"{path} is not a manifest (not a JSON object)", "rebuild the package")
    return manifest


def validate_manifest(manifest: dict[str, Any]) -> None:
    """Refuse (LoaderError) a manifest whose fields are not what ``edgetune package`` writes: the
    library, its inputs and outputs, and the files and checksums the loader verifies — among them
    the library itself, so a package cannot load a file nobody checked."""
    def bad(what: str) -> LoaderError:
        return LoaderError(f"the package's manifest is malformed: {what}", "package the model again")

    validate_files(manifest)
    files = manifest["files"]
    library = manifest.get("library")
    if not isinstance(library, str) or "/" in library or library in ("", ".", "..") or library not in files:
        raise bad(f"its library {library!r} is not one of the files it checks")
    runtime = manifest.get("runtime")
    if not isinstance(runtime, dict) or runtime.get("kind", "cpu") not in ("cpu", "cuda") or not isinstance(runtime.get("tvm", ""), str):
        raise bad("'runtime' is not {kind: cpu|cuda, tvm: VERSION}")
    for side in ("inputs", "outputs"):
        specs = manifest.get(side)
        if not isinstance(specs, list) or not all(_tensor_spec_ok(spec) for spec in specs):
            raise bad(f"'{side}' is not a list of tensors (name, original_name, shape, dtype)")
    for key, kind in (("bound_inputs", dict), ("state", list), ("verification", dict)):
        if manifest.get(key) is not None and not isinstance(manifest[key], kind):
            raise bad(f"'{key}' is not a {kind.__name__}")
    names = {spec["original_name"] for spec in manifest["inputs"]} | {spec["original_name"] for spec in manifest["outputs"]}
    for pair in manifest.get("state") or []:
        if not isinstance(pair, dict) or pair.get("input") not in names or pair.get("output") not in names:
            raise bad("'state' pairs name no input and output of the model")


def _tensor_spec_ok(spec: Any) -> bool:
    if not (isinstance(spec, dict) and isinstance(spec.get("name"), str) and isinstance(spec.get("original_name"), str)):
        return False
    shape = spec.get("shape")
    if not (isinstance(shape, list) and len(shape) <= 16 and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**31
                                                                   for d in shape)):
        return False
    try:
        np.dtype(spec.get("dtype"))
    except (TypeError, ValueError):
        return False
    span = spec.get("value_range")
    return span is None or (isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) for v in span) and span[0] < span[1])


def machine_arch() -> str:
    """This machine's architecture, normalised the way manifests spell it."""
    machine = platform.machine().lower()
    if machine in ("arm64", "aarch64"):
        return "aarch64"
    if machine.startswith("armv7") or machine == "armv8l":
        return "armv7l"
    return "x86_64" if machine == "amd64" else machine


def physical_cores() -> int:
    """Cores this process may run on, one per physical core: the CPUs in its affinity mask
    divided by the SMT siblings per core (Linux sysfs; all CPUs where that is unknown)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in cpus:
        try:
            siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
        except OSError:
            siblings = str(cpu)
        cores.add(siblings)
    return max(1, len(cores))


def default_threads() -> None:
    """Unless the user chose (``TVM_NUM_THREADS`` / ``OMP_NUM_THREADS``), one TVM thread per
    physical core. TVM's own default halves the CPU count on x86 (assuming hyper-threading): on a
    2-core x86 machine without SMT it ran every package on one core, at half the speed."""
    if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(physical_cores())


def _tvm() -> Any:
    default_threads()  # read when TVM's thread pool starts, at the first parallel kernel
    try:
        import tvm
    except ImportError as err:
        raise LoaderError(f"the TVM runtime is not importable: {err}", "install the runtime bundle with `edgetune devices setup`") from err
    return tvm


def check_compatible(manifest: dict[str, Any], tvm_version: str) -> None:
    """Refuse packages for another format, architecture or TVM runtime (major.minor)."""
    fmt = manifest.get("format")
    if not isinstance(manifest.get("runtime", {}), dict):
        raise PackageMismatchError("the package's manifest names no runtime", "package the model again")
    if fmt != FORMAT_VERSION:
        raise PackageMismatchError(
            f"package format {fmt} is not the format this loader reads ({FORMAT_VERSION})",
            "rebuild the package with the edgetune version that matches this runtime, or update the board's runtime (`edgetune devices setup`)",
        )
    arch = manifest.get("arch")
    if arch != machine_arch():
        raise PackageMismatchError(
            f"package was built for {arch}, this machine is {machine_arch()}",
            f"rebuild it with `edgetune package MODEL --device PROFILE` for a {machine_arch()} profile",
        )
    wanted = str(manifest.get("runtime", {}).get("tvm", ""))
    if wanted.split(".")[:2] != tvm_version.split(".")[:2]:
        raise PackageMismatchError(
            f"package needs TVM runtime {wanted}, this machine has {tvm_version}",
            "install the matching runtime (`edgetune devices setup`) or rebuild the package with this TVM",
        )


def _check_cuda_runtime(tvm: Any) -> None:
    """TVM loads its CUDA runtime library quietly, or quietly not (no libcudart, no driver):
    say which library is missing instead of "no cuda device"."""
    import ctypes

    loaded = getattr(tvm.base, "_LOADED_LIBS", None)
    if loaded is None or "tvm_runtime_cuda" in loaded:
        return
    sidecar = Path(loaded["tvm_runtime"]._name).resolve().parent / "libtvm_runtime_cuda.so"
    try:
        loaded["tvm_runtime_cuda"] = ctypes.CDLL(str(sidecar), mode=ctypes.RTLD_GLOBAL)  # registers the device API
    except OSError as err:
        why = str(err).removeprefix(f"{sidecar}: ")[:200]
        hint = ("libcuda is the NVIDIA driver's: run the package on the machine with the GPU and its driver"
                if why.startswith("libcuda.") else
                "put the CUDA runtime's library directory on LD_LIBRARY_PATH (e.g. /usr/local/cuda/lib64); "
                "its major version must be the package's (manifest runtime.cuda_major)")
        raise LoaderError(f"TVM's CUDA runtime does not load: {why}", hint) from None


def check_gpu(manifest: dict[str, Any], compute_version: str, name: str = "this GPU") -> None:
    """Refuse a CUDA package whose kernels this GPU cannot run, before the driver fails on them
    with CUDA_ERROR_NO_BINARY_FOR_GPU: a cubin for sm_XY runs on compute capability X.Z, Z >= Y."""
    archs = manifest.get("runtime", {}).get("cuda_archs") or []
    major, _, minor = compute_version.partition(".")
    runnable = [a for a in archs if a.startswith("sm_") and len(a) >= 5 and a[3:-1] == major and a[-1:] <= minor]
    if archs and not runnable:
        raise PackageMismatchError(
            f"package's GPU kernels are built for {', '.join(archs)}; {name} is sm_{major}{minor}",
            f"package the model with a profile whose [target] arch is sm_{major}{minor}",
        )


def _verify_files(root: Path, manifest: dict[str, Any]) -> None:
    for name, digest in manifest.get("files", {}).items():
        path = root / name
        if not path.is_file():
            raise LoaderError(f"package file {name} is missing", "copy the whole package directory")
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != digest:
            raise LoaderError(f"package file {name} does not match its checksum", "the copy is damaged: copy the package again")


def _identifier(name: str) -> str:
    """A tensor name as edgetune makes it a C identifier (``serving_default_x:0`` →
    ``serving_default_x_0``), so either spelling finds the input."""
    import re

    clean = re.sub(r"\W", "_", name)
    return clean if clean and not clean[0].isdigit() else f"t_{clean}"


class Model:
    """A loaded package: ``run`` inputs by position or name; ``benchmark`` and ``check`` it."""

    def __init__(self, root: Path, manifest: dict[str, Any], vm: Any, device: Any):
        self.root, self.manifest, self._vm, self._device = root, manifest, vm, device
        self.inputs: list[dict[str, Any]] = manifest["inputs"]
        self.outputs: list[dict[str, Any]] = manifest["outputs"]
        # each range a symbolic-shape package takes at run time: variable → (min, max)
        self.ranges: dict[str, tuple[int, int]] = manifest_ranges(manifest)

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[np.ndarray]:
        if args and kwargs:
            raise InputError("pass inputs either by position or by name, not both")
        if kwargs:
            kwargs = self._drop_bound(kwargs)
            lookup = {}
            for spec in self.inputs:  # the file's name, the compiled one, and their C-identifier form
                for key in (spec["original_name"], spec["name"], _identifier(spec["original_name"])):
                    lookup.setdefault(key, spec["name"])
            unknown = sorted(k for k in kwargs if k not in lookup and _identifier(k) not in lookup)
            if unknown:
                raise InputError(f"unknown input(s) {unknown}", f"inputs are {[s['original_name'] for s in self.inputs]}")
            by_name = {lookup.get(k, lookup.get(_identifier(k))): v for k, v in kwargs.items()}
            missing = [s["original_name"] for s in self.inputs if s["name"] not in by_name]
            if missing:
                raise InputError(f"missing input(s) {missing}")
            args = tuple(by_name[s["name"]] for s in self.inputs)
        if len(args) != len(self.inputs):
            raise InputError(f"model takes {len(self.inputs)} input(s), got {len(args)}", f"inputs are {[s['original_name'] for s in self.inputs]}")
        ranges = self.ranges
        if ranges:  # each range's value, the same on every input that has it, and in the range
            args = tuple(np.asarray(a) for a in args)
            point_of(self.inputs, args, ranges)
        return [self._validated(spec, value, ranges) for spec, value in zip(self.inputs, args)]

    @property
    def length_range(self) -> tuple[int, int] | None:
        """(min, max) of the length a symbolic-shape package takes on its inputs' ``range_axis``."""
        span = self.manifest.get("length_range")
        return (int(span[0]), int(span[1])) if span else None

    def _drop_bound(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Inputs fixed at package time (``--bind``) may still be passed by name, with the value
        they were bound to; any other value is an error (the package cannot honour it)."""
        bound = self.manifest.get("bound_inputs") or {}
        rest = {}
        for name, value in kwargs.items():
            if name not in bound:
                rest[name] = value
            elif not np.array_equal(np.asarray(value), np.asarray(bound[name])):
                raise InputError(f"input '{name}' was bound to {bound[name]} when the package was built, got {np.asarray(value).tolist()}",
                                 f"package the model again with --bind {name}=VALUE for that value")
        return rest

    @staticmethod
    def _validated(spec: dict[str, Any], value: Any, ranges: dict[str, tuple[int, int]] | None = None) -> np.ndarray:
        array = np.asarray(value)
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        axes = range_axes(spec, ranges) if ranges else {}
        if axes and array.ndim == len(shape):
            if any(a != d for i, (a, d) in enumerate(zip(array.shape, shape)) if i not in axes):
                wanted = ",".join(_symbol(axes[i]) if i in axes else str(d) for i, d in enumerate(shape))
                spans = ", ".join(f"{_symbol(v)} in {ranges[v][0]}..{ranges[v][1]}"  # type: ignore[index]
                                  for v in dict.fromkeys(axes.values()))
                raise InputError(f"input '{spec['original_name']}' needs shape ({wanted}) with {spans}, "
                                 f"got {array.shape}")
            for axis, var in axes.items():
                lo, hi = ranges[var]  # type: ignore[index]
                n = array.shape[axis]
                if not lo <= n <= hi:
                    what = "length" if var == "length" else f"{var} (axis {axis})"
                    raise InputError(f"input '{spec['original_name']}' has {what} {n}, outside the package's range {lo}..{hi}",
                                     f"package the model again with a range that holds it (--input-shape NAME=...,{lo}..{n})"
                                     if n > hi else "pad the input up to the range's start")
        elif array.shape != shape:
            raise InputError(f"input '{spec['original_name']}' needs shape {shape}, got {array.shape}")
        if array.dtype != dtype:
            raise InputError(
                f"input '{spec['original_name']}' needs dtype {dtype}, got {array.dtype}",
                f"convert it with array.astype('{dtype}')",
            )
        return np.require(array, requirements="C")  # ascontiguousarray would make a scalar 1-d

    def _tensors(self, arrays: list[np.ndarray]) -> list[Any]:
        tvm = _tvm()
        return [tvm.runtime.tensor(a, self._device) for a in arrays]

    def run(self, *args: Any, **kwargs: Any) -> dict[str, np.ndarray]:
        """Run one inference; returns outputs as numpy arrays keyed by original output name."""
        tensors = self._tensors(self._arguments(args, kwargs))
        try:
            result = self._vm["main"](*tensors)
        except Exception as err:  # TVM's errors: the library does not take what its manifest describes
            lines = str(err).strip().splitlines() or [type(err).__name__]
            raise LoaderError(f"the package's library refused the inputs its manifest describes: {lines[-1][:300]}",
                              "the manifest does not belong to this library: package the model again") from err
        values = [result] if hasattr(result, "numpy") else list(result)
        if len(values) != len(self.outputs):
            raise LoaderError(f"the library returned {len(values)} output(s), its manifest describes {len(self.outputs)}",
                              "the manifest does not belong to this library: package the model again")
        return {spec["original_name"]: v.numpy() for spec, v in zip(self.outputs, values)}

    def benchmark(self, number: int = 10, repeat: int = 5, warmup: int = 1) -> dict[str, float]:
        """Latency in ms over ``repeat`` measurements of ``number`` runs each, on :meth:`timing_inputs`."""
        arrays = self.timing_inputs()
        tensors = self._tensors(arrays)
        for _ in range(warmup):
            self._vm["main"](*tensors)
        timer = self._vm.time_evaluator("main", self._device, number=number, repeat=repeat)
        samples = np.array(timer(*tensors).results) * 1e3
        return {
            "mean_ms": float(samples.mean()), "p50_ms": float(np.percentile(samples, 50)),
            "p90_ms": float(np.percentile(samples, 90)), "std_ms": float(samples.std()),
            "min_ms": float(samples.min()), "repeat": repeat, "number": number,
        }

    @property
    def _on_gpu(self) -> bool:
        return self._device.dlpack_device_type() != 1  # 1: kDLCPU

    def _sync(self) -> None:
        if self._on_gpu:  # kernels on a GPU return before they finish
            self._device.sync()

    def _reference_call(self, length: int | None = None) -> Any:
        """One inference on :meth:`timing_inputs`, synchronized (for timing)."""
        tensors = self._tensors(self.timing_inputs(length))
        main = self._vm["main"]

        def call() -> None:
            main(*tensors)
            self._sync()
        return call

    def measure(self, runs: int = 50, profile: bool = False, profile_runs: int = 20,
                max_warmup_s: float = 20.0, baseline: str | Path | None = None,
                length: int | None = None) -> dict[str, Any]:
        """A timing to trust: the machine's state and its warnings, latency after a warm-up that
        waits for stable numbers (p50/p90/p99, 95 % CI of the mean) and, with ``profile``, the
        time of every kernel inside the network and which one to tune next
        (see :mod:`edgetune_runtime.measure`). ``baseline``: the model file, timed with its own
        runtime (onnxruntime / LiteRT) on the same inputs and threads, alternating with ours.
        ``length``: a symbolic-shape package timed at that length (:meth:`timing_inputs`)."""
        from . import measure

        state = measure.system_state()
        call = self._reference_call(length)
        result: dict[str, Any] = {"system": state, "warnings": measure.warnings(state), "threads": _threads()}
        if baseline is None:
            result["latency"] = measure.latency(call, runs, max_warmup_s)
        else:  # the model's own runtime, same inputs and threads, in alternating blocks
            from . import baseline as base

            named = {s["original_name"]: a for s, a in zip(self.inputs, self.timing_inputs(length))}
            named.update({k: np.asarray(v) for k, v in (self.manifest.get("bound_inputs") or {}).items()})
            label, other = base.runner(Path(baseline), named, result["threads"] or 1)
            ours, theirs = measure.side_by_side(call, other, runs, max_warmup_s=max_warmup_s)
            result["latency"] = ours
            result["baseline"] = dict(theirs, runtime=label, ratio_p50=ours["p50_ms"] / theirs["p50_ms"])
        if profile:
            raw = measure.profile(self._vm, call, self._sync if self._on_gpu else None, profile_runs)
            ranked = measure.rank(raw["rows"], self.manifest.get("kernels") or {}, result["latency"]["mean_ms"])
            ranked["hook_overhead_us"] = raw["hook_overhead_us"]
            result["profile"] = ranked
        return result

    def initial_state(self) -> dict[str, np.ndarray]:
        """A stateful model's state before its first call (TFLite resource variables), by state
        input name: pass it with the first call, then each state output as its input on the next
        (``manifest["state"]`` pairs them). Empty for a model without such state."""
        pairs = self.manifest.get("state") or []
        if not pairs:
            return {}
        if not (self.root / STATE).is_file():
            raise LoaderError(f"the package's initial state ({STATE}) is missing",
                              "package the model again with this edgetune (it writes the state whether or not it verifies)")
        with np.load(self.root / STATE) as data:
            return {p["input"]: np.array(data[p["input"]]) for p in pairs}

    def reference_inputs(self) -> list[np.ndarray]:
        """The deterministic inputs stored at package time (LoaderError for a package built
        with ``--no-verify``, which has none)."""
        if not (self.root / REFERENCE).is_file():
            raise LoaderError("the package has no reference inputs", "it was built with --no-verify; package it again "
                              "without it, or pass your own inputs (`run --input`)")
        try:
            with np.load(self.root / REFERENCE) as data:
                return [data[f"input:{s['name']}"] for s in self.inputs]
        except (OSError, KeyError, ValueError) as err:
            raise LoaderError(f"the package's {REFERENCE} is unreadable: {str(err)[:200]}", "package the model again") from err

    def timing_inputs(self, length: Any = None) -> list[np.ndarray]:
        """Inputs to time the package with: the reference inputs, or — for a package built with
        ``--no-verify``, or a symbolic-shape package at ``length`` — deterministic ones of the
        right shapes, types and value ranges (the initial state for state inputs)."""
        if length is None and (self.root / REFERENCE).is_file():
            return self.reference_inputs()
        rng = np.random.default_rng(0)
        state = self.initial_state()
        at = dict(zip(self.ranges, point_values(length))) if length is not None else {}
        out = []
        for spec in self.inputs:
            dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
            axes = range_axes(spec, self.ranges) if at else {}
            shape = tuple(at[axes[i]] if i in axes else d for i, d in enumerate(shape))
            span = spec.get("value_range")
            if spec["original_name"] in state:
                out.append(state[spec["original_name"]].astype(dtype))
            elif dtype.kind == "f":
                out.append(rng.uniform(-1, 1, shape).astype(dtype))
            else:
                low, high = span if span else (0, 2 if dtype.kind == "b" else 8)
                out.append(rng.integers(low, high, shape).astype(dtype))
        return out

    def check(self, rtol: float | None = None, atol: float | None = None) -> dict[str, Any]:
        """Run the stored reference inputs and compare with the stored reference outputs."""
        tol = tolerance(self.manifest, rtol, atol)
        if not (self.root / REFERENCE).is_file():
            raise LoaderError("package has no reference data", "it was built with --no-verify")
        got = self.run(*self.reference_inputs())
        with np.load(self.root / REFERENCE) as data:
            expected = {s["original_name"]: data[f"output:{s['name']}"] for s in self.outputs}
        return compare(expected, got, **tol)


def _threads() -> int | None:
    """Threads TVM's runtime uses here (as its thread pool reports them)."""
    num = _tvm().get_global_func("runtime.NumThreads", allow_missing=True)
    return int(num()) if num is not None else None


_LOADED: list[bool] = []  # a package was loaded in this process (its kernels may have run: TVM's thread pool)


def loaded_here() -> bool:
    """Whether this process (or the one it was forked from) loaded a package."""
    return bool(_LOADED)


def load(package: str | Path, verify_files: bool = True) -> Any:
    """Load a package directory: a :class:`Model`, or for a package built for a range of lengths
    a :class:`~edgetune_runtime.ranges.RangeModel`; raises PackageMismatchError if it is not for
    this machine."""
    root = Path(package)
    manifest = read_manifest(root)
    tvm = _tvm()
    check_compatible(manifest, tvm.__version__)
    (ranges.validate if ranges.is_range(manifest) else validate_manifest)(manifest)
    if verify_files:
        _verify_files(root, manifest)
    if ranges.is_range(manifest):  # its buckets' files are among those just checked
        return ranges.RangeModel(root, manifest, lambda sub: load(sub, verify_files=False))
    kind = manifest.get("runtime", {}).get("kind", "cpu")
    _LOADED.append(True)
    if kind == "cuda":
        _check_cuda_runtime(tvm)
    device = tvm.cuda(0) if kind == "cuda" else tvm.cpu(0)
    if not device.exist:
        raise LoaderError(f"package needs a {kind} device and none is present", "run it on the board it was built for")
    if kind == "cuda":
        check_gpu(manifest, device.compute_version, device.device_name)
    try:
        lib = tvm.runtime.load_module(str(root / manifest["library"]))
        from tvm.runtime.vm import VirtualMachine

        devices = [device, tvm.cpu(0)] if kind == "cuda" else device
        vm = VirtualMachine(lib, devices)
    except Exception as err:  # TVM raises TVMError subclasses, OSError for bad .so files
        lines = str(err).strip().splitlines() or [type(err).__name__]
        raise LoaderError(f"TVM could not load {manifest['library']}: {lines[-1][:300]}",
                          "check the runtime bundle matches the package (`edgetune devices check`)") from err
    return Model(root, manifest, vm, device)
