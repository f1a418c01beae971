"""What the CPU schedule rules share: reading blocks and loops, vectorizing, parallelizing."""

from __future__ import annotations

from typing import Any

from ..kernels.cpu import CpuFacts, vector_widths


def has_root_block(func: Any) -> bool:
    """Whether a PrimFunc's body is a root block over its computation (what TE writes); TOPI's CPU
    topk / argsort are one extern call instead (an M-LSD head's peak picking)."""
    from tvm import s_tir

    return isinstance(func.body, s_tir.stmt.SBlockRealize) and func.body.block.name_hint == "root"


def child_blocks(sch: Any) -> list[Any]:
    """The blocks under ``main``'s root block; none where it has none (:func:`has_root_block`)."""
    if not has_root_block(sch.mod["main"]):
        return []
    root = sch.get_sblock("root", func_name="main")
    return list(sch.get_child_blocks(root))


def block_name(sch: Any, block: Any) -> str:
    return str(sch.get(block).name_hint)


def block_index(sch: Any, blocks: list[Any], block: Any) -> int:
    """Where ``block`` stands among ``blocks`` (block handles compare by the statement they name)."""
    return next(i for i, b in enumerate(blocks) if sch.get(b).same_as(sch.get(block)))


def kernel_of(sch: Any, block: Any) -> str:
    ann = sch.get(block).annotations
    return str(ann["edgetune.kernel"]) if "edgetune.kernel" in ann else ""


def is_reduction(sch: Any, block: Any) -> bool:
    from tvm.tirx import IterVar

    return any(int(iv.iter_type) == IterVar.CommReduce for iv in sch.get(block).iter_vars)


def static_extent(sch: Any, loop: Any) -> int | None:
    """A loop's extent, None where it is symbolic (a package for a range of lengths)."""
    ext = sch.get(loop).extent
    if isinstance(ext, int):
        return ext
    return int(ext.value) if hasattr(ext, "value") else None


def loop_extent(sch: Any, loop: Any) -> int:
    """A loop's constant extent; a rule that needs one does not match a symbolic loop."""
    ext = static_extent(sch, loop)
    if ext is None:
        raise NoMatchError(f"symbolic loop extent {sch.get(loop).extent}")
    return ext


def fold_epilogue(sch: Any, main: Any, per_tile: bool = False) -> tuple[Any | None, bool]:
    """Inline the elementwise chain after ``main`` into its last block; return that block and
    whether it runs as a pass of its own: the chain starts with a crop of padded channels, or
    writes another shape — or, unless ``per_tile``, crops whole tiles of a symbolic extent."""
    blocks = child_blocks(sch)
    at = block_index(sch, blocks, main)
    feeds = {r.source for r in sch.get(main).reads}
    for block in reversed(blocks[:at]):
        if any(w.source in feeds for w in sch.get(block).writes):  # computes main's inputs
            feeds |= {r.source for r in sch.get(block).reads}
        else:
            # a side input of the epilogue computed in this kernel (the slice of an LSTM step's
            # input projection added to its matmul): inlined, or the epilogue cannot follow main
            sch.compute_inline(block)
    after = blocks[at + 1:]
    whole = out_shape(sch, main)
    # A crop of whole tiles of a symbolic extent (a range of lengths: rows or pixels past the
    # end) keeps the channels: with ``per_tile`` the epilogue still runs per tile, from the
    # registers, the rows past the end left out by a predicate on the row. Measured for the
    # packed convolution (a PP-OCR-style recognizer's range package on the Pi 5 estimate: 1.07 /
    # 1.06 → 1.05 / 1.04 of fixed packages at 160 / 640 px; on this AVX-512 host its kernels
    # 0.81 → 0.75 ms at 640 px, the fixed package's 0.73), and against for depthwise and dense
    # kernels (per tile as well: the same recognizer 1.14 / 1.14 on the Pi 5, a MiniLM-like
    # encoder 1.02 → 1.09 at 256 tokens): they keep the pass of their own.
    crop = bool(after) and block_name(sch, after[0]) == "crop"
    tiles = per_tile and crop and _fewer_rows(out_shape(sch, after[0]), whole)
    cropped = crop and not tiles
    for block in after[:-1]:
        sch.compute_inline(block)
    if not after:
        return None, False
    # reverse_compute_at only covers what depends on the producer: an epilogue that writes more
    # (channel padding after a pool, measured wrong on BlazeFace) must run as its own pass.
    same = out_shape(sch, after[-1]) == whole or (tiles and _fewer_rows(out_shape(sch, after[-1]), whole))
    return after[-1], cropped or not same


