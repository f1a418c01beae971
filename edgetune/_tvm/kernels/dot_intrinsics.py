"""The int8 dot-product families' tensor intrinsics, written in TVMScript and registered with
TVM once per process (:func:`register`: before a schedule tensorizes with them, and before a
stored trace that uses them is replayed). What each family is and which a target has is in
:mod:`.dot`; the intrinsics' names are there too."""

from __future__ import annotations

from typing import Any

from .dot import (
    DEPTH,
    DW_ROWS,
    DW_SDOT,
    DW_TAPS,
    FLIPPED,
    HALF_DEPTH,
    INTRINSICS,
    LANES,
    LANES_SUM,
    LANES_SUM_F32,
    NEON_LANES,
    NEON_LANES_HALF,
    NEON_LANES_NARROW,
    NEON_PAIRS,
    PAIR,
    PAIR_CHANNELS,
    QUADS,
    SDOT_PAIR,
    SDOT_TAPS,
    SINGLE_INSTRUCTION,
    WIDE_DEPTH,
    flip_sign,
    lane_input,
    lane_terms,
    lanes,
    row_bytes,
    unsigned_data,
)

_REGISTERED: list[bool] = []


def register() -> None:
    """Register the intrinsics with TVM (once per process; replaying a stored trace needs them)."""
    from tvm.s_tir import TensorIntrin

    if _REGISTERED:
        return
    for family, name in [*INTRINSICS.items(), ("vnni", FLIPPED)]:
        if TensorIntrin.get(name, allow_missing=True) is None:
            TensorIntrin.register(name, *_intrinsic(family, flip=name == FLIPPED))
    for quads, name in SDOT_TAPS.items():
        if TensorIntrin.get(name, allow_missing=True) is None:
            TensorIntrin.register(name, *_sdot_quads(quads))
    if TensorIntrin.get(DW_SDOT, allow_missing=True) is None:
        TensorIntrin.register(DW_SDOT, *_dw_sdot())
    if TensorIntrin.get(DW_ROWS, allow_missing=True) is None:
        TensorIntrin.register(DW_ROWS, *_dw_rows())
    if TensorIntrin.get(SDOT_PAIR, allow_missing=True) is None:
        TensorIntrin.register(SDOT_PAIR, *_sdot_quads(2, loaded=2 * DEPTH))
    for (pairs, narrow), name in NEON_PAIRS.items():
        if TensorIntrin.get(name, allow_missing=True) is None:
            TensorIntrin.register(name, *_neon_pairs(pairs, narrow))
    for name, step, narrow in ((NEON_LANES, WIDE_DEPTH, False), (NEON_LANES_NARROW, WIDE_DEPTH, True),
                               (NEON_LANES_HALF, HALF_DEPTH, False)):
        if TensorIntrin.get(name, allow_missing=True) is None:
            TensorIntrin.register(name, *_neon_lanes(narrow, step))
    for name, dtype in ((LANES_SUM, "int32"), (LANES_SUM_F32, "float32")):
        if TensorIntrin.get(name, allow_missing=True) is None:
            TensorIntrin.register(name, *_lanes_sum(dtype))
    _REGISTERED.append(True)


def _pairs(x: Any) -> Any:
    """int16x8 → int32x4, adjacent lanes summed (``saddlp``; added to an accumulator: ``sadalp``)."""
    from tvm.script import tirx as T  # noqa: N812

    return T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.saddlp.v4i32.v8i16"), x,
                                   dtype="int32x4")


def _products(x: Any, y: Any) -> Any:
    """int8x8 · int8x8 → int16x8, exact (``smull``)."""
    from tvm.script import tirx as T  # noqa: N812

    return T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.smull.v8i16"), x, y,
                                   dtype="int16x8")


def _addp(x: Any, y: Any) -> Any:
    """Two int32x4 → their adjacent lanes summed, ``x``'s then ``y``'s (``addp``)."""
    from tvm.script import tirx as T  # noqa: N812

    return T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id("llvm.aarch64.neon.addp.v4i32"), x, y,
                                   dtype="int32x4")


