"""Shared fixtures: models made once per session, and skips that say why."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import models  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# A cache every user can read: the stand-in board's own user runs the cached aarch64 sysroot.
os.environ.setdefault("EDGETUNE_CACHE_DIR", "/var/tmp/edgetune-test-cache")
EXAMPLES = REPO / "examples"


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """User profile dirs are per-test; the cache (sysroot, runtime bundle) is shared and kept."""
    config = tmp_path_factory.mktemp("config")
    monkeypatch.setenv("EDGETUNE_TARGETS_DIR", str(config / "targets"))
    monkeypatch.setenv("EDGETUNE_DEVICES_FILE", str(config / "devices.toml"))
    monkeypatch.setenv("EDGETUNE_KNOWN_HOSTS", str(config / "known_hosts"))
    monkeypatch.setenv("EDGETUNE_SSH_CONFIG", str(config / "ssh_config"))


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def squeezenet(model_dir: Path) -> Path:
    return models.randomized_light("squeezenet", model_dir / "squeezenet.onnx")


@pytest.fixture(scope="session")
def exporter_onnx(model_dir: Path) -> Path:
    return models.exporter_style_onnx(model_dir / "exported.onnx")


@pytest.fixture(scope="session")
def int8_tflite(model_dir: Path) -> Path:
    return models.int8_tflite(model_dir / "int8.tflite")


@pytest.fixture(scope="session")
def face_tflite() -> Path:
    """MediaPipe's float face detector (Apache-2.0), bundled in examples/."""
    return EXAMPLES / "face_detection_short_range.tflite"


@pytest.fixture(scope="session")
def host_package(tmp_path_factory: pytest.TempPathFactory, squeezenet: Path) -> Path:
    """A verified host package of squeezenet, built once."""
    from edgetune.package import PackageOptions, package

    out = tmp_path_factory.mktemp("pkg") / "squeezenet-host"
    package(PackageOptions(model=squeezenet, device="host", output=out))
    return out


def _qemu_reason() -> str | None:
    if shutil.which("qemu-aarch64-static") is None:
        return "qemu-aarch64-static is not installed (scripts/install-system-deps.sh installs it)"
    if shutil.which("debootstrap") is None:
        return "debootstrap is not installed (scripts/install-system-deps.sh installs it)"
    if os.geteuid() != 0 and shutil.which("fakeroot") is None:  # emulation builds the sysroot under fakeroot
        return "fakeroot is not installed: a non-root user builds the aarch64 sysroot under it (scripts/install-system-deps.sh installs it)"
    return None


@pytest.fixture(scope="session")
def qemu() -> None:
    """Skip (with the reason) where aarch64 emulation cannot be set up."""
    reason = _qemu_reason()
    if reason:
        pytest.skip(reason)


def run_edgetune(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real console script in a subprocess (exit codes and stderr exactly as a user sees)."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "edgetune", *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=900)


def built_candidates(task, target, toolchain: tuple, tmp_path: Path) -> list:
    """The first candidates a tuning task proposes (a fresh database under ``tmp_path``), built
    as the tuner's builder does with ``toolchain`` (``build.check_toolchain``'s (cc, cuda));
    asserts every build succeeded and returns them (their artifacts: remove when done)."""
    from edgetune._tvm import metaschedule as ms

    ctx = ms.TaskContext(task, target, 0, 2, ms.SearchConfig(population_size=16, init_min_unmeasured=4))
    (tmp_path / "db").mkdir()
    ctx.start(ms.open_database(tmp_path / "db"), ms.make_cost_model(2), 8, 2)
    cc, cuda = toolchain
    built = ms.make_builder(cc, 2, 120, cuda).build([ms.builder_input(c, target) for c in ctx.propose()])
    assert built and all(b.error_msg is None for b in built), [b.error_msg for b in built]
    return built


def record_lines(records: Path) -> int:
    """Tuning records measured so far in a records directory (lines of its records file)."""
    path = records / "database_tuning_record.json"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def wait_until_spinning(pid: int, cpu_s: float = 0.3, timeout: float = 60.0) -> None:
    """Block until process ``pid`` has used ``cpu_s`` of CPU: a busy loop started for a test is
    then really running (not still starting Python), whatever the machine's load."""
    ticks = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if (int(fields[11]) + int(fields[12])) / ticks >= cpu_s:  # utime + stime
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not start spinning within {timeout:.0f} s")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one test process per core this process may use, at most one per 6 GiB of
    memory (a TVM build of a real model with onnxruntime beside it takes up to ~4 GiB)."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return max(1, min(len(os.sched_getaffinity(0)), pages // (6 << 30)))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under pytest -n, a test marked ``exclusive`` (its assertions read timings or the host's
    load: a profile that adds up, a stop rule on measured kernels, a board check's "machine is
    busy") runs with no other test process running a test; every other test runs beside others.
    A readers-writer lock shared by this run's test processes, with a turnstile so that a waiting
    exclusive test is not starved (setup and teardown, module fixtures included, are inside)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return (yield)
    base = item.config._tmp_path_factory.getbasetemp().parent / f"tests-{run}"  # the run's own, which pytest cleans
    with open(f"{base}.turn", "a") as turn, open(f"{base}.lock", "a") as lock:
        fcntl.flock(turn, fcntl.LOCK_EX)
        exclusive = item.get_closest_marker("exclusive") is not None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``qemu`` marks every test that runs aarch64 code here (it asks for the ``qemu`` fixture)."""
    for item in items:
        if "qemu" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.qemu)
