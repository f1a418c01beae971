"""edgetune's compiler core: everything that touches Apache TVM.

:mod:`.core` is the one module that imports ``tvm`` (lazily, so ``edgetune --help`` stays
instant, behind the version gate); every other module asks it. This package re-exports what the
rest of edgetune calls. The stages, in the order a model goes through them (``README.md`` here
has the full list with files):

frontend (ONNX / TFLite → Relax) → passes/pipeline (graph passes, legalization to edgetune's
kernels, fusion) → schedules (default micro-kernel schedules) or metaschedule (tuning records)
→ codegen (TIR pipeline) → build (a shared library) → rpc (timing on a board).
"""

from __future__ import annotations

from .build import BuildInfo, build
from .core import TVM_FFI_VERSION, TVM_VERSION, last_line, tvm, version
from .cuda import CudaToolchain, cuda_runtime_library, local_gpu
from .facts import estimate_flops, kernel_table, longest_sum, quantization_notes, quantization_scheme, relax_signature, symbolic_axes
from .frontend.common import NodeConversionError
from .frontend.onnx import onnx_supported_ops, onnx_to_relax
from .frontend.tflite import parse_unsupported, rename_inputs, tflite_supported_ops, tflite_to_relax, tflite_unsupported
from .kernels.winograd import default_conv_variant
from .peak import peak_gflops
from .rpc import remote_bench, rpc_connect, rpc_tracker_request, rpc_tracker_summary
from .schedules.dispatch import default_schedule
from .targets import LOWERINGS, PRECISIONS, Lowering, has_half, host_cpu, lowering_for, make_target, target_to_json

__all__ = [
    "LOWERINGS", "PRECISIONS", "TVM_FFI_VERSION", "TVM_VERSION", "BuildInfo", "Lowering", "CudaToolchain", "NodeConversionError", "build",
    "cuda_runtime_library", "local_gpu", "default_conv_variant", "default_schedule", "estimate_flops", "has_half", "host_cpu", "kernel_table", "longest_sum", "last_line",
    "lowering_for", "make_target", "onnx_supported_ops", "onnx_to_relax", "parse_unsupported", "peak_gflops", "quantization_notes",
    "quantization_scheme", "relax_signature", "remote_bench", "symbolic_axes", "rename_inputs", "rpc_connect", "rpc_tracker_request",
    "rpc_tracker_summary", "target_to_json", "tflite_supported_ops", "tflite_to_relax",
    "tflite_unsupported", "tvm", "version",
]
