"""The only module that imports Apache TVM.

Everything TVM-specific lives here: the version gate, frontends, target construction, builds,
and the workarounds measured on TVM 0.27 (see DESIGN.md §3). The next TVM rename is a change to
this file only. ``tvm`` itself is imported lazily so ``edgetune --help`` stays instant.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import BuildError, ModelError, ProfileError, ToolchainError

log = logging.getLogger(__name__)

TVM_VERSION = "0.27.0.post1"
TVM_FFI_VERSION = "0.1.14.post1"


@functools.cache
def tvm() -> Any:
    """Import TVM once, refusing versions edgetune was not built and tested against."""
    from importlib import metadata

    try:
        import tvm as _tvm  # noqa: PLC0415
    except ImportError as err:
        raise ToolchainError(
            f"Apache TVM is not importable: {err}",
            f"install it with `pip install apache-tvm=={TVM_VERSION}`",
        ) from err
    found = {name: metadata.version(name) for name in ("apache-tvm", "apache-tvm-ffi")}
    wanted = {"apache-tvm": TVM_VERSION, "apache-tvm-ffi": TVM_FFI_VERSION}
    if found != wanted and not os.environ.get("EDGETUNE_ALLOW_TVM_MISMATCH"):
        raise ToolchainError(
            f"edgetune needs {wanted} but found {found}",
            f"pip install apache-tvm=={TVM_VERSION} apache-tvm-ffi=={TVM_FFI_VERSION}",
        )
    return _tvm


def version() -> str:
    """The TVM version string, without importing TVM."""
    from importlib import metadata

    return metadata.version("apache-tvm")


# ---------------------------------------------------------------- targets


def host_cpu() -> tuple[str, str]:
    """(LLVM triple, LLVM cpu name) of this machine."""
    tvm()
    from tvm.target import codegen

    return str(codegen.llvm_get_system_triple()), str(codegen.llvm_get_system_cpu())


def make_target(spec: Mapping[str, Any]) -> Any:
    """Build a ``tvm.target.Target`` from its JSON form; invalid keys become ProfileError."""
    tvm()
    from tvm.target import Target

    try:
        return Target(dict(spec))
    except (ValueError, RuntimeError) as err:
        first = str(err).strip().splitlines()[-1] if str(err).strip() else repr(err)
        raise ProfileError(f"invalid TVM target {dict(spec)}: {first}") from err


def target_to_json(target: Any) -> dict[str, Any]:
    """The full target as plain JSON data (TVM's Map/Array converted)."""
    return _plain(target.export())


def _plain(value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "__iter__"):
        return [_plain(v) for v in value]
    return str(value)


def default_conv_variant(target: Any) -> str:
    """"winograd" or "direct": what an untuned build uses for an eligible 3×3 convolution."""
    from .lowering import default_conv_variant as default

    return default(target)


def peak_gflops(profile: Any, target: Any) -> float | None:
    """fp32 GFLOP/s a perfect kernel reaches on the profile's CPU: declared by a board profile
    (``[board] peak-gflops``), measured once on the host, None when neither is known."""
    declared = profile.board.get("peak-gflops")
    if declared:
        return float(declared)
    if profile.is_native and target.kind.name == "llvm":
        from .peak import host_peak

        return host_peak(target)
    return None


# ---------------------------------------------------------------- frontends


@contextlib.contextmanager
def _quiet_frontend() -> Iterator[None]:
    """TVM frontends warn per initializer and print a failing node's inputs (whole IR
    snippets) to stdout; keep both out of the user's terminal (debug log)."""
    import io

    printed = io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(printed):
            warnings.simplefilter("always")
            yield
    finally:
        for w in caught:
            log.debug("tvm frontend: %s", w.message)
        if printed.getvalue():
            log.debug("tvm frontend printed: %s", printed.getvalue()[:2000])


# Converted while TVM's frontend walks the graph, not through its converter map (DESIGN §3).
_ONNX_DIRECT = frozenset({"If", "Constant", "Loop"})  # Loop: edgetune's (:mod:`.onnx_loop`)


def onnx_supported_ops() -> frozenset[str]:
    """ONNX op types (default domain) that convert: TVM's converter map, ``If`` (which TVM's
    frontend handles while walking the graph), edgetune's recurrent layers and its own
    converters (:mod:`.onnx_ops`)."""
    tvm()
    from tvm.relax.frontend.onnx import onnx_frontend

    from .onnx_ops import CONVERTERS
    from .recurrent import GATES

    return frozenset(onnx_frontend._get_convert_map()) | _ONNX_DIRECT | frozenset(GATES) | frozenset(CONVERTERS)


def _onnx_importer() -> Any:
    """TVM's ONNX graph importer, with edgetune's LSTM/GRU/RNN converters (sequences up to
    ``recurrent.UNROLL_MAX_STEPS`` steps unrolled, as read at conversion) and :mod:`.onnx_ops`
    in front of its map; a node that fails to convert is named in the error."""
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from . import onnx_loop, onnx_ops, recurrent

    class Importer(fe.ONNXGraphImporter):
        def _check_for_unsupported_ops(self, graph: Any) -> None:
            known = onnx_supported_ops()
            missing = sorted({n.op_type for n in graph.node if n.op_type not in known})
            if missing:
                raise tvm().error.OpNotImplemented(f"not supported: {', '.join(missing)}")

        def _convert_operator(self, op_name: str, inputs: Any, attrs: dict, opset: int) -> Any:
            try:
                if op_name in recurrent.GATES:
                    return self.bb.normalize(recurrent.convert(self.bb, op_name, inputs, attrs,
                                                               recurrent.UNROLL_MAX_STEPS))
                if op_name in onnx_ops.CONVERTERS:
                    return self.bb.normalize(onnx_ops.CONVERTERS[op_name](self.bb, list(inputs), attrs))
                if op_name == "Loop":
                    return self.bb.normalize(onnx_loop.convert_loop(self, list(inputs), attrs))
                return super()._convert_operator(op_name, inputs, attrs, opset)
            except NodeConversionError:
                raise
            except Exception as err:  # TVM's converters raise many types; each means "this node"
                name = attrs.get("tvm_custom", {}).get("name") or "?"
                raise NodeConversionError(f"{op_name} node '{name}': {reason(err)}") from err

    return Importer


class NodeConversionError(Exception):
    """TVM's frontend failed on one node (the message names it)."""


def reason(err: BaseException) -> str:
    """The line of a TVM error that says what went wrong: not its traceback, not the "Metadata
    omitted" footer TVM prints after an IR snippet."""
    import re

    text = re.sub(r"In ir\.Op\(.*?support_level=\d+\),\s*", "", str(err))  # an operator's whole description
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    noise = ("Metadata omitted", "File \"", "Traceback", "^", "~~~")
    useful = [ln for ln in lines if not ln.startswith(noise) and not ln.startswith(("#", "@", "R.", "def ", "return "))]
    checks = [ln for ln in useful if "Check failed" in ln or "Error" in ln.split(":")[0]]
    text = (checks or useful or [type(err).__name__])[-1]
    return text[:300] + ("…" if len(text) > 300 else "")


def _onnx_opset(model: Any) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def onnx_to_relax(model: Any, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str]) -> Any:
    """Convert an ONNX ModelProto (names already sanitized, checked by the importer) to a Relax
    IRModule, weights embedded. Short recurrent sequences are unrolled, longer ones loop
    (:mod:`.recurrent`). A model with a data-dependent ``If`` keeps its
    ``relax.If``; the bindings around it are regrouped into dataflow blocks so they fuse."""
    tvm()
    from tvm import relax

    importer = _onnx_importer()
    try:
        with _quiet_frontend():
            mod = importer(dict(shapes), dict(dtypes)).from_onnx(model.graph, _onnx_opset(model))
            if any(n.op_type == "If" for n in model.graph.node):
                mod = relax.transform.ConvertToDataflow(min_size=1)(mod)
    except Exception as err:  # TVM raises many types; all mean "could not convert"
        raise ModelError(
            f"TVM's ONNX frontend failed on {err}" if isinstance(err, NodeConversionError)
            else f"TVM's ONNX frontend failed: {reason(err)}",
            "EDGETUNE_DEBUG=1 shows TVM's traceback; `edgetune inspect MODEL` lists the model's operators",
        ) from err
    return _integer_layers(mod, tflite=False)


