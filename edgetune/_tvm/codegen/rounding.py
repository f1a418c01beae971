"""Requantization as one rounding conversion: a pass of the ``edgetune`` TIR pipeline
(:mod:`.lookups`).

Every int8 layer (and a uint8 quantize) ends in ``cast(clip(round(v) + z, lo, hi))``: TVM's
``round`` is LLVM's ``nearbyint`` (``vrndscaleps`` on x86, ``frinti`` on Arm), then the clipped
float is converted by truncation (``vcvttps2dq``). The conversion that rounds by itself
(``vcvtps2dq``; Arm ``frintx`` + ``fcvtzs``) gives the same integers — both round to nearest,
ties to even, in the current rounding mode — and the zero point is then an integer add. So each such cast becomes

    cast(lrint(clip(v, lo − z, hi − z)) + z)

— the same value for every ``v``: with integer ``lo``, ``hi``, ``z``, clipping before or after
rounding is the same, and ``round(v) + z`` is exact in float32 wherever the clip does not decide
the result. One instruction less per requantize; an epilogue of a residual block has two or
three (an 8-bit output on x86 then needs only the narrowing ``vpmovdb``).

On AArch64 ``lrint`` is still two instructions (``frintx`` + ``fcvtzs``: LLVM 19 folds neither
it nor ``roundeven`` + ``fptosi`` into one), so there the conversion is ``fcvtns`` itself —
round to nearest, ties to even, whatever the rounding mode, as the default mode ``lrint``
follows does —, in the 2- and 4-lane vectors TVM vectorized, and four lanes at a time in wider
ones, and the clip then runs on the integers it saturates to (``smin`` / ``smax``, a cheaper
pipe than the float clip's on the Cortex-A72). An 8-bit result of 8 or 16 lanes (an int8
layer's output) is clipped there by the conversion's and the narrows' saturation instead
(:func:`_narrowed`); a uint8 output shifted
to the int8 the next layer reads (``int8(int16(clip(…)) − 128)``) is first made one clip
(:func:`_unshifted`). Pi 4 / Pi 5 M cycles by the estimate: MobileNetV3-style int8 59.6 / 22.6
→ 55.6 / 22.4, SqueezeNet 59.5 / 18.4 → 57.8 / 18.2, ResNet-style bottleneck stack 228.2 /
63.9 → 222.6 / 63.3, OCR classifier 44.9 / 15.3 → 43.0 / 15.2 (VGG block 101.5 → 101.9 on
the Pi 5, its only rise).

On the Cortex-A76 (the Pi 5) ``fcvtns`` and ``scvtf`` take one of the two vector pipes two
cycles per four lanes (:data:`..kernels.cpu.SLOW_CONVERTS`), an add half a cycle: there the
rounding conversion is an add of 1.5 · 2²³ and an integer subtract of its bit pattern
(:func:`_bits_rounded`; the int8 kernels hand their sums on as floats the same way,
:func:`..kernels.conv.conv2d_nhwc_int8`'s ``float_sums``). A76 estimate, M cycles (int8
layers' epilogues only; the Pi 4 keeps ``fcvtns``: on the A72 model the bit-pattern forms are slower):
SqueezeNet 17.97 → 17.60, MobileNetV3-style 21.51 → 20.19, YOLOv8n-style 56.96 → 55.66, OCR
classifier 14.43 → 13.82, face detector 5.79 → 5.33.
"""

from __future__ import annotations

from typing import Any

from ..kernels.cpu import FLOAT_BIAS, FLOAT_BIAS_BITS, FLOAT_BIAS_LIMIT, CpuFacts
from .common import concat_lanes, in_chunks, vector_lanes

_ROUNDS = ("tirx.round", "tirx.nearbyint")
_LIMIT = 2.0**22  # |bounds| and |zero point| below this: every integer sum of them is exact


