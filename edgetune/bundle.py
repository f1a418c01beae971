"""The board's runtime bundle: TVM runtime + numpy + edgetune_runtime, from PyPI wheels.

Assembled on the host for the board's architecture (``pip install --target --platform``), minus
TVM's 259 MB compiler library, and cached. A board needs neither a compiler nor internet.
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

PLATFORMS = {"aarch64": "manylinux_2_28_aarch64", "x86_64": "manylinux_2_28_x86_64"}
PYTHON = "3.11"
# numpy's oldest manylinux tag is 2_17/2014; pip accepts it for a 2_28 platform request.
EXTRA = ("cloudpickle", "typing_extensions")


def requirements() -> list[str]:
    """Exact pins of what goes into a bundle: the host's TVM pair and numpy."""
    return [
        f"apache-tvm=={_tvm.TVM_VERSION}",
        f"apache-tvm-ffi=={_tvm.TVM_FFI_VERSION}",
        f"numpy=={metadata.version('numpy')}",
        *EXTRA,
    ]


def bundle_key(arch: str) -> str:
    """Cache key: architecture, Python and TVM version."""
    return f"{arch}-cp{PYTHON.replace('.', '')}-tvm{_tvm.TVM_VERSION}"


def copy_loader(dest: Path) -> Path:
    """Copy the ``edgetune_runtime`` package (source only) into ``dest``."""
    import edgetune_runtime

    src = Path(edgetune_runtime.__file__).parent
    target = dest / "edgetune_runtime"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def runtime_bundle(arch: str) -> Path:
    """Path of the cached bundle for ``arch``, assembling it (network: PyPI) the first time."""
    if arch not in PLATFORMS:
        raise ToolchainError(
            f"no TVM runtime wheel exists on PyPI for {arch}",
            "build the TVM runtime on the board from source (see README: 32-bit boards)",
        )
    root = cache_dir("runtime") / bundle_key(arch)
    if (root / ".complete").is_file() and _loader_current(root):
        return root
    with file_lock(root.with_name(root.name + ".lock"), what=f"the {arch} runtime bundle"):
        if (root / ".complete").is_file():
            if not _loader_current(root):
                copy_loader(root)  # the loader is small and may have changed with edgetune
            return root
        return _assemble(arch, root)


def _loader_current(root: Path) -> bool:
    """Whether the bundle's copy of ``edgetune_runtime`` matches this edgetune's."""
    import edgetune_runtime

    src = Path(edgetune_runtime.__file__).parent
    for path in src.glob("*.py"):
        copy = root / "edgetune_runtime" / path.name
        if not copy.is_file() or copy.read_bytes() != path.read_bytes():
            return False
    return True


def _assemble(arch: str, root: Path) -> Path:
    staging = root.with_name(root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--target", str(staging), "--platform", PLATFORMS[arch], "--only-binary=:all:",
        "--python-version", PYTHON, "--implementation", "cp", "--no-deps", *requirements(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise ToolchainError(
            f"could not fetch the {arch} runtime wheels: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}",
            "the first bundle for an architecture needs PyPI access; later runs use the cache",
        )
    (staging / "tvm" / "lib" / "libtvm_compiler.so").unlink(missing_ok=True)
    for cache in staging.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    copy_loader(staging)
    (staging / ".complete").write_text("\n".join(requirements()) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
    return root
