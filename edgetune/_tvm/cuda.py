"""CUDA for Jetson profiles: nvcc-compiled kernels on a host without a GPU (README: Jetson)."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import ToolchainError


class CudaToolchain:
    """Where nvcc and libcudart live; built by ``toolchain.find_cuda``."""

    def __init__(self, nvcc: Path, cudart: Path, stub_dir: Path):
        self.nvcc, self.cudart, self.stub_dir = nvcc, cudart, stub_dir


def cuda_runtime_library() -> Path:
    """TVM's CUDA runtime sidecar, whose libcuda symbols a GPU-less host must stub."""
    from tvm import base

    return Path(base._LOADED_LIBS["tvm_runtime"]._name).resolve().parent / "libtvm_runtime_cuda.so"


@contextlib.contextmanager
def cuda_compile_env(cuda: CudaToolchain) -> Iterator[None]:
    """Make TVM compile CUDA kernels with nvcc into a binary.

    Without a loadable libcuda, TVM's CUDA runtime module is absent and the build silently
    embeds CUDA *source*. On a host without a driver we load libcudart and a stub libcuda
    (RTLD_GLOBAL) and register the CUDA backend again, then run nvcc via TVM's callback.
    """
    from tvm import base
    from tvm.backend import cuda as tvm_cuda

    if "tvm_runtime_cuda" not in base._LOADED_LIBS:
        ctypes.CDLL(str(cuda.cudart), mode=ctypes.RTLD_GLOBAL)
        if not real_libcuda():
            ctypes.CDLL(str(cuda.stub_dir / "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
        tvm_cuda.register_backend()
        if "tvm_runtime_cuda" not in base._LOADED_LIBS:
            raise ToolchainError(
                "TVM's CUDA runtime library could not be loaded, so kernels would ship as source",
                "check that the CUDA runtime matches nvcc (libcudart.so.13)",
            )
    import tvm.support.nvcc  # noqa: F401  registers tvm_callback_cuda_compile

    saved = {k: os.environ.get(k) for k in ("PATH", "TVM_CUDA_COMPILE_MODE", "CUDA_HOME")}
    os.environ["PATH"] = f"{cuda.nvcc.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    os.environ["CUDA_HOME"] = str(cuda.nvcc.parent.parent)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def local_gpu(cuda: CudaToolchain) -> tuple[str, str] | None:
    """This machine's first NVIDIA GPU as (name, compute capability such as "9.0"), or None
    where there is no driver or no GPU. Loads TVM's CUDA runtime with ``cuda``'s libcudart."""
    if not real_libcuda():
        return None
    from tvm import base
    from tvm.backend import cuda as tvm_cuda

    from .core import tvm

    if "tvm_runtime_cuda" not in base._LOADED_LIBS:
        ctypes.CDLL(str(cuda.cudart), mode=ctypes.RTLD_GLOBAL)
        tvm_cuda.register_backend()
    device = tvm().cuda(0)
    return (device.device_name, device.compute_version) if device.exist else None


def real_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True
