"""ONNX ``LSTM``, ``GRU`` and ``RNN`` → Relax (TVM 0.27's ONNX frontend has no converter for them).

The importer (:mod:`edgetune.importer.onnx_graph`) has already checked every node against what
is covered here — constant weights, Sigmoid/Tanh/Relu activations, ``sequence_lens`` absent or
equal to the whole sequence — and rewritten batch-major (``layout=1``) nodes to time-major, so
the converters below assume a valid time-major node.

One layer becomes:

* **the input projection for every step and direction at once**: one matmul of the
  ``[T·B, I]`` sequence by all directions' input weights, biases folded in. It is the layer's
  big matmul and a tuning task like any other.
* **the recurrence**, per direction, in one of two forms:

  - *unrolled* (``T ≤ unroll_max``): each step is Relax ops — a ``[B, H] × [H, G·H]`` matmul
    of the previous hidden state plus that step's projection, then the gate arithmetic. Every
    step has the same shapes, so the steps share their kernels: the step matmul is one tuning
    task and the compile time grows with the graph, not with new kernels.
  - *a loop* (longer sequences): one TIR kernel that runs every step of the direction (the
    recurrent matvec vectorized over the gate columns, parallel when a step has enough work),
    so compile time stays the same for any length. The kernel is scheduled as written and is
    not tuned.

ONNX's gate orders: LSTM ``i, o, f, c`` (peepholes ``i, o, f``), GRU ``z, r, h``. Clip bounds the
input of every gate activation, as onnxruntime does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..constants import ACTIVATIONS, DEFAULT_ACTIVATIONS, GATES, UNROLL_MAX_STEPS  # noqa: F401 — read as recurrent.X
from ..core import tvm
from ..passes.common import const_array


@dataclass(frozen=True)
class Layer:
    """One recurrent node's attributes and constant weights, per direction."""

    op: str  # LSTM | GRU | RNN
    hidden: int
    directions: tuple[str, ...]  # ("forward",) | ("reverse",) | ("forward", "reverse")
    activations: tuple[tuple[str, ...], ...]  # per direction
    clip: float | None
    w: np.ndarray  # [D, G·H, I]
    r: np.ndarray  # [D, G·H, H]
    wb: np.ndarray  # [D, G·H]
    rb: np.ndarray  # [D, G·H]
    peephole: np.ndarray | None  # [D, 3H] (LSTM)
    input_forget: bool  # LSTM: f = 1 - i
    linear_before_reset: bool  # GRU

    @property
    def gates(self) -> int:
        return GATES[self.op]


def _array(expr: Any) -> np.ndarray | None:
    if expr is None:
        return None
    value = const_array(expr)
    if value is None:
        raise ValueError("recurrent weights must be constants")
    return value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def layer_of(op: str, inputs: Any, attrs: dict[str, Any]) -> Layer:
    """Read a node's attributes and constant inputs (W, R, B, sequence_lens, ..., P)."""
    w, r = _array(inputs[1]), _array(inputs[2])
    ndir, gh, hidden = r.shape
    direction = _text(attrs.get("direction", b"forward"))
    directions = ("forward", "reverse") if direction == "bidirectional" else (direction,)
    names = tuple(_text(a) for a in attrs.get("activations", ())) or DEFAULT_ACTIVATIONS[op] * ndir
    per = len(names) // ndir
    bias = _array(inputs[3])
    if bias is None:
        bias = np.zeros((ndir, 2 * gh), dtype="float32")
    peephole = _array(inputs[7]) if op == "LSTM" else None
    return Layer(
        op=op, hidden=hidden, directions=directions,
        activations=tuple(tuple(names[d * per:(d + 1) * per]) for d in range(ndir)),
        clip=float(attrs["clip"]) if "clip" in attrs else None,
        w=w.astype("float32"), r=r.astype("float32"),
        wb=bias[:, :gh].astype("float32"), rb=bias[:, gh:].astype("float32"),
        peephole=None if peephole is None else peephole.astype("float32"),
        input_forget=bool(attrs.get("input_forget", 0)),
        linear_before_reset=bool(attrs.get("linear_before_reset", 0)),
    )


