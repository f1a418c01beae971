"""Attention as one kernel (TE): ``softmax(Q·Kᵀ · scale + bias) · V`` per head, the score
matrix computed, normalised and consumed a block of rows at a time (its schedule,
:mod:`..schedules.attention`, keeps the block in L1), never written whole.

Q, K and V are read where the dense layers left them: ``[B, S, N·H]`` (or ``[B, S, N, H]``),
heads side by side in each token's row, as the exporters' reshape → transpose pairs read them;
the result is written the same way (the transpose and reshape after ·V). Kᵀ is packed per head
as ``[B, N, H, T]`` (a pass of its own) so the scores' register tile loads whole vectors of keys.
"""

from __future__ import annotations

from typing import Any

from .cpu import CpuFacts, divisors
from .extents import dims
from .rows import softmax_rows

KERNEL = "attention_fused"
SCORES, LOGITS, OUTPUT, PACK, CROP = "attn_scores", "attn_logits", "attn_out", "attn_kpack", "attn_crop"

# register tiles: the scores' rows × vectors of keys, the output's rows × vectors of columns
SCORE_VECTORS, OUTPUT_VECTORS = 2, 4


def _score_vectors(keys: int, lanes: int) -> int:
    """Vectors of keys in the scores' register tile: :data:`SCORE_VECTORS` where they divide
    ``keys``, else one."""
    return next(v for v in (SCORE_VECTORS, 1) if keys % (v * lanes) == 0)