def rounded_conversions() -> Any:
    """The pass: each float32 → integer cast of a clipped, rounded value as ``llvm.lrint``."""
    import tvm_ffi
    from tvm import tirx

    @tirx.transform.prim_func_pass(opt_level=0, name="edgetune.RoundedConversions")
    def rewrite(func: Any, _mod: Any, _ctx: Any) -> Any:
        target = func.attrs.get("target") if func.attrs is not None else None
        arm = target is not None and str(target.attrs.get("mtriple", "")).startswith("aarch64")
        by_bits = arm and CpuFacts.of(target).slow_converts

        def on_cast(cast: Any) -> Any:
            replaced = _rounded(cast, arm, by_bits)
            return cast if replaced is None else replaced

        def on_shifted(cast: Any) -> Any:
            replaced = _unshifted(cast, arm)
            replaced = _refloated(cast) if replaced is None and by_bits else replaced
            return cast if replaced is None else replaced

        func = tvm_ffi.structural_map(func, [(tirx.Cast, on_shifted)], order="post")
        return tvm_ffi.structural_map(func, [(tirx.Cast, on_cast)], order="post")

    return rewrite


def _rounded(cast: Any, arm: bool = False, by_bits: bool = False) -> Any | None:
    """``cast`` = int(clip(round(v) + z, lo, hi)) as int(lrint(clip(v, lo − z, hi − z)) + z)
    (``arm``: ``fcvtns`` for ``lrint`` where LLVM has its form; ``by_bits``: vectors rounded by
    the float's bit pattern instead, :func:`_bits_rounded`); None when it is anything else."""
    import numpy as np
    from tvm import DataType, tirx

    target = DataType(str(cast.ty.dtype))
    clipped = _clip(cast.value)
    unsigned = str(target).startswith("uint")
    if clipped is None or not (str(target).startswith("int") or unsigned) or target.bits > (16 if unsigned else 32):
        return None  # (an unsigned result of up to 16 bits: its whole range is an int32's)
    inner, lo, hi = clipped
    rounded = _round_plus(inner)
    if rounded is None:
        return None
    v, z = rounded
    source = DataType(str(v.ty.dtype))
    info = np.iinfo(f"{'uint' if unsigned else 'int'}{target.bits}")
    if (not str(source).startswith("float32") or not info.min <= lo <= hi <= info.max
            or any(c != int(c) or abs(c) >= _LIMIT for c in (lo, hi, z))):
        return None
    lanes = source.lanes
    if arm and target.bits == 8 and lanes % 8 == 0:
        narrowed = _narrowed(v, lanes, lo, hi, z, str(cast.ty.dtype), by_bits)
        if narrowed is not None:
            return narrowed
    low, high = _like(v, lo - z), _like(v, hi - z)
    wide = f"int32x{lanes}" if lanes > 1 else "int32"
    clamped = tirx.Max(tirx.Min(v, high), low)
    # (scalar code keeps lrint: LLVM's loop vectorizer widens it, not the target's intrinsic —
    # a scalar fcvtns made an image model's input kernel 2.2× slower, measured)
    if by_bits and lanes > 1 and max(abs(lo - z), abs(hi - z)) < FLOAT_BIAS_LIMIT:
        out = _bits_rounded(clamped, z)
        return out if str(cast.ty.dtype) == wide else tirx.Cast(str(cast.ty.dtype), out)
    if arm and (lanes in (2, 4) or (lanes % 4 == 0 and lanes > 4)):
        # the clip after the conversion, on the integers: ``smin`` / ``smax`` where ``fminnm`` /
        # ``fmaxnm`` take the A72's two vector pipes a cycle each in q form (the same integers:
        # ``fcvtns`` saturates; a NaN becomes 0 clipped rather than the clip's upper bound).
        # Pi 4 estimate, MediaPipe iris landmark int8: 11.54 → 11.19 M cycles
        out = tirx.call_llvm_pure_intrin(wide, "llvm.aarch64.neon.fcvtns", v) if lanes <= 4 else _by_quads(v, lanes)
        out = tirx.Max(tirx.Min(out, _like(out, int(hi - z))), _like(out, int(lo - z)))
    else:
        out = tirx.call_llvm_pure_intrin(wide, "llvm.lrint", clamped)
    if z:
        out = out + _like(out, int(z))
    return out if str(cast.ty.dtype) == wide else tirx.Cast(str(cast.ty.dtype), out)