def convert(bb: Any, op: str, inputs: Any, attrs: dict[str, Any], unroll_max: int) -> Any:
    """The Relax expression of one node: a tuple (Y [T, D, B, H], Y_h [D, B, H][, Y_c])."""
    from tvm import relax

    lay = layer_of(op, inputs, attrs)
    x = inputs[0]
    steps, batch, _ = _dims(x)
    gh = lay.gates * lay.hidden
    xp = _input_projection(bb, x, lay)
    states = [_initial(inputs[5], lay, batch)]
    if op == "LSTM":
        states.append(_initial(inputs[6], lay, batch))
    if not isinstance(steps, int) or steps > unroll_max:  # (a symbolic length: always the loop)
        res = _looped(bb, xp, states, lay)
        return relax.Tuple([bb.emit(relax.TupleGetItem(res, i)) for i in range(1 + len(states))])
    ys, finals = [], []
    for d, direction in enumerate(lay.directions):
        xd = bb.emit(relax.op.strided_slice(xp, axes=[2], begin=[d * gh], end=[(d + 1) * gh]))
        init = [bb.emit(relax.op.squeeze(relax.op.strided_slice(s, axes=[0], begin=[d], end=[d + 1]), [0]))
                for s in states]
        y, last = _unrolled(bb, xd, init, lay, d, reverse=direction == "reverse")
        ys.append(y)
        finals.append(last)
    y = bb.emit(relax.op.stack(ys, axis=1))  # [T, D, B, H]
    outs = [bb.emit(relax.op.stack([f[i] for f in finals], axis=0)) for i in range(len(states))]  # [D, B, H]
    return relax.Tuple([y, *outs])


def _dims(x: Any) -> list[Any]:
    """A tensor's dimensions: ints, a symbolic one (a sequence chosen at run time) as it is."""
    return [int(v) if hasattr(v, "value") else v for v in x.ty.shape.values]


def _input_projection(bb: Any, x: Any, lay: Layer) -> Any:
    """``x @ W^T + bias`` for every step and direction: [T, B, D·G·H]."""
    from tvm import relax

    steps, batch, feats = _dims(x)
    hidden, g = lay.hidden, lay.gates
    bias = lay.wb.copy()
    if lay.op == "GRU" and lay.linear_before_reset:
        bias[:, :2 * hidden] += lay.rb[:, :2 * hidden]  # the h gate's Rb stays inside r ⊙ (…)
    else:
        bias += lay.rb
    weights = np.concatenate([lay.w[d] for d in range(len(lay.directions))], axis=0)  # [D·G·H, I]
    flat = bb.emit(relax.op.reshape(x, [steps * batch, feats]))
    proj = bb.emit(relax.op.matmul(flat, relax.const(np.ascontiguousarray(weights.T))))
    proj = bb.emit(relax.op.add(proj, relax.const(bias.reshape(-1))))
    return bb.emit(relax.op.reshape(proj, [steps, batch, len(lay.directions) * g * hidden]))


def _initial(given: Any, lay: Layer, batch: int) -> Any:
    """An initial state as [D, B, H]; zeros when the node has none."""
    from tvm import relax

    if given is None:
        return relax.const(np.zeros((len(lay.directions), batch, lay.hidden), dtype="float32"))
    return given


# ---------------------------------------------------------------- unrolled


def _act(bb: Any, name: str, x: Any, clip: float | None) -> Any:
    from tvm import relax

    if clip is not None:
        x = bb.emit(relax.op.clip(x, relax.prim_value(-clip), relax.prim_value(clip)))
    fn = {"Sigmoid": relax.op.sigmoid, "Tanh": relax.op.tanh, "Relu": relax.op.nn.relu}[name]
    return bb.emit(fn(x))


