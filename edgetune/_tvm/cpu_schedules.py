"""Default CPU schedules: a fast kernel for every task before any tuning, and the design space
the tuner searches around it.

Each rule matches a fused PrimFunc (DLight style: a rule returns a schedule or passes) and
writes the loop nest a hand-written CPU kernel would have:

* ``conv2d_nhwc_packed`` (from :mod:`.lowering`): a register-tiled micro-kernel — ``RW``
  output pixels × ``OCi`` output channels accumulate in vector registers over (ky, kx, ic), the
  weights streamed from their packed layout, the input broadcast; bias/BN/activation/residual
  epilogues computed from the registers; rows in parallel.
* ``depthwise_conv2d_nhwc``: channels in vectors, a row of pixels per register tile.
* ``dense_packed``: the same micro-kernel over rows × output features.
* pooling and other reductions: spatial loops parallel, the channel loop vectorized inside the
  reduction.
* everything elementwise/injective: producers inlined, outer loops parallel, inner vectorized.

Decisions (register tile width, loop order) come from a :class:`Decider`: fixed at the
heuristic defaults for the untuned build, or sampled when MetaSchedule builds a design space.
In both cases they are *sampling instructions* of the trace, so the default schedule is a point
of the tuned space (the tuner starts from it and mutates it) and a tuning record of either kind
replays on the build.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .lowering import CpuFacts, tile_rate, vector_widths

log = logging.getLogger(__name__)


class Decider:
    """Schedule decisions: sampled (``tunable``) or pinned to the heuristic default."""

    def __init__(self, sch: Any, tunable: bool):
        self.sch, self.tunable = sch, tunable

    def tile(self, loop: Any, default: list[int], max_innermost: int) -> list[Any]:
        """Factors of a perfect split of ``loop`` (len(default) levels)."""
        decision = None if self.tunable else [int(x) for x in default]
        return list(self.sch.sample_perfect_tile(loop, n=len(default), max_innermost_factor=max(max_innermost, 1),
                                                 decision=decision))


@dataclass(frozen=True)
class KernelInfo:
    """What a rule recognised, for reports (``inspect``, the package summary)."""

    kind: str  # conv2d | depthwise | dense | pool | reduction | elementwise | naive


# ---------------------------------------------------------------- helpers


def _blocks(sch: Any) -> list[Any]:
    root = sch.get_sblock("root", func_name="main")
    return list(sch.get_child_blocks(root))


def _name(sch: Any, block: Any) -> str:
    return str(sch.get(block).name_hint)


def _kernel(sch: Any, block: Any) -> str:
    ann = sch.get(block).annotations
    return str(ann["edgetune.kernel"]) if "edgetune.kernel" in ann else ""


def _is_reduction(sch: Any, block: Any) -> bool:
    from tvm.tirx import IterVar

    return any(int(iv.iter_type) == IterVar.CommReduce for iv in sch.get(block).iter_vars)


def _extent(sch: Any, loop: Any) -> int:
    ext = sch.get(loop).extent
    return int(ext.value) if hasattr(ext, "value") else int(ext)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _fold_epilogue(sch: Any, main: Any) -> tuple[Any | None, bool]:
    """Inline the elementwise chain after ``main`` into its last block; return that block and
    whether the chain starts with a crop of padded channels."""
    blocks = _blocks(sch)
    at = blocks.index(next(b for b in blocks if sch.get(b).same_as(sch.get(main))))
    feeds = {r.source for r in sch.get(main).reads}
    for block in reversed(blocks[:at]):
        if any(w.source in feeds for w in sch.get(block).writes):  # computes main's inputs
            feeds |= {r.source for r in sch.get(block).reads}
        else:
            # a side input of the epilogue computed in this kernel (the slice of an LSTM step's
            # input projection added to its matmul): inlined, or the epilogue cannot follow main
            sch.compute_inline(block)
    after = blocks[at + 1:]
    cropped = bool(after) and _name(sch, after[0]) == "crop"
    for block in after[:-1]:
        sch.compute_inline(block)
    if not after:
        return None, False
    # reverse_compute_at only covers what depends on the producer: an epilogue that writes more
    # (channel padding after a pool, measured wrong on BlazeFace) must run as its own pass.
    same = _out_shape(sch, after[-1]) == _out_shape(sch, main)
    return after[-1], cropped or not same


def _out_shape(sch: Any, block: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in sch.get(block).writes[0].source.shape)


def _vector_factor(extent: int, cpu: CpuFacts) -> int | None:
    """The widest whole-register vector that divides ``extent`` (None: leave it scalar)."""
    return next((w for w in reversed(vector_widths(cpu.lanes)) if extent % w == 0 and w <= 4 * cpu.lanes), None)


def _vectorize_inner(sch: Any, block: Any, cpu: CpuFacts) -> None:
    """Vectorize a block's innermost loop by whole registers (odd widths stay scalar: LLVM
    legalizes them badly)."""
    loops = sch.get_loops(block)
    if not loops:
        return
    inner = loops[-1]
    ext = _extent(sch, inner)
    factor = _vector_factor(ext, cpu)
    if factor is None or ext <= 1:
        return
    if ext != factor:
        _outer, inner = sch.split(inner, [None, factor])
    sch.vectorize(inner)


def _parallel_outer(sch: Any, loops: list[Any], cpu: CpuFacts, cores: int, min_chunks: int = 4) -> Any | None:
    """Fuse leading loops until there are enough parallel chunks; mark them parallel."""
    take, work = 0, 1
    for loop in loops:
        take += 1
        work *= _extent(sch, loop)
        if work >= min_chunks * cores:
            break
    if work <= 1:
        return None
    fused = sch.fuse(*loops[:take]) if take > 1 else loops[0]
    sch.parallel(fused)
    return fused


def schedule_elementwise(sch: Any, block: Any, cpu: CpuFacts, cores: int) -> None:
    """Outer loops parallel, innermost vectorized (for pad stages and injective blocks)."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        _parallel_outer(sch, loops[:-1], cpu, cores)
    _vectorize_inner(sch, block, cpu)