def _fewer_rows(shape: tuple[int | str, ...], whole: tuple[int | str, ...]) -> bool:
    """Whether ``shape`` is ``whole`` with only symbolic extents changed (a length where whole
    has its tiles): the same constant dimensions, channels included."""
    return len(shape) == len(whole) and shape != whole and all(
        a == b or (isinstance(a, str) and isinstance(b, str)) for a, b in zip(shape, whole))


def out_shape(sch: Any, block: Any) -> tuple[int | str, ...]:
    """The shape a block writes (symbolic dimensions as their expressions' text)."""
    return tuple(int(d) if hasattr(d, "value") else str(d) for d in sch.get(block).writes[0].source.shape)


def vector_factor(extent: int, cpu: CpuFacts) -> int | None:
    """The widest whole-register vector that divides ``extent`` (None: leave it scalar)."""
    return next((w for w in reversed(vector_widths(cpu.lanes)) if extent % w == 0 and w <= 4 * cpu.lanes), None)


def has_select(sch: Any, block: Any) -> bool:
    """Whether ``block`` computes an ``if_then_else`` (a pad, a concatenation)."""
    from ..core import ir_nodes, tvm

    select = tvm().ir.Op.get("prim.if_then_else")
    return any(isinstance(n, tvm().ir.Call) and n.op.same_as(select) for n in ir_nodes(sch.get(block).body))


def select_edges(sch: Any, block: Any, extent: int) -> list[int]:
    """Where an ``if_then_else`` in ``block`` flips along its innermost axis — a pad's edge
    (``v < 29``) or a concatenation's seam (``1600 <= v``) — inside ``extent``, ascending. Cut
    there, each piece has a constant condition and vectorizes; across it TVM leaves the lanes
    scalar."""
    from ..core import ir_nodes, tvm

    ir = tvm().ir
    stmt = sch.get(block)
    axis = stmt.iter_vars[-1].var
    if not has_select(sch, block):
        return []
    nodes = list(ir_nodes(stmt.body))
    prim = ir.prim
    edges = set()
    for n in nodes:
        if not isinstance(n, (prim.LT, prim.LE, prim.GT, prim.GE)):
            continue
        for var, const, flipped in ((n.a, n.b, False), (n.b, n.a, True)):
            if var.same_as(axis) and isinstance(const, prim.IntImm):
                # the first index on the condition's far side: v < c and c <= v flip at c,
                # v <= c and c < v at c + 1
                strict = isinstance(n, (prim.LT, prim.GT))
                below = isinstance(n, (prim.LT, prim.LE)) != flipped  # the axis is the smaller side
                edges.add(int(const.value) + (0 if strict == below else 1))
    return sorted(e for e in edges if 0 < e < extent)


def vectorize_inner(sch: Any, block: Any, cpu: CpuFacts, widths: tuple[int, ...] = ()) -> None:
    """Vectorize a block's innermost loop by whole registers (odd widths stay scalar: LLVM
    legalizes them badly): the first of ``widths`` that divides it, else the widest whole
    registers that do."""
    loops = sch.get_loops(block)
    if not loops:
        return
    inner = loops[-1]
    ext = static_extent(sch, inner)
    if ext is None:  # a symbolic innermost axis stays scalar
        return
    factor = next((w for w in widths if w <= ext and ext % w == 0), None) or vector_factor(ext, cpu)
    if factor is None or ext <= 1:
        return
    if ext != factor:
        _outer, inner = sch.split(inner, [None, factor])
    sch.vectorize(inner)


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


def parallel_outer(sch: Any, loops: list[Any], cpu: CpuFacts, cores: int, min_chunks: int = 4,
                   divide: bool = True) -> Any | None:
    """Fuse leading loops until there are enough parallel chunks; mark them parallel. A loop of
    symbolic extent (a range of lengths) fused with the loops before it costs each iteration a
    division by that extent (its index recovered at run time); ``divide`` False leaves it serial
    inside the parallel chunks where the loops before it make one per core already."""
    take, work = 0, 1
    for loop in loops:
        extent = static_extent(sch, loop)
        if extent is None and not divide and work >= cores:
            break
        take += 1
        # a symbolic extent (a sequence's length) is taken as long enough
        work *= extent or min_chunks * cores
        if work >= min_chunks * cores:
            break
    if work <= 1:
        return None
    fused = sch.fuse(*loops[:take]) if take > 1 else loops[0]
    sch.parallel(fused)
    return fused


class NoMatchError(Exception):
    """The rule does not apply to this function."""
