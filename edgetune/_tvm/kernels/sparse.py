"""Sparse 1×1 convolutions: a pruned layer's weights as compressed rows, run on tiles of pixels.

Models pruned for XNNPACK's sparse inference (MediaPipe's ``*_sparse`` detectors, its pose
detector: 70–75 % of most 1×1 layers' weights zero, unstructured) store their weights sparse.
Densified, those layers ran on the packed micro-kernel at ~95 % of the FMA peak — multiplying by
zero three times in four. Here such a layer multiplies only its non-zero weights, the way
XNNPACK's SpMM does: an output channel's values over a tile of 64 pixels are
``Σ w_j · x[c_j, tile]`` over that channel's non-zeros ``(c_j, w_j)`` (:class:`Csr`), a weight
times a row of 16 pixel registers per non-zero, the weights loaded four at a time (one q
register, each multiplied as a lane: ``fmla`` by element) and the rest of a row one by one.

By the Pi estimate (M cycles, Pi 4 / Pi 5, MediaPipe's pose detector and face detector (full
range)): one weight loaded per non-zero (``ld1r``), with two sets of 32-pixel sums on the A76,
60.0 / 35.6 and 25.3 / 15.9; four weights a load, 58.5 / 32.8 and 25.0 / 14.5 — and with two
sets of 32 on the A76 37.2 / 16.8 (its registers then spill across the row's two loops). The
inner step is load-bound on both cores: per four non-zeros 64 pixel loads and three more (the
weights, two pairs of columns), against 64 + 8 one at a time.

XNNPACK runs the whole pruned part of a network channel-major (NCHW) for this. edgetune's graph
stays NHWC (its depthwise, dense and int8 kernels are), so each tile is transposed on the way in
(its pixels × all input channels into a channel-major scratch tile, 4 × 4 blocks in registers)
and on the way out, ``GROUP`` output channels at a time, where the layer's epilogue (bias, ReLU /
clip, a residual add) is applied to pixel rows before they are stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

TILE = 64  # pixels a tile: an output channel's sums in 16 registers
GROUP = 4  # output channels transposed together on the way out (4 × 4 blocks)
QUAD = 4  # non-zero weights loaded together (one q register), each multiplied as a lane
MAX_DENSITY = 1 / 3  # XNNPACK's rule for its sparse path: at least two thirds of the weights zero
# A layer with fewer non-zeros per output channel on average stays dense. By the Pi estimate
# (M cycles Pi 4 / Pi 5), the face detector (full range) at 8 / 4 / 2: 30.5 / 18.0, 29.5 / 17.8,
# 29.1 / 17.8; the pose detector at 8 / 2: 70.7 / 39.3, 65.5 / 37.7 (its 16 → 24 and 24 → 64
# layers have 6 per channel). At 16-pixel tiles 8 was the better bound (the transposes then
# weighed more).
MIN_ROW_NONZEROS = 2


@dataclass(frozen=True)
class Csr:
    """A ``[out, in]`` weight matrix's non-zeros, row by row (compressed sparse rows)."""

    vals: np.ndarray  # float32 [non-zeros]
    cols: np.ndarray  # int32 [non-zeros]: the input channel of each value
    rows: np.ndarray  # int32 [out + 1]: output channel o's values are rows[o] … rows[o + 1] − 1

    @classmethod
    def of(cls, weights: np.ndarray) -> "Csr":
        nz = weights != 0
        rows = np.concatenate([[0], np.cumsum(np.count_nonzero(nz, axis=1))])
        return cls(np.ascontiguousarray(weights[nz], dtype=np.float32), np.nonzero(nz)[1].astype(np.int32),
                   rows.astype(np.int32))

    @property
    def stored(self) -> int:
        """Values stored."""
        return int(self.vals.size)


def sparse_enough(weights: np.ndarray) -> bool:
    """Whether a ``[out, in]`` weight matrix is pruned enough for the sparse kernel (and its
    output channels come in whole groups)."""
    nnz = int(np.count_nonzero(weights))
    return weights.shape[0] % GROUP == 0 and MIN_ROW_NONZEROS * weights.shape[0] <= nnz <= MAX_DENSITY * weights.size