def _bits_rounded(v: Any, z: float, saturate: bool = False) -> Any:
    """round(v) + z in int32 lanes by ``v``'s bit pattern (cores with slow conversions,
    :data:`..kernels.cpu.SLOW_CONVERTS`): v + 1.5 · 2²³ holds round(v), ties to even, in its low
    bits while |v| < 2²² (:data:`..kernels.cpu.FLOAT_BIAS`), and those bits less the pattern's
    (less ``z``) are the integer — an add (:func:`_plus_bias`) and an integer subtract where
    ``fcvtns`` takes the A76's one conversion pipe two cycles. ``saturate``: the subtract saturates (``sqsub``), which makes every v past ±2²² (and every
    v < −1.5 · 2²³, whose sum is negative) an int32 past ±2²² on its side — the caller then
    saturates to its narrow type; without it v must be within ±2²² (a clip)."""
    from tvm import tirx

    wide = str(v.ty.dtype).replace("float32", "int32")
    bits = tirx.reinterpret(wide, _plus_bias(v))
    offset = _like(bits, FLOAT_BIAS_BITS - int(z))
    if saturate:
        return tirx.call_llvm_pure_intrin(wide, "llvm.ssub.sat", bits, offset)
    return bits - offset


def _plus_bias(v: Any) -> Any:
    """v + 1.5 · 2²³ (:data:`..kernels.cpu.FLOAT_BIAS`), which holds round(v), ties to even, in
    its low bits while |v| < 2²², behind ``llvm.arithmetic.fence``: TVM has LLVM contract
    floating-point operations, and the add fused into the multiply before it would round once
    where onnxruntime rounds the product and then the sum."""
    from tvm import tirx

    return tirx.call_llvm_pure_intrin(str(v.ty.dtype), "llvm.arithmetic.fence", v) + _like(v, FLOAT_BIAS)


def _narrowed(v: Any, lanes: int, lo: float, hi: float, z: float, dtype: str, by_bits: bool = False) -> Any | None:
    """AArch64, an 8-bit result (``dtype``) of 8 or 16 lanes: ``clip(round(v) + z, lo, hi)`` as
    ``fcvtns`` four lanes at a time, saturating narrows to int16 (``sqxtn``), the zero point a
    saturating int16 add (``sqadd``), a saturating narrow to the result's type (``sqxtn`` /
    ``sqxtun``) and what is left of the clip (a ReLU's lower bound) an 8-bit ``smax`` /
    ``umax``. The same integers as clipping the float: rounding and clipping to integer bounds
    commute, and every saturation keeps a value past the result's range past it, on its side;
    a NaN becomes ``z`` clipped rather than the clip's upper bound. Per 16 values of an int8
    layer's epilogue on the Cortex-A72 it replaces four ``fminnm``, four ``fmaxnm`` (two cycles
    each in q form), four int32 adds and LLVM's four-register ``tbl`` for the truncation (nine)
    by eight narrows and two adds. None for a zero point past int16."""
    from tvm import tirx


    if abs(z) > 2**15 - 1:
        return None
    unsigned = dtype.startswith("uint")
    whole = tirx.Var("rounded", str(v.ty.dtype))
    halves = []
    for start in range(0, lanes, 8):
        quads = [tirx.call_llvm_pure_intrin("int16x4", "llvm.aarch64.neon.sqxtn", _bits_rounded(
                 vector_lanes(whole, start + k, 4, 4), z, saturate=True) if by_bits else tirx.call_llvm_pure_intrin(
                 "int32x4", "llvm.aarch64.neon.fcvtns", vector_lanes(whole, start + k, 4, 4))) for k in (0, 4)]
        shorts = concat_lanes(quads, [4, 4])
        if z and not by_bits:
            shorts = tirx.call_llvm_pure_intrin("int16x8", "llvm.aarch64.neon.sqadd", shorts, _like(shorts, int(z)))
        halves.append(tirx.call_llvm_pure_intrin(f"{'u' if unsigned else ''}int8x8",
                                                 f"llvm.aarch64.neon.{'sqxtun' if unsigned else 'sqxtn'}", shorts))
    out = concat_lanes(halves, [8] * len(halves))
    floor, ceiling = (0, 255) if unsigned else (-128, 127)
    if lo > floor:
        out = tirx.Max(out, _like(out, lo))
    if hi < ceiling:
        out = tirx.Min(out, _like(out, hi))
    return tirx.Let(whole, v, out)