def _neon_lanes(narrow: bool, step: int = WIDE_DEPTH) -> tuple[Any, Any]:
    """(description, implementation) of :data:`NEON_LANES` (``narrow``: weights within ±127,
    :data:`NEON_LANES_NARROW`; ``step`` 8: :data:`NEON_LANES_HALF`): four output channels'
    :data:`LANES` partial sums += one pixel's ``step`` input channels · their weights
    ``[4, step]`` (:func:`lane_input`)."""
    from tvm.script import tirx as T  # noqa: N812 — TVMScript's convention

    terms = lane_terms(step)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (step,), "int8", offset_factor=1)  # noqa: N806
        B = T.match_buffer(b, (4, step), "int8", offset_factor=1)  # noqa: N806
        C = T.match_buffer(c, (4, LANES), "int32", offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:4, 0:LANES], A[0:step], B[0:4, 0:step])
            T.writes(C[0:4, 0:LANES])
            for i, lane, e in T.grid(4, LANES, terms):
                with T.sblock("update"):
                    vi, vl, ve = T.axis.remap("SSR", [i, lane, e])
                    C[vi, vl] = C[vi, vl] + T.cast(A[lane_input(vl, ve)], "int32") * T.cast(B[vi, lane_input(vl, ve)], "int32")

    def channel(acc: Any, x: Any, w: Any) -> Any:
        """One output channel's products added to its partial sums: the pairwise adds onto the
        accumulator are ``sadalp``; over 16 channels the high halves' ``smull`` a ``smull2``
        (narrow: added in int16 first, ``smlal2``, and widened once)."""
        if step == HALF_DEPTH:
            return acc + _pairs(_products(x, w))
        low = _products(T.vectorlow(x, dtype="int8x8"), T.vectorlow(w, dtype="int8x8"))
        high = _products(T.vectorhigh(x, dtype="int8x8"), T.vectorhigh(w, dtype="int8x8"))
        return acc + _pairs(low + high) if narrow else acc + _pairs(low) + _pairs(high)

    bytes_t = f"int8x{step}"  # a pixel's step of channels, one output channel's weights for it

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (step,), "int8", offset_factor=1)  # noqa: N806
        B = T.match_buffer(b, (4, step), "int8", offset_factor=1)  # noqa: N806
        C = T.match_buffer(c, (4, LANES), "int32", offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:4, 0:LANES], A[0:step], B[0:4, 0:step])
            T.writes(C[0:4, 0:LANES])
            x = A.vload([0], bytes_t)
            C[0, T.ramp(T.int32(0), 1, LANES)] = channel(C.vload([0, 0], "int32x4"), x, B.vload([0, 0], bytes_t))
            C[1, T.ramp(T.int32(0), 1, LANES)] = channel(C.vload([1, 0], "int32x4"), x, B.vload([1, 0], bytes_t))
            C[2, T.ramp(T.int32(0), 1, LANES)] = channel(C.vload([2, 0], "int32x4"), x, B.vload([2, 0], bytes_t))
            C[3, T.ramp(T.int32(0), 1, LANES)] = channel(C.vload([3, 0], "int32x4"), x, B.vload([3, 0], bytes_t))

    return desc, impl


