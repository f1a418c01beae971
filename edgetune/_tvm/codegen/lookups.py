"""Table lookups in vector code: the ``edgetune`` TIR pipeline.

An int8 → int8 chain that edgetune runs as a lookup in a 256-entry table
(:class:`..passes.int8_elementwise.Int8Tables`: MobileNetV3's QDQ hard-swish) sits in the epilogue of the
convolution before it, a vectorized loop. TVM's LLVM code generator has no vector gather: a
load whose index is a vector that is not a ramp becomes one scalar load and one insert per lane
(16 of each per AVX-512 register), which cost as much as the rest of a depthwise layer.

This pipeline is TVM's own (``s_tir``) with passes added before the host code is finalized
(also :mod:`.rounding`, :mod:`.division`, :mod:`.widening` and :mod:`.scratch`). This one
rewrites each such load of a clamped index (``take(table, i, mode="clip")``: the index is
``min(max(i, 0), n − 1)``, so every lane is in the table) on x86:

* with AVX-512 VBMI (Ice Lake and later, Zen 4), where the loaded int32 is narrowed to 8 bits
  (the lookup feeds an int8 result): as byte permutes. The table's 256 entries narrowed to bytes
  fill four 64-byte registers, loaded once per kernel — LLVM hoists them out of the loops —
  and each 16 lanes are two ``vpermi2b`` (the low and the high 128 entries) and a blend;
* otherwise as hardware gathers: ``vpgatherdd`` / ``vgatherdps`` (AVX-512: 16 lanes a call,
  AVX2: 8).

and on Arm (NEON), where the loaded int32 is narrowed to 8 bits, as table lookups: the table's
256 bytes fill 16 registers, and each 16 lanes are a ``tbl`` over the first 64 bytes and three
``tbx`` over the others. Results are the same loads' values, bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

from .common import in_chunks

PIPELINE = "edgetune"
_REGISTERED: list[bool] = []


def register() -> None:
    """Register the ``edgetune`` TIR pipeline with TVM (once per process)."""
    from tvm import tirx

    if _REGISTERED:
        return

    def factory() -> tuple[Any, Any, Any]:
        from tvm import transform

        from .division import exact_reciprocals
        from .rounding import rounded_conversions
        from .scratch import stack_scratch
        from .widening import byte_conversions

        base, host, device = tirx.get_tir_pipeline("s_tir")
        passes = [vector_lookups(), rounded_conversions(), exact_reciprocals(), byte_conversions(), stack_scratch()]
        return base, (lambda: transform.Sequential([*passes, host()])), device

    tirx.register_tir_pipeline(PIPELINE, factory)
    _REGISTERED.append(True)


def vector_lookups() -> Any:
    """The pass: each PrimFunc's clamped vector-index loads as byte permutes or gathers, by the
    features of the function's target (a function without one, or not x86, as it is)."""
    import tvm_ffi
    from tvm import ir, tirx

    @tirx.transform.prim_func_pass(opt_level=0, name="edgetune.VectorLookups")
    def rewrite(func: Any, _mod: Any, _ctx: Any) -> Any:
        target = func.attrs.get("target") if func.attrs is not None else None
        how = _method(target) if target is not None else None
        if how is None:
            return func
        permutes, gather_lanes = how

        def on_cast(cast: Any) -> Any:
            replaced = _permute(cast, permutes) if permutes else None
            return cast if replaced is None else replaced

        def on_load(load: Any) -> Any:
            replaced = _gather(load, gather_lanes) if gather_lanes else None
            return load if replaced is None else replaced

        # before children: a narrowing cast sees its lookup before the lookup is made a gather
        return tvm_ffi.structural_map(func, [(tirx.Cast, on_cast), (ir.TensorLoad, on_load)], order="pre")

    return rewrite


def _method(target: Any) -> tuple[str | None, int] | None:
    """(byte permute: ``"vbmi"``, ``"tbl"`` or None; gather width, 0 for none) for ``target``,
    or None (leave lookups scalar)."""
    from ..kernels.cpu import has_feature

    if target.kind.name != "llvm":
        return None
    triple = str(target.attrs.get("mtriple", ""))

    def has(feature: str) -> bool:
        return has_feature(target, feature)

    if triple.startswith("aarch64"):
        return ("tbl", 0) if has("neon") else None
    if not triple.startswith("x86_64"):
        return None
    if has("avx512f"):
        return ("vbmi" if has("avx512vbmi") and has("avx512bw") else None), 16
    return (None, 8) if has("avx2") else None


def _dtype(expr: Any) -> Any:
    from tvm import DataType

    return DataType(str(expr.ty.dtype))


