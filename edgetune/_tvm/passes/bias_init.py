"""Per-channel biases as the sums' starting value, not an epilogue add.

A convolution or dense kernel sums into zeroed accumulators and then, in its epilogue, adds the
layer's bias, one vector add per output vector. Starting the sums at the bias instead (as
XNNPACK's micro-kernels do) drops that add; the accumulators are set once per tile either way (a
zero vector or the bias vector). The epilogue of a small-reduction layer — a depthwise 3 × 3, a
1 × 1 over a few channels, an int8 layer's requantization — is a large part of its time, and
the add a third of a bias + ReLU6 epilogue's vector operations.

:func:`bias_into_init` rewrites one fused PrimFunc: the reduction that computes an edgetune
micro-kernel's sums (the kernel's own block, or the ``lanes`` sum after it; :data:`SUMS`),
read by nothing but ``sums + bias[c]`` — directly or through the crop of a padded width — gets
``bias[c]`` as its init, and the add becomes a copy (inlined into the epilogue by the
schedule). Sums over padded channels (cropped before the add) keep the add. Run after FuseTIR
on every function, so default schedules and tuning tasks see the same function.
"""

from __future__ import annotations

from typing import Any

from ..core import copy_module, tvm
from ..schedules.common import child_blocks, is_reduction, kernel_of
from .common import module_pass

# The kernels whose sums are a layer's output before its bias (a ``lanes`` stage after the int8
# ones that keep partial sums). Winograd's are not: its bias follows the inverse transform,
# which is written out as sums of products, not a reduction with an init. (A first measurement
# that seemed to say leaving it out mattered — SqueezeNet's last 3 × 3 layer, Pi 5 estimate
# 3.06 → 3.52 M cycles — was the estimate's code-layout effect: that kernel's TIR is the same
# with and without this pass.)
SUMS = frozenset({"conv2d_nhwc_packed", "conv2d_nhwc_int8", "dense_int8", "depthwise_conv2d_nhwc", "dense_packed",
                  "matmul_packed", "depthwise_conv2d_nhwc_sdot"})


@module_pass(opt_level=0)
class BiasIntoInit:
    """:func:`bias_into_init` on every PrimFunc of the module."""

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        tirx = tvm().tirx
        updates = {}
        for gv, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc):
                rewritten = bias_into_init(func)
                if rewritten is not None:
                    updates[gv] = rewritten
        if not updates:
            return mod
        out = copy_module(mod)
        for gv, func in updates.items():
            out[gv] = func
        return out


def bias_into_init(func: Any) -> Any | None:
    """``func`` with its micro-kernel's bias add moved into the sums' init, or None where it has
    none (see the module docstring for the pattern)."""
    if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
        return None
    sch = tvm().s_tir.Schedule(func)
    blocks = child_blocks(sch)
    if not any(kernel_of(sch, b) in SUMS for b in blocks):
        return None
    written = [w.source for b in blocks for w in sch.get(b).writes]
    readers: dict[Any, list[Any]] = {}
    for b in blocks:
        for r in sch.get(b).reads:
            readers.setdefault(r.source, []).append(b)

    def only_reader(buf: Any) -> Any | None:
        chain = readers.get(buf, [])
        return chain[0] if len(chain) == 1 else None

    for sums in blocks:
        starts = kernel_of(sch, sums) in SUMS or str(sch.get(sums).name_hint) == "lanes"
        if not starts or not is_reduction(sch, sums) or not _zero_init(sch.get(sums)):
            continue
        buf = sums_buf = sch.get(sums).writes[0].source
        add = only_reader(buf)
        if add is not None and str(sch.get(add).name_hint) == "crop":  # a padded width (or channels: refused below)
            buf = sch.get(add).writes[0].source
            add = only_reader(buf)
        if add is None:
            continue
        bias = _bias_of(sch.get(add), buf, written)
        if bias is None or bias.source.ty.dtype != buf.ty.dtype or _channels(bias.source) != _channels(sums_buf):
            # (padded channels: their starting value would be a clamped index, a gather where
            # the init was one vector load — measured on SqueezeNet's 1000 → 1008 classes)
            continue
        _rewrite(sch, sums, add, buf, bias)
        return sch.mod["main"]
    return None


def _zero_init(block: Any) -> bool:
    init = block.init
    tirx = tvm().tirx
    return (isinstance(init, tirx.BufferStore) and isinstance(init.value, (tirx.FloatImm, tirx.IntImm))
            and float(init.value.value) == 0.0)


def _bias_of(add: Any, buf: Any, written: list[Any]) -> Any | None:
    """The bias buffer of ``add`` when its body is ``out[v] = buf[v] + bias[v_c]`` (either order;
    ``bias`` a parameter of one channel axis, or with size-1 axes before it), else None."""
    tirx, load = tvm().tirx, tvm().ir.TensorLoad
    store = add.body
    if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, tirx.Add):
        return None
    index = list(store.indices)
    for sums, bias in ((store.value.a, store.value.b), (store.value.b, store.value.a)):
        if not (isinstance(sums, load) and sums.source.same_as(buf) and _same(sums.indices, index)):
            continue
        if not isinstance(bias, load) or any(bias.source.same_as(w) for w in written):
            continue
        *lead, _channels = bias.source.ty.shape
        if _same(bias.indices[-1:], index[-1:]) and all(_one(d) for d in lead):
            return bias
    return None


def _channels(buf: Any) -> int:
    return int(buf.ty.shape[-1])


def _one(extent: Any) -> bool:
    return isinstance(extent, int) and extent == 1 or hasattr(extent, "value") and int(extent.value) == 1


def _same(a: Any, b: Any) -> bool:
    return len(a) == len(b) and all(x.same_as(y) for x, y in zip(a, b))


def _rewrite(sch: Any, sums: Any, add: Any, buf: Any, bias: Any) -> None:
    """Replace the two blocks: ``sums`` starting at ``bias``, ``add`` a copy of ``buf``."""
    tirx = tvm().tirx
    old = sch.get(sums)
    init = old.init
    channel = init.indices[-1]
    at = [tirx.const(0, i.ty.dtype if hasattr(i, "ty") else "int64") for i in bias.indices[:-1]] + [channel]
    # The block's reads stay those of its update: decompose_reduction gives the init block none
    # of its own and leaves these to the update, which tensorize matches against an intrinsic's
    # (the bias is a parameter nothing writes: no dependence is lost)
    _replace(sch, sums, old.reads, old.body, tirx.BufferStore(init.buffer, tirx.BufferLoad(bias.source, at), init.indices))
    old = sch.get(add)
    store = old.body
    _replace(sch, add, [r for r in old.reads if r.source.same_as(buf)],
             tirx.BufferStore(store.buffer, tirx.BufferLoad(buf, store.indices), store.indices), old.init)


def _replace(sch: Any, block: Any, reads: list[Any], body: Any, init: Any) -> None:
    """``block`` in ``sch`` with these reads, body and init (the rest as it was)."""
    old = sch.get(block)
    new = tvm().s_tir.SBlock(old.iter_vars, reads, old.writes, old.name_hint, body, init, old.alloc_buffers,
                             old.match_buffers, old.annotations)
    sch.state.replace(sch.get_sref(block), new, {old: new})
