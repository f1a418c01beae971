"""Legalization to edgetune's kernels: packed convolutions, dense layers and Winograd, fast math."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core import tvm
from ..kernels.conv import conv2d_nhwc_lanes, conv2d_nhwc_packed, depthwise_conv2d_nhwc
from ..kernels.cpu import (
    CpuFacts,
    best_rows,
    dense_block,
    depthwise_weights,
    few_outputs_lanes,
    max_rows,
    packed_weights,
    pad_axis,
    padded_rows,
    register_tile,
    symbolic_default,
)
from ..kernels.dense import dense_packed, matmul_packed
from ..kernels.half import sigmoid16
from ..kernels.resize import resize2d_nhwc, supported
from ..kernels.rows import layer_norm_rows, rms_norm_rows, softmax_rows, sum_in_float32
from ..kernels.winograd import (
    ConvChoice,
    conv2d_nhwc_winograd,
    conv_signature,
    default_conv_variant,
    default_min_channels,
    winograd_tile,
    winograd_weights,
)
from .common import FLOATS, INJECTIVE, const_array, ints, last_dim, rank, static_shape


def _dtype(expr: Any) -> str:
    return str(getattr(expr.ty, "dtype", ""))


def _fast_sigmoid(x: Any, divide: bool = True) -> Any:
    """σ(x) = 1 / (1 + e⁻ˣ) with TOPI's fast_exp; the division as :func:`_reciprocal` where
    ``divide`` is False (AArch64)."""
    from tvm import te, topi

    e = topi.fast_exp(topi.negative(x))
    if divide:
        return te.compute(x.shape, lambda *i: 1.0 / (1.0 + e(*i)), name="fast_sigmoid")
    return te.compute(x.shape, lambda *i: _reciprocal(1.0 + e(*i)), name="fast_sigmoid")


# TOPI's fast_erf (TVM's fast_erf_float_expr, from Eigen): erf(x) ≈ x·p(x²) / q(x²) on [−4, 4]
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def _fast_erf_reciprocal(x: Any) -> Any:
    """TOPI's fast_erf with its division ``p / q`` as ``−p · (1 / −q)`` by :func:`_reciprocal`:
    q's coefficients are all negative, so −q ∈ [0.0143, 2.4] on the clamped range."""
    from tvm import te, tirx

    def erf(*i: Any) -> Any:
        v = tirx.max(tirx.min(x(*i), tirx.const(4.0, "float32")), tirx.const(-4.0, "float32"))
        v2 = v * v
        p = tirx.const(_ERF_P[0], "float32")
        for c in _ERF_P[1:]:
            p = v2 * p + tirx.const(c, "float32")
        q = tirx.const(_ERF_Q[0], "float32")
        for c in _ERF_Q[1:]:
            q = v2 * q + tirx.const(c, "float32")
        return -(v * p) * _reciprocal(-q)

    return te.compute(x.shape, erf, name="fast_erf")


# Newton's iteration for 1/d from the exponent trick's first guess (≤ 5.1 % off): three steps
# give 1.5e-7 relative error (2.5 ulps) for every positive normal d, measured over 3 M values
_RECIPROCAL_GUESS = 0x7EF311C3


def _reciprocal(d: Any) -> Any:
    """1 / d for a positive float32 ``d`` without a division (a vector fdiv is 34 cycles per 4
    lanes on the Cortex-A72 model, 7 on the A76; this is 10 multiply-adds): within 2.5 ulps, as
    accurate as the fast_exp / fast_erf polynomials it divides need."""
    from tvm import tirx

    r = tirx.reinterpret("float32", tirx.const(_RECIPROCAL_GUESS, "int32") - tirx.reinterpret("int32", d))
    for _ in range(3):
        r = r * (tirx.const(2.0, "float32") - d * r)
    return r


def _round_vectorized(x: Any) -> Any:
    """Round half to even as ``tirx.round``: on LLVM targets it lowers to ``llvm.nearbyint``
    exactly as TOPI's ``round`` (``tirx.nearbyint``) does, but TVM's VectorizeLoop knows only
    the former. With ``nearbyint`` every requantizing int8 epilogue ran as a scalar loop that
    LLVM re-vectorized 8 wide with gathers (a 64×64×24 int8 layer: 0.25 ms, 0.06 without it)."""
    from tvm import te

    return te.compute(x.shape, lambda *i: te.round(x(*i)), name="round")