def tflite_supported_ops() -> frozenset[str]:
    """TFLite builtin operator names edgetune's converter (TVM's, :mod:`.tflite_ops`) converts."""
    tvm()
    from .tflite_ops import converter_class

    return frozenset(converter_class()(None, None, None, None).convert_map)


def tflite_unsupported(model: Any) -> list[str]:
    """Everything in subgraph 0 the TFLite converter rejects up front (all at once)."""
    tvm()
    from .tflite_ops import converter_class

    conv = converter_class()(model, model.Subgraphs(0), None, None)
    try:
        conv.check_unsupported_ops()
    except Exception as err:  # noqa: BLE001 — tvm.error.OpNotImplemented, or quantization errors
        return _parse_unsupported(str(err))
    return []


def _parse_unsupported(text: str) -> list[str]:
    """The operator names in the frontend's message: each line lists them after its colon, up to
    the sentence's end (the explanation after it names no operator)."""
    import re

    ops = set()
    for line in text.splitlines():
        _head, sep, rest = line.partition(": ")
        if sep:
            ops.update(re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", re.split(r"\.(?:\s|$)", rest)[0]))
    return sorted(ops) or [text.strip().splitlines()[0]]


def tflite_to_relax(model: Any, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str]) -> Any:
    """Convert a parsed tflite.Model to a Relax IRModule (weights are constants); int8 layers
    computed as LiteRT computes them (:mod:`.quantized`), the quantization scheme kept on the
    module (:func:`quantization_scheme`)."""
    tvm()
    from tvm.relax.frontend.tflite import tflite_frontend

    from .tflite_ops import converter_class

    try:
        with _quiet_frontend():
            mod = tflite_frontend.from_tflite(model, shape_dict=dict(shapes), dtype_dict=dict(dtypes),
                                              op_converter=converter_class())
    except Exception as err:
        raise ModelError(
            f"TVM's TFLite frontend failed on {err}" if isinstance(err, NodeConversionError)
            else f"TVM's TFLite frontend failed: {reason(err)}",
            "EDGETUNE_DEBUG=1 shows TVM's traceback; `edgetune inspect MODEL` lists the model's operators",
        ) from err
    return _integer_layers(mod, tflite=True)


