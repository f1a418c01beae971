"""``edgetune bench``: latency of a package where it will run, and whether to trust it.

On this machine (``--device host``) and on a board over SSH, the package's own loader measures
it (``python -m edgetune_runtime bench``): the machine's state and warnings (throttled, busy,
governor), latency after a warm-up that waits for stable numbers, p50/p90/p99 and a 95 %
confidence interval, and with ``profile`` every kernel's time inside the network. Through a
tracker, TVM's remote time evaluator times it (no shell on those boards).
"""

from __future__ import annotations

import contextlib
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgetune_runtime.loader import REFERENCE
from edgetune_runtime.ranges import RANGE_REFERENCE

from .. import _tvm
from ..errors import RemoteCommandError, RemoteError, RpcError, UsageError
from ..model import ImportedModel
from ..profiles import normalize_arch
from .board import RemoteBoard, last_json, read_manifest, upload_package
from .inventory import Board
from .rpc import board_server, request_session


@dataclass(frozen=True)
class BenchResult:
    """Latency statistics (ms) over ``repeat`` samples of ``number`` runs, and the output check."""

    device: str
    mean_ms: float
    p50_ms: float
    p90_ms: float
    std_ms: float
    min_ms: float
    number: int
    repeat: int
    check: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _has_reference(package: Path) -> None:
    """RemoteError for a package without reference data (its inputs are what is timed)."""
    if not (package / REFERENCE).is_file() and not (package / RANGE_REFERENCE).is_file():
        raise RemoteError(f"{package} has no reference data (built with --no-verify)", "package it again without --no-verify")


def _inputs_and_reference(package: Path) -> tuple[dict[str, Any], list[np.ndarray], dict[str, np.ndarray]]:
    manifest = read_manifest(package)
    if manifest.get("kind") == "range":
        raise UsageError("a range package is timed by its loader, bucket by bucket, not over RPC",
                         "edgetune bench PACKAGE --device BOARD (a board added with `edgetune devices add`) or host")
    _has_reference(package)
    with np.load(package / REFERENCE) as data:
        inputs = [data[f"input:{s['name']}"] for s in manifest["inputs"]]
        expected = {s["original_name"]: data[f"output:{s['name']}"] for s in manifest["outputs"]}
    return manifest, inputs, expected


def _measure(session: Any, package: Path, device: str, number: int, repeat: int) -> BenchResult:
    from edgetune_runtime.compare import DEFAULT_TOLERANCE, compare

    manifest, inputs, expected = _inputs_and_reference(package)
    try:
        samples, outputs = _tvm.remote_bench(session, package / manifest["library"], inputs,
                                             manifest["runtime"]["kind"], number, repeat)
    except Exception as err:  # TVM raises TVMError on a dead server / dropped session
        raise RpcError(f"benchmark on {device} failed: {_tvm.last_line(err)[:300]}") from err
    got = {s["original_name"]: o for s, o in zip(manifest["outputs"], outputs)}
    tolerance = dict(DEFAULT_TOLERANCE, **manifest.get("verification", {}).get("tolerance", {}))
    ms = np.array(samples) * 1e3
    return BenchResult(device, float(ms.mean()), float(np.percentile(ms, 50)), float(np.percentile(ms, 90)),
                       float(ms.std()), float(ms.min()), number, repeat, compare(expected, got, **tolerance))


def bench_on_board(package: Path, board: Board, number: int = 10, repeat: int = 10) -> BenchResult:
    """Start an RPC server on ``board``, tunnel to it, time the package, stop the server."""
    manifest = read_manifest(package)
    _inputs_and_reference(package)  # a package without reference data fails before any connection
    with RemoteBoard(board) as rb:
        if manifest["arch"] != rb.facts().arch:
            raise RemoteError(f"package is for {manifest['arch']}, board {board.name} is {rb.facts().arch}")
        with board_server(rb) as server:
            try:
                session = _tvm.rpc_connect("127.0.0.1", server.local_port, server.key)
            except Exception as err:  # the server died during the handshake (TVM's InternalError)
                raise RpcError(f"no RPC session on {board.name}: {_tvm.last_line(err)[:300]}") from err
            return _measure(session, package, board.name, number, repeat)


def bench_on_tracker(package: Path, tracker: tuple[str, int], key: str, number: int = 10, repeat: int = 10, timeout: float = 120) -> BenchResult:
    """Time the package on whichever board under ``key`` the tracker hands out."""
    _inputs_and_reference(package)
    session = request_session(tracker, key, timeout)
    return _measure(session, package, f"{key}@{tracker[0]}:{tracker[1]}", number, repeat)


