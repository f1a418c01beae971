"""What every micro-kernel schedule shares: the decisions (sampled when tuning, pinned to the
default otherwise), partial sums kept in vector registers, and where an epilogue runs (fused
into the tile, or once per row of whole vectors)."""

from __future__ import annotations

from typing import Any

from ..core import ir_nodes
from ..kernels import dot as dots
from ..kernels.cpu import CpuFacts
from ..kernels.dot_intrinsics import register as register_intrinsics
from .common import (
    block_name,
    child_blocks,
    loop_extent,
    register_pieces,
    select_edges,
)
from .rules import schedule_elementwise


class Decider:
    """Schedule decisions: sampled (``tunable``) or pinned to the heuristic default."""

    def __init__(self, sch: Any, tunable: bool):
        self.sch, self.tunable = sch, tunable

    def tile(self, loop: Any, default: list[int], max_innermost: int) -> list[Any]:
        """Factors of a perfect split of ``loop`` (len(default) levels)."""
        decision = None if self.tunable else [int(x) for x in default]
        return list(self.sch.sample_perfect_tile(loop, n=len(default), max_innermost_factor=max(max_innermost, 1),
                                                 decision=decision))


def finish_microkernel(sch: Any, main: Any, epi: Any | None, at: Any, first_reduce: Any,
                        row: Any, vec: Any, cpu: CpuFacts, cores: int, separate: bool = False,
                        dot: str | None = None, intrinsic: str | None = None) -> None:
    """Accumulate in registers, epilogue from them, then vectorize/unroll every stage. With
    ``separate`` (zero-padded output channels cropped, or an epilogue of another shape) the
    epilogue is a pass of its own: per tile it would carry a bounds predicate that measured
    slower than the extra pass. With ``dot`` (an int8 dot-product family) the accumulation
    below ``vec`` is tensorized with its instruction instead of vectorized (``intrinsic``: a
    given one at ``vec`` as it is, else the family's over ``vec`` cut into its lanes)."""
    writer = place_epilogue(sch, main, epi, at, separate, cpu, cores)
    if epi is not None and writer == epi:
        if _body_size(sch, epi) > EXPENSIVE_EPILOGUE:
            # Copy the registers out (unrolled, constant indices: they stay registers) into a
            # small stack buffer and loop over the copy without unrolling: a fast_exp SiLU
            # epilogue unrolled per register doubled LLVM's compile time (YOLO, measured). Cheap
            # epilogues stay unrolled (the copy cost ResNet-50 10 %).
            acc = sch.get(main).writes[0].source
            index = next(n for n, r in enumerate(sch.get(epi).reads) if r.source.same_as(acc))
            writer = sch.cache_read(epi, index, "local")
            vector_registers(sch, sch.get_loops(epi)[-1], cpu, unroll=False)
    sch.unroll(row)
    if dot is None:
        vector_registers(sch, vec, cpu)
    init = sch.decompose_reduction(main, first_reduce)
    if dot is not None:
        register_intrinsics()
    if dot is not None and intrinsic is not None:
        sch.tensorize(vec, intrinsic)
    elif dot is not None:
        step = dots.lanes(dot)
        if loop_extent(sch, vec) != step:
            outer, vec = sch.split(vec, [None, step])
            sch.unroll(outer)
        # the data: the 8-bit buffer read (the accumulator is int32, the packed weights 6-D)
        data = next(r.source for r in sch.get(main).reads if len(r.source.shape) != 6 and str(r.source.dtype) in ("int8", "uint8"))
        weights = next(r.source for r in sch.get(main).reads if len(r.source.shape) == 6)
        narrow = bool(int(sch.get(main).annotations.get("edgetune.dot_narrow", 0)))
        sch.tensorize(vec, dots.intrinsic(dot, str(data.dtype), int(weights.shape[-1]), narrow))
    for block in (init, writer):
        loops = sch.get_loops(block)
        if len(loops) > 1:
            sch.unroll(loops[-2])
        if block == writer:
            vector_epilogue(sch, block, cpu)
        else:
            vector_registers(sch, loops[-1], cpu)


def place_epilogue(sch: Any, main: Any, epi: Any | None, at: Any, separate: bool, cpu: CpuFacts,
                    cores: int) -> Any:
    """Put a micro-kernel's output stage under ``at`` and return it: the epilogue from the
    registers (``main``'s accumulators made local); with ``separate``, or with no epilogue, a
    local copy of the accumulators written out there (a separate epilogue then a pass of its
    own, scheduled here)."""
    if epi is not None and not separate:
        sch.reverse_compute_at(epi, at, preserve_unit_loops=True)
        sch.set_scope(main, 0, "local")
        return epi
    writer = sch.cache_write(main, 0, "local")
    sch.reverse_compute_at(writer, at, preserve_unit_loops=True)
    if epi is not None:
        schedule_elementwise(sch, epi, cpu, cores)
    return writer


def vector_epilogue(sch: Any, block: Any, cpu: CpuFacts) -> None:
    """Vectorize an epilogue ``block``'s inner loop (:func:`_byte_lanes` at a time where it
    stores bytes). A channel pad read in the epilogue (a residual padded 24 → 28 channels) is an
    if_then_else on the vector lane, which TVM cannot vectorize: it left the whole epilogue
    scalar (BlazeFace int8: 0.36 → 0.2 ms per layer, partitioned, measured). So the loop is cut
    where the condition flips, and after the whole registers of a piece (120 channels: 112 +
    8): each part vectorizes with the condition constant."""
    loop = sch.get_loops(block)[-1]
    lanes = _byte_lanes(sch, block, cpu)
    cuts = _lane_cuts(sch, block, loop, cpu, lanes)
    if not cuts:
        vector_registers(sch, loop, cpu, lanes=lanes)
        return
    sizes = [b - a for a, b in zip([0, *cuts], cuts)]
    for part in sch.loop_partition(loop, [*sizes, None]):
        vector_registers(sch, part, cpu, lanes=lanes)