def _integer_layers(mod: Any, tflite: bool) -> Any:
    """``mod`` with its quantized convolution / dense layers as exact integer sums
    (:func:`.quantized.exact_int8_layers`) — and for TFLite, int8 ADDs and ReLUs as LiteRT's
    XNNPACK computes them — the quantization scheme kept on the module. A float model as is."""
    import json
    from collections import Counter

    from .quantized import (
        SCHEME_ATTR,
        exact_int8_layers,
        int8_concats,
        int8_relus,
        int8_rescales,
        int8_tables,
        quantized_layers,
        xnnpack_int8_adds,
    )

    scheme = quantization_scheme(mod)
    if scheme is None:  # a float model (or only elementwise QDQ chains: those as tables)
        return int8_tables(int8_rescales(int8_concats(mod)[0])[0])[0]
    layers = quantized_layers(mod)
    mod, exact = exact_int8_layers(mod)
    float_layers = list((Counter(layers) - Counter(exact["rewritten"])).elements())
    adds = relus = 0
    if tflite:
        mod, adds = xnnpack_int8_adds(mod)
        mod, relus = int8_relus(mod)
    mod, concats = int8_concats(mod)
    mod, rescales = int8_rescales(mod)
    mod, tables = int8_tables(mod)
    scheme.update(exact=exact["layers"], exact_bounded=exact["bounded"], integer=exact["integer"], float_layers=float_layers,
                  fixed_point_adds=adds, relus=relus,
                  concats=concats, rescales=rescales, tables=tables,
                  requantized_as="LiteRT's XNNPACK" if tflite else "onnxruntime's QLinearConv / MLAS",
                  runs_as="full convolutions and dense layers (as 1×1 convolutions) on the CPU's int8 dot-product "
                          "instruction (AVX-512 VNNI, Arm sdot, NEON smull), depthwise layers (and CPUs without one) as "
                          "exact integer sums in fp32 kernels")
    return mod.with_attr(SCHEME_ATTR, json.dumps(scheme))


def _last_line(err: BaseException) -> str:
    import re

    text = re.sub(r"In ir\.Op\(.*?support_level=\d+\),\s*", "", str(err))  # an operator's whole description
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(err).__name__


