"""ONNX operators edgetune converts itself, in front of TVM's converter map: ones TVM 0.27 lacks
(``ConvInteger``) or computes otherwise than onnxruntime (``DynamicQuantizeLinear`` of an
all-zero tensor: TVM divides by a zero scale, onnxruntime takes the scale as 1).

Each converter takes the importer's block builder, the node's inputs (Relax expressions, None for
an omitted optional input) and its attributes, as TVM's converters do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _static_shape(expr: Any) -> list[int]:
    return [int(d) for d in expr.ty.shape.values]


def dynamic_quantize_linear(bb: Any, inputs: list[Any], attrs: dict[str, Any]) -> Any:
    """``y = saturate(round(x / scale) + zero_point)`` over uint8 with ``scale = (max(x, 0) −
    min(x, 0)) / 255`` — 1 when that range is empty, as onnxruntime's kernel takes it — and
    ``zero_point = round(clip(−min / scale, 0, 255))``, ties to even."""
    from tvm import relax

    x = inputs[0]
    dtype = str(x.ty.dtype)
    zero = relax.const(0.0, dtype)
    high = bb.normalize(relax.op.maximum(zero, relax.op.max(x)))
    low = bb.normalize(relax.op.minimum(zero, relax.op.min(x)))
    spread = bb.normalize(relax.op.subtract(high, low))
    empty = relax.op.equal(spread, zero)
    scale = bb.normalize(relax.op.where(empty, relax.const(1.0, dtype), relax.op.divide(spread, relax.const(255.0, dtype))))
    point = relax.op.round(relax.op.clip(relax.op.negative(relax.op.divide(low, scale)), 0, 255))
    point = bb.normalize(relax.op.astype(point, "uint8"))
    y = relax.op.quantize(x, scale, point, axis=0, out_dtype="uint8")
    return relax.Tuple([bb.normalize(y), scale, point])


def conv_integer(bb: Any, inputs: list[Any], attrs: dict[str, Any]) -> Any:
    """``Σ (x − x_zero_point)·(w − w_zero_point)`` in int32 (1-D and 2-D, grouped too): both
    sides widened to int32 first, so the sums are exact; the input is padded after its zero
    point is taken off, which is padding with the zero point."""
    from tvm import relax

    x, w = inputs[0], inputs[1]
    xz = inputs[2] if len(inputs) > 2 else None
    wz = inputs[3] if len(inputs) > 3 else None
    spatial = len(_static_shape(x)) - 2
    if spatial not in (1, 2):
        raise NotImplementedError(f"ConvInteger over {spatial} spatial dimensions is not supported")
    xi = relax.op.astype(x, "int32")
    if xz is not None:
        xi = relax.op.subtract(xi, relax.op.astype(xz, "int32"))
    wi = relax.op.astype(w, "int32")
    if wz is not None:
        zw = bb.normalize(relax.op.astype(wz, "int32"))
        if len(_static_shape(zw)) == 1 and _static_shape(zw)[0] > 1:  # one per output channel
            zw = relax.op.reshape(zw, [-1] + [1] * (spatial + 1))
        wi = relax.op.subtract(wi, zw)
    xi, wi = bb.normalize(xi), bb.normalize(wi)
    kernel = _static_shape(wi)[2:]
    strides = list(attrs.get("strides", [1] * spatial))
    dilations = list(attrs.get("dilations", [1] * spatial))
    pads = _pads(attrs, _static_shape(xi)[2:], kernel, strides, dilations)
    groups = int(attrs.get("group", 1))
    if spatial == 1:
        return relax.op.nn.conv1d(xi, wi, strides=strides, padding=pads, dilation=dilations, groups=groups,
                                  out_dtype="int32")
    return relax.op.nn.conv2d(xi, wi, strides=strides, padding=pads, dilation=dilations, groups=groups,
                              out_dtype="int32")


def _pads(attrs: dict[str, Any], sizes: list[int], kernel: list[int], strides: list[int],
          dilations: list[int]) -> list[int]:
    """ONNX pads (begins then ends) from ``pads`` or ``auto_pad``."""
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto in ("NOTSET", ""):
        return list(attrs.get("pads", [0] * (2 * len(sizes))))
    if auto == "VALID":
        return [0] * (2 * len(sizes))
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else large)
        ends.append(large if auto == "SAME_UPPER" else small)
    return begins + ends


def clip(bb: Any, inputs: list[Any], attrs: dict[str, Any]) -> Any:
    """``Clip`` as Relax's ``clip`` (or ``maximum`` / ``minimum`` for one bound or a computed
    one), where TVM's converter emits TOPI kernels (``call_tir``) that no graph pass sees
    through: the NHWC layout stopped at every ReLU6 a PyTorch export writes (two transposes
    around each), and a pruned layer's sparse kernel could not take it in. A bound that is NaN
    is no bound (onnxruntime's rule, and TVM's converter's)."""
    import numpy as np
    from tvm import relax

    from ..passes.common import const_array

    x = inputs[0]
    dtype = str(x.ty.dtype)
    bounds = [inputs[k] if len(inputs) > k else None for k in (1, 2)]
    for k, key in enumerate(("min", "max")):  # opset < 11: attributes
        if bounds[k] is None and key in attrs:
            bounds[k] = relax.const(np.array(attrs[key], dtype=dtype), dtype)
    values = [None if b is None else const_array(b) for b in bounds]
    scalars = [v is not None and v.size == 1 for v in values]
    floating = np.dtype(dtype).kind == "f"
    if all(scalars) and not any(floating and np.isnan(v).any() for v in values):
        return relax.op.clip(x, values[0].item(), values[1].item())
    out = x
    for k, (bound, value) in enumerate(zip(bounds, values)):
        if bound is None or (value is not None and value.size == 1 and floating and np.isnan(value).any()):
            continue
        if floating and value is None:  # computed: NaN means unbounded
            unbounded = relax.const(-np.inf if k == 0 else np.inf, dtype)
            bound = bb.normalize(relax.op.where(relax.op.isnan(bound), unbounded, bound))
        out = bb.normalize((relax.op.maximum if k == 0 else relax.op.minimum)(out, bound))
    return out


CONVERTERS: dict[str, Callable[[Any, list[Any], dict[str, Any]], Any]] = {
    "Clip": clip,
    "ConvInteger": conv_integer,
    "DynamicQuantizeLinear": dynamic_quantize_linear,
}