def _byte_lanes(sch: Any, block: Any, cpu: CpuFacts) -> int | None:
    """16 where the epilogue ``block`` stores 8-bit values or looks values up in a table of
    ≤ 256 entries (an int8 epilogue's SiLU or hard-swish, a rescale:
    :class:`..passes.int8_elementwise.Int8Tables`; the result stored as int8 or dequantized) on
    AArch64, else None (the native register). Vectorized one q register of int32 at a time,
    NEON's ``tbl`` / ``tbx``, which look up 16 bytes at a time (:mod:`..codegen.lookups`), had 4
    useful lanes each (narrowed and padded to 16 bytes); and every 4 outputs were narrowed to
    bytes alone (``xtn``, ``uzp1``, a lane insert). 16 lanes are 4 q registers, narrowed by
    ``uzp1`` pairs. By the Pi estimate (A72 / A76 M cycles): a YOLOv8n-style detector 237.8 /
    78.3 → 211.6 / 64.6, an OCR classifier 69.5 / 28.5 → 52.2 / 19.6, MobileNetV3 74.1 / 31.3 →
    64.1 / 25.1, a ResNet-style bottleneck stack 234.0 / 67.1 → 229.2 / 64.0."""
    if not cpu.aarch64 or cpu.lanes >= 16:
        return None
    info = sch.get(block)
    if info.writes and str(info.writes[0].source.dtype) in ("int8", "uint8"):
        return 16
    for region in info.reads:
        # a table is read whole (its index is data); a per-channel bias at the block's channel
        shape = region.source.shape
        entries = getattr(shape[0], "value", None) if len(shape) == 1 else None
        read = getattr(region.region[0].extent, "value", None) if len(shape) == 1 else None
        if str(region.source.dtype) == "int32" and isinstance(entries, int) and 1 < entries <= 256 and read == entries:
            return 16
    return None


def _lane_cuts(sch: Any, block: Any, loop: Any, cpu: CpuFacts, lanes: int | None = None) -> list[int]:
    """Where to cut ``block``'s vector ``loop``: at a pad's edges, and each piece between them
    into :func:`register_pieces` of ``lanes`` (default: the native register). Ascending; none
    when the loop vectorizes as it is."""
    extent, lanes = loop_extent(sch, loop), lanes or cpu.lanes
    edges = select_edges(sch, block, extent)
    if not edges and extent % lanes == 0:
        return []
    cuts = set(edges)
    for a, b in zip([0, *edges], [*edges, extent]):
        pieces = register_pieces(b - a, lanes)
        if a and pieces and pieces[0] > lanes:
            # a part that does not start at 0 cannot be split into registers (TVM refuses: BlazeFace
            # int8's 28 → 32-channel residuals on NEON ran as plain loops): cut it at each register
            pieces = [lanes] * (pieces[0] // lanes) + pieces[1:]
        for width in pieces[:-1]:
            a += width
            cuts.add(a)
    return sorted(cuts)


def pad_stages(sch: Any, cpu: CpuFacts, cores: int) -> None:
    """A kernel's input pad stages (a pass of their own before the micro-kernel), parallel and
    vectorized one or two native registers at a time. A pad's value is a load under a condition
    (``if_then_else``): over three registers (24 channels on NEON: <12 x float>) LLVM built
    each vector lane by lane from scalar loads (MediaPipe pose landmark's 24-channel pad on the
    Pi 4 estimate: 0.66 M cycles; as 8 lanes, two `ldp`/`stp` pairs per pixel: 0.23 M; the
    model 125.9 → 125.4 M cycles, Pi 5 66.8 → 66.6)."""
    for block in child_blocks(sch):
        if block_name(sch, block) == "pad":
            schedule_elementwise(sch, block, cpu, cores, widths=(2 * cpu.lanes, cpu.lanes, 8, 4))


# IR nodes of an epilogue's computation: bias + activation 13-40, a GELU or a SiLU with fast_exp
# 370-470 (measured on BERT, YOLO, MobileNetV3, BlazeFace; host and Pi 5)
EXPENSIVE_EPILOGUE = 200


def _body_size(sch: Any, block: Any) -> int:
    """Size of a block's computation: the IR nodes of its body."""
    return sum(1 for _ in ir_nodes(sch.get(block).body))


def vector_registers(sch: Any, loop: Any, cpu: CpuFacts, unroll: bool = True, lanes: int | None = None) -> None:
    """Vectorize ``loop`` one native register at a time (the register copies unrolled), or
    ``lanes`` at a time: LLVM handles <16 x float> well and <48 x float> badly (measured 30×
    slower)."""
    ext = loop_extent(sch, loop)
    if lanes and ext > lanes and ext % lanes:
        # half of them where they divide it (24, 40, 72 channels: 8 lanes, two q registers)
        lanes = lanes // 2 if lanes // 2 > cpu.lanes and ext % (lanes // 2) == 0 else cpu.lanes
    lanes = lanes or cpu.lanes  # (a loop shorter than ``lanes`` is one vector)
    if ext > lanes and ext % lanes == 0:
        outer, loop = sch.split(loop, [None, lanes])
        if unroll:
            sch.unroll(outer)
    sch.vectorize(loop)


def loop_exists(sch: Any, loop: Any) -> bool:
    """Whether ``loop`` is still in the schedule (fusing removes the loops it fuses)."""
    try:
        sch.get(loop)
    except Exception:  # noqa: BLE001 — TVM raises a plain error for a removed loop
        return False
    return True