def _by_quads(value: Any, lanes: int) -> Any:
    """``fcvtns`` of a float32 vector wider than a q register (an epilogue vectorized 16 lanes
    at a time on AArch64: registers._byte_lanes), four lanes a call, joined (the lookups'
    split-and-join, :func:`.lookups._chunks`): LLVM's own ``lrint`` of it is ``frintx`` +
    ``fcvtzs`` per register."""
    from tvm import tirx


    return in_chunks(value, 4, lambda quad, _count: tirx.call_llvm_pure_intrin("int32x4", "llvm.aarch64.neon.fcvtns", quad))


def _unshifted(cast: Any, arm: bool = False) -> Any | None:
    """``cast`` = int(int(clip(round(v) + z, lo, hi)) ± c) — the inner cast an integer of 16
    bits or more, the clip and its shift within int16 (no wrap-around) — as the one clip
    int(clip(round(v) + z ± c, lo ± c, hi ± c)), exact in float32 (integers below 2²²), which
    :func:`_rounded` then rewrites. The inner cast alone, rewritten first, left the shift and
    the narrowing to the outer one: a uint8 layer's output made the int8 the next layer reads
    (``x − 128`` in int16) kept its float clip and LLVM's ``tbl`` truncation on AArch64. None
    when it is anything else — and, on AArch64 (``arm``), for a float ``cast``: a requantized
    value read again as float (a PReLU's input) kept as this float clip was ``frinti``, an add
    and ``fminnm`` / ``fmaxnm``; left to :func:`_rounded` it is the conversion and integer clip
    that LLVM shares with the value's other uses (the PReLU's sign test), then ``scvtf``
    (:func:`_refloated` on the Pi 5). Pi 4 / Pi 5 estimate, iris landmark int8: 11.19 / 4.81 →
    11.02 / 4.64 M cycles."""
    from tvm import DataType, tirx

    if arm and not str(cast.ty.dtype).startswith(("int", "uint")):
        return None
    split = _offset(cast.value) if isinstance(cast.value, (tirx.Add, tirx.Sub)) else None
    if split is None:
        return None
    rest, shift = split
    if (not isinstance(rest, tirx.Cast) or shift != int(shift) or not str(rest.ty.dtype).startswith("int")
            or DataType(str(rest.ty.dtype)).bits < 16):
        return None
    clipped = _clip(rest.value)
    if clipped is None:
        return None
    inner, lo, hi = clipped
    rounded = _round_plus(inner)
    if (rounded is None or not -(2**15) <= min(lo, lo + shift) <= max(hi, hi + shift) < 2**15
            or abs(rounded[1] + shift) >= _LIMIT):
        return None
    call = _offset(inner)[0]  # round(v)
    total = call + _like(call, rounded[1] + shift)
    return tirx.Cast(str(cast.ty.dtype), tirx.Max(tirx.Min(total, _like(call, hi + shift)), _like(call, lo + shift)))


