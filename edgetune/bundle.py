"""The board's runtime bundle: TVM runtime + numpy + edgetune_runtime, from PyPI wheels.

Assembled on the host for the board's architecture (``pip install --target --platform``), minus
TVM's 259 MB compiler library, and cached. A board needs neither a compiler nor internet.

The optional baselines bundle beside it holds the frameworks ``bench --baseline`` compares
with on the board (onnxruntime, LiteRT with XNNPACK), at the versions this host has, with
their dependencies but without numpy (the runtime bundle's, same pin, comes first on the path).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from . import _tvm
from .errors import ToolchainError
from .util import cache_dir, file_lock

# glibc 2.28 or newer on the board (Raspberry Pi OS bookworm: 2.36, JetPack 6: 2.35); pip
# matches a --platform tag exactly, so every older manylinux tag a wheel may carry is listed.
MANYLINUX = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014")
PLATFORMS = {arch: tuple(f"{tag}_{arch}" for tag in MANYLINUX) for arch in ("aarch64", "x86_64")}
PYTHON = "3.11"  # Raspberry Pi OS bookworm's, and this host's: the bundle a board gets unless its Python differs
PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # a board's Python with wheels for every pin (JetPack 6: 3.10)
EXTRA = ("cloudpickle", "typing_extensions")  # what TVM's RPC server imports: pinned to this host's versions
BASELINES = ("onnxruntime", "ai-edge-litert")  # edgetune's own dependencies: pinned to this host's


def requirements(python: str = PYTHON) -> list[str]:
    """Exact pins of what goes into a bundle: the host's TVM pair, numpy and the RPC server's
    imports (the versions this host runs and its tests passed with: a board gets no surprise
    release of them). numpy is the host's, or for a Python it has no wheel for (numpy 2.3 left
    3.10 behind) the newest release before it that has one."""
    return [
        f"apache-tvm=={_tvm.TVM_VERSION}",
        f"apache-tvm-ffi=={_tvm.TVM_FFI_VERSION}",
        _numpy_pin(python),
        *(f"{name}=={metadata.version(name)}" for name in EXTRA),
    ]


def _numpy_pin(python: str) -> str:
    host = metadata.version("numpy")
    return f"numpy=={host}" if python == PYTHON else f"numpy>=2.0,<={host}"


def bundle_key(arch: str, python: str = PYTHON) -> str:
    """Cache key: architecture, Python and TVM version."""
    _check_python(python)
    return f"{arch}-cp{python.replace('.', '')}-tvm{_tvm.TVM_VERSION}"


def baseline_requirements() -> list[str]:
    """Exact pins of the baseline frameworks: the versions ``bench --baseline`` uses on this host."""
    return [f"{name}=={metadata.version(name)}" for name in BASELINES]


def baselines_key(arch: str, python: str = PYTHON) -> str:
    """Cache key of the baselines bundle: its runtime bundle's (numpy comes from there) and the
    framework versions."""
    versions = "-".join(f"{name.removeprefix('ai-edge-')}{metadata.version(name)}" for name in BASELINES)
    return f"{bundle_key(arch, python)}-baselines-{versions}"


def copy_loader(dest: Path) -> Path:
    """Copy the ``edgetune_runtime`` package (source only) into ``dest``."""
    import edgetune_runtime

    src = Path(edgetune_runtime.__file__).parent
    target = dest / "edgetune_runtime"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def runtime_bundle(arch: str, python: str = PYTHON) -> Path:
    """Path of the cached bundle for ``arch`` and the board's ``python`` (major.minor),
    assembling it (network: PyPI) the first time."""
    _check_arch(arch)
    root = cache_dir("runtime") / bundle_key(arch, python)
    if (root / ".complete").is_file() and _loader_current(root):
        return root
    with file_lock(root.with_name(root.name + ".lock"), what=f"the {arch} runtime bundle"):
        if (root / ".complete").is_file():
            if not _loader_current(root):
                copy_loader(root)  # the loader is small and may have changed with edgetune
            return root
        return _assemble(arch, python, root, requirements(python), deps=False)


def baselines_bundle(arch: str, python: str = PYTHON) -> Path:
    """Path of the cached baselines bundle for ``arch`` (onnxruntime, LiteRT and what they
    import), assembling it (network: PyPI) the first time."""
    _check_arch(arch)
    root = cache_dir("runtime") / baselines_key(arch, python)
    if (root / ".complete").is_file():
        return root
    with file_lock(root.with_name(root.name + ".lock"), what=f"the {arch} baselines bundle"):
        if (root / ".complete").is_file():
            return root
        numpy = _numpy_pin(python)  # resolved against the runtime bundle's pin, then left out
        return _assemble(arch, python, root, [*baseline_requirements(), numpy], deps=True, drop=("numpy", "numpy.libs", "bin"))


def _check_arch(arch: str) -> None:
    if arch not in PLATFORMS:
        raise ToolchainError(
            f"no TVM runtime wheel exists on PyPI for {arch}",
            "build the TVM runtime on the board from source (see README: 32-bit boards)",
        )


def _check_python(python: str) -> None:
    if python not in PYTHONS:
        raise ToolchainError(
            f"no runtime bundle for Python {python}: its wheels exist for Python {', '.join(PYTHONS)}",
            "install one of those Pythons on the board (python3 on its PATH)",
        )


def _loader_current(root: Path) -> bool:
    """Whether the bundle's copy of ``edgetune_runtime`` matches this edgetune's."""
    import edgetune_runtime

    src = Path(edgetune_runtime.__file__).parent
    for path in src.glob("*.py"):
        copy = root / "edgetune_runtime" / path.name
        if not copy.is_file() or copy.read_bytes() != path.read_bytes():
            return False
    return True


def _assemble(arch: str, python: str, root: Path, pins: list[str], deps: bool, drop: tuple[str, ...] = ()) -> Path:
    """``pip install --target`` the ``pins`` for ``arch`` into a staging directory, then rename it
    into place: an interrupted assembly leaves no half bundle. The runtime bundle (``deps``
    False) also loses TVM's compiler library and headers and gains the loader; ``drop`` names top-level
    entries to leave out (with their ``.dist-info``)."""
    staging = root.with_name(root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    platforms = [arg for platform in PLATFORMS[arch] for arg in ("--platform", platform)]
    cmd = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--target", str(staging), *platforms, "--only-binary=:all:",
        "--python-version", python, "--implementation", "cp", *([] if deps else ["--no-deps"]), *pins,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        errors = [line for line in proc.stderr.strip().splitlines() if line.startswith("ERROR")] or proc.stderr.strip().splitlines()
        raise ToolchainError(
            f"could not fetch the {arch} wheels for {', '.join(pins)}: {errors[-1] if errors else proc.returncode}",
            "the first bundle for an architecture needs PyPI access; later runs use the cache",
        )
    for name in drop:
        shutil.rmtree(staging / name, ignore_errors=True)
        for info in staging.glob(f"{name}-*.dist-info"):
            shutil.rmtree(info)
    for cache in staging.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    if not deps:
        (staging / "tvm" / "lib" / "libtvm_compiler.so").unlink(missing_ok=True)
        shutil.rmtree(staging / "tvm" / "3rdparty", ignore_errors=True)  # CUTLASS's headers, 26 MB: compiling only
        copy_loader(staging)
    installed = sorted("==".join(d.name.removesuffix(".dist-info").rsplit("-", 1)) for d in staging.glob("*.dist-info"))
    (staging / ".complete").write_text("\n".join(installed) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
    return root
