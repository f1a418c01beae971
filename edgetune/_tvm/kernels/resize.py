"""NHWC resize (linear, nearest) with its source coordinates as tables (TE).

TOPI's resize computes every output element's source coordinates from its indices: per pixel a
float conversion, a multiply-add, a floor, two clamps and the weight, for one or two vectors of
channels (MediaPipe pose landmark's 8-channel upsamplings: 34 cycles per pixel on the Pi 4
estimate, 3.4 M of the model's cycles). Here the coordinates along each axis are computed once,
into small tables (``edgetune.table`` stages: the schedules keep them as passes of their own),
and each output pixel reads its two columns and weight from them: the arithmetic is TOPI's
(``get_inx``, ``get_closest_index``, the clamp of ``get_2d_pixel``, ``_lerp``), only where it is
computed moves.
"""

from __future__ import annotations

from typing import Any

TABLE = "edgetune.table"
METHODS = ("linear", "nearest_neighbor")
MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn")


def supported(method: str, mode: str, dtype: str) -> bool:
    """Whether :func:`resize2d_nhwc` computes this resize (else TOPI's stays)."""
    return method in METHODS and mode in MODES and dtype == "float32"


def resize2d_nhwc(data: Any, size: tuple[int, int], method: str, mode: str, rounding: str) -> Any:
    """``data`` [N, H, W, C] resized to ``size`` (OH, OW) as TOPI's ``resize2d`` with layout NHWC."""
    from tvm import te
    from tvm.topi.image.resize import can_convert_multiply_to_intdiv, get_closest_index, get_inx

    _n, h, w, _c = (int(d) for d in data.shape)
    oh, ow = size
    if method == "nearest_neighbor" and not rounding:
        rounding = "round" if mode == "align_corners" else "floor"

    def axis(name: str, image: int, target: int) -> list[Any]:
        """The coordinate tables of one axis: (first index, second index, weight) for linear,
        (index,) for nearest; indices clamped into the image as ``get_2d_pixel`` clamps them."""
        int_div = (method == "nearest_neighbor" and mode == "asymmetric" and rounding == "floor"
                   and can_convert_multiply_to_intdiv(image, target))
        image_e, target_e = te.const(image, "int32"), te.const(target, "int32")

        def source(i: Any) -> Any:
            return get_inx(i, image_e, target_e, mode, 0.0, 0.0, int_div)

        def clamp(v: Any) -> Any:
            return te.max(te.min(v, image - 1), 0)

        attrs = {TABLE: 1}
        if method == "nearest_neighbor":
            return [te.compute((target,), lambda i: clamp(get_closest_index(source(i), rounding, None, int_div)),
                               name=f"{name}_index", attrs=attrs)]
        first = te.compute((target,), lambda i: te.floor(source(i)).astype("int32"), name=f"{name}_floor", attrs=attrs)
        low = te.compute((target,), lambda i: clamp(first[i]), name=f"{name}_low", attrs=attrs)
        high = te.compute((target,), lambda i: clamp(first[i] + 1), name=f"{name}_high", attrs=attrs)
        weight = te.compute((target,), lambda i: source(i) - first[i], name=f"{name}_weight", attrs=attrs)
        return [low, high, weight]

    rows, cols = axis("rows", h, oh), axis("cols", w, ow)
    if method == "nearest_neighbor":
        (yi,), (xi,) = rows, cols
        return te.compute((data.shape[0], oh, ow, data.shape[3]), lambda b, y, x, c: data[b, yi[y], xi[x], c],
                          name="resize")
    y0, y1, wy = rows
    x0, x1, wx = cols

    def lerp(a: Any, b: Any, t: Any) -> Any:
        return a * (1.0 - t) + b * t

    def value(b: Any, y: Any, x: Any, c: Any) -> Any:
        top = lerp(data[b, y0[y], x0[x], c], data[b, y0[y], x1[x], c], wx[x])
        bottom = lerp(data[b, y1[y], x0[x], c], data[b, y1[y], x1[x], c], wx[x])
        return lerp(top, bottom, wy[y])

    return te.compute((data.shape[0], oh, ow, data.shape[3]), value, name="resize")
