"""Host tools a profile needs: cross compilers, nvcc (+ a libcuda stub), qemu-user.

Every lookup fails fast with a ToolchainError naming the Debian or PyPI package that fixes it,
before any long compile starts.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import _tvm
from .errors import ToolchainError
from .profiles import Profile, host_arch
from .util import cache_dir


def cross_compiler(profile: Profile) -> str | None:
    """Path of the profile's compiler driver, or None to use the host default."""
    if not profile.toolchain.cc:
        return None
    found = shutil.which(profile.toolchain.cc)
    if not found:
        pkgs = " ".join(profile.toolchain.debian_packages) or profile.toolchain.cc
        raise ToolchainError(
            f"cross compiler '{profile.toolchain.cc}' for profile '{profile.name}' is not installed",
            f"install it with `sudo apt-get install {pkgs}` (or `sudo scripts/install-system-deps.sh`)",
        )
    return found


def emulator(profile: Profile) -> Path | None:
    """qemu-user binary that runs the profile's code here, if installed."""
    name = profile.toolchain.emulator
    found = shutil.which(name) if name else None
    return Path(found) if found else None


def _nvcc_candidates() -> list[Path]:
    env = [os.environ.get("EDGETUNE_NVCC"), shutil.which("nvcc")]
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    paths = [Path(p) for p in env if p] + [Path(h) / "bin" / "nvcc" for h in homes if h]
    # NVIDIA's PyPI wheels (pip install 'edgetune[jetson]') unpack under site-packages/nvidia/cu13
    site = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    paths += sorted(site.glob("nvidia/cu*/bin/nvcc"))
    unique = dict.fromkeys(p.resolve() for p in paths if p.is_file())
    return list(unique)


def nvcc_version(nvcc: Path) -> tuple[int, int]:
    """(major, minor) reported by ``nvcc --version``."""
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"release (\d+)\.(\d+)", out)
    if not match:
        raise ToolchainError(f"cannot read the CUDA version from `{nvcc} --version`")
    return int(match.group(1)), int(match.group(2))


def _find_cudart(nvcc: Path, major: int) -> Path:
    prefixes = [nvcc.parent.parent, *(Path(p) for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if p)]
    prefixes += sorted(Path("/usr/local").glob(f"cuda-{major}*")) + [p.parent.parent for p in _nvcc_candidates()]
    for prefix in prefixes:
        for lib in ("lib", "lib64", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            candidate = prefix / lib / f"libcudart.so.{major}"
            if candidate.is_file():
                return candidate
    ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    match = re.search(rf"libcudart\.so\.{major} .*=> (\S+)", ldconfig)
    if match:
        return Path(match.group(1))
    raise ToolchainError(
        f"libcudart.so.{major} not found next to {nvcc}",
        "install the CUDA runtime of the same version as nvcc (pip install 'edgetune[jetson]')",
    )


def cuda_stub_dir() -> Path:
    """A directory with a stub ``libcuda.so.1`` (built once) for hosts without an NVIDIA driver.

    It defines the driver symbols TVM's CUDA runtime module links to, each returning
    CUDA_ERROR_NO_DEVICE: enough to load the module and let the build embed compiled kernels.
    """
    out = cache_dir("cuda-stub")
    lib = out / "libcuda.so.1"
    if lib.is_file():
        return out
    sidecar = _tvm.cuda_runtime_library()
    nm = subprocess.run(["nm", "-D", "--undefined-only", str(sidecar)], capture_output=True, text=True, check=False)
    symbols = sorted({ln.split()[-1] for ln in nm.stdout.splitlines() if re.search(r"\scu[A-Z]\w*$", ln)})
    if nm.returncode or not symbols:
        raise ToolchainError("cannot list the CUDA driver symbols TVM needs (is binutils' `nm` installed?)")
    source = out / "libcuda_stub.c"
    source.write_text("".join(f"int {s}(void) {{ return 100; }}\n" for s in symbols))
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise ToolchainError("a host C compiler (gcc) is needed to build the libcuda stub", "sudo apt-get install gcc")
    tmp = out / f"libcuda.so.1.{os.getpid()}"
    built = subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(tmp), str(source)],
                           capture_output=True, text=True)
    if built.returncode:
        raise ToolchainError(f"building the libcuda stub failed: {(built.stderr or built.stdout).strip()[-300:]}",
                             "check the host C compiler (gcc) and the disk space under the cache directory")
    tmp.replace(lib)
    return out


def find_cuda(profile: Profile) -> _tvm.CudaToolchain:
    """nvcc whose CUDA major matches the profile's board, plus its libcudart and the stub."""
    want = profile.toolchain.cuda_major
    seen = []
    for nvcc in _nvcc_candidates():
        major, minor = nvcc_version(nvcc)
        seen.append(f"{nvcc} (CUDA {major}.{minor})")
        if major == want:
            return _tvm.CudaToolchain(nvcc, _find_cudart(nvcc, major), cuda_stub_dir())
    found = "; found " + ", ".join(seen) if seen else ""
    raise ToolchainError(
        f"profile '{profile.name}' needs nvcc from CUDA {want} to compile kernels for the board{found}",
        "pip install 'edgetune[jetson]' (NVIDIA's nvcc wheels), or set EDGETUNE_NVCC=/path/to/nvcc",
    )


@dataclass(frozen=True)
class LocalGpu:
    """This machine's GPU (``name``: "NVIDIA H200 (sm_90)") and the profile's libcudart that
    TVM's CUDA runtime was loaded with."""

    name: str
    cudart: Path


def local_gpu(profile: Profile) -> LocalGpu | None:
    """This machine's GPU where it can run the CUDA profile's kernels itself: the profile's host
    code is this machine's architecture, a GPU and its driver are here, and the profile's sm
    arch runs on it. None otherwise (any CPU profile; a Jetson profile on an x86 host)."""
    if profile.runtime != "cuda" or profile.arch != host_arch():
        return None
    try:
        cuda = find_cuda(profile)
        gpu = _tvm.local_gpu(cuda)
    except ToolchainError:
        return None
    if gpu is None:
        return None
    from edgetune_runtime.loader import PackageMismatchError, check_gpu

    name, version = gpu
    try:
        check_gpu({"runtime": {"cuda_archs": [profile.target.get("arch", "")]}}, version, name)
    except PackageMismatchError:
        return None
    return LocalGpu(f"{name} (sm_{version.replace('.', '')})", cuda.cudart)
