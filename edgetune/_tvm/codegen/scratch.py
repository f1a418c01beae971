"""Kernel scratch on the stack: a pass of the ``edgetune`` TIR pipeline (:mod:`.lookups`).

TVM 0.27's ``LowerTVMBuiltin`` turns every ``local`` buffer of a CPU kernel — a register tile's
accumulators (256 bytes), a 16-byte temporary — into a ``TVMBackendAllocWorkspace`` /
``TVMBackendFreeWorkspace`` pair around the loop body that declares it: two calls into the
runtime's workspace pool per row of pixels, or per pixel tile where a ragged int8 epilogue keeps
the tile's accumulators (1.3–4.5 M cycles of libtvm_runtime per int8 model on the Cortex-A72
estimate), and a pointer LLVM cannot keep in registers across the reduction loop.

This pass marks each such buffer of constant size up to :data:`MAX_BYTES` on an AArch64 target
``disable_lower_builtin``, which ``LowerTVMBuiltin`` reads as "leave it an ``alloca``": LLVM
places it in the entry block of the parallel body's function and promotes the accumulators to
registers. By the Raspberry Pi estimate (``benchmarks/arm_estimate.py``), together with the
concatenation cuts of ``schedule_injective`` (measured in one run), fp32 packages took 1.5–15 %
fewer cycles (YOLO-style: −8 % Pi 4, −15 % Pi 5), int8 with ``sdot`` (Pi 5) up to 12 % fewer
(squeezenet), VGG-style int8 2.5 % more; int8 MobileNetV3 and BlazeFace, which have no such
concatenation, 2–10 % fewer. Kernels whose inner loop already fills the register file keep TVM's
allocation (:func:`_register_bound`). x86 keeps it everywhere: on an AVX2 host (16 vector
registers, tiles planned to fill them) it moved the latency ratio to onnxruntime both ways —
ResNet-50 1.62 → 1.78, SqueezeNet 1.16 → 1.24, YOLO-style 0.77 → 0.66, MiniLM 1.37 → 1.15
(``benchmarks/vs_runtimes.py --budgets 0``; runs there differ by ~10 %): a per-kernel register
count would have to decide, not the target. Larger buffers (whole intermediate tensors) keep the
workspace pool: a board's worker threads have glibc's 8 MiB stacks, but a musl-based image has
128 KiB.
"""

from __future__ import annotations

import functools
from typing import Any

MAX_BYTES = 16 * 1024


def stack_scratch() -> Any:
    """The pass: small constant ``local`` buffers of AArch64 kernels as stack allocations."""
    import tvm_ffi
    from tvm import tirx

    @tirx.transform.prim_func_pass(opt_level=0, name="edgetune.StackScratch")
    def rewrite(func: Any, _mod: Any, _ctx: Any) -> Any:
        target = func.attrs.get("target") if func.attrs is not None else None
        if target is None or not str(target.attrs.get("mtriple", "")).startswith("aarch64"):
            return func
        marked = []

        def on_alloc(node: Any) -> Any:
            if not small_local(node.buffer) or "disable_lower_builtin" in node.annotations:
                return node
            marked.append(node.buffer)
            flag = tirx.IntImm("bool", 1)
            return tirx.AllocBuffer(node.buffer, annotations={**node.annotations, "disable_lower_builtin": flag})

        rewritten = tvm_ffi.structural_map(func, [(tirx.AllocBuffer, on_alloc)], order="post")
        # checked only where something was marked: the walk is the pass's cost
        return func if not marked or _register_bound(func) else rewritten

    return rewrite


def _register_bound(func: Any) -> bool:
    """Whether ``func``'s inner loop already fills the register file: the Pi 4's int8 step over
    4 input channels (``smull`` pairs, their widening adds and an ``addp`` tree over them per
    step, without ``sdot``). Promoted beside it, the accumulators spill: Pi 4 estimate,
    VGG-style int8 +29–34 %. NEON table lookups (their table is 16 vector registers) were
    excluded too while their epilogues ran 4 lanes at a time (YOLO int8's lookup layers +20–35 %
    each, promoted); with 16-lane epilogues (schedules.registers._byte_lanes) promoting them
    measures faster: A72 / A76 M cycles, an OCR classifier 52.2 / 19.6 → 47.5 / 16.6,
    MobileNetV3 64.1 / 25.1 → 62.7 / 23.7, a YOLOv8n-style detector 211.6 / 64.6 → 211.2 / 61.9.
    The step over 16
    channels into partial sums (``sadalp``; its ``addp`` tree sums the partial sums once per
    tile: kernels.dot.partial_lanes) keeps 16 accumulators, 4 weights, the input and 4
    products in 25 registers: promoted, a VGG block's int8 kernels took 2.4 % fewer cycles
    (415.3 → 405.5 M)."""
    import tvm_ffi
    from tvm import ir

    (addp, saddlp), pure, found = _crowding_intrinsics(), ir.Op.get("tirx.call_llvm_pure_intrin"), []

    def intrinsic(expr: Any) -> int | None:
        if isinstance(expr, ir.Call) and expr.op.same_as(pure) and expr.args:
            return getattr(expr.args[0], "value", None)
        return None

    def on_call(call: Any) -> Any:
        which = intrinsic(call)
        if which == addp and any(intrinsic(a) == saddlp for a in call.args[1:]):
            found.append(call)
        return call

    tvm_ffi.structural_map(func, [(ir.Call, on_call)], order="post")
    return bool(found)


@functools.cache
def _crowding_intrinsics() -> tuple[int, ...]:
    """LLVM intrinsic ids of the instructions :func:`_register_bound` looks for: ``addp`` and
    ``saddlp`` (an ``addp`` over pairwise sums: the int8 step's tree)."""
    from tvm.target import codegen

    names = ("llvm.aarch64.neon.addp.v4i32", "llvm.aarch64.neon.saddlp.v4i32.v8i16")
    return tuple(int(codegen.llvm_lookup_intrinsic_id(name)) for name in names)


def small_local(buffer: Any) -> bool:
    """Whether ``buffer`` is thread-local scratch of constant size up to :data:`MAX_BYTES`."""
    if buffer.scope() != "local":
        return False
    size = buffer.dtype.bits * buffer.dtype.lanes // 8
    for dim in buffer.shape:
        if not hasattr(dim, "value"):
            return False
        size *= int(dim.value)
    return 0 < size <= MAX_BYTES