_FAST_MATH = {
    "relax.round": _round_vectorized,
    "relax.sigmoid": _fast_sigmoid,
    "relax.exp": lambda x: _topi().fast_exp(x),
    "relax.tanh": lambda x: _topi().fast_tanh(x),
    "relax.erf": lambda x: _topi().fast_erf(x),
}


def _topi() -> Any:
    from tvm import topi

    return topi


def _legalize_fast(fn: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    """exp/sigmoid/tanh/erf as vectorizable polynomials (TOPI's fast_*: ~1e-6 relative error)
    instead of libm calls that LLVM cannot vectorize (a SiLU epilogue cost 10–30 % of YOLO's
    convolutions, measured); round as the intrinsic TVM vectorizes (same result)."""

    def legalize(bb: Any, call: Any) -> Any:
        dtype = str(call.ty.dtype)
        if dtype not in FLOATS:
            return _default_legalize(bb, call)
        name = call.op.name.removeprefix("relax.")
        if dtype == "float16" and name in HALF_MATH:
            return bb.call_te(HALF_MATH[name], call.args[0], primfunc_name_hint=name)
        return bb.call_te(fn if dtype == "float32" else _in_float32(fn), call.args[0], primfunc_name_hint=name)

    return legalize


# float16 kernels' own math (:mod:`..kernels.half`); the other polynomials run in float32 between
# conversions (:func:`_in_float32`)
HALF_MATH = {"sigmoid": sigmoid16}


def _in_float32(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` (a float32 polynomial) over a float16 tensor: each value converted to float32 and
    the result back (``fcvtl`` / ``fcvtn`` on NEON, one conversion per 4 lanes each way) — the
    polynomials' constants and their exponent tricks are float32's."""
    from tvm import te

    def half(x: Any) -> Any:
        up = te.compute(x.shape, lambda *i: x(*i).astype("float32"), name="to_float32")
        out = fn(up)
        return te.compute(x.shape, lambda *i: out(*i).astype(str(x.dtype)), name="to_float16")

    return half


def _gelu(erf: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """ONNX's ``Gelu`` (opset 20: what torch's dynamo exporter writes) as ``x · (½ + ½ erf(x/√2))``
    with the polynomial ``erf``: TVM's own legalization calls libm's ``erff``, a scalar call per
    element (a timm TinyViT's GELU epilogues made its convolutions 2–10× slower than the same
    kernels without them)."""
    from tvm import te, tirx

    def gelu(x: Any) -> Any:
        half = tirx.const(0.5, "float32")
        e = erf(te.compute(x.shape, lambda *i: x(*i) * tirx.const(0.5**0.5, "float32"), name="gelu_scaled"))
        return te.compute(x.shape, lambda *i: x(*i) * (half + e(*i) * half), name="gelu")

    return gelu


def _gelu_tanh(x: Any) -> Any:
    """``Gelu(approximate="tanh")`` with TOPI's polynomial ``fast_tanh`` (as :func:`_gelu`)."""
    from tvm import te, tirx

    c, k = tirx.const(math.sqrt(2.0 / math.pi), "float32"), tirx.const(0.044715, "float32")
    inner = te.compute(x.shape, lambda *i: c * x(*i) * (tirx.const(1.0, "float32") + k * x(*i) * x(*i)), name="gelu_inner")
    t = _topi().fast_tanh(inner)
    return te.compute(x.shape, lambda *i: tirx.const(0.5, "float32") * x(*i) * (tirx.const(1.0, "float32") + t(*i)),
                      name="gelu_tanh")


def _fast_math(cpu: CpuFacts) -> dict[str, Callable[[Any], Any]]:
    """The fast-math legalizations for a CPU: where it divides slowly (the Pi 4's Cortex-A72)
    the sigmoid's and erf's divisions by Newton's reciprocal. By the Pi estimate
    (benchmarks/arm_estimate.py), A72 M cycles: a YOLOv8n-style detector 246.9 → 230.2 (its
    SiLU epilogues' fdiv-bound blocks were 32.4), MiniLM-style encoder int8 115.2 → 112.8; on
    the A76 (Pi 5) the same made MiniLM int8 35.5 → 36.1, so it keeps the division."""
    table = dict(_FAST_MATH)
    if cpu.slow_divide:
        table.update({"relax.sigmoid": lambda x: _fast_sigmoid(x, divide=False), "relax.erf": _fast_erf_reciprocal})
    table["relax.nn.gelu"] = _gelu(table["relax.erf"])
    table["relax.nn.gelu_tanh"] = _gelu_tanh
    return table


def _legalize_rms_norm(bb: Any, call: Any, cpu: CpuFacts) -> Any:
    if not row_kernel_takes(call):
        return _default_legalize(bb, call)
    x, gamma = call.args
    return bb.call_te(rms_norm_rows, x, gamma, float(call.attrs.epsilon), cpu.in_dtype(_dtype(x)).lanes,
                      primfunc_name_hint="rms_norm")


def packed_legalize_map(target: Any, choice: ConvChoice = "auto") -> dict[str, Callable[[Any, Any], Any]]:
    """Legalization overrides: convolutions and dense layers with constant weights become the
    packed kernels edgetune's schedules know (3×3 stride-1 convolutions as Winograd where
    ``choice`` says so); anything else falls back to TVM's own."""
    cpu = CpuFacts.of(target)
    default, min_channels = default_conv_variant(target), default_min_channels(target)
    custom: dict[str, Callable[[Any, Any], Any]] = {op: _legalize_fast(fn) for op, fn in _fast_math(cpu).items()}
    custom["relax.nn.conv2d"] = lambda bb, call: _legalize_conv2d(bb, call, cpu, choice, default, min_channels)
    custom["relax.matmul"] = lambda bb, call: _legalize_matmul(bb, call, cpu, choice)
    custom["relax.nn.softmax"] = lambda bb, call: _legalize_softmax(bb, call, cpu)
    custom["relax.nn.layer_norm"] = lambda bb, call: _legalize_layer_norm(bb, call, cpu)
    custom["relax.nn.rms_norm"] = lambda bb, call: _legalize_rms_norm(bb, call, cpu)
    custom["relax.image.resize2d"] = _legalize_resize2d
    for name in SUMS:
        custom[name] = _legalize_sum
    return custom


def _legalize_resize2d(bb: Any, call: Any) -> Any:
    """An NHWC linear / nearest resize of static shape: :func:`..kernels.resize.resize2d_nhwc`
    (its source coordinates as tables); anything else TVM's own."""
    a = call.attrs
    size = static_shape(call)
    dtype = str(call.args[0].ty.dtype)
    out_dtype = str(a.out_dtype) if a.out_dtype else dtype
    if (a.layout != "NHWC" or size is None or static_shape(call.args[0]) is None or out_dtype != dtype
            or not supported(str(a.method), str(a.coordinate_transformation_mode), dtype)):
        return _default_legalize(bb, call)
    out = bb.call_te(resize2d_nhwc, call.args[0], size=(size[1], size[2]), method=str(a.method),
                     mode=str(a.coordinate_transformation_mode), rounding=str(a.rounding_method),
                     primfunc_name_hint="resize2d")
    # injective as TOPI's resize is (its tables would make it opaque): it fuses as before
    gv = out.args[0]
    bb.update_func(gv, bb.get()[gv].with_attr("op_pattern", INJECTIVE))
    return out


def _default_legalize(bb: Any, call: Any) -> Any:
    return tvm().ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)


def _legalize_conv2d(bb: Any, call: Any, cpu: CpuFacts, choice: ConvChoice, default: str, min_channels: int) -> Any:
    from tvm import relax

    a = call.attrs
    weights = const_array(call.args[1])
    out_dtype = str(a.out_dtype) if a.out_dtype else str(call.ty.dtype)
    layout = str(a.kernel_layout)
    dtype = _dtype(call.args[0])
    plain = (a.data_layout == "NHWC" and a.out_layout == "NHWC" and sorted(layout) == sorted("OHWI")
             and weights is not None and dtype in FLOATS and out_dtype == dtype and weights.dtype == dtype)
    if not plain:
        return _default_legalize(bb, call)
    cpu = cpu.in_dtype(dtype)
    if static_shape(call.args[0]) is None:
        return _legalize_conv2d_symbolic(bb, call, weights, layout, cpu, choice)
    weights = weights.transpose([layout.index(axis) for axis in "OHWI"])  # TFLite: HWIO / HWOI
    oc, kh, kw, ic_g = weights.shape
    ic = int(call.args[0].ty.shape.values[3])
    groups = int(a.groups)
    geometry = dict(strides=ints(a.strides), padding=ints(a.padding), dilation=ints(a.dilation))
    if groups == 1:
        oh, ow = int(call.ty.shape.values[1]), int(call.ty.shape.values[2])
        sig = conv_signature(ints(call.args[0].ty.shape.values), weights.shape, **geometry)
        # an int8 layer made exact (int8_layers.py) has small integer weights: Winograd's
        # transforms would round its sums, so it keeps the direct kernel
        exact = bool(np.all(np.abs(weights) <= 128) and np.array_equal(weights, np.round(weights)))
        lanes = few_outputs_lanes(oc, ic, cpu)
        if lanes:
            return bb.call_te(conv2d_nhwc_lanes, call.args[0], relax.const(np.ascontiguousarray(weights)), **geometry,
                              lanes=lanes, signature=sig, primfunc_name_hint="conv2d_nhwc")
        # F(6,3) where it multiplies less: float32 on AArch64 (the Pi estimate's VGG-style block
        # 130.2 -> 121.9 M A76 cycles); on x86 the same block ran 7 % slower with it (AVX-512 host,
        # alternating runs), so x86 keeps F(4,3)
        largest = 6 if dtype == "float32" and cpu.aarch64 else 4
        tile = None if exact else winograd_tile(sig, (kh, kw), oh, ow, ic, oc, geometry, choice, default, min_channels,
                                                largest=largest)
        if tile:
            return legalize_winograd(bb, call.args[0], weights, geometry, tile, sig, cpu)
        oci, _rw = register_tile(oc, ow, cpu)
        return bb.call_te(conv2d_nhwc_packed, call.args[0], relax.const(packed_weights(weights, oci)), **geometry, out_channels=oc,
                          signature=sig, primfunc_name_hint="conv2d_nhwc")
    if groups == ic == oc and ic_g == 1:
        packed = depthwise_weights(weights, cpu)
        return bb.call_te(depthwise_conv2d_nhwc, call.args[0], relax.const(packed), **geometry,
                          primfunc_name_hint="depthwise_conv2d_nhwc")
    return _default_legalize(bb, call)


def _legalize_conv2d_symbolic(bb: Any, call: Any, weights: Any, layout: str, cpu: CpuFacts,
                              choice: ConvChoice = "auto") -> Any:
    """A convolution whose width is symbolic (a range of lengths: an OCR line, a speech
    encoder's frames as a height-1 image) on the packed kernel, its pixel rows in whole register
    tiles (:func:`.kernels.conv.conv2d_nhwc_packed`; their height a variant tuning measures:
    :func:`row_height`); anything else symbolic on TVM's kernel."""
    from tvm import relax

    a = call.attrs
    values = call.args[0].ty.shape.values
    if not all(hasattr(values[i], "value") for i in (0, 1, 3)):
        return _default_legalize(bb, call)
    weights = weights.transpose([layout.index(axis) for axis in "OHWI"])
    oc, kh, kw, ic_g = weights.shape
    geometry = dict(strides=ints(a.strides), padding=ints(a.padding), dilation=ints(a.dilation))
    shape = f"{kh}x{kw} {int(values[1].value)}x?x{int(values[3].value)}->{oc} " + \
        " ".join(f"{k}{v}" for k, v in geometry.items())
    if int(a.groups) == 1:
        oci, rw = register_tile(oc, None, cpu)
        height, rows = row_height(f"rows conv2d {shape}", rw, max_rows(-(-oci // cpu.lanes), cpu), choice, cpu)
        return bb.call_te(conv2d_nhwc_packed, call.args[0], relax.const(packed_weights(weights, oci)), **geometry,
                          out_channels=oc, row_tile=height, rows=rows, primfunc_name_hint="conv2d_nhwc")
    if int(a.groups) == int(values[3].value) == oc and ic_g == 1:
        packed = depthwise_weights(weights, cpu)
        vectors = -(-min(packed.shape[-1], 4 * cpu.lanes) // cpu.lanes)  # (the schedule's channel block, at most)
        limit = max_rows(vectors, cpu)
        height, rows = row_height(f"rows depthwise {shape}", min(8, limit), limit, choice, cpu)
        return bb.call_te(depthwise_conv2d_nhwc, call.args[0], relax.const(packed), **geometry,
                          row_tile=height, rows=rows, primfunc_name_hint="depthwise_conv2d_nhwc")
    return _default_legalize(bb, call)


ROWS = "rows"  # a key of a ConvChoice mapping: one register-tile height for every kernel over symbolic rows
ROW_HEIGHTS = (2, 4, 6, 8)  # the heights tuning measures beside the default (those a kernel's registers hold)


def row_height(sig: str, default: int, limit: int, choice: ConvChoice, cpu: CpuFacts) -> tuple[int, tuple[str, int]]:
    """The register-tile height of a kernel over a symbolic row count or width (a range of
    lengths: dense, matmul, convolution, depthwise) and its ``rows`` annotation
    (:func:`..kernels.extents.row_variant`): ``default`` (on AArch64 4 rows:
    :func:`..kernels.cpu.symbolic_default`) unless ``choice`` names one for the kernel's
    signature (``"rows6"``: what tuning measured fastest at the lengths it weighed) or for every
    kernel (``ROWS``: how tuning's extraction makes the variants); a height over ``limit`` (what
    the registers hold) is the default."""
    default = symbolic_default(default, limit, cpu)
    wanted = (choice.get(sig) or choice.get(ROWS)) if isinstance(choice, Mapping) else None
    height = default
    if wanted is not None and str(wanted).removeprefix("rows").isdigit():
        height = int(str(wanted).removeprefix("rows"))
        height = height if 1 <= height <= limit else default
    return height, (sig, default)


def _legalize_matmul(bb: Any, call: Any, cpu: CpuFacts, choice: ConvChoice = "auto") -> Any:
    from tvm import relax

    weights = const_array(call.args[1])
    x = call.args[0]
    floats = _dtype(x) in FLOATS and all(_dtype(t) == _dtype(x) for t in (call.args[1], call))
    cpu = cpu.in_dtype(_dtype(x))
    if weights is None:
        return _legalize_matmul_computed(bb, call, cpu, choice) if floats else _default_legalize(bb, call)
    if weights.ndim != 2 or rank(x) < 2 or not floats:
        return _default_legalize(bb, call)
    k, n = weights.shape
    nb = dense_block(n, cpu)
    packed = pad_axis(weights, 1, nb).reshape(k, -1, nb).transpose(1, 0, 2).copy()
    shape = static_shape(x)
    vectors = -(-nb // cpu.lanes)
    if shape is None:  # symbolic rows (a range of lengths): whole tiles, the last one padded
        height, rows = row_height(f"rows dense {k}x{n}", best_rows(vectors, cpu), max_rows(vectors, cpu), choice, cpu)
        return bb.call_te(dense_packed, x, relax.const(packed), n, 0, height, rows, primfunc_name_hint="dense")
    rows = int(np.prod(shape[:-1]))
    rows_to = padded_rows(rows, vectors, cpu)
    return bb.call_te(dense_packed, x, relax.const(packed), n, rows_to if rows_to > rows else 0,
                      primfunc_name_hint="dense")


def _legalize_matmul_computed(bb: Any, call: Any, cpu: CpuFacts, choice: ConvChoice = "auto") -> Any:
    """A matmul of two computed tensors (attention's Q·Kᵀ and P·V) on the dense micro-kernel,
    its right operand packed in the kernel."""
    a, b = call.args
    shapes = [static_shape(t) for t in (a, b)]
    if all(s is not None and len(s) >= 2 for s in shapes):
        (m, _k), n = shapes[0][-2:], shapes[1][-1]
        nb = dense_block(n, cpu)
        rows_to = padded_rows(m, -(-nb // cpu.lanes), cpu)
        return bb.call_te(matmul_packed, a, b, nb, rows_to, primfunc_name_hint="matmul")
    # a range of lengths: rows, columns and depth may be symbolic, the batch axes (heads) not
    values = [getattr(t.ty.shape, "values", None) for t in (a, b)]
    if any(v is None or len(v) < 2 or not all(hasattr(d, "value") for d in v[:-2]) for v in values):
        return _default_legalize(bb, call)
    n = values[1][-1]
    nb = dense_block(int(n.value), cpu) if hasattr(n, "value") else 2 * cpu.lanes  # short rows waste less
    def text(d: Any) -> str:
        return str(int(d.value)) if hasattr(d, "value") else str(d)

    sig = f"rows matmul {'x'.join(text(d) for d in values[0][:-2])} {text(values[0][-1])}x{text(n)}"
    vectors = -(-nb // cpu.lanes)
    height, rows = row_height(sig, best_rows(vectors, cpu), max_rows(vectors, cpu), choice, cpu)
    return bb.call_te(matmul_packed, a, b, nb, 0, height, rows, primfunc_name_hint="matmul")


def _last_axis(call: Any, axes: list[int]) -> bool:
    """Whether ``axes`` is the last axis of the call's float input (float32, or float16), rows
    of 4 or more (TVM's own kernel handles a handful of classes as well). The row count and
    length may be symbolic (a range of lengths: attention's scores)."""
    values = getattr(getattr(call.args[0].ty, "shape", None), "values", None)
    if values is None or len(values) < 2 or _dtype(call.args[0]) not in FLOATS:
        return False
    if [a % len(values) for a in axes] != [len(values) - 1]:
        return False
    last = values[-1]
    return not hasattr(last, "value") or int(last.value) >= 4


def row_kernel_takes(call: Any) -> bool:
    """Whether a softmax, layer norm or RMS norm call runs on edgetune's row kernel
    (:mod:`..kernels.rows`: its statistics in float32 whatever the tensors' dtype) rather than
    on TVM's own."""
    name = call.op.name
    if name == "relax.nn.softmax":
        return _last_axis(call, [int(call.attrs.axis)])
    if name == "relax.nn.layer_norm":
        x, gamma, beta = call.args
        return _last_axis(call, ints(call.attrs.axes)) and last_dim(x) is not None and rank(gamma) == rank(beta) == 1
    if name == "relax.nn.rms_norm":
        x, gamma = call.args
        return _last_axis(call, ints(call.attrs.axes)) and last_dim(x) is not None and rank(gamma) == 1
    return False


SUMS = ("relax.mean", "relax.sum")  # sums over float16 tensors, in float32 inside (:func:`_legalize_sum`)


def keeps_half(call: Any) -> bool:
    """Whether the kernel a float16 softmax, norm, mean or sum gets keeps its statistics in float32
    itself (:mod:`..passes.precision`): the row kernels, and sums and means of static shape."""
    if call.op.name in SUMS:
        return static_shape(call.args[0]) is not None
    return row_kernel_takes(call)


def _legalize_sum(bb: Any, call: Any) -> Any:
    """A mean or sum over a float16 tensor summed in float32 and its result rounded to float16
    once (:func:`..kernels.rows.sum_in_float32`), where TVM's would sum in float16; any other
    TVM's own."""
    x = call.args[0]
    if _dtype(x) != "float16" or static_shape(x) is None:
        return _default_legalize(bb, call)
    axes = [int(a) for a in call.attrs.axis] if call.attrs.axis is not None else None
    return bb.call_te(sum_in_float32, x, axes, bool(call.attrs.keepdims), call.op.name == "relax.mean",
                      primfunc_name_hint=call.op.name.removeprefix("relax."))


def _legalize_softmax(bb: Any, call: Any, cpu: CpuFacts) -> Any:
    if not row_kernel_takes(call):
        if _dtype(call.args[0]) == "float32" and static_shape(call.args[0]) is not None:
            # over another axis (YOLO's DFL: 16 bins of [1, 16, 4, 2100] along axis 1): TOPI's softmax
            # with fast_exp, vectorized along the contiguous axes, where TOPI's own called libm's expf
            # per value (yolo11n at 320², Pi 5 estimate: 4.4 of 118.7 M cycles in it and libm)
            return bb.call_te(_topi().nn.fast_softmax, call.args[0], int(call.attrs.axis), primfunc_name_hint="softmax")
        return _default_legalize(bb, call)
    return bb.call_te(softmax_rows, call.args[0], cpu.in_dtype(_dtype(call.args[0])).lanes, primfunc_name_hint="softmax")


def _legalize_layer_norm(bb: Any, call: Any, cpu: CpuFacts) -> Any:
    if not row_kernel_takes(call):
        return _default_legalize(bb, call)
    a = call.attrs
    x, gamma, beta = call.args
    return bb.call_te(layer_norm_rows, x, gamma if a.scale else None, beta if a.center else None, float(a.epsilon),
                      cpu.in_dtype(_dtype(x)).lanes, primfunc_name_hint="layer_norm")


def legalize_winograd(bb: Any, data: Any, weights: Any, geometry: Mapping[str, Any], tile: int, sig: str,
                       cpu: CpuFacts, fill: int = 0, default_variant: str = "") -> Any:
    from tvm import relax

    oc = weights.shape[0]
    top, left, bottom, right = geometry["padding"]
    oh = int(data.ty.shape.values[1]) + top + bottom - 2
    ow = int(data.ty.shape.values[2]) + left + right - 2
    tiles = int(data.ty.shape.values[0]) * -(-oh // tile) * -(-ow // tile)
    oci, _rw = register_tile(oc, tiles, cpu)
    packed = winograd_weights(weights, tile, oci)
    return bb.call_te(conv2d_nhwc_winograd, data, relax.const(packed), padding=geometry["padding"], tile=tile,
                      out_channels=oc, signature=sig, fill=fill, default_variant=default_variant,
                      primfunc_name_hint="conv2d_winograd")