def _refloated(cast: Any) -> Any | None:
    """``cast`` = float(int(clip(round(v) + z, lo, hi)) ± c) — a requantized integer read again
    as float (a second requantize after the first: a concatenation's common scale, or a
    dequantize) — as round(clip(v, lo − z, hi − z)) + z ± c in float, the same number (integers
    below 2²²), with no conversion, the rounding an add and a subtract of 1.5 · 2²³: for cores
    with slow conversions, where LLVM made it ``frinti`` (which takes the A76's one conversion
    pipe two cycles, as ``scvtf`` and ``fcvtns`` do) or ``fcvtns`` + ``scvtf``. None when it is
    anything else."""
    from tvm import DataType, tirx

    dtype = DataType(str(cast.ty.dtype))
    split = _offset(cast.value) if str(dtype).startswith("float32") and dtype.lanes > 1 else None
    if split is None:
        return None
    expr, c = split
    types = []  # the integer casts in turn (int32 of the int8 result): each holds [lo, hi]
    while isinstance(expr, tirx.Cast) and str(expr.ty.dtype).startswith(("int", "uint")):
        types.append(DataType(str(expr.ty.dtype)))
        expr = expr.value
    clipped = _clip(expr) if types else None
    rounded = None if clipped is None else _round_plus(clipped[0])
    if rounded is None or not str(rounded[0].ty.dtype).startswith("float32"):
        return None
    (v, z), (_inner, lo, hi) = rounded, clipped

    def holds(t: Any) -> bool:
        low, high = (0, 2**t.bits - 1) if str(t).startswith("uint") else (-(2 ** (t.bits - 1)), 2 ** (t.bits - 1) - 1)
        return low <= lo <= hi <= high

    if (any(k != int(k) or abs(k) >= _LIMIT for k in (lo, hi, z, c)) or not all(holds(t) for t in types)
            or max(abs(lo - z), abs(hi - z)) >= FLOAT_BIAS_LIMIT):
        return None
    whole = _plus_bias(tirx.Max(tirx.Min(v, _like(v, hi - z)), _like(v, lo - z))) - _like(v, FLOAT_BIAS)
    return whole + _like(v, z + c) if z + c else whole


def _clip(expr: Any) -> tuple[Any, float, float] | None:
    """(x, lo, hi) for ``expr`` = max(min(x, hi), lo) or min(max(x, lo), hi), constant bounds."""
    from tvm import tirx

    if not isinstance(expr, (tirx.Max, tirx.Min)):
        return None
    inner, outer_bound = _with_constant(expr)
    if inner is None or type(inner) is type(expr) or not isinstance(inner, (tirx.Max, tirx.Min)):
        return None
    x, inner_bound = _with_constant(inner)
    if x is None:
        return None
    lo, hi = (outer_bound, inner_bound) if isinstance(expr, tirx.Max) else (inner_bound, outer_bound)
    return (x, lo, hi) if lo <= hi else None


def _round_plus(expr: Any) -> tuple[Any, float] | None:
    """(v, z) for ``expr`` = round(v) + z, round(v) − z or round(v); else None."""
    from tvm import ir

    split = _offset(expr)
    if split is None:
        return None
    expr, z = split
    if isinstance(expr, ir.Call) and getattr(expr.op, "name", "") in _ROUNDS:
        return expr.args[0], z
    return None


def _offset(expr: Any) -> tuple[Any, float] | None:
    """(x, c) for ``expr`` = x + c or x − c with a constant c (then −c), (``expr``, 0) for
    anything but a sum or difference; None for one with no constant term, or c − x."""
    from tvm import tirx

    if not isinstance(expr, (tirx.Add, tirx.Sub)):
        return expr, 0.0
    rest, c = _with_constant(expr)
    if rest is None or (isinstance(expr, tirx.Sub) and not rest.same_as(expr.a)):
        return None
    return rest, (-c if isinstance(expr, tirx.Sub) else c)


def _with_constant(expr: Any) -> tuple[Any | None, float]:
    """(the other operand, the constant) of a binary ``expr`` with one constant operand."""
    for const, rest in ((expr.b, expr.a), (expr.a, expr.b)):
        value = _constant(const)
        if value is not None:
            return rest, value
    return None, 0.0


def _constant(expr: Any) -> float | None:
    """The value of a float/int immediate, or of a broadcast of one; else None."""
    from tvm import tirx

    if isinstance(expr, tirx.Broadcast):
        expr = expr.value
    if isinstance(expr, (tirx.FloatImm, tirx.IntImm)):
        return float(expr.value)
    return None


def _like(expr: Any, value: float) -> Any:
    """``value`` as a constant of ``expr``'s type (broadcast to its lanes)."""
    from tvm import DataType, tirx

    lanes = DataType(str(expr.ty.dtype)).lanes
    scalar = tirx.const(value, str(expr.ty.dtype).split("x")[0])
    return tirx.Broadcast(scalar, lanes) if lanes > 1 else scalar
