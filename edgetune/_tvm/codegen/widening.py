"""8-bit integers to float on NEON: a pass of the ``edgetune`` TIR pipeline (:mod:`.lookups`).

An int8 layer that runs on float kernels (a depthwise convolution on the Pis) converts its
input to float32 first, 16 lanes at a time. LLVM 19 folds ``sitofp(sext(x))`` to a direct
``sitofp <16 x i8>``, which its AArch64 backend legalizes four lanes at a time from 8-bit lanes
kept in 16-bit ones: ``zip`` with itself, ``shl`` + ``sshr`` by 8 to sign-extend, ``sshll``,
``scvtf`` — 21 instructions per 16 values where ``sshll`` twice and ``scvtf`` take 10 (the
``sitofp <4 x i8>`` of a 4-byte load is fine; a 16-byte vector is what the schedules make).

On AArch64 each such conversion of ≥ 8 lanes is written as the value's bytes interleaved
above zero bytes (``zip1`` / ``zip2`` with a zero register: each 16-bit lane is ``x · 256``),
shifted right by 8 (arithmetic for int8, logical for uint8: ``sshr`` / ``ushr``) and converted
from 16 bits, which LLVM does with ``sshll`` / ``ushll`` and ``scvtf``: 12 instructions per 16
values, the same numbers.
"""

from __future__ import annotations

from typing import Any

from .common import aarch64_rewrite


def byte_conversions() -> Any:
    """The pass: on AArch64, 8-bit integer vectors (≥ 8 lanes) converted to float through
    16-bit lanes made by interleaving with zero bytes."""
    return aarch64_rewrite("edgetune.ByteConversions", "Cast", _through_halves)


def _through_halves(cast: Any) -> Any | None:
    """``cast`` = float(x) of 8-bit ``x`` (possibly widened to int16/int32 first) with ≥ 8 lanes,
    as float(int16(zip(0, x)) >> 8); None for any other cast."""
    from tvm import DataType, tirx

    dtype = DataType(str(cast.ty.dtype))
    if not str(dtype).startswith("float") or dtype.lanes < 8 or dtype.lanes % 8:
        return None
    value = cast.value
    while isinstance(value, tirx.Cast) and str(value.ty.dtype).split("x")[0] in ("int16", "int32"):
        value = value.value  # a widening to a signed type: the 8-bit value's number, unchanged
    source = str(value.ty.dtype).split("x")[0]
    if source not in ("int8", "uint8") or DataType(str(value.ty.dtype)).lanes != dtype.lanes:
        return None
    lanes = dtype.lanes
    zeros = tirx.Broadcast(tirx.const(0, source), lanes)
    order = [k for i in range(lanes) for k in (i, lanes + i)]  # per 16-bit lane: a zero byte, then x
    halves = tirx.Shuffle([zeros, value], [tirx.const(k, "int32") for k in order])
    wide = f"{'int16' if source == 'int8' else 'uint16'}x{lanes}"
    shifted = tirx.shift_right(tirx.reinterpret(wide, halves), tirx.Broadcast(tirx.const(8, wide.split("x")[0]), lanes))
    return tirx.Cast(str(dtype), shifted)