def _lookup(load: Any, by_form: bool = False) -> tuple[Any, int] | None:
    """(index, table entries) of a load from a 1-D buffer at a vector index clamped into it
    (min/max with constants), else None. With ``by_form`` an index whose form bounds it inside
    the table (:func:`_span`: an int8 value + 128) is taken too, and returned without its clamp:
    TVM drops the clamp itself where it knows the range, and a kept one costs NEON 8 ``smax`` /
    ``smin`` per 16 lanes of an int8 epilogue once the requantize is ``fcvtns``."""
    from tvm import ir, tirx

    if not isinstance(load, ir.TensorLoad) or len(load.indices) != 1:
        return None
    index, buf = load.indices[0], load.source.ty
    lanes = _dtype(load).lanes
    if lanes < 2 or _dtype(index).lanes != lanes or isinstance(index, (tirx.Ramp, tirx.Broadcast)):
        return None
    if len(buf.shape) != 1 or not isinstance(buf.shape[0], tirx.IntImm) or not _is_zero(buf.elem_offset):
        return None
    inner, lo, hi = _clip_chain(index, _broadcast_int)
    size = int(buf.shape[0].value)
    span = _span(inner) if by_form else None
    if span is not None and 0 <= span[0] and span[1] < size:
        return inner, size
    if lo is None or hi is None or lo < 0 or hi >= size:
        return None
    return index, size


def _is_zero(expr: Any) -> bool:
    from tvm import tirx

    return isinstance(expr, tirx.IntImm) and expr.value == 0


def _clip_chain(expr: Any, constant: Any) -> tuple[Any, float | None, float | None]:
    """(what is clamped, lo, hi) of a chain of min / max of ``expr`` with constants
    (``constant``: a node's value or None); lo / hi None where no max / min bounds it."""
    from tvm import tirx

    lo = hi = None
    e = expr
    while isinstance(e, (tirx.Min, tirx.Max)):
        if constant(e.a) is not None:
            c, rest = constant(e.a), e.b
        elif constant(e.b) is not None:
            c, rest = constant(e.b), e.a
        else:
            break
        if isinstance(e, tirx.Min):
            hi = c if hi is None else min(hi, c)
        else:
            lo = c if lo is None else max(lo, c)
        e = rest
    return e, lo, hi


def _span(expr: Any) -> tuple[float, float] | None:
    """(lo, hi) that an integer vector ``expr`` provably lies in, from its form: a constant, an
    8-bit value, a float clipped to constant bounds and converted, a widening cast, or a sum
    with a constant; None where the form says nothing."""
    from tvm import DataType, tirx

    c = _broadcast_int(expr)
    if c is not None:
        return float(c), float(c)
    dtype = DataType(str(expr.ty.dtype))
    if dtype.bits == 8 and str(dtype).startswith(("int", "uint")):  # any 8-bit value: its type's range
        return (-128.0, 127.0) if str(dtype).startswith("int") else (0.0, 255.0)
    if isinstance(expr, tirx.Cast):
        source = str(expr.value.ty.dtype)
        if source.startswith("float"):
            clip = _float_clip(expr.value)  # converted by truncation, which is monotone
            return None if clip is None else (math.trunc(clip[0]), math.trunc(clip[1]))
        inner = _span(expr.value)
        bits = DataType(str(expr.ty.dtype)).bits
        if inner is not None and str(expr.ty.dtype).startswith("int") and -(2.0 ** (bits - 1)) <= inner[0] \
                and inner[1] < 2.0 ** (bits - 1):
            return inner
        return None
    if isinstance(expr, (tirx.Add, tirx.Sub)):
        a, b = _span(expr.a), _span(expr.b)
        if a is None or b is None:
            return None
        return (a[0] + b[0], a[1] + b[1]) if isinstance(expr, tirx.Add) else (a[0] - b[1], a[1] - b[0])
    return None


def _float_clip(expr: Any) -> tuple[float, float] | None:
    """(lo, hi) of a float vector min(max(x, lo), hi) / max(min(x, hi), lo) with constant
    bounds, else None."""
    from tvm import tirx

    def constant(e: Any) -> float | None:
        if isinstance(e, tirx.Broadcast):
            e = e.value
        return float(e.value) if isinstance(e, tirx.FloatImm) else None

    _, lo, hi = _clip_chain(expr, constant)
    return None if lo is None or hi is None else (lo, hi)


def _broadcast_int(expr: Any) -> int | None:
    from tvm import tirx

    if isinstance(expr, tirx.Broadcast) and isinstance(expr.value, tirx.IntImm):
        return int(expr.value.value)
    return None