def _neon_pairs(pairs: int, narrow: bool) -> tuple[Any, Any]:
    """(description, implementation) of :data:`NEON_PAIRS`: :data:`PAIR_CHANNELS` output
    channels += ``pairs`` consecutive pairs of a row's bytes · their weights (per pair
    ``[8, 2]``: one q register, the pairs ``stride`` bytes apart in the packed weights). The
    row's bytes are loaded once, 8 or 16 of them whatever ``pairs`` (the data must extend that
    far); pair ``j`` broadcast from lane ``j`` (``dup v.8h, v.h[j]``), its 16 products with the
    weights (``smull``, ``smull2``) pairwise-added onto the two accumulators (``sadalp``) — with
    ``narrow`` weights two pairs' products first summed in int16 (``smlal``, ``smlal2``:
    |2 · 128 · 127| < 2¹⁵)."""
    from tvm.script import tirx as T  # noqa: N812 — TVMScript's convention

    stride = T.int32()
    size, n = pairs * PAIR, PAIR_CHANNELS
    loaded = row_bytes(PAIR, pairs)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (size,), "int8", offset_factor=1)  # noqa: N806
        B = T.match_buffer(b, (pairs, n, PAIR), "int8", offset_factor=1, strides=[stride, PAIR, 1])  # noqa: N806
        C = T.match_buffer(c, (n,), "int32", offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:n], A[0:size], B[0:pairs, 0:n, 0:PAIR])
            T.writes(C[0:n])
            for j, i, k in T.grid(pairs, n, PAIR):
                with T.sblock("update"):
                    vi = T.axis.spatial(n, i)
                    vk = T.axis.reduce(size, j * PAIR + k)
                    C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vk // PAIR, vi, vk % PAIR], "int32")

    def products(data: Any, b: Any, j: int, half: Any) -> Any:
        """Pair ``j`` times its weights for channels 0-3 (``half``: T.vectorlow) or 4-7
        (T.vectorhigh), int16x8."""
        pair = T.reinterpret(T.Shuffle([data] * (16 // loaded), [j] * 8), dtype="int8x16")  # pair j in every lane
        return _products(half(pair, dtype="int8x8"), half(b.vload([j, 0, 0], "int8x16"), dtype="int8x8"))

    def total(acc: Any, data: Any, b: Any, half: Any) -> Any:
        terms = [products(data, b, j, half) for j in range(pairs)]
        if narrow:  # two pairs' products summed in int16 (smlal), one widening add for both
            terms = [terms[j] + terms[j + 1] if j + 1 < pairs else terms[j] for j in range(0, pairs, 2)]
        for term in terms:
            acc = acc + _pairs(term)
        return acc

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (size,), "int8", offset_factor=1)  # noqa: N806
        B = T.match_buffer(b, (pairs, n, PAIR), "int8", offset_factor=1, strides=[stride, PAIR, 1])  # noqa: N806
        C = T.match_buffer(c, (n,), "int32", offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:n], A[0:size], B[0:pairs, 0:n, 0:PAIR])
            T.writes(C[0:n])
            data = T.reinterpret(A.vload([0], f"int8x{loaded}"), dtype=f"int16x{loaded // 2}")
            C[T.ramp(T.int32(0), 1, 4)] = total(C.vload([0], dtype="int32x4"), data, B, T.vectorlow)
            C[T.ramp(T.int32(4), 1, 4)] = total(C.vload([4], dtype="int32x4"), data, B, T.vectorhigh)

    return desc, impl


def _lanes_sum(dtype: str) -> tuple[Any, Any]:
    """(description, implementation) of :data:`LANES_SUM` (int32: ``addp``) or
    :data:`LANES_SUM_F32` (float32: ``faddp``): four outputs += their :data:`LANES` partial sums
    (``[4, 4]``), a tree of three pairwise adds — where summing each output across its vector
    lanes left LLVM moving single lanes (the Pi 4 estimate: 1×1 convolutions of 2–8 steps
    1.2–1.9× slower than the tree per step they replace)."""
    from tvm.script import tirx as T  # noqa: N812 — TVMScript's convention

    vector = f"{dtype}x4"
    pairwise = "llvm.aarch64.neon.faddp.v4f32" if dtype == "float32" else "llvm.aarch64.neon.addp.v4i32"

    def pairs(x: Any, y: Any) -> Any:
        return T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id(pairwise), x, y, dtype=vector)

    @T.prim_func(s_tir=True)
    def desc(p: T.handle, c: T.handle) -> None:
        P = T.match_buffer(p, (4, LANES), dtype, offset_factor=1, scope="local")  # noqa: N806
        C = T.match_buffer(c, (4,), dtype, offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:4], P[0:4, 0:LANES])
            T.writes(C[0:4])
            for i, lane in T.grid(4, LANES):
                with T.sblock("update"):
                    vi, vl = T.axis.remap("SR", [i, lane])
                    C[vi] = C[vi] + P[vi, vl]

    @T.prim_func(s_tir=True)
    def impl(p: T.handle, c: T.handle) -> None:
        P = T.match_buffer(p, (4, LANES), dtype, offset_factor=1, scope="local")  # noqa: N806
        C = T.match_buffer(c, (4,), dtype, offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:4], P[0:4, 0:LANES])
            T.writes(C[0:4])
            C[T.ramp(T.int32(0), 1, 4)] = C.vload([0], dtype=vector) + pairs(
                pairs(P.vload([0, 0], dtype=vector), P.vload([1, 0], dtype=vector)),
                pairs(P.vload([2, 0], dtype=vector), P.vload([3, 0], dtype=vector)))

    return desc, impl


