"""``DFT`` and ``STFT`` (ONNX opset 17+; audio front ends exported from ``torch.stft``) as
standard ops TVM 0.27 converts: a discrete Fourier transform of fixed length is a product with
constant cos / sin matrices, which runs on the dense kernels.

* ``DFT``: along ``axis`` (an attribute up to opset 19, an input from 20), real (``[..., 1]``) or
  complex (``[..., 2]``) input, zero-padded or cropped to ``dft_length``, forward or inverse
  (scaled by 1/N), ``onesided`` keeps the first N/2 + 1 bins; output ``[..., 2]``.
* ``STFT``: frames taken with a constant index Gather (``frame_step``), times the window, then
  the same real/complex products; output ``[batch, frames, bins, 2]``.

Lengths, steps and windows must be constants once shapes are fixed (they are, in exported audio
models); anything else is refused naming the node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError
from ..onnx_proto import attrs, node_label, opset
from .onnx_rewriter import Rewriter, Table, inp, rewrite_nodes


def _constant(rw: Rewriter, node: Any, name: str, what: str) -> np.ndarray:
    value = rw.value(name)
    if value is None:
        raise ModelError(f"{node_label(node)}: its {what} is computed at run time, not a constant",
                         "fix the input shapes with --input-shape so it folds, or export it as a constant")
    return value


def _parts(rw: Rewriter, x: str, last: int) -> tuple[str, str | None]:
    """Real and imaginary parts of a ``[..., last]`` tensor, ``last`` 1 (real: None) or 2."""
    real = rw.op("Squeeze", [rw.op("Slice", [x, rw.ints([0]), rw.ints([1]), rw.ints([-1])]), rw.ints([-1])])
    if last == 1:
        return real, None
    imag = rw.op("Squeeze", [rw.op("Slice", [x, rw.ints([1]), rw.ints([2]), rw.ints([-1])]), rw.ints([-1])])
    return real, imag


def _transform(rw: Rewriter, re: str, im: str | None, n: int, bins: int, inverse: bool, output: str) -> None:
    """``Σ_t (re + i·im)_t · e^{∓2πi·k·t/n}`` over the last axis for k < ``bins``, stacked as
    ``[..., bins, 2]`` into ``output``."""
    t, k = np.arange(n)[:, None], np.arange(bins)[None, :]
    angle = 2 * np.pi * t * k / n
    sign = 1.0 if inverse else -1.0
    scale = 1.0 / n if inverse else 1.0
    cos, sin = rw.const(np.cos(angle) * scale), rw.const(sign * np.sin(angle) * scale)
    # (re + i·im)(cos + i·sin) = (re·cos − im·sin) + i(re·sin + im·cos)
    real = rw.op("MatMul", [re, cos])
    imag = rw.op("MatMul", [re, sin])
    if im is not None:
        real = rw.op("Sub", [real, rw.op("MatMul", [im, sin])])
        imag = rw.op("Add", [imag, rw.op("MatMul", [im, cos])])
    stacked = [rw.op("Unsqueeze", [part, rw.ints([-1])]) for part in (real, imag)]
    rw.op("Concat", stacked, output, axis=-1)


def _fit(rw: Rewriter, x: str, rank: int, have: int, want: int) -> str:
    """``x`` (of ``rank``) cropped or zero-padded to ``want`` along its last axis."""
    if have > want:
        return rw.op("Slice", [x, rw.ints([0]), rw.ints([want]), rw.ints([-1])])
    if have < want:
        pads = [0] * rank + [0] * (rank - 1) + [want - have]
        return rw.op("Pad", [x, rw.ints(pads)])
    return x


def dft(rw: Rewriter, node: Any) -> None:
    at = attrs(node)
    shape = rw.fixed_shape(node.input[0])
    if shape is None or None in shape:
        raise ModelError(f"{node_label(node)}: its input shape is not fixed", "fix the input shapes with --input-shape")
    rank = len(shape)
    axis = int(at.get("axis", 1)) if rw.opset < 20 else int(_constant(rw, node, inp(node, 2), "axis") if inp(node, 2) else -2)
    axis %= rank
    if axis == rank - 1:
        raise ModelError(f"{node_label(node)}: a DFT along the real/imaginary axis is not a transform")
    inverse, onesided = bool(at.get("inverse", 0)), bool(at.get("onesided", 0))
    n = int(_constant(rw, node, inp(node, 1), "dft_length").reshape(())) if inp(node, 1) else shape[axis]
    if onesided and (inverse or shape[-1] == 2):
        raise ModelError(f"{node_label(node)}: onesided is for a forward DFT of real input")
    perm = [i for i in range(rank - 1) if i != axis] + [axis, rank - 1]
    moved = rw.op("Transpose", [node.input[0]], perm=perm)
    re, im = _parts(rw, moved, shape[-1])
    re = _fit(rw, re, rank - 1, shape[axis], n)
    im = _fit(rw, im, rank - 1, shape[axis], n) if im is not None else None
    bins = n // 2 + 1 if onesided else n
    result = rw.fresh()
    _transform(rw, re, im, n, bins, inverse, result)
    back = [0] * rank
    for i, p in enumerate(perm):
        back[p] = i
    rw.op("Transpose", [result], node.output[0], perm=back)


def stft(rw: Rewriter, node: Any) -> None:
    shape = rw.fixed_shape(node.input[0])
    if shape is None or len(shape) != 3 or None in shape:
        raise ModelError(f"{node_label(node)}: its signal must be [batch, length, 1|2] with fixed sizes",
                         "fix the input shapes with --input-shape")
    step = int(_constant(rw, node, node.input[1], "frame_step").reshape(()))
    window = _constant(rw, node, inp(node, 2), "window").astype(np.float64) if inp(node, 2) else None
    length = int(_constant(rw, node, inp(node, 3), "frame_length").reshape(())) if inp(node, 3) else None
    length = length if length is not None else (window.size if window is not None else None)
    if length is None:
        raise ModelError(f"{node_label(node)}: neither a window nor a frame_length gives the frame size")
    frames = (shape[1] - length) // step + 1
    if frames < 1 or step < 1:
        raise ModelError(f"{node_label(node)}: a {shape[1]}-sample signal holds no {length}-sample frame")
    index = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    taken = rw.op("Gather", [node.input[0], rw.const(index, np.int64)], axis=1)  # [batch, frames, length, 1|2]
    re, im = _parts(rw, taken, shape[-1])
    if window is not None:
        w = rw.const(window.astype(np.float32))
        re = rw.op("Mul", [re, w])
        im = rw.op("Mul", [im, w]) if im is not None else None
    onesided = bool(attrs(node).get("onesided", 1)) and im is None
    _transform(rw, re, im, length, length // 2 + 1 if onesided else length, False, node.output[0])


TABLE = Table(lambda node, version: {"DFT": dft, "STFT": stft}.get(node.op_type) if node.domain in ("", "ai.onnx") else None)


def standard_ops(model: Any) -> dict[str, int]:
    """Rewrite every DFT / STFT of the main graph in place; returns how many of each."""
    if not any(n.op_type in ("DFT", "STFT") for n in model.graph.node) or opset(model) < 17:
        return {}
    return rewrite_nodes(model, TABLE)