def rename_inputs(mod: Any, mapping: Mapping[str, str]) -> Any:
    """Rename parameters of ``main`` (names TVM's CUDA codegen cannot carry, e.g. ``a/b:0``)."""
    tvm()
    from tvm import relax

    func = mod["main"]
    new_params = [relax.Var(mapping.get(p.name, p.name), p.ty) for p in func.params]
    pairs = list(zip(func.params, new_params))

    @relax.expr_functor.mutator
    class _Rename(relax.PyExprMutator):
        def visit_var_(self, op: Any) -> Any:  # noqa: N802 — TVM's visitor naming
            return next((new for old, new in pairs if op.same_as(old)), op)

    body = _Rename(mod).visit_expr(func.body)
    new = relax.Function(new_params, body, func.ret_ty, func.is_pure, func.attrs)
    out = mod.shallow_copy() if hasattr(mod, "shallow_copy") else tvm().IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    out[out.get_global_var("main")] = new
    return out


# ---------------------------------------------------------------- module facts


def relax_signature(mod: Any) -> tuple[list[tuple[str, tuple[int, ...], str]], list[tuple[tuple[int, ...], str]]]:
    """Inputs (name, shape, dtype) and outputs (shape, dtype) of ``main``."""
    tvm()
    from tvm import relax

    func = mod["main"]
    inputs = [(p.name, *_tensor_info(p.ty)) for p in func.params]
    ret = func.ret_ty
    outs = ret.fields if isinstance(ret, relax.TupleType) else [ret]
    return inputs, [_tensor_info(s) for s in outs]


def _tensor_info(sinfo: Any) -> tuple[tuple[int, ...], str]:
    try:
        shape = tuple(int(d) for d in sinfo.shape.values)
    except (AttributeError, TypeError) as err:
        raise ModelError(
            f"model has a non-static tensor shape {sinfo}",
            "fix dynamic dimensions with --input-shape NAME=1,3,224,224",
        ) from err
    return shape, str(sinfo.dtype)


def estimate_flops(mod: Any) -> float:
    """Floating/integer operations of one inference, from the legalized TIR."""
    tvm()
    from tvm import relax
    from tvm.s_tir.analysis import estimate_tir_flops

    lowered = relax.transform.LegalizeOps()(mod)
    calls = _count_call_tir(lowered["main"])
    total = 0.0
    for gv, func in lowered.functions_items():
        if gv.name_hint in calls and not isinstance(func, relax.Function):
            try:
                total += estimate_tir_flops(tvm().IRModule({"main": func})) * calls[gv.name_hint]
            except Exception:  # noqa: BLE001 — ops with data-dependent loops have no estimate
                log.debug("no FLOP estimate for %s", gv.name_hint)
    return total


def quantization_notes(mod: Any) -> list[str]:
    """The import note of an int8 model whose quantized layers are not all computed as the
    runtime's integer kernels do: those layers, named, stay on TVM's float path."""
    from .quantized import WEIGHT_ONLY

    scheme = quantization_scheme(mod)
    float_layers = (scheme or {}).get("float_layers", [])
    if not float_layers or scheme["activations"] == [WEIGHT_ONLY]:
        return []
    shown = "; ".join(float_layers[:8]) + (f"; and {len(float_layers) - 8} more" if len(float_layers) > 8 else "")
    return [f"int8: {len(float_layers)} quantized layer(s) keep TVM's float path (dequantize → fp32 kernel → "
            f"quantize; checked against the runtime like the rest, not integer kernels): {shown}"]


def quantization_scheme(mod: Any) -> dict[str, Any] | None:
    """How an imported model is quantized and how it runs (:func:`.quantized.quantization_scheme`)."""
    from .quantized import quantization_scheme as scheme

    return scheme(mod)


def kernel_table(fused: Any) -> dict[str, dict[str, Any]]:
    """Per PrimFunc of a fused module: how often ``main`` calls it and its FLOPs per call."""
    from tvm import tirx
    from tvm.s_tir.analysis import estimate_tir_flops

    calls = _count_call_tir(fused["main"])
    out = {}
    for gv, func in fused.functions_items():
        if isinstance(func, tirx.PrimFunc) and gv.name_hint in calls:
            try:
                flops = float(estimate_tir_flops(tvm().IRModule({"main": func})))
            except Exception:  # noqa: BLE001 — data-dependent loops have no estimate
                flops = 0.0
            out[gv.name_hint] = {"calls": calls[gv.name_hint], "flops": flops}
    return out