def _sdot_quads(quads: int = QUADS, loaded: int = QUADS * DEPTH) -> tuple[Any, Any]:
    """(description, implementation) of :data:`SDOT_QUADS` (``quads``: of :data:`SDOT_TAPS`):
    four output channels += ``quads`` consecutive quads of one pixel's input (``loaded`` bytes
    loaded, 16 whatever ``quads`` but for :data:`SDOT_PAIR`'s 8: the data must extend that far)
    · their weights (per quad ``[4, 4]``, the quads ``stride`` bytes apart in the packed
    weights)."""
    from tvm.script import tirx as T  # noqa: N812 — TVMScript's convention

    stride = T.int32()

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (quads * DEPTH,), "int8", offset_factor=1)  # noqa: N806
        B = T.match_buffer(b, (quads, 4, DEPTH), "int8", offset_factor=1, strides=[stride, DEPTH, 1])  # noqa: N806
        C = T.match_buffer(c, (4,), "int32", offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:4], A[0:quads * DEPTH], B[0:quads, 0:4, 0:DEPTH])
            T.writes(C[0:4])
            for j, i, k in T.grid(quads, 4, DEPTH):
                with T.sblock("update"):
                    vi = T.axis.spatial(4, i)
                    vk = T.axis.reduce(quads * DEPTH, j * DEPTH + k)
                    C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vk // DEPTH, vi, vk % DEPTH], "int32")

    instruction = SINGLE_INSTRUCTION["sdot"]

    def sdot(acc: Any, weights: Any, quads: Any, j: int) -> Any:
        # quad j in every lane: sdot by element (a d register's two quads shuffled as one q's)
        lane = T.reinterpret(T.Shuffle([quads] * (16 // loaded), [j] * 4), dtype="int8x16")
        return T.call_llvm_pure_intrin(T.llvm_lookup_intrinsic_id(instruction), acc, weights, lane, dtype="int32x4")

    def chain(acc: Any, data: Any, b: Any) -> Any:
        for j in range(quads):
            acc = sdot(acc, b.vload([j, 0, 0], "int8x16"), data, j)
        return acc

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (quads * DEPTH,), "int8", offset_factor=1)  # noqa: N806
        B = T.match_buffer(b, (quads, 4, DEPTH), "int8", offset_factor=1, strides=[stride, DEPTH, 1])  # noqa: N806
        C = T.match_buffer(c, (4,), "int32", offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:4], A[0:quads * DEPTH], B[0:quads, 0:4, 0:DEPTH])
            T.writes(C[0:4])
            C[T.ramp(T.int32(0), 1, 4)] = chain(C.vload([0], dtype="int32x4"),
                                                 T.reinterpret(A.vload([0], f"int8x{loaded}"),
                                                               dtype=f"int32x{loaded // 4}"), B)

    return desc, impl


def _dw_sdot() -> tuple[Any, Any]:
    """(description, implementation) of :data:`DW_SDOT`: four channels' sums += their quads of
    data · their quads of weights (16 bytes each, channel ``i``'s at ``4i``): one ``sdot``."""
    from tvm.script import tirx as T  # noqa: N812 — TVMScript's convention

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (16,), "int8", offset_factor=1)  # noqa: N806
        B = T.match_buffer(b, (16,), "int8", offset_factor=1)  # noqa: N806
        C = T.match_buffer(c, (4,), "int32", offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:4], A[0:16], B[0:16])
            T.writes(C[0:4])
            for i, k in T.grid(4, DW_TAPS):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.cast(A[vi * 4 + vk], "int32") * T.cast(B[vi * 4 + vk], "int32")

    instruction = SINGLE_INSTRUCTION["sdot"]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (16,), "int8", offset_factor=1)  # noqa: N806
        B = T.match_buffer(b, (16,), "int8", offset_factor=1)  # noqa: N806
        C = T.match_buffer(c, (4,), "int32", offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:4], A[0:16], B[0:16])
            T.writes(C[0:4])
            C[T.ramp(T.int32(0), 1, 4)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(instruction), C.vload([0], dtype="int32x4"), A.vload([0], "int8x16"),
                B.vload([0], "int8x16"), dtype="int32x4")

    return desc, impl