@dataclass(frozen=True)
class Step:
    """One epilogue operation applied to an output value: ``bias`` (a per-channel constant added:
    kernel parameter ``b<k>``), ``residual`` (a tensor of the output's shape added: parameter
    ``r``; with ``pads``, read inside a zero border that wide — another sparse layer's output
    written padded for the depthwise layer after it), ``relu``, ``clip`` (``lo``, ``hi``),
    ``max`` (``lo``) or ``min`` (``hi``); last, a ``pad`` with zeros (``pads``: top, bottom,
    left, right), the output written inside its border (a separate pad was a pass over the
    layer's output before each depthwise layer)."""

    kind: str
    lo: float = 0.0
    hi: float = 0.0
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)


def zero_border(buffer: str, padded: tuple[int, int, int, int], pads: tuple[int, int, int, int],
                indent: str, dtype: str = "float32") -> list[str]:
    """TVMScript lines writing zeros (of ``dtype``) into the border of the NHWC ``buffer`` of
    shape ``padded`` whose interior starts ``pads`` (top, bottom, left, right) from its edges:
    the rows above and below, then the columns left and right of the interior's rows."""
    n, hp, wp, c = padded
    top, bottom, left, right = pads
    h = hp - top - bottom
    lines = []
    for rows, first in ((top, 0), (bottom, top + h)):
        if rows:
            lines += [f"{indent}for zi, zy, zx, zc in T.grid({n}, {rows}, {wp}, {c}):",
                      f"{indent}    {buffer}[zi, zy + {first}, zx, zc] = T.{dtype}(0)"]
    for cols, first in ((left, 0), (right, wp - right)):
        if cols:
            lines += [f"{indent}for zi, zy, zx, zc in T.grid({n}, {h}, {cols}, {c}):",
                      f"{indent}    {buffer}[zi, zy + {top}, zx + {first}, zc] = T.{dtype}(0)"]
    return lines


def _place(shape: tuple[int, int, int, int], pads: tuple[int, int, int, int]) -> str:
    """The index, in pixels, of pixel ``{p}`` of an NHWC ``shape`` in a buffer of it padded by
    ``pads`` (top, bottom, left, right)."""
    n, h, w, _ = shape
    top, _, left, _ = pads
    _, hp, wp, _ = _padded(shape, pads)
    if hp * wp == h * w:
        return "{p}"
    image = "" if n == 1 else f"{{p}} // {h * w} * {hp * wp} + "
    return f"({image}({{p}} // {w} % {h} + {top}) * {wp} + {{p}} % {w} + {left})"