def tiles(rows: int, keys: int, width: int, cpu: CpuFacts) -> tuple[int, int, int, int, int] | None:
    """(RB, TR, TC, OR, OC): the row block, the scores' tile (rows × keys), the output's tile
    (rows × columns) for ``rows`` queries over ``keys`` keys with V ``width`` wide — or None
    when the shapes make no good whole tiles (a prime token count: :func:`padded` rounds it up)."""
    lanes = cpu.lanes
    if keys % lanes or width % lanes:
        return None
    score_vectors = _score_vectors(keys, lanes)
    out_vectors = next(v for v in range(OUTPUT_VECTORS, 0, -1) if width % (v * lanes) == 0)
    # accumulators: half the vector registers (16 of AVX-512's and AArch64's 32), the rest for
    # the broadcasts and loads of the next step
    budget = cpu.registers // 2
    tr = max(t for t in range(1, budget // score_vectors + 1) if rows % t == 0)
    orows = max(t for t in range(1, budget // out_vectors + 1) if rows % t == 0)
    blocks = [r for r in divisors(rows) if r <= 32 and r % tr == 0 and r % orows == 0]
    if tr < 4 or orows < 2 or not blocks:
        return None
    return max(blocks), tr, score_vectors * lanes, orows, out_vectors * lanes


def _heads(x: Any, heads: int) -> Any:
    """``x[b, s, n, h]`` of a ``[B, S, N·H]`` or ``[B, S, N, H]`` tensor."""
    if len(x.shape) == 4:
        return lambda b, s, n, h: x[b, s, n, h]
    width = int(x.shape[-1]) // heads
    return lambda b, s, n, h: x[b, s, n * width + h]


def _broadcast(bias: Any) -> Any:
    """``bias[b, n, i, j]`` of a bias broadcast to ``[B, N, S, T]`` as ONNX broadcasts
    (right-aligned, size-1 axes read at 0)."""
    shape = dims(bias.shape)
    lead = 4 - len(shape)

    def at(*idx: Any) -> Any:
        return bias[tuple(0 if d == 1 else i for d, i in zip(shape, idx[lead:]))]

    return at


def padded(rows: int, keys: int, width: int, cpu: CpuFacts) -> tuple[int, int] | None:
    """The rows and keys the kernel computes for ``rows`` queries over ``keys`` keys: the same
    where they make whole tiles (:func:`tiles`), else rows rounded up to whole score tiles and
    keys to whole vectors (ViT's 197 and 257 tokens: 200 / 264 rows, 208 / 272 keys); None when
    even those make no tiles, or for fewer queries than a tile's rows or keys than a vector."""
    if tiles(rows, keys, width, cpu) is not None:
        return rows, keys
    lanes = cpu.lanes
    keys_to = -(-keys // lanes) * lanes
    score_vectors = _score_vectors(keys_to, lanes)
    step = max(4, min(8, cpu.registers // 2 // score_vectors))
    if rows < step or keys < lanes:  # a few queries (a decoder's step): mostly padding
        return None
    rows_to = -(-rows // step) * step
    return (rows_to, keys_to) if tiles(rows_to, keys_to, width, cpu) is not None else None


def attention_fused(q: Any, k: Any, v: Any, *biases: Any, heads: int, scale: float | None, lanes: int,
                    output_rank: int, rows_to: int = 0, keys_to: int = 0) -> Any:
    """``softmax(Q·Kᵀ · scale + Σ biases) · V`` over ``heads`` heads; ``biases``: tensors each
    broadcastable to ``[B, N, S, T]``. The result is ``[B, S, N·Hv]`` (``output_rank`` 3) or
    ``[B, S, N, Hv]`` (4). With ``rows_to`` > S and ``keys_to`` > T (:func:`padded`) the scores
    are computed over that many rows and keys, the ones past the end reading the last query or
    key again; the softmax and ·V take the T real keys, and a crop the S real rows."""
    from tvm import te, tirx

    b, s = (int(x) for x in q.shape[:2])
    t = int(k.shape[1])
    rows_to, keys_to = max(rows_to, s), max(keys_to, t)
    hd = int(q.shape[-1]) if len(q.shape) == 4 else int(q.shape[-1]) // heads
    hv = int(v.shape[-1]) if len(v.shape) == 4 else int(v.shape[-1]) // heads
    qa, ka, va = _heads(q, heads), _heads(k, heads), _heads(v, heads)

    def last(i: Any, n: int, to: int) -> Any:
        return tirx.min(i, n - 1) if to > n else i

    kpack = te.compute((b, heads, hd, keys_to), lambda bb, n, h, j: ka(bb, last(j, t, keys_to), n, h), name=PACK)
    rd = te.reduce_axis((0, hd), "rd")
    scores = te.compute((b, heads, rows_to, keys_to),
                        lambda bb, n, i, j: te.sum(qa(bb, last(i, s, rows_to), n, rd) * kpack[bb, n, rd, j], axis=[rd]),
                        name=SCORES, attrs={"edgetune.kernel": KERNEL})
    adds = [_broadcast(x) for x in biases]

    def logit(bb: Any, n: Any, i: Any, j: Any) -> Any:
        out = scores[bb, n, i, j]
        if scale is not None:
            out = out * tirx.const(scale, str(scores.dtype))
        for add in adds:
            out = out + add(bb, n, last(i, s, rows_to), last(j, t, keys_to))
        return out

    logits = te.compute((b, heads, rows_to, keys_to), logit, name=LOGITS)
    probs = softmax_rows(logits, lanes, valid=t)  # [B, N, rows_to, T]
    rj = te.reduce_axis((0, t), "rj")
    if output_rank == 4:
        out = te.compute((b, rows_to, heads, hv),
                         lambda bb, i, n, c: te.sum(probs[bb, n, i, rj] * va(bb, rj, n, c), axis=[rj]), name=OUTPUT)
    else:
        out = te.compute((b, rows_to, heads * hv),
                         lambda bb, i, nc: te.sum(probs[bb, nc // hv, i, rj] * va(bb, rj, nc // hv, nc % hv), axis=[rj]),
                         name=OUTPUT)
    if rows_to == s:
        return out
    return te.compute((b, s, *out.shape[2:]), lambda *idx: out[idx], name=CROP)