def _permute(cast: Any, kind: str) -> Any | None:
    """``cast`` = an 8-bit narrowing of an int32 lookup in a table of ≤ 256 entries, as byte
    permutes over the table narrowed to bytes (``kind``: ``"vbmi"`` — two ``vpermi2b`` over
    128 bytes each and a blend per 16 lanes; ``"tbl"`` — NEON ``tbl`` over the first 64 bytes,
    three ``tbx`` over the others); else None."""
    from tvm import tirx

    out = _dtype(cast)
    load = cast.value
    found = _lookup(load, by_form=kind == "tbl")
    if found is None or out.bits != 8 or _dtype(load).bits != 32 or str(_dtype(load)).startswith("float"):
        return None
    index, size = found
    if size > 256:
        return None
    scalar = str(index.ty.dtype).split("x")[0]

    def table_bytes(first: int) -> Any:  # entries first … first+15 as 16 bytes (past the end: 0)
        if first + 16 > size:
            return tirx.Broadcast(tirx.const(0, "int8"), 16)
        ramp = tirx.Ramp(tirx.const(first, scalar), tirx.const(1, scalar), 16)
        return tirx.Cast("int8x16", tirx.BufferLoad(load.source, [ramp]))

    sixteens = [table_bytes(16 * k) for k in range(16)]

    def vbmi(chunk: Any, _count: int) -> Any:
        quarters = [tirx.Shuffle(sixteens[4 * q:4 * q + 4], [tirx.const(i, "int32") for i in range(64)])
                    for q in range(4)]
        wide = tirx.Cast("int32x16", chunk)
        picks = tirx.reinterpret("int8x64", wide)  # byte 4·i of the 64 is lane i's index (< 256)
        permute = "llvm.x86.avx512.vpermi2var.qi.512"
        low = tirx.call_llvm_pure_intrin("int8x64", permute, quarters[0], picks, quarters[1])
        high = tirx.call_llvm_pure_intrin("int8x64", permute, quarters[2], picks, quarters[3])

        def lane_bytes(v: Any) -> Any:  # byte 4·i of each lane
            return tirx.Cast("int8x16", tirx.reinterpret("int32x16", v))

        upper = wide >= tirx.Broadcast(tirx.const(128, "int32"), 16)
        return tirx.Select(upper, lane_bytes(high), lane_bytes(low))

    def tbl(chunk: Any, _count: int) -> Any:
        wide = tirx.Cast("int32x16", chunk)
        # the index less 64·q as a byte: out of 0…63 (tbl: 0; tbx: kept) outside quarter q
        picks = [tirx.Cast("int8x16", wide - tirx.Broadcast(tirx.const(64 * q, "int32"), 16)) for q in range(4)]
        got = tirx.call_llvm_pure_intrin("int8x16", "llvm.aarch64.neon.tbl4", *sixteens[0:4], picks[0])
        for q in range(1, 4):
            got = tirx.call_llvm_pure_intrin("int8x16", "llvm.aarch64.neon.tbx4", got,
                                             *sixteens[4 * q:4 * q + 4], picks[q])
        return got

    joined = in_chunks(index, 16, vbmi if kind == "vbmi" else tbl)
    return joined if str(out).startswith("int8") else tirx.reinterpret(str(out), joined)


def _gather(load: Any, width: int) -> Any | None:
    """An int32 / float32 lookup as hardware gathers of ``width`` lanes; else None."""
    from tvm import tirx

    found = _lookup(load)
    dtype = _dtype(load)
    if found is None or dtype.bits != 32:
        return None
    index, _size = found
    scalar = "float32" if str(dtype).startswith("float") else "int32"

    def gathered(chunk: Any, _count: int) -> Any:
        wide = tirx.Cast(f"int32x{width}", chunk)
        zeros = tirx.Broadcast(tirx.const(0, scalar), width)
        if width == 16:
            name = "llvm.x86.avx512.mask.gather.dps.512" if scalar == "float32" else "llvm.x86.avx512.mask.gather.dpi.512"
            every = tirx.Broadcast(tirx.const(True, "bool"), 16)
            return tirx.call_llvm_pure_intrin(f"{scalar}x16", name, zeros, load.source, wide, every, tirx.const(4, "int32"))
        name = "llvm.x86.avx2.gather.d.ps.256" if scalar == "float32" else "llvm.x86.avx2.gather.d.d.256"
        every = tirx.Broadcast(tirx.const(-1, "int32"), 8)
        mask = tirx.reinterpret("float32x8", every) if scalar == "float32" else every
        return tirx.call_llvm_pure_intrin(f"{scalar}x8", name, zeros, load.source, wide, mask, tirx.const(4, "int8"))

    return in_chunks(index, width, gathered)