def _cols(bb: Any, x: Any, gate: int, hidden: int, count: int = 1) -> Any:
    from tvm import relax

    return bb.emit(relax.op.strided_slice(x, axes=[1], begin=[gate * hidden], end=[(gate + count) * hidden]))


def _unrolled(bb: Any, xp: Any, init: list[Any], lay: Layer, d: int, reverse: bool) -> tuple[Any, list[Any]]:
    """Every step as Relax ops; returns Y [T, B, H] and the final states."""
    from tvm import relax

    steps, batch, _ = (int(v) for v in xp.ty.shape)
    hidden, acts, clip = lay.hidden, lay.activations[d], lay.clip
    rt = np.ascontiguousarray(lay.r[d].T)  # [H, G·H]
    add, mul, mm = relax.op.add, relax.op.multiply, relax.op.matmul
    if lay.op == "GRU" and not lay.linear_before_reset:
        rt_zr, rt_h = relax.const(np.ascontiguousarray(rt[:, :2 * hidden])), relax.const(np.ascontiguousarray(rt[:, 2 * hidden:]))
    else:
        rt_all = relax.const(rt)
    rb_h = relax.const(lay.rb[d, 2 * hidden:]) if lay.op == "GRU" else None
    p = lay.peephole[d] if lay.peephole is not None else None
    state = list(init)
    outs: list[Any] = [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        xt = bb.emit(relax.op.reshape(relax.op.strided_slice(xp, axes=[0], begin=[t], end=[t + 1]),
                                      [batch, lay.gates * hidden]))
        h = state[0]
        if lay.op == "RNN":
            h = _act(bb, acts[0], bb.emit(add(xt, bb.emit(mm(h, rt_all)))), clip)
            state = [h]
        elif lay.op == "LSTM":
            c = state[1]
            g = bb.emit(add(xt, bb.emit(mm(h, rt_all))))
            gi, go, gf, gc = (_cols(bb, g, k, hidden) for k in range(4))
            if p is not None:
                gi = bb.emit(add(gi, bb.emit(mul(c, relax.const(p[:hidden])))))
                gf = bb.emit(add(gf, bb.emit(mul(c, relax.const(p[2 * hidden:])))))
            i = _act(bb, acts[0], gi, clip)
            if lay.input_forget:
                f = bb.emit(relax.op.subtract(relax.const(np.float32(1.0)), i))
            else:
                f = _act(bb, acts[0], gf, clip)
            c = bb.emit(add(bb.emit(mul(f, c)), bb.emit(mul(i, _act(bb, acts[1], gc, clip)))))
            if p is not None:
                go = bb.emit(add(go, bb.emit(mul(c, relax.const(p[hidden:2 * hidden])))))
            o = _act(bb, acts[0], go, clip)
            h = bb.emit(mul(o, _act(bb, acts[2], c, None)))
            state = [h, c]
        else:  # GRU
            if lay.linear_before_reset:
                g = bb.emit(mm(h, rt_all))
                zr = bb.emit(add(_cols(bb, xt, 0, hidden, 2), _cols(bb, g, 0, hidden, 2)))
                z, r = _act(bb, acts[0], _cols(bb, zr, 0, hidden), clip), _act(bb, acts[0], _cols(bb, zr, 1, hidden), clip)
                gh = bb.emit(mul(r, bb.emit(add(_cols(bb, g, 2, hidden), rb_h))))
            else:
                zr = bb.emit(add(_cols(bb, xt, 0, hidden, 2), bb.emit(mm(h, rt_zr))))
                z, r = _act(bb, acts[0], _cols(bb, zr, 0, hidden), clip), _act(bb, acts[0], _cols(bb, zr, 1, hidden), clip)
                gh = bb.emit(mm(bb.emit(mul(r, h)), rt_h))
            hh = _act(bb, acts[1], bb.emit(add(_cols(bb, xt, 2, hidden), gh)), clip)
            h = bb.emit(add(hh, bb.emit(mul(z, bb.emit(relax.op.subtract(h, hh))))))  # (1-z)·h̃ + z·h
            state = [h]
        outs[t] = h
    return bb.emit(relax.op.stack(outs, axis=0)), state


# ---------------------------------------------------------------- one loop kernel


def _looped(bb: Any, xp: Any, states: list[Any], lay: Layer) -> Any:
    """Every step of every direction in one TIR kernel: (Y [T, D, B, H], final states [D, B, H])."""
    from tvm import relax

    steps, batch, _ = _dims(xp)
    ndir, hid = len(lay.directions), lay.hidden
    gv = bb.add_func(loop_kernel(lay, steps if isinstance(steps, int) else None, batch), f"{lay.op.lower()}_loop")
    width, (_, columns, _) = panel_width(hid), lay.r.shape
    if width:  # [D, G·H / P, H, P]: panel, row, column in the panel
        rt = lay.r.reshape(ndir, columns // width, width, hid).transpose(0, 1, 3, 2)
    else:  # [D, H, G·H]
        rt = lay.r.transpose(0, 2, 1)
    extra = [relax.const(np.ascontiguousarray(rt))]
    if lay.op == "LSTM":
        p = lay.peephole if lay.peephole is not None else np.zeros((ndir, 3 * hid), "float32")
        extra.append(relax.const(np.ascontiguousarray(p)))
    if lay.op == "GRU":
        extra.append(relax.const(np.ascontiguousarray(lay.rb[:, 2 * hid:])))
    out = [relax.TensorType((steps, ndir, batch, hid), "float32")]
    out += [relax.TensorType((ndir, batch, hid), "float32")] * len(states)
    return bb.emit(relax.call_tir(gv, [xp, *extra, *states], out))


_TIR_ACT = {"Sigmoid": "T.sigmoid({})", "Tanh": "T.tanh({})", "Relu": "T.max({}, T.float32(0))"}


def _tir_act(name: str, expr: str, clip: float | None) -> str:
    if clip is not None:
        expr = f"T.min(T.max({expr}, T.float32({-clip!r})), T.float32({clip!r}))"
    return _TIR_ACT[name].format(expr)


def _vector_block(columns: int) -> int:
    for lanes in (64, 32, 16, 8, 4, 2):
        if columns % lanes == 0:
            return lanes
    return 1


def panel_width(hidden: int) -> int:
    """Columns per panel of the packed recurrent weights (``[D, G·H / P, H, P]``: each panel's
    rows contiguous, one cache line per row at 16 floats), 0 where the hidden size has no
    vector-wide divisor (the weights stay ``[D, H, G·H]``). Unpacked, a column block's rows lay
    a whole gate row apart — 4 kB at H = 256, LSTM: every row in the same L1 sets."""
    width = min(16, _vector_block(hidden))
    return width if width >= 4 else 0


def _matvec(src: str, first: int, columns: int, batch: int, hidden: int, parallel: bool, indent: str) -> list[str]:
    """``g[d, :, first:first+columns] = src[d] @ rt[d, :, first:first+columns]``, vectorized over
    columns, a block of them in registers over the whole sum; parallel over column blocks when
    allowed (one direction) and a step has enough multiply-adds to pay for a thread launch."""
    lanes = _vector_block(columns)
    loop = "T.parallel" if parallel and batch * columns * hidden >= 32768 and columns // lanes > 1 else "T.serial"
    width = panel_width(hidden)
    if not width:
        col = f"{first} + jo * {lanes} + ji"
        return [
            f"{indent}for jo in {loop}({columns // lanes}):",
            f"{indent}    for b in range({batch}):",
            f"{indent}        for ji in T.vectorized({lanes}):",
            f"{indent}            g[d, b, {col}] = T.float32(0)",
            f"{indent}        for k in range({hidden}):",
            f"{indent}            for ji in T.vectorized({lanes}):",
            f"{indent}                g[d, b, {col}] = g[d, b, {col}] + {src}[d, b, k] * rt[d, k, {col}]",
        ]
    panels = lanes // width
    col = f"{first} + jo * {lanes} + u * {width} + ji"
    weight = f"rt[d, {first // width} + jo * {panels} + u, k, ji]"
    return [
        f"{indent}for jo in {loop}({columns // lanes}):",
        f"{indent}    for b in range({batch}):",
        f"{indent}        for u in T.unroll({panels}):",
        f"{indent}            for ji in T.vectorized({width}):",
        f"{indent}                g[d, b, {col}] = T.float32(0)",
        f"{indent}        for k in range({hidden}):",
        f"{indent}            for u in T.unroll({panels}):",
        f"{indent}                for ji in T.vectorized({width}):",
        f"{indent}                    g[d, b, {col}] = g[d, b, {col}] + {src}[d, b, k] * {weight}",
    ]


def _direction_steps(lay: Layer, d: int, steps: int, batch: int, parallel: bool, indent: str) -> list[str]:
    """The time loop of direction ``d`` (its gates at column ``d·G·H`` of ``xp``)."""
    hid, gh, clip, acts = lay.hidden, lay.gates * lay.hidden, lay.clip, lay.activations[d]
    tt = f"{steps} - 1 - t" if lay.directions[d] == "reverse" else "t"
    x = f"xp[{tt}, b, {d * gh} + {{}} + j]"
    body = [f"{indent}for t in range({steps}):"]
    ind = indent + "    "
    ew = [f"{ind}for b, j in T.grid({batch}, {hid}):"]
    e = ind + "    "
    if lay.op == "RNN":
        body += _matvec("h", 0, gh, batch, hid, parallel, ind)
        body += ew + [f"{e}h[d, b, j] = {_tir_act(acts[0], x.format(0) + ' + g[d, b, j]', clip)}"]
    elif lay.op == "LSTM":
        body += _matvec("h", 0, gh, batch, hid, parallel, ind)
        gate = lambda k: f"{x.format(k * hid)} + g[d, b, {k * hid} + j]"  # noqa: E731
        i = _tir_act(acts[0], f"{gate(0)} + p[d, j] * c[d, b, j]", clip)
        f = f"T.float32(1) - {i}" if lay.input_forget else _tir_act(acts[0], f"{gate(2)} + p[d, {2 * hid} + j] * c[d, b, j]", clip)
        cand = _tir_act(acts[1], gate(3), clip)
        o = _tir_act(acts[0], f"{gate(1)} + p[d, {hid} + j] * c[d, b, j]", clip)
        body += ew + [f"{e}c[d, b, j] = ({f}) * c[d, b, j] + ({i}) * ({cand})",
                      f"{e}h[d, b, j] = ({o}) * {_tir_act(acts[2], 'c[d, b, j]', None)}"]
    else:  # GRU: z, r first; h̃ needs r
        z = _tir_act(acts[0], f"{x.format(0)} + g[d, b, j]", clip)
        r = _tir_act(acts[0], f"{x.format(hid)} + g[d, b, {hid} + j]", clip)
        if lay.linear_before_reset:
            body += _matvec("h", 0, gh, batch, hid, parallel, ind)
            hh = _tir_act(acts[1], f"{x.format(2 * hid)} + ({r}) * (g[d, b, {2 * hid} + j] + rbh[d, j])", clip)
        else:
            body += _matvec("h", 0, 2 * hid, batch, hid, parallel, ind)
            body += ew + [f"{e}rh[d, b, j] = ({r}) * h[d, b, j]"]
            body += _matvec("rh", 2 * hid, hid, batch, hid, parallel, ind)
            hh = _tir_act(acts[1], f"{x.format(2 * hid)} + g[d, b, {2 * hid} + j]", clip)
        body += ew + [f"{e}h[d, b, j] = ({hh}) + ({z}) * (h[d, b, j] - ({hh}))"]
    body += ew + [f"{e}y[{tt}, d, b, j] = h[d, b, j]"]
    return body


def loop_kernel(lay: Layer, steps: int | None, batch: int) -> Any:
    """The TIR function running every step of every direction: parameters ``xp [T, B, D·G·H]``,
    ``rt`` (the recurrent weights, packed: :func:`panel_width`), (LSTM) ``p [D, 3H]`` / (GRU) ``rb_h [D, H]``, the initial states
    ``[D, B, H]``; outputs ``y [T, D, B, H]`` and the final states. Two directions run in
    parallel, one thread each (no synchronisation per step); one direction parallelizes each
    step's matvec instead. ``steps`` None: T is read from ``xp`` at run time (a symbolic length)."""
    from tvm.script import from_source

    ndir, hid, gh = len(lay.directions), lay.hidden, lay.gates * lay.hidden
    f32 = '"float32"'
    state = f"({ndir}, {batch}, {hid})"
    symbolic = steps is None
    buffers = []  # (a symbolic length: xp and y as handles, matched to buffers whose T is a size variable)
    if symbolic:
        steps = "steps"  # type: ignore[assignment]
        buffers = ["    steps = T.int64()",
                   f"    xp = T.match_buffer(xp_h, (steps, {batch}, {ndir * gh}), {f32})",
                   f"    y = T.match_buffer(y_h, (steps, {ndir}, {batch}, {hid}), {f32})"]
    width = panel_width(hid)
    packed = f"({ndir}, {gh // width}, {hid}, {width})" if width else f"({ndir}, {hid}, {gh})"
    params = ["xp_h: T.handle" if symbolic else f"xp: T.Buffer(({steps}, {batch}, {ndir * gh}), {f32})",
              f"rt: T.Buffer({packed}, {f32})"]
    states = ["h"] + (["c"] if lay.op == "LSTM" else [])
    if lay.op == "LSTM":
        params.append(f"p: T.Buffer(({ndir}, {3 * hid}), {f32})")
    if lay.op == "GRU":
        params.append(f"rbh: T.Buffer(({ndir}, {hid}), {f32})")
    params += [f"{s}0: T.Buffer({state}, {f32})" for s in states]
    params.append("y_h: T.handle" if symbolic else f"y: T.Buffer(({steps}, {ndir}, {batch}, {hid}), {f32})")
    params += [f"{s}n: T.Buffer({state}, {f32})" for s in states]
    body = [f"    {s} = T.alloc_buffer({state}, {f32})" for s in states]
    body.append(f"    g = T.alloc_buffer(({ndir}, {batch}, {gh}), {f32})")
    if lay.op == "GRU" and not lay.linear_before_reset:
        body.append(f"    rh = T.alloc_buffer({state}, {f32})")
    body.append(f"    for d in {'T.parallel' if ndir > 1 else 'T.serial'}({ndir}):")
    body.append(f"        for b, j in T.grid({batch}, {hid}):")
    body += [f"            {s}[d, b, j] = {s}0[d, b, j]" for s in states]
    for d in range(ndir):
        steps_d = _direction_steps(lay, d, steps, batch, ndir == 1, "            ")
        body += [f"        if d == {d}:", *steps_d] if ndir > 1 else [ln[4:] for ln in steps_d]
    body.append(f"        for b, j in T.grid({batch}, {hid}):")
    body += [f"            {s}n[d, b, j] = {s}[d, b, j]" for s in states]
    src = "\n".join([
        "@T.prim_func",
        f"def main({', '.join(params)}):",
        '    T.func_attr({"tirx.noalias": True, "tirx.is_scheduled": True, "edgetune.kind": "recurrent"})',
        *buffers,
        *body,
    ])
    tvm()
    return from_source(src).without_attr("global_symbol")  # private: add_func names it