def _count_call_tir(func: Any) -> dict[str, int]:
    from tvm import relax

    counts: dict[str, int] = {}

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.call_tir":
            name = expr.args[0].name_hint
            counts[name] = counts.get(name, 0) + 1

    relax.analysis.post_order_visit(func.body, visit)
    return counts


# ---------------------------------------------------------------- build


@dataclasses.dataclass(frozen=True)
class BuildInfo:
    """How a library was built: the lowering, and per kernel (fused function) how it was
    scheduled — ``tuned`` (a record applied), a default rule's kind, or ``naive`` (plain loops)."""

    lowering: str
    kernels: dict[str, dict[str, Any]]  # fused function → {"kind", "calls", "flops"}


def build(mod: Any, target: Any, out: Path, cc: str | None, cuda: "CudaToolchain | None" = None,
          records: Path | None = None, layout: str = "auto", conv_choice: Any = "auto") -> BuildInfo:
    """Compile ``mod`` for ``target`` and export a .so.

    CPU targets: edgetune's lowering (:mod:`.lowering`; ``conv_choice`` picks direct or Winograd
    kernels per 3×3 convolution), tuning ``records`` applied where they match, default
    schedules (:mod:`.cpu_schedules`) for every other kernel. GPU targets: TVM's
    pipeline with DLight schedules (records applied first). ``cc`` is the cross compiler driver
    used to link (None: the host's); for CUDA, ``cuda`` supplies nvcc so kernels are embedded as
    a compiled fatbin, not source.
    """
    tvm()
    from tvm.support import cc as tvm_cc

    ctx = _cuda_compile_env(cuda) if cuda else contextlib.nullcontext()
    try:
        with ctx, target:
            exe, info = _compile(mod, target, records, layout, conv_choice)
        fcompile = tvm_cc.cross_compiler(cc) if cc else None
        exe.export_library(str(out), fcompile=fcompile)
    except (ToolchainError, BuildError):
        raise
    except Exception as err:
        if "No space left on device" in str(err):  # the linker's words, deep in TVM's message
            raise BuildError(f"no space left on the device while writing {out.parent}",
                             "free some space and run again") from err
        raise BuildError(
            f"TVM could not build for {target.kind.name}: {_last_line(err)}",
            "EDGETUNE_DEBUG=1 shows TVM's traceback",
        ) from err
    return info


def _compile(mod: Any, target: Any, records: Path | None, layout: str, conv_choice: Any) -> tuple[Any, BuildInfo]:
    from tvm import relax

    from . import lowering

    lw = lowering.lowering_for(target, layout)
    if target.kind.name != "llvm":
        mod = lowering.int8_convolutions_in_float(mod)
        if records is not None:
            from .metaschedule import compile_with_records

            return compile_with_records(mod, target, records), BuildInfo(lw.key, {})
        return tvm().compile(mod, target, relax_pipeline=relax.get_default_pipeline(target)), BuildInfo(lw.key, {})
    fused = lowering.fuse(mod, target, lw, conv_choice)
    from .metaschedule import apply_records, kernel_workloads

    workloads = kernel_workloads(fused)
    if records is not None:
        fused = apply_records(fused, target, records)
    from .cpu_schedules import apply_default_schedules

    table = kernel_table(fused)
    fused, kinds = apply_default_schedules(fused, target)
    kernels = {name: {"kind": kind, "workload": workloads.get(name, ""), **table.get(name, {"calls": 0, "flops": 0.0})}
               for name, kind in kinds.items()}
    from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

    from . import lookups

    lookups.register()
    rest = tvm().transform.Sequential(cpu_pipeline.dataflow_lower_passes(target) + cpu_pipeline.finalize_passes(target))
    return (tvm().compile(fused, target, relax_pipeline=rest, tir_pipeline=lookups.PIPELINE),
            BuildInfo(lw.key, kernels))


class CudaToolchain:
    """Where nvcc and libcudart live; built by ``toolchain.find_cuda``."""

    def __init__(self, nvcc: Path, cudart: Path, stub_dir: Path):
        self.nvcc, self.cudart, self.stub_dir = nvcc, cudart, stub_dir