def _padded(shape: tuple[int, int, int, int], pads: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    n, h, w, c = shape
    return n, h + pads[0] + pads[1], w + pads[2] + pads[3], c


def _splat(v: float) -> str:
    return f"T.Broadcast(T.float32({float(np.float32(v))!r}), {GROUP})"


def _transpose4(rows: list[str], out: str, indent: str) -> list[str]:
    """Lets ``<out>0`` … ``<out>3``: the columns of the 4 × 4 block whose rows are the float32x4
    expressions ``rows`` (trn1 / trn2, then zip1 / zip2 of double words: eight shuffles)."""
    v = "T.float32x4"
    pairs = "[0, 4, 2, 6]", "[1, 5, 3, 7]"
    halves = "[0, 1, 4, 5]", "[2, 3, 6, 7]"
    lines = [f"{indent}{out}r{k}: {v} = {row}" for k, row in enumerate(rows)]
    lines += [f"{indent}{out}t{2 * h + k}: {v} = T.Shuffle([{out}r{2 * h}, {out}r{2 * h + 1}], {pairs[k]})"
              for h in range(2) for k in range(2)]
    lines += [f"{indent}{out}{c}: {v} = T.Shuffle([{out}t{c % 2}, {out}t{2 + c % 2}], {halves[c // 2]})"
              for c in range(4)]
    return lines


def _tile(first: str, tile: int, pixels: int | None, ci: int, co: int, value: str, place: str, indent: str,
          start: str = "T.float32(0)") -> list[str]:
    """One tile's statements: its first pixel ``first``, ``tile`` pixels (a multiple of 4);
    ``pixels``: the count a tail tile guards against (None: a whole tile). Input channels go
    into the channel-major scratch tile four at a time, 4 × 4 blocks transposed in registers; a
    row's non-zeros in quads, then the rest one by one; the sums of ``GROUP`` output channels
    come out transposed the same way, as pixel rows of 4 channels (``value``: their epilogue, of
    the float32x4 ``{v}`` at pixel ``{p}``), stored at pixel ``place`` of the output; ``start``:
    the sums' starting value for output channel ``o`` (a bias, taken off the epilogue's vector
    work). Pixels past the end of a tail tile read the last one (their sums are not stored)."""
    i = indent
    last = f"T.min({{}}, {pixels - 1})" if pixels is not None else "({})"
    lines = [f'{i}xt = T.decl_buffer(({ci * tile},), "float32")',
             f'{i}acc = T.decl_buffer(({GROUP * tile},), "float32", scope="local")']
    if ci % 4 == 0:
        rows = [f"xf[T.Ramp({last.format(f'{first} + k * 4 + {r}')} * {ci} + c4 * 4, 1, 4)]" for r in range(4)]
        lines += [f"{i}for c4 in range({ci // 4}):",
                  f"{i}    for k in T.unroll({tile // 4}):",
                  *_transpose4(rows, "x", f"{i}        "),
                  *(f"{i}        xt[T.Ramp((c4 * 4 + {c}) * {tile} + k * 4, 1, 4)] = x{c}" for c in range(4))]
    else:
        lines += [f"{i}for t in range({tile}):",
                  f"{i}    for c in range({ci}):",
                  f"{i}        xt[c * {tile} + t] = xf[{last.format(f'{first} + t')} * {ci} + c]"]
    o = f"og * {GROUP} + u"
    # each vector statement in power-of-two pieces: LLVM legalizes a 52-lane vector lane by lane
    pieces, at = [], 0  # (first pixel, lanes)
    for bit in reversed(range(tile.bit_length())):
        if tile >> bit & 1:
            pieces.append((at, 1 << bit))
            at += 1 << bit

    def each(statement: str) -> list[str]:  # statement: of {at} (the piece's first pixel) and {n} (its lanes)
        return [statement.format(at=at, n=n) for at, n in pieces]

    acc = f"acc[T.Ramp(u * {tile} + {{at}}, 1, {{n}})]"

    def row(col: str) -> str:  # the scratch tile's row of input channel cols[col]
        return f"xt[T.Ramp(cols[{col}] * {tile} + {{at}}, 1, {{n}})]"

    lines += [f"{i}for og in range({co // GROUP}):",
              f"{i}    for u in T.unroll({GROUP}):",
              *each(f"{i}        {acc} = T.Broadcast({start.format(o=f'({o})')}, {{n}})"),
              f"{i}        n: T.int32 = rows[{o} + 1] - rows[{o}]",
              f"{i}        for q in range(n // {QUAD}):",
              f"{i}            j: T.int32 = rows[{o}] + q * {QUAD}",
              f"{i}            w: T.float32x{QUAD} = vals[T.Ramp(j, 1, {QUAD})]",
              *(line for k in range(QUAD)
                for line in each(f"{i}            {acc} = {acc} + T.Broadcast(T.Shuffle([w], [{k}]), {{n}}) * "
                                 + row(f"j + {k}"))),
              f"{i}        for r in range(n % {QUAD}):",
              f"{i}            j: T.int32 = rows[{o} + 1] - 1 - r",
              *each(f"{i}            {acc} = {acc} + T.Broadcast(vals[j], {{n}}) * " + row("j"))]
    lines += [f"{i}    for k in T.unroll({tile // 4}):",
              *_transpose4([f"acc[T.Ramp({u * tile} + k * 4, 1, 4)]" for u in range(GROUP)], "y", f"{i}        ")]
    for r in range(4):
        p = f"({first} + k * 4 + {r})"
        store = f"yf[T.Ramp({place.format(p=p)} * {co} + og * {GROUP}, 1, {GROUP})] = {value.format(v=f'y{r}', p=p)}"
        lines += [f"{i}        if {p} < {pixels}:", f"{i}            {store}"] if pixels is not None else [f"{i}        {store}"]
    return lines


def sparse_conv1x1(shape: tuple[int, int, int, int], out_channels: int, stored: int, steps: tuple[Step, ...],
                   flops: float = 0.0) -> Any:
    """The scheduled TIR function of a 1×1 stride-1 convolution over an NHWC ``shape``, its
    weights a :class:`Csr` of ``stored`` values, then ``steps``. Parameters:
    ``x``, ``vals``, ``cols``, ``rows``, one ``b<k>`` per bias step, ``r`` if a step is a
    residual add; output ``y``. Whole tiles run in parallel, then the last, partial one.
    ``flops``: what reports count for it (its loops are data-dependent)."""
    from tvm.script import from_source

    from ..core import tvm

    n, h, w, ci = shape
    co = out_channels
    if co % GROUP:
        raise ValueError(f"{co} output channels are not whole groups of {GROUP}")
    pixels = n * h * w
    tile = TILE
    whole, tail = divmod(pixels, tile)
    f32 = '"float32"'
    params = [f"x: T.Buffer(({n}, {h}, {w}, {ci}), {f32})", f"vals: T.Buffer(({stored},), {f32})",
              f'cols: T.Buffer(({stored},), "int32")', f'rows: T.Buffer(({co + 1},), "int32")']
    value = "{v}"  # a float32x4 of GROUP channels at pixel {p}
    channels = f"T.Ramp(og * {GROUP}, 1, {GROUP})"
    biases = 0
    residual = None  # the residual's (padded) shape
    start = "T.float32(0)"
    for k, step in enumerate(steps):
        if step.kind == "bias":
            params.append(f"b{biases}: T.Buffer(({co},), {f32})")
            if k == 0:
                # the sums start from it: one vector add less per 4 outputs in the epilogue (Pi 4
                # estimate: pose detector 61.3 → 60.0 M cycles, face detector (full range) 25.9 → 25.3)
                start = f"b{biases}[{{o}}]"
            else:
                value = f"({value} + b{biases}[{channels}])"
            biases += 1
        elif step.kind == "residual":
            residual = _padded((n, h, w, co), step.pads)
            params.append(f"r: T.Buffer({residual}, {f32})")
            rplace = _place((n, h, w, co), step.pads)
            value = f"({value} + rf[T.Ramp({rplace} * {co} + og * {GROUP}, 1, {GROUP})])"
        elif step.kind == "relu":
            value = f"T.max({value}, {_splat(0.0)})"
        elif step.kind == "clip":
            value = f"T.max(T.min({value}, {_splat(step.hi)}), {_splat(step.lo)})"
        elif step.kind == "max":
            value = f"T.max({value}, {_splat(step.lo)})"
        elif step.kind == "min":
            value = f"T.min({value}, {_splat(step.hi)})"
        elif step.kind != "pad" or step is not steps[-1]:
            raise ValueError(f"epilogue step {step.kind} not supported there")
    pads = steps[-1].pads if steps and steps[-1].kind == "pad" else (0, 0, 0, 0)
    _, hp, wp, _ = _padded((n, h, w, co), pads)
    params.append(f"y: T.Buffer(({n}, {hp}, {wp}, {co}), {f32})")
    place = _place((n, h, w, co), pads)  # the output pixel of input pixel {p}
    body = []
    if hp * wp != h * w:
        body += zero_border("y", (n, hp, wp, co), pads, "    ")  # (the rest is written once, below)
    if whole:
        body += [f"    for tile in T.parallel({whole}):",
                 *_tile(f"tile * {tile}", tile, None, ci, co, value, place, "        ", start)]
    if tail:
        # the last, partial tile as long as it needs (a 7 × 7 layer: 52 pixels' sums, not 64)
        body += _tile(str(whole * tile), -(-tail // 4) * 4, pixels, ci, co, value, place, "    ", start)
    src = "\n".join([
        "@T.prim_func",
        f"def main({', '.join(params)}):",
        '    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True, "edgetune.kind": "sparse-conv", '
        f'"edgetune.flops": T.float64({float(flops)!r})}})',
        f"    xf = T.decl_buffer(({pixels * ci},), {f32}, data=x.data)",
        f"    yf = T.decl_buffer(({n * hp * wp * co},), {f32}, data=y.data)",
        *([f"    rf = T.decl_buffer(({int(np.prod(residual))},), {f32}, data=r.data)"] if residual else []),
        *body,
    ])
    tvm()
    return from_source(src).without_attr("global_symbol")  # private: add_func names it