def _dw_rows() -> tuple[Any, Any]:
    """(description, implementation) of :data:`DW_ROWS`: four rows of 16 channels (``stride``
    bytes apart) as four registers of channel quads — quad ``q``'s channel ``i`` at ``4i``, its
    row ``k`` at ``4i + k`` —: ``zip1``/``zip2`` of rows 0, 1 and of rows 2, 3 byte by byte,
    then of those two by 16-bit pairs (the rows' region is ``[4, 1, 16]``: row, pixel, channel)."""
    from tvm.script import tirx as T  # noqa: N812 — TVMScript's convention

    stride, pixel = T.int32(), T.int32()

    @T.prim_func(s_tir=True)
    def desc(s: T.handle, d: T.handle) -> None:
        S = T.match_buffer(s, (DW_TAPS, 1, 16), "int8", offset_factor=1, strides=[stride, pixel, 1])  # noqa: N806
        D = T.match_buffer(d, (4, 16), "int8", offset_factor=1)  # noqa: N806
        with T.sblock("root"):
            T.reads(S[0:DW_TAPS, 0:1, 0:16])
            T.writes(D[0:4, 0:16])
            for q, lane in T.grid(4, 16):
                with T.sblock("cols"):
                    vq, vl = T.axis.remap("SS", [q, lane])
                    D[vq, vl] = S[vl % DW_TAPS, 0, vq * 4 + vl // DW_TAPS]

    def zip_bytes(x: Any, y: Any, high: int) -> Any:
        return T.Shuffle([x, y], [v for i in range(8) for v in (8 * high + i, 16 + 8 * high + i)])

    def zip_pairs(x: Any, y: Any, high: int) -> Any:
        halves = [T.reinterpret(x, dtype="int16x8"), T.reinterpret(y, dtype="int16x8")]
        return T.reinterpret(T.Shuffle(halves, [v for i in range(4) for v in (4 * high + i, 8 + 4 * high + i)]),
                             dtype="int8x16")

    def quads(rows: Any, j: int) -> Any:
        """Register ``j``: channels 4j to 4j + 3, each its four rows' bytes."""
        row = [rows.vload([k, 0, 0], "int8x16") for k in range(DW_TAPS)]
        return zip_pairs(zip_bytes(row[0], row[1], j // 2), zip_bytes(row[2], row[3], j // 2), j % 2)

    @T.prim_func(s_tir=True)
    def impl(s: T.handle, d: T.handle) -> None:
        S = T.match_buffer(s, (DW_TAPS, 1, 16), "int8", offset_factor=1, strides=[stride, pixel, 1])  # noqa: N806
        D = T.match_buffer(d, (4, 16), "int8", offset_factor=1)  # noqa: N806
        with T.sblock("root"):
            T.reads(S[0:DW_TAPS, 0:1, 0:16])
            T.writes(D[0:4, 0:16])
            D[0, T.ramp(T.int32(0), 1, 16)] = quads(S, 0)
            D[1, T.ramp(T.int32(0), 1, 16)] = quads(S, 1)
            D[2, T.ramp(T.int32(0), 1, 16)] = quads(S, 2)
            D[3, T.ramp(T.int32(0), 1, 16)] = quads(S, 3)

    return desc, impl


def _intrinsic(family: str, flip: bool = False) -> tuple[Any, Any]:
    """(description, implementation) of ``family``'s dot product over 4 input channels into a
    local accumulator; with ``flip``, of int8 data with its sign bit flipped on the way (one xor
    per input quad, shared by every block of output channels it feeds)."""
    from tvm.script import tirx as T  # noqa: N812 — TVMScript's convention

    n = lanes(family)
    a_dtype = "uint8" if unsigned_data(family) and not flip else "int8"
    mask = -0x7F7F7F80  # 0x80808080: each byte's sign bit

    def data(value: Any) -> Any:
        return T.cast(flip_sign(value) if flip else value, "int32")

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (DEPTH,), a_dtype, offset_factor=1)  # noqa: N806
        B = T.match_buffer(b, (n, DEPTH), "int8", offset_factor=1)  # noqa: N806
        C = T.match_buffer(c, (n,), "int32", offset_factor=1, scope="local")  # noqa: N806
        with T.sblock("root"):
            T.reads(C[0:n], A[0:DEPTH], B[0:n, 0:DEPTH])
            T.writes(C[0:n])
            for i in T.serial(0, n):
                for k in T.serial(0, DEPTH):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + data(A[vk]) * T.cast(B[vi, vk], "int32")

    if family in SINGLE_INSTRUCTION:
        # one LLVM intrinsic: accumulators, the input quad broadcast to every lane group, weights
        quad_t, wide, weights_t = f"{a_dtype}x4", f"int32x{n}", f"int8x{4 * n}"
        lanes_in = f"{'uint8' if unsigned_data(family) else 'int8'}x{4 * n}"
        instruction = SINGLE_INSTRUCTION[family]

        def quad_of(buffer: Any) -> Any:
            quad = T.reinterpret(buffer.vload([0], quad_t), dtype="int32")
            return quad ^ T.int32(mask) if flip else quad

        @T.prim_func(s_tir=True)
        def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (4,), a_dtype, offset_factor=1)  # noqa: N806
            B = T.match_buffer(b, (n, 4), "int8", offset_factor=1)  # noqa: N806
            C = T.match_buffer(c, (n,), "int32", offset_factor=1, scope="local")  # noqa: N806
            with T.sblock("root"):
                T.reads(C[0:n], A[0:4], B[0:n, 0:4])
                T.writes(C[0:n])
                quad = quad_of(A)
                C[T.ramp(T.int32(0), 1, n)] = T.call_llvm_pure_intrin(
                    T.llvm_lookup_intrinsic_id(instruction),
                    C.vload([0], dtype=wide),
                    T.reinterpret(T.broadcast(quad, n), dtype=lanes_in),
                    B.vload([0, 0], dtype=weights_t),
                    dtype=wide)

    else:  # NEON: smull (int8 pairs → int16 products), pairwise adds up to int32; the quad twice
        # in a d register, each half of the 16 weights two channels

        @T.prim_func(s_tir=True)
        def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
            A = T.match_buffer(a, (4,), "int8", offset_factor=1)  # noqa: N806
            B = T.match_buffer(b, (4, 4), "int8", offset_factor=1)  # noqa: N806
            C = T.match_buffer(c, (4,), "int32", offset_factor=1, scope="local")  # noqa: N806
            with T.sblock("root"):
                T.reads(C[0:4], A[0:4], B[0:4, 0:4])
                T.writes(C[0:4])
                a8 = T.reinterpret(T.broadcast(T.reinterpret(A.vload([0], "int8x4"), dtype="int32"), 2), dtype="int8x8")
                w = B.vload([0, 0], dtype="int8x16")
                C[T.ramp(T.int32(0), 1, 4)] = C.vload([0], dtype="int32x4") + _addp(
                    _pairs(_products(a8, T.vectorlow(w, dtype="int8x8"))),
                    _pairs(_products(a8, T.vectorhigh(w, dtype="int8x8"))))

    return desc, impl