# ---------------------------------------------------------------- micro-kernel rules


def max_rows(vectors: int, cpu: CpuFacts) -> int:
    """Most output rows a register tile of ``vectors`` vector columns can hold."""
    return max(1, min(28, (cpu.registers - vectors - 1) // max(vectors, 1)))


def default_rows(extent: int, vectors: int, cpu: CpuFacts) -> int:
    """The register-tile height for a loop of ``extent``: the best-scoring divisor."""
    fits = [rw for rw in _divisors(extent) if rw <= max_rows(vectors, cpu)]
    return max(fits, key=lambda rw: (tile_rate(rw, vectors, cpu), rw))


def _finish_microkernel(sch: Any, main: Any, epi: Any | None, at: Any, first_reduce: Any,
                        row: Any, vec: Any, cpu: CpuFacts, cores: int, separate: bool = False,
                        dot: str | None = None) -> None:
    """Accumulate in registers, epilogue from them, then vectorize/unroll every stage. With
    ``separate`` (zero-padded output channels cropped, or an epilogue of another shape) the
    epilogue is a pass of its own: per tile it would carry a bounds predicate that measured
    slower than the extra pass. With ``dot`` (an int8 dot-product family) the accumulation
    below ``vec`` is tensorized with its instruction instead of vectorized."""
    if separate and epi is not None:
        writer = sch.cache_write(main, 0, "local")
        sch.reverse_compute_at(writer, at, preserve_unit_loops=True)
        schedule_elementwise(sch, epi, cpu, cores)
    elif epi is not None:
        sch.reverse_compute_at(epi, at, preserve_unit_loops=True)
        sch.set_scope(main, 0, "local")
        writer = epi
        if _body_size(sch, epi) > EXPENSIVE_EPILOGUE:
            # Copy the registers out (unrolled, constant indices: they stay registers) into a
            # small stack buffer and loop over the copy without unrolling: a fast_exp SiLU
            # epilogue unrolled per register doubled LLVM's compile time (YOLO, measured). Cheap
            # epilogues stay unrolled (the copy cost ResNet-50 10 %).
            acc = sch.get(main).writes[0].source
            index = next(n for n, r in enumerate(sch.get(epi).reads) if r.source.same_as(acc))
            writer = sch.cache_read(epi, index, "local")
            _vector_registers(sch, sch.get_loops(epi)[-1], cpu, unroll=False)
    else:
        writer = sch.cache_write(main, 0, "local")
        sch.reverse_compute_at(writer, at, preserve_unit_loops=True)
    sch.unroll(row)
    if dot is None:
        _vector_registers(sch, vec, cpu)
    init = sch.decompose_reduction(main, first_reduce)
    if dot is not None:
        from . import dot as dots

        step = dots.lanes(dot)
        if _extent(sch, vec) != step:
            outer, vec = sch.split(vec, [None, step])
            sch.unroll(outer)
        # the data: the 4-D 8-bit buffer read (the accumulator is int32, the packed weights 6-D)
        data = next(r.source for r in sch.get(main).reads if len(r.source.shape) == 4 and "8" in str(r.source.dtype))
        sch.tensorize(vec, dots.intrinsic(dot, str(data.dtype)))
    for block in (init, writer):
        loops = sch.get_loops(block)
        if len(loops) > 1:
            sch.unroll(loops[-2])
        cuts = _lane_cuts(sch, block, loops[-1], cpu) if block == writer else []
        if cuts:
            # A channel pad read in the epilogue (a residual padded 24 → 28 channels) is an
            # if_then_else on the vector lane, which TVM cannot vectorize: it left the whole
            # epilogue scalar (BlazeFace int8: 0.36 → 0.2 ms per layer, partitioned, measured).
            # Cut the loop where the condition flips, and after the whole registers of a piece
            # (120 channels: 112 + 8): each part vectorizes with the condition constant.
            sizes = [b - a for a, b in zip([0, *cuts], cuts)]
            for part in sch.loop_partition(loops[-1], [*sizes, None]):
                _vector_registers(sch, part, cpu)
            continue
        _vector_registers(sch, loops[-1], cpu)


def _lane_cuts(sch: Any, block: Any, loop: Any, cpu: CpuFacts) -> list[int]:
    """Where to cut ``block``'s vector ``loop``: at a pad's edges, and each piece between them
    into :func:`register_pieces`. Ascending; none when the loop vectorizes as it is."""
    extent = _extent(sch, loop)
    edges = _pad_edges(sch, block, extent)
    if not edges and extent % cpu.lanes == 0:
        return []
    cuts = set(edges)
    for a, b in zip([0, *edges], [*edges, extent]):
        for width in register_pieces(b - a, cpu.lanes)[:-1]:
            a += width
            cuts.add(a)
    return sorted(cuts)


def register_pieces(extent: int, lanes: int) -> list[int]:
    """``extent`` lanes as pieces LLVM keeps in whole registers: the native registers, then the
    rest in halves, quarters, … (42 on AVX-512: 32 + 8 + 2), a last single lane as is."""
    pieces = [extent // lanes * lanes] if extent >= lanes else []
    rest, width = extent - sum(pieces), lanes // 2
    while rest and width:
        if rest >= width:
            pieces.append(width)
            rest -= width
        width //= 2
    return pieces


def _pad_edges(sch: Any, block: Any, extent: int) -> list[int]:
    """Where a pad's ``if_then_else`` in ``block`` changes along its innermost axis (the
    constants it compares that axis with, inside the extent), ascending."""
    import re

    name = str(sch.get(block).iter_vars[-1].var.name)
    body = str(sch.get(block).body)
    if "if_then_else" not in body:
        return []
    edges = {int(n) for n in re.findall(rf"\b{re.escape(name)} < (?:T\.int64\()?(\d+)", body)}
    return sorted(e for e in edges if 0 < e < extent)


EXPENSIVE_EPILOGUE = 2500  # characters of TVMScript: bias + activation ≈ 300-900, a SiLU with fast_exp ≈ 8000


def _body_size(sch: Any, block: Any) -> int:
    """Size of a block's computation (TVM 0.27 exposes no TIR visitor to Python: its script)."""
    return len(str(sch.get(block).body))


def _vector_registers(sch: Any, loop: Any, cpu: CpuFacts, unroll: bool = True) -> None:
    """Vectorize ``loop`` one native register at a time (the register copies unrolled): LLVM
    handles <16 x float> well and <48 x float> badly (measured 30× slower)."""
    ext = _extent(sch, loop)
    if ext > cpu.lanes and ext % cpu.lanes == 0:
        outer, loop = sch.split(loop, [None, cpu.lanes])
        if unroll:
            sch.unroll(outer)
    sch.vectorize(loop)


def conv2d_nhwc_packed(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """The packed NHWC convolution micro-kernel (see module docstring); ``order`` 0 keeps a
    row of pixels fixed while output-channel blocks stream weights, 1 the reverse."""
    blocks = _blocks(sch)
    for block in blocks:
        if _name(sch, block) == "pad":
            schedule_elementwise(sch, block, cpu, cores)
    epi, cropped = _fold_epilogue(sch, main)
    b, y, x, o, ry, rx, rc = sch.get_loops(main)
    weights = sch.get(main).reads[1].source
    oci = int(weights.shape[-1])
    vectors = -(-oci // cpu.lanes)
    ow = _extent(sch, x)
    xo, xi = sch.split(x, decide.tile(x, [ow // default_rows(ow, vectors, cpu), default_rows(ow, vectors, cpu)],
                                      max_rows(vectors, cpu)))
    oo, oi = sch.split(o, [None, oci])
    if order == 0:
        sch.reorder(b, y, xo, oo, ry, rx, rc, xi, oi)
        at = oo
        par = [b, y, xo]
    else:
        sch.reorder(b, y, oo, xo, ry, rx, rc, xi, oi)
        at = xo
        par = [b, y, oo]
    _parallel_outer(sch, par, cpu, cores)
    _finish_microkernel(sch, main, epi, at, ry, xi, oi, cpu, cores, cropped)


def conv2d_nhwc_int8(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """The integer convolution micro-kernel: ``RW`` output pixels × ``NB`` blocks of 16 output
    channels of int32 accumulators in registers over (ky, kx, ic/4), each step one dot-product
    instruction per pixel and block (per 4 channels on Arm) — the target's family, read from
    the kernel (:mod:`.dot`). ``RW`` and ``NB`` are tuned."""
    blocks = _blocks(sch)
    for stage in blocks:
        if _name(sch, stage) == "pad":
            schedule_elementwise(sch, stage, cpu, cores)
    family = str(sch.get(main).annotations["edgetune.dot"])
    # The requantize epilogue runs in this kernel: as a pass of its own (the fp32 kernels'
    # choice when padded channels are cropped) it cost 3× the convolution (BlazeFace). Per
    # tile of blocks, from the registers — unless the output is cropped (120 channels computed
    # as 128) or a residual's channel pad is read: per tile, their bounds flip at a lane that
    # depends on the tile, so TVM leaves the epilogue scalar (120 channels: 0.116 ms, 0.068
    # once per row of pixels after all tiles, its channel loop cut into whole registers —
    # measured). Then it runs once per row of pixels, from the accumulators in L1.
    epi, cropped = _fold_epilogue(sch, main)
    ragged = cropped or (epi is not None and "if_then_else" in str(sch.get(epi).body))
    b, y, x, o, ry, rx, rc = sch.get_loops(main)
    weights = sch.get(main).reads[1].source
    block, depth = int(weights.shape[-2]), int(weights.shape[-1])
    # x86: a zmm accumulator per pixel and block, two or three blocks (dot.blocks_per_tile),
    # rows of 8; Arm: four q registers per pixel and block (and the intrinsic's temporaries),
    # rows of 4
    from . import dot as dots

    rows = 8 if family == "vnni" else 4
    ow = _extent(sch, x)
    default = max(d for d in _divisors(ow) if d <= rows)
    xo, xi = sch.split(x, decide.tile(x, [ow // default, default], 2 * rows if family == "vnni" else 6))
    oo, oi = sch.split(o, [None, block])
    nob = _extent(sch, oo)
    per = dots.blocks_per_tile(family, nob)
    oo, ob = sch.split(oo, decide.tile(oo, [nob // per, per], 4))
    rco, rci = sch.split(rc, [None, depth])
    if order == 0:
        sch.reorder(b, y, xo, oo, ry, rx, rco, xi, ob, oi, rci)
        at, par = (xo if ragged else oo), [b, y, xo]
    else:
        sch.reorder(b, y, oo, xo, ry, rx, rco, xi, ob, oi, rci)
        at, par = xo, [b, y, oo]
    sch.unroll(ob)
    fused = _parallel_outer(sch, par, cpu, cores)
    if at.same_as(xo) and order == 0 and not _exists(sch, at):
        at = fused  # a small output's pixel tiles fused into the parallel loop (8×8 on 4 cores)
    _finish_microkernel(sch, main, epi, at, ry, xi, oi, cpu, cores, dot=family)


def _exists(sch: Any, loop: Any) -> bool:
    """Whether ``loop`` is still in the schedule (fusing removes the loops it fuses)."""
    try:
        sch.get(loop)
    except Exception:  # noqa: BLE001 — TVM raises a plain error for a removed loop
        return False
    return True


def depthwise_conv2d_nhwc(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """Depthwise NHWC: a row of ``RW`` pixels × a channel vector block in registers."""
    for block in _blocks(sch):
        if _name(sch, block) == "pad":
            schedule_elementwise(sch, block, cpu, cores)
    epi, separate = _fold_epilogue(sch, main)
    b, y, x, c, ry, rx = sch.get_loops(main)
    channels = _extent(sch, c)
    cv = _vector_factor(channels, cpu) or channels
    vectors = -(-cv // cpu.lanes)
    ow = _extent(sch, x)
    rows = min(8, max_rows(vectors, cpu))
    default = max(d for d in _divisors(ow) if d <= rows)
    xo, xi = sch.split(x, decide.tile(x, [ow // default, default], rows))
    co, ci = sch.split(c, [None, cv])
    # Channels rounded up to whole registers (lowering.depthwise_weights) are cropped by the
    # epilogue: once per row of pixels, after every channel block, its loop cut into register
    # pieces (as a pass of its own it cost a parallel region per layer). An epilogue that writes
    # beyond the sums (a channel pad) stays a pass of its own.
    per_row = separate and order == 0 and epi is not None and all(
        e <= m for e, m in zip(_out_shape(sch, epi), _out_shape(sch, main)))
    if order == 0:
        sch.reorder(b, y, xo, co, ry, rx, xi, ci)
        at, par = (xo if per_row else co), [b, y, xo]
    else:
        sch.reorder(b, y, co, xo, ry, rx, xi, ci)
        at, par = xo, [b, y, co]
    _parallel_outer(sch, par, cpu, cores)
    _finish_microkernel(sch, main, epi, at, ry, xi, ci, cpu, cores, separate and not per_row)


def dense_packed(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """Packed dense: ``RM`` rows × ``NB`` output features in registers, K streamed. Its input
    may be computed in the kernel (a recurrent step's ``r ⊙ h``): a parallel pass first."""
    epi, cropped = _fold_epilogue(sch, main)
    inputs = {r.source for r in sch.get(main).reads}
    for block in _blocks(sch):
        if not _is_reduction(sch, block) and any(w.source in inputs for w in sch.get(block).writes):
            schedule_elementwise(sch, block, cpu, cores)
    loops = sch.get_loops(main)
    *rows, j, rk = loops
    row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    weights = sch.get(main).reads[1].source
    nb = int(weights.shape[-1])
    vectors = -(-nb // cpu.lanes)
    m = _extent(sch, row)
    rm = default_rows(m, vectors, cpu) if m > 1 else 1
    ro, ri = sch.split(row, decide.tile(row, [m // rm, rm], max_rows(vectors, cpu)))
    jo, ji = sch.split(j, [None, nb])
    outer = [ro, jo] if order == 0 else [jo, ro]
    sch.reorder(*outer, rk, ri, ji)
    at = sch.fuse(*outer)
    sch.parallel(at)
    _finish_microkernel(sch, main, epi, at, rk, ri, ji, cpu, cores, cropped)


def winograd_conv(sch: Any, main: Any, cpu: CpuFacts, cores: int, decide: Decider, order: int) -> None:
    """Winograd F(m, 3): input transform per tile and channel vector (parallel over tiles), the
    α² GEMMs as register-tiled micro-kernels (tiles × output channels), output transform per
    tile, then crop + epilogue as one elementwise pass."""
    for block in _blocks(sch):
        if _name(sch, block) == "pad":
            schedule_elementwise(sch, block, cpu, cores)
    _winograd_input(sch, cpu)
    e, p, o, rc = sch.get_loops(main)
    oci = int(sch.get(main).reads[1].source.shape[-1])
    vectors = -(-oci // cpu.lanes)
    tiles = _extent(sch, p)
    rows = default_rows(tiles, vectors, cpu)
    po, pi = sch.split(p, decide.tile(p, [tiles // rows, rows], max_rows(vectors, cpu)))
    oo, oi = sch.split(o, [None, oci])
    outer = [e, po, oo] if order == 0 else [e, oo, po]
    sch.reorder(*outer, rc, pi, oi)
    sch.parallel(sch.fuse(outer[0], outer[1]))
    writer = sch.cache_write(main, 0, "local")
    sch.reverse_compute_at(writer, outer[2], preserve_unit_loops=True)
    sch.unroll(pi)
    _vector_registers(sch, oi, cpu)
    init = sch.decompose_reduction(main, rc)
    for block in (init, writer):
        loops = sch.get_loops(block)
        sch.unroll(loops[-2])
        _vector_registers(sch, loops[-1], cpu)
    _winograd_output(sch, cpu)
    epi, _separate = _fold_epilogue(sch, sch.get_sblock("winograd_crop"))
    tail = epi if epi is not None else sch.get_sblock("winograd_crop")
    if epi is not None:
        sch.compute_inline(sch.get_sblock("winograd_crop"))
    schedule_elementwise(sch, tail, cpu, cores)


def _winograd_input(sch: Any, cpu: CpuFacts) -> None:
    """Bᵀ d B per tile: tiles in parallel, channels in vectors, the α × α transform unrolled."""
    v = sch.get_sblock("winograd_input")
    e, p, c = sch.get_loops(v)
    width = _vector_factor(_extent(sch, c), cpu) or 1
    co, ci = sch.split(c, [None, width])
    sch.reorder(p, co, e, ci)
    sch.parallel(p)
    sch.unroll(e)
    sch.vectorize(ci)
    _first_stage_at(sch, "winograd_input1", co)


def _winograd_output(sch: Any, cpu: CpuFacts) -> None:
    """Aᵀ m A per tile: tiles in parallel, output channels in vectors, the transform unrolled."""
    out = sch.get_sblock("winograd_output")
    p, i, j, o = sch.get_loops(out)
    width = _vector_factor(_extent(sch, o), cpu) or 1
    oo, oi = sch.split(o, [None, width])
    sch.reorder(p, oo, i, j, oi)
    sch.parallel(p)
    sch.unroll(i)
    sch.unroll(j)
    sch.vectorize(oi)
    _first_stage_at(sch, "winograd_output1", oo)


def _first_stage_at(sch: Any, name: str, at: Any) -> None:
    """The first (row) pass of a separable transform, per channel block: its two tile loops
    unrolled, its channel loop vectorized."""
    first = sch.get_sblock(name)
    sch.compute_at(first, at)
    loops = sch.get_loops(first)
    sch.unroll(loops[-4])
    sch.unroll(loops[-3])
    sch.vectorize(loops[-1])


MICROKERNELS: dict[str, tuple[str, Callable[..., None]]] = {
    "conv2d_nhwc_packed": ("conv2d", conv2d_nhwc_packed),
    "conv2d_nhwc_int8": ("conv2d-int8", conv2d_nhwc_int8),
    "depthwise_conv2d_nhwc": ("depthwise", depthwise_conv2d_nhwc),
    "dense_packed": ("dense", dense_packed),
    "winograd_gemm": ("winograd", winograd_conv),
}


# ---------------------------------------------------------------- generic rules


def schedule_reduction(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """One reduction block (pooling, mean, sum): producers inlined, the consumer chain computed
    per output, spatial loops outside the reduction, the innermost spatial loop vectorized."""
    blocks = _blocks(sch)
    reductions = [b for b in blocks if _is_reduction(sch, b)]
    if len(reductions) != 1:
        raise _NoMatchError
    main = reductions[0]
    idx = next(i for i, b in enumerate(blocks) if sch.get(b).same_as(sch.get(main)))
    for block in blocks[:idx]:
        sch.compute_inline(block)
    epi, separate = _fold_epilogue(sch, main)
    kinds = [int(iv.iter_type) for iv in sch.get(main).iter_vars]
    loops = sch.get_loops(main)
    if len(loops) != len(kinds):
        raise _NoMatchError
    spatial = [lp for lp, k in zip(loops, kinds) if k == 0]
    reduce = [lp for lp, k in zip(loops, kinds) if k != 0]
    if not spatial:
        raise _NoMatchError
    inner = spatial[-1]
    width = _vector_factor(_extent(sch, inner), cpu)
    vec = None
    if width and width < _extent(sch, inner):
        vo, vec = sch.split(inner, [None, width])
        par = [*spatial[:-1], vo]
    elif width:
        vec, par = inner, spatial[:-1]
    else:  # no whole-register width divides the channels: scalar, but every output in parallel
        par = spatial
    sch.reorder(*par, *reduce, *([vec] if vec is not None else []))
    if par:
        _parallel_outer(sch, par, cpu, cores)
    now = sch.get_loops(main)
    first_reduce = len(now) - len(reduce) - (1 if vec is not None else 0)
    at = now[first_reduce - 1] if first_reduce > 0 else None
    if epi is not None and at is not None and not separate:
        sch.reverse_compute_at(epi, at, preserve_unit_loops=True)
        _vectorize_inner(sch, epi, cpu)
    elif epi is not None:
        schedule_elementwise(sch, epi, cpu, cores)
    if vec is not None:
        sch.vectorize(vec)
    init = sch.decompose_reduction(main, now[first_reduce])
    if vec is not None:
        sch.vectorize(sch.get_loops(init)[-1])


def schedule_injective(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """Only spatial blocks: inline what inlines, then each remaining block parallel + vector."""
    blocks = _blocks(sch)
    if any(_is_reduction(sch, b) for b in blocks):
        raise _NoMatchError
    for block in blocks[:-1]:
        try:
            sch.compute_inline(block)
        except Exception:  # noqa: BLE001 — a block that cannot be inlined is scheduled on its own
            pass
    for block in _blocks(sch):
        schedule_elementwise(sch, block, cpu, cores)


class _NoMatchError(Exception):
    """The rule does not apply to this function."""


# ---------------------------------------------------------------- entry points


def _main_microkernel(sch: Any) -> tuple[Any, str, Callable[..., None]] | None:
    for block in _blocks(sch):
        kernel = _kernel(sch, block)
        if kernel in MICROKERNELS:
            kind, fn = MICROKERNELS[kernel]
            return block, kind, fn
    return None


def conv_variant(func: Any) -> tuple[str, str]:
    """(convolution signature, "direct" | "winograd") of a conv kernel; ("", "") otherwise."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    for block in _blocks(sch):
        ann = sch.get(block).annotations
        if "edgetune.conv" in ann and str(ann["edgetune.conv"]):
            return str(ann["edgetune.conv"]), "winograd" if _kernel(sch, block) == "winograd_gemm" else "direct"
    return "", ""


def dot_family_of(func: Any) -> str | None:
    """The int8 dot-product family an integer convolution kernel is tensorized with, else None."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    for block in _blocks(sch):
        ann = sch.get(block).annotations
        if "edgetune.dot" in ann:
            return str(ann["edgetune.dot"])
    return None


def classify(func: Any) -> str:
    """The kernel kind a function gets a default schedule as (``naive`` when none applies)."""
    from tvm import s_tir

    probe = s_tir.Schedule(func)
    found = _main_microkernel(probe)
    if found is not None:
        return found[1]
    reductions = sum(_is_reduction(probe, b) for b in _blocks(probe))
    return "elementwise" if reductions == 0 else "reduction"


MICROKERNEL_KINDS = frozenset(kind for kind, _fn in MICROKERNELS.values())


def schedule_microkernel(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """The default (first) sketch of a micro-kernel task, decisions at their defaults."""
    block, _kind, fn = _main_microkernel(sch)  # type: ignore[misc]
    fn(sch, block, cpu, cores, Decider(sch, False), 0)


def design_space(sch: Any, target: Any) -> list[Any]:
    """The tunable sketches of a micro-kernel task (MetaSchedule ``ScheduleFn``): one per loop
    order, tile sizes sampled. Empty when no micro-kernel rule applies."""
    cpu, cores = CpuFacts.of(target), int(target.attrs.get("num-cores", 1))
    if _main_microkernel(sch) is None:
        return []
    out = []
    for order in (0, 1):
        variant = sch.copy()
        variant.seed(sch.fork_seed())
        block, kind, fn = _main_microkernel(variant)  # type: ignore[misc]
        try:
            fn(variant, block, cpu, cores, Decider(variant, True), order)
        except Exception as err:  # noqa: BLE001 — a variant that does not apply is skipped
            log.debug("sketch %d of %s failed: %s", order, kind, err)
            continue
        out.append(variant)
    return out


def default_schedule(func: Any, target: Any) -> tuple[Any | None, str]:
    """(the default schedule of one PrimFunc — an ``s_tir.Schedule`` with its trace — or None,
    the kind of kernel it was scheduled as). Every rule is tried in turn; a rule that fails
    falls through, and ``naive`` means plain loops."""
    from tvm import s_tir

    cpu, cores = CpuFacts.of(target), int(target.attrs.get("num-cores", 1))
    kind = classify(func)
    rules: list[tuple[str, Callable[..., None]]]
    if kind in MICROKERNEL_KINDS:
        rules = [(kind, schedule_microkernel)]
    elif kind == "elementwise":
        rules = [("elementwise", schedule_injective)]
    else:
        rules = [("reduction", schedule_reduction), ("reduction", schedule_blockwise)]
    for label, rule in rules:
        sch = s_tir.Schedule(func)
        try:
            rule(sch, cpu, cores)
        except Exception as err:  # noqa: BLE001 — fall through to the next rule, then naive
            log.debug("%s rule failed: %s", label, err)
            continue
        return sch, label
    return None, "naive"


def schedule_blockwise(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """Several reductions (softmax, layer norms): every elementwise block parallel + vectorized
    on its own, reductions left serial. (TVM's DLight CPU rule computed the whole softmax once
    per output element here — 1000× the work on a 1000-class softmax, measured.)"""
    for block in _blocks(sch):
        if not _is_reduction(sch, block):
            schedule_elementwise(sch, block, cpu, cores)


def apply_default_schedules(mod: Any, target: Any) -> tuple[Any, dict[str, str]]:
    """Schedule every PrimFunc of a fused module that is not scheduled yet (tuning records are
    applied first). Returns the module and the kind each function got (``naive``: none)."""
    from tvm import tirx

    kinds: dict[str, str] = {}
    updates = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
            # written scheduled (a recurrent loop kernel) or a tuning record applied
            kinds[gv.name_hint] = str(func.attrs.get("edgetune.kind", "tuned"))
            continue
        sch, kind = default_schedule(func, target)
        kinds[gv.name_hint] = kind
        if sch is not None:
            updates[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
    for gv, func in updates.items():
        mod[gv] = func
    return mod, kinds