def cuda_runtime_library() -> Path:
    """TVM's CUDA runtime sidecar, whose libcuda symbols a GPU-less host must stub."""
    from tvm import base

    return Path(base._LOADED_LIBS["tvm_runtime"]._name).resolve().parent / "libtvm_runtime_cuda.so"


@contextlib.contextmanager
def _cuda_compile_env(cuda: CudaToolchain) -> Iterator[None]:
    """Make TVM compile CUDA kernels with nvcc into a binary (DESIGN §3, Jetson).

    Without a loadable libcuda, TVM's CUDA runtime module is absent and the build silently
    embeds CUDA *source*. On a host without a driver we load libcudart and a stub libcuda
    (RTLD_GLOBAL) and register the CUDA backend again, then run nvcc via TVM's callback.
    """
    from tvm import base
    from tvm.backend import cuda as tvm_cuda

    if "tvm_runtime_cuda" not in base._LOADED_LIBS:
        ctypes.CDLL(str(cuda.cudart), mode=ctypes.RTLD_GLOBAL)
        if not _real_libcuda():
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


def _real_libcuda() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


# ---------------------------------------------------------------- persistence


def save_ir(mod: Any, path: Path) -> None:
    """Write an IRModule (with its constants) as TVM JSON."""
    path.write_text(tvm().ir.save_json(mod))


def load_ir(path: Path) -> Any:
    """Read an IRModule written by :func:`save_ir`."""
    return tvm().ir.load_json(path.read_text())


# ---------------------------------------------------------------- RPC


def rpc_connect(host: str, port: int, key: str = "", session_timeout: float = 0) -> Any:
    """An RPC session to a server (raises TVM's error on failure)."""
    tvm()
    from tvm import rpc

    return rpc.connect(host, port, key=key, session_timeout=session_timeout)


def rpc_tracker_summary(host: str, port: int) -> dict[str, Any]:
    """The tracker's summary: servers by key and queue state."""
    tvm()
    from tvm import rpc

    return _plain(rpc.connect_tracker(host, port).summary())


def rpc_tracker_request(host: str, port: int, key: str, wait: float, session_timeout: float = 0) -> Any:
    """A session from the tracker under ``key``, or None when no server became free within
    ``wait`` seconds. TVM's ``TrackerSession.request`` waits forever and cannot be withdrawn; this
    speaks the same request (``tvm.rpc.base``'s framing) on a socket of its own, with a deadline,
    and closes it on giving up — which withdraws the request: the tracker hands a freed board
    only to a requester whose connection is still open."""
    import socket
    import struct

    tvm()
    from tvm import rpc
    from tvm.rpc import base

    with socket.create_connection((host, port), timeout=min(wait, 30)) as sock:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        if struct.unpack("<i", base.recvall(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
            raise RuntimeError(f"{host}:{port} is not an RPC tracker")
        base.sendjson(sock, [base.TrackerCode.REQUEST, key, "", 1])
        sock.settimeout(wait)
        try:
            value = base.recvjson(sock)
        except TimeoutError:
            return None
    if value[0] != base.TrackerCode.SUCCESS:
        raise RuntimeError(f"the tracker answered {value!s}")
    url, server_port, matchkey = value[1]
    return rpc.connect(url, server_port, matchkey, session_timeout)


def remote_bench(session: Any, library: Path, arrays: list[Any], kind: str, number: int, repeat: int) -> tuple[list[float], list[Any]]:
    """Upload a package library through ``session``, run it once and time it with TVM's remote
    time evaluator. Returns (per-repeat mean seconds, outputs of the first run as numpy)."""
    tvm()
    from tvm.runtime.vm import VirtualMachine

    session.upload(str(library))
    lib = session.load_module(library.name)
    dev = session.cuda(0) if kind == "cuda" else session.cpu(0)
    vm = VirtualMachine(lib, [dev, session.cpu(0)] if kind == "cuda" else dev)
    tensors = [tvm().runtime.tensor(a, dev) for a in arrays]
    result = vm["main"](*tensors)
    outputs = [result.numpy()] if hasattr(result, "numpy") else [r.numpy() for r in result]
    timer = vm.time_evaluator("main", dev, number=number, repeat=repeat)
    return [float(s) for s in timer(*tensors).results], outputs