@dataclass(frozen=True)
class MeasureOptions:
    """What ``edgetune bench`` (host or SSH board) asks of the package's loader."""

    package: Path
    device: str  # ``host`` or a board name
    runs: int = 50
    profile: bool = False
    strict: bool = False  # refuse when the machine is throttled or busy
    max_warmup_s: float = 20.0
    baseline: Path | None = None  # the model file: also time it with its own runtime, alternating
    check: bool = True  # also run the reference check there (False: timing only, ``check`` left empty)


@dataclass(frozen=True)
class Measurement:
    """The loader's ``measure`` result on ``device``, with the reference check run there."""

    device: str
    latency: dict[str, Any]
    system: dict[str, Any]
    warnings: list[dict[str, str]]
    threads: int | None
    check: dict[str, Any]
    profile: dict[str, Any] | None = None
    kernels_known: bool = field(default=True)
    baseline: dict[str, Any] | None = None  # its latency statistics, runtime and ratio_p50
    buckets: dict[str, Any] | None = None  # a range package: each bucket's own measurement (latency: the largest's)

    @property
    def bad(self) -> list[str]:
        return [w["text"] for w in self.warnings if w["level"] == "bad"]

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def measure_package(opts: MeasureOptions) -> Measurement:
    """Measure ``opts.package`` on this machine or on a board; see the module docstring.

    Raises PackageError (not a package), RemoteError (wrong arch, no runtime, the loader failed)
    or UsageError (``strict`` and the machine is throttled or busy: the numbers would lie)."""
    if opts.runs < 2:
        raise UsageError("--runs must be at least 2", "e.g. --runs 50")
    package = opts.package.resolve()
    manifest = read_manifest(package)
    _has_reference(package)  # a package without reference data fails before anything runs
    args = ["-m", "edgetune_runtime", "bench", ".", "--json", "--runs", str(opts.runs),
            "--max-warmup", str(opts.max_warmup_s)] + (["--profile"] if opts.profile else [])
    check_args = ["-m", "edgetune_runtime", "check", ".", "--json"]
    with tempfile.TemporaryDirectory(prefix="edgetune-baseline-") as tmp:
        model = _baseline_model(_baseline_source(opts.baseline, manifest), Path(tmp)) if opts.baseline else None
        if opts.device == "host":
            here = normalize_arch(platform.machine())
            if manifest.get("arch") != here:
                raise RemoteError(f"package is for {manifest.get('arch')}, this machine is {here}",
                                  "package the model with --device host to measure it here")
            extra = ["--baseline", str(model)] if model else []
            check = _local(package, check_args) if opts.check else {}
            result = _local(package, args + extra)
        else:
            from .inventory import get_board

            board = get_board(opts.device)
            with RemoteBoard(board) as rb:
                if manifest.get("arch") != rb.facts().arch:
                    raise RemoteError(f"package is for {manifest.get('arch')}, board {board.name} is {rb.facts().arch}",
                                      f"package the model with --device {board.name}")
                if model:
                    _need_baselines(rb)
                with _scratch(rb, package) as remote:
                    extra = []
                    if model:
                        rb.conn.put(model, f"{remote}/{model.name}", verify=False)
                        extra = ["--baseline", model.name]
                    check = _on_board(rb, remote, check_args) if opts.check else {}
                    result = _on_board(rb, remote, args + extra)
    out = Measurement(opts.device, result["latency"], result["system"], result["warnings"], result.get("threads"),
                      check, result.get("profile"), bool(manifest.get("kernels")), result.get("baseline"),
                      result.get("buckets"))
    if opts.strict and out.bad:
        raise UsageError(f"refused to measure on {opts.device}: " + "; ".join(out.bad),
                         "let the board cool down or stop what keeps it busy, or drop --strict")
    return out


@dataclass(frozen=True)
class BaselineTiming:
    """The model's own runtime, timed alone on ``device``."""

    device: str
    runtime: str  # e.g. "onnxruntime 1.31.1"
    latency: dict[str, Any]  # p50_ms, p90_ms, ci95_ms, ... as ``bench`` reports them
    threads: int
    warnings: list[dict[str, str]]

    @property
    def p50_s(self) -> float:
        return self.latency["p50_ms"] / 1e3


