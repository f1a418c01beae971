"""How an int8 model is quantized, read off its Relax graph (what ``edgetune inspect`` shows)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..constants import SCHEME_ATTR
from ..kernels import dot
from .common import bindings_of, const_array, op_name

_TRANSFORMS = ("relax.reshape", "relax.permute_dims")


EXACT_LIMIT = 2**24  # float32 holds every integer up to here


QUANTIZED_COMPUTE = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv2d_transpose", "relax.matmul", "relax.nn.dense")




WEIGHT_ONLY = "float (weight-only quantization)"


def peel_transforms(bound: dict[Any, Any], expr: Any) -> tuple[Any, list[Any]]:
    """``expr`` with the reshapes / transposes in front of it peeled off: (inner, calls outermost
    first)."""
    from tvm import relax

    calls = []
    while True:
        while isinstance(expr, relax.Var) and expr in bound:
            expr = bound[expr]
        if op_name(expr) not in _TRANSFORMS:
            return expr, calls
        calls.append(expr)
        expr = expr.args[0]


def _apply(array: np.ndarray, calls: list[Any]) -> np.ndarray:
    """The numpy value of ``calls`` (outermost first) applied to ``array``."""
    for call in reversed(calls):
        if op_name(call) == "relax.reshape":
            array = array.reshape([int(d) for d in call.ty.shape.values])
        else:
            axes = call.attrs.axes
            array = array.transpose([int(a) for a in axes] if axes is not None else None)
    return array


def dequantized_constant(bound: dict[Any, Any], expr: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For ``expr`` = transforms(dequantize(transforms(constant), scale, zero_point)): the integer
    constant, its scale and its zero point, each broadcast to the integer tensor's shape and
    carried through the same transforms (so per-channel scales follow their channels)."""
    outer, calls = peel_transforms(bound, expr)
    if op_name(outer) != "relax.dequantize":
        return None
    inner, inner_calls = peel_transforms(bound, outer.args[0])
    data, scale, zero = const_array(inner), const_array(outer.args[1]), const_array(outer.args[2])
    if data is None or scale is None or zero is None or data.dtype.kind not in "iu":
        return None
    data = _apply(data, inner_calls)
    axis = int(outer.attrs.axis) % data.ndim

    def spread(values: np.ndarray) -> np.ndarray:
        values = np.asarray(values).reshape(-1)
        if values.size == 1:
            return np.broadcast_to(values.reshape((1,) * data.ndim), data.shape)
        shape = [1] * data.ndim
        shape[axis] = values.size
        return np.broadcast_to(values.reshape(shape), data.shape)

    return _apply(data, calls), _apply(spread(scale), calls), _apply(spread(zero), calls)


def quantization_scheme(mod: Any) -> dict[str, Any] | None:
    """How an imported model is quantized and how it runs, read from its Relax ``main``: per
    compute op (conv2d, matmul) whose weight is a dequantized constant, the weight's type and
    granularity (per channel: a vector scale) and symmetry (zero points all 0), and whether its
    activation input is dequantized (an int8 → int8 layer). None for a float model.

    ``exact``: the layers whose int8 sums are computed exactly and requantized as the runtime
    does (:class:`.int8_layers.ExactInt8Layers`); ``fixed_point_adds``: TFLite int8 ADDs in LiteRT's fixed
    point; ``fixed_point_resizes``: its int8 bilinear resizes in XNNPACK's. The import stores the scheme on the module (these rewrites hide the pattern)."""

    if mod.attrs is not None and SCHEME_ATTR in mod.attrs:
        return json.loads(str(mod.attrs[SCHEME_ATTR]))
    bound = bindings_of(mod["main"])

    def dequantized(expr: Any) -> Any:
        inner, _ = peel_transforms(bound, expr)
        return inner if op_name(inner) == "relax.dequantize" else None

    def const(expr: Any) -> np.ndarray | None:
        return const_array(peel_transforms(bound, expr)[0])

    layers: dict[str, int] = {}
    weights: set[str] = set()
    activations: set[str] = set()
    for value, w, data in quantized_computes(bound):
        scale, zero = const(w.args[1]), const(w.args[2])
        per_channel = scale is not None and scale.size > 1
        symmetric = zero is None or not np.any(zero)
        weights.add(f"{data.dtype} {'per-channel' if per_channel else 'per-tensor'} {'symmetric' if symmetric else 'asymmetric'}")
        x = dequantized(value.args[0])
        if x is not None:
            xz = const(x.args[2])
            activations.add(f"{x.args[0].ty.dtype} {'asymmetric' if xz is not None and np.any(xz) else 'symmetric'}")
        kind = op_name(value).removeprefix("relax.").removeprefix("nn.")
        layers[kind] = layers.get(kind, 0) + 1
    if not layers:
        return None
    return {"weights": sorted(weights), "activations": sorted(activations) or [WEIGHT_ONLY],
            "layers": layers, "exact": 0, "exact_bounded": 0, "fixed_point_adds": 0,
            "runs_as": "dequantize → fp32 kernels → quantize"}


