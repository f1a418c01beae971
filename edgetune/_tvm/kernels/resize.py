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
    """Whether :func:`resize2d_nhwc` computes this resize (else TOPI's stays): nearest-neighbour
    ones of any type (a gather), linear ones in float32 or float16 (its weights in its dtype)."""
    return method in METHODS and mode in MODES and (dtype in ("float32", "float16") or method == "nearest_neighbor")


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
        weight = te.compute((target,), lambda i: (source(i) - first[i]).astype(data.dtype), name=f"{name}_weight",
                            attrs=attrs)
        return [low, high, weight]

    rows, cols = axis("rows", h, oh), axis("cols", w, ow)
    if method == "nearest_neighbor":
        (yi,), (xi,) = rows, cols
        return te.compute((data.shape[0], oh, ow, data.shape[3]), lambda b, y, x, c: data[b, yi[y], xi[x], c],
                          name="resize")
    y0, y1, wy = rows
    x0, x1, wx = cols

    one = te.const(1.0, str(data.dtype))

    def lerp(a: Any, b: Any, t: Any) -> Any:
        return a * (one - t) + b * t

    def value(b: Any, y: Any, x: Any, c: Any) -> Any:
        top = lerp(data[b, y0[y], x0[x], c], data[b, y0[y], x1[x], c], wx[x])
        bottom = lerp(data[b, y1[y], x0[x], c], data[b, y1[y], x1[x], c], wx[x])
        return lerp(top, bottom, wy[y])

    return te.compute((data.shape[0], oh, ow, data.shape[3]), value, name="resize")


def resize2d_nhwc_q11(data: Any, rows: Any, cols: Any) -> Any:
    """``data`` [N, H, W, C], 8-bit, resized bilinearly as XNNPACK's ``ibilinear`` kernels do:
    ``rows`` [OH, 3] and ``cols`` [OW, 3] hold each output row's and column's two source
    indices and the second one's weight in 1/2048 (:func:`..passes.int8_elementwise.q11_axis`);
    in int32, ``t = (tl << 11) + (tr − tl)·αx`` (``b`` likewise below), ``(t << 11) + (b −
    t)·αy``, rounded by ``+ 2²¹ >> 22`` — a weighted mean, never outside the 8-bit range. (LLVM
    makes NEON's widening subtracts and multiply-adds of it: 40 instructions per 8 channels.)"""
    from tvm import te

    n, c = data.shape[0], data.shape[3]
    oh, ow = rows.shape[0], cols.shape[0]

    def value(b: Any, y: Any, x: Any, ch: Any) -> Any:
        def pixel(row: int, col: int) -> Any:
            return data[b, rows[y, row], cols[x, col], ch].astype("int32")

        def lerp(first: Any, second: Any, weight: Any) -> Any:
            return (first << 11) + (second - first) * weight

        top = lerp(pixel(0, 0), pixel(0, 1), cols[x, 2])
        bottom = lerp(pixel(1, 0), pixel(1, 1), cols[x, 2])
        return ((lerp(top, bottom, rows[y, 2]) + (1 << 21)) >> 22).astype(data.dtype)

    return te.compute((n, oh, ow, c), value, name="resize")