def measure_baseline(model: ImportedModel, device: str, runs: int = 30, max_warmup_s: float = 10.0) -> BaselineTiming:
    """Time ``model`` with its own runtime (onnxruntime / LiteRT + XNNPACK) alone on ``device``
    (``host``, or a board over SSH with `devices setup --baselines` done), on the threads a
    package gets there and the inputs its reference check uses: what relative tuning targets
    (``--latency NET=0.8x``) are shares of. The loader that times it travels with the model.

    Raises RemoteError (no baselines on the board), UsageError (no such board) or
    RemoteCommandError (the runtime failed there)."""
    from ..bundle import copy_loader
    from ..reference import make_inputs

    with tempfile.TemporaryDirectory(prefix="edgetune-baseline-") as tmp:
        work = Path(tmp) / "baseline"
        work.mkdir()
        source = Path(tmp) / f"{model.source.stem}.{model.format}"
        source.write_bytes(model.source_bytes)
        runnable = _baseline_model(source, work)
        if runnable.parent != work:
            runnable = Path(shutil.copy(runnable, work / runnable.name))
        state = {v.input: v.initial for v in model.state}
        inputs = {s.original_name: a for s, a in zip(model.inputs, make_inputs(model.inputs, 0, state))}
        inputs.update({k: np.asarray(v) for k, v in model.bound.items()})
        np.savez(work / "inputs.npz", **inputs)
        copy_loader(work)  # this edgetune's loader, whatever the board's bundle holds
        args = ["-m", "edgetune_runtime", "baseline", runnable.name, "--inputs", "inputs.npz", "--runs", str(runs),
                "--max-warmup", str(max_warmup_s), "--json"]
        if device == "host":
            result = _local(work, args)
        else:
            from .inventory import get_board

            with RemoteBoard(get_board(device)) as rb:
                _need_baselines(rb)
                with _scratch(rb, work) as remote:
                    result = _on_board(rb, remote, args)
    return BaselineTiming(device, result["runtime"], result["latency"], result["threads"], result["warnings"])


SOURCE = "source"  # --baseline source: the model file the package was built from


def _baseline_source(given: Path, manifest: dict[str, Any]) -> Path:
    """``given``, or for ``source`` the model file the manifest names, when it is still where
    the package was built from and unchanged (its sha256); UsageError otherwise."""
    if str(given) != SOURCE:
        return given
    from ..util import sha256_file

    model = manifest.get("model") or {}
    path = Path(str(model.get("path") or model.get("file") or ""))
    if not path.is_file() or sha256_file(path) != model.get("sha256"):
        raise UsageError(f"the model the package was built from ({path}) is not there any more, or has changed",
                         "give the model file: --baseline MODEL")
    return path


def _need_baselines(rb: RemoteBoard) -> None:
    if not rb.has_baselines():
        raise RemoteError(f"board {rb.board.name} has no baseline runtimes (onnxruntime, LiteRT)",
                          f"install them once with `edgetune devices setup {rb.board.name} --baselines` "
                          "(pushed from here: the board needs no internet)")


@contextlib.contextmanager
def _scratch(rb: RemoteBoard, local: Path) -> Iterator[str]:
    """``local``'s files in a fresh directory on the board (checksums verified), removed after."""
    remote = f"{rb.root}/bench-{uuid.uuid4().hex[:8]}"
    try:
        upload_package(rb, local, remote)
        yield remote
    finally:
        rb.conn.run(f"rm -rf {shlex.quote(remote)}", check=False)


def _baseline_model(model: Path, tmp: Path) -> Path:
    """The model the baseline runtime times: for ONNX, as edgetune imports it (initializers
    that old exporters list as graph inputs dropped: onnxruntime treats those as overridable
    inputs and skips its constant folding); TFLite files as they are."""
    if not model.is_file():
        raise UsageError(f"baseline model {model} not found", "give the .onnx / .tflite the package was built from")
    if model.suffix != ".onnx":
        return model.resolve()
    import onnx

    from ..importer.onnx_import import drop_initializer_inputs

    proto = onnx.load(str(model))
    drop_initializer_inputs(proto)
    out = tmp / f"baseline-{model.stem}.onnx"
    onnx.save(proto, str(out))
    return out


def _parse(stdout: str, stderr: str, where: str) -> dict[str, Any]:
    result = last_json(stdout)
    if result is not None:
        return result
    last = (stderr.strip().splitlines() or ["?"])[-1][:300]
    if "unrecognized arguments" in last:
        raise RemoteCommandError(f"the package's loader is older than this edgetune ({last})",
                                 "package the model again with this edgetune")
    hint = "run `python -m edgetune_runtime check PACKAGE` for the details" if where == "this machine" else \
        "check the board with `edgetune devices check NAME`"
    raise RemoteCommandError(f"the package's loader failed on {where}: {last}", hint)


def _local(package: Path, args: list[str]) -> dict[str, Any]:
    """The package's own loader, in a fresh process (its thread pool and environment are a
    user's), from the package directory."""
    proc = subprocess.run([sys.executable, *args], cwd=package, capture_output=True, text=True, check=False)
    return _parse(proc.stdout, proc.stderr, "this machine")


def _on_board(rb: RemoteBoard, remote: str, args: list[str]) -> dict[str, Any]:
    proc = rb.python(args, cwd=remote, check=False, timeout=900)
    return _parse(proc.stdout, proc.stderr, rb.board.name)