_DOT_INSTRUCTIONS = {"vnni": "AVX-512 VNNI", "sdot": "Arm sdot", "neon": "Arm NEON smull/sadalp"}


def integer_runs_as(family: str | None, gpu: bool = False, known: bool = True) -> str:
    """How the exact int8 layers run on a target: with ``family`` its int8 dot-product
    instruction (:func:`..kernels.dot.dot_family`), on a GPU, or — ``known`` False, at import,
    before a target is chosen — on whichever the build's target has."""
    fp32 = "exact integer sums in fp32 kernels"
    if not known:
        return (f"full convolutions and dense layers (as 1×1 convolutions) on the target CPU's int8 dot-product "
                f"instruction where it has one ({', '.join(_DOT_INSTRUCTIONS.values())}), depthwise layers with "
                f"weights within ±127 on Arm NEON's smull/smlal, else — and on GPUs — "
                f"as {fp32}")
    if gpu:
        return f"{fp32} (GPU: the integer kernels are CPU-only)"
    if family is None:
        return f"{fp32} (this CPU has no int8 dot-product instruction edgetune uses)"
    pairs = f"with weights within ±127 on Arm NEON (smull/smlal, taps in pairs), others as {fp32}"
    if family == "sdot":
        depthwise = f"depthwise layers of whole 16-channel blocks on sdot (four taps along y a quad), others {pairs}"
    elif dot.integer_depthwise(family):
        depthwise = f"depthwise layers {pairs}"
    else:
        depthwise = f"depthwise layers as {fp32}"
    return f"full convolutions and dense layers (as 1×1 convolutions) on {_DOT_INSTRUCTIONS[family]}, {depthwise}"


def quantized_computes(bound: dict[Any, Any]) -> Any:
    """(compute op, its weights' dequantize, the weights' stored values) for each convolution /
    matmul of ``bound`` (var → value) whose weights are a dequantized constant."""
    for value in bound.values():
        if op_name(value) not in QUANTIZED_COMPUTE:
            continue
        w, _ = peel_transforms(bound, value.args[1])
        data = const_array(peel_transforms(bound, w.args[0])[0]) if op_name(w) == "relax.dequantize" else None
        if data is not None:
            yield value, w, data


def describe_layer(value: Any) -> str:
    """A quantized layer as a user can find it in the model: op, input and output shapes."""

    def shape(expr: Any) -> str:
        dims = expr.ty.shape.values if expr.ty.shape is not None else None
        return "×".join(str(int(d)) if hasattr(d, "value") else str(d) for d in dims) if dims is not None else "?"

    return f"{op_name(value).removeprefix('relax.').removeprefix('nn.')} {shape(value.args[0])} → {shape(value)}"


def quantized_layers(mod: Any) -> list[str]:
    """:func:`describe_layer` of each quantized layer of ``mod`` (as :func:`quantization_scheme`
    counts them), before the int8 rewrites."""
    bound = bindings_of(mod["main"])
    return [describe_layer(value) for value, _w, _data in quantized_computes(bound)]


def per_channel(values: np.ndarray, axis: int) -> np.ndarray | None:
    """One value per index of ``axis`` when ``values`` is constant along every other axis."""
    moved = np.moveaxis(values, axis, 0).reshape(values.shape[axis], -1)
    return moved[:, 0] if np.all(moved == moved[:, :1]) else None
