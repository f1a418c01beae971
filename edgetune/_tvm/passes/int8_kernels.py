"""int8 convolutions onto integer kernels (the CPU's dot-product instruction), or in float
where a target has none; int8 round trips dropped."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..kernels import dot
from ..kernels.conv import (
    conv2d_nhwc_int8,
    conv2d_nhwc_lanes,
    conv2d_nhwc_packed,
    depthwise_conv2d_nhwc,
    depthwise_conv2d_nhwc_int8,
    depthwise_conv2d_nhwc_int8_sdot,
    out_size,
)
from ..kernels.cpu import (
    FLOAT_BIAS,
    FLOAT_BIAS_BITS,
    FLOAT_BIAS_LIMIT,
    CpuFacts,
    depthwise_weights,
    few_outputs_lanes,
    packed_weights,
    register_tile,
)
from ..kernels.winograd import (
    ConvChoice,
    conv_signature,
    default_conv_variant,
    default_min_channels,
    int8_variant,
    winograd_eligible,
    winograd_tile,
)
from .common import (
    MutatorPass,
    bindings_of,
    const_array,
    emit_like,
    immediate,
    ints,
    is_tensor,
    map_functions,
    module_pass,
    mutate_functions,
    op_name,
    readers_of,
    relax,
    static_shape,
    wrapped_int32,
)
from .legalize import legalize_winograd

FLOAT_FIRST_LAYER = 4  # input channels up to which an int8 layer on NEON without sdot runs on the fp32 kernel
# where its row of taps is no row of pairs (dot.tap_row: wider than 16 bytes, or dilated)


@module_pass(opt_level=0)
class Int8Convolutions:
    """int8 × int8 → int32 convolutions (exact int8 layers, :class:`.int8_layers.ExactInt8Layers`) as edgetune's
    kernels, a zero-point pad in front of one absorbed into it (a pad of its own would be a
    separate pass over the input: FuseOps does not fuse producers into a convolution), and the
    per-channel constant added after it (``bias − zx·Σw``) taken in:

    * full convolutions: the integer micro-kernel tensorized with the target's dot-product
      instruction (:mod:`..kernels.dot`; the constant joins the ``128·Σw`` an unsigned one takes off: one
      add per vector), or the fp32 packed kernel over the same small integers on a CPU without
      one (exact: the sums stay below 2²⁴, checked at import);
    * depthwise ones on Arm: the integer depthwise kernel (taps in pairs, ``smull`` + ``smlal``
      in 16-bit lanes: :func:`..kernels.conv.depthwise_conv2d_nhwc_int8`) where the weights are
      within ±127; A72 / A76 M cycles, MediaPipe hand landmark int8 69.7 / 28.3 → 60.6 / 25.0,
      MobileNetV2 int8 62.1 / 22.9 → 55.9 / 21.2. Elsewhere (x86; a −128 weight) the fp32
      depthwise kernel reading the int8 input directly;
    * 3×3 stride-1 ones, where ``conv_choice`` (or the target's int8 default,
      :func:`..kernels.winograd.int8_variant`) says so: Winograd in float32 over the same
      integers, the sums rounded back to integers (:func:`_winograd`).

    An fp32 kernel adds the constant in float where the sum stays exact, and hands the float on:
    the requantize after it converts to float anyway (an int32 round trip and an integer add per
    vector less, in epilogues as long as the 9-tap sums of a depthwise layer).

    Done before LegalizeOps because TVM's conv2d carries no pad value."""

    def __init__(self, target: Any, conv_choice: ConvChoice = "auto"):
        self.family, self.cpu = dot.dot_family(target), CpuFacts.of(target)
        self.winograd = _WinogradChoice(conv_choice, default_conv_variant(target), default_min_channels(target))

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        functions = [(gv, func) for gv, func in mod.functions_items() if isinstance(func, relax.Function)]
        mutator = _Int8(mod, set().union(*(_biased(func) for _gv, func in functions)), self.family, self.cpu,
                        self.winograd, set().union(*(_looked_up(func) for _gv, func in functions)))
        return relax.transform.DeadCodeElimination(["main"])(mutate_functions(mod, mutator))


def _int8_kernel(mutator: Any, conv: Any, bias: Any) -> tuple[Any, bool, Any] | None:
    """(the call_te of an exact int8 convolution ``conv`` plus ``bias`` — int32 per output
    channel, or None —, whether it returns the sums in float32, the part of ``bias`` left to
    add in int32 after it: None, or all of it where float32 would round); None: not one."""
    weights = integer_conv_weights(conv)
    a = conv.attrs
    if (weights is None or str(conv.args[0].ty.dtype) != "int8" or a.data_layout != "NHWC"
            or a.out_layout != "NHWC" or sorted(str(a.kernel_layout)) != sorted("OHWI")):
        return None
    weights = weights.transpose([str(a.kernel_layout).index(axis) for axis in "OHWI"])
    x, padding, fill = conv.args[0], ints(a.padding), 0
    src = mutator.lookup_binding(x) if isinstance(x, relax.Var) else None
    if op_name(src) == "relax.nn.pad" and not any(padding) and str(src.attrs.pad_mode) == "constant":
        widths = ints(src.attrs.pad_width)
        if not any(widths[:2] + widths[6:]):
            x, fill = src.args[0], int(src.attrs.pad_value)
            padding = [widths[2], widths[4], widths[3], widths[5]]
    geometry = dict(strides=ints(a.strides), padding=padding, dilation=ints(a.dilation), fill=fill)
    oc, kh, kw, ic_g = weights.shape
    ic = int(x.ty.shape.values[3])
    sig = conv_signature(ints(x.ty.shape.values), weights.shape, **{k: geometry[k] for k in ("strides", "padding", "dilation")})
    # float32 holds the sum plus the constant exactly while |x| ≤ 128 keeps them below 2²⁴
    reach = kh * kw * ic_g * 128 * int(np.abs(weights.astype(np.int64)).max(initial=0))
    largest = reach + (int(np.abs(bias.astype(np.int64)).max(initial=0)) if bias is not None else 0)  # a sum's bound
    bounded = largest < 2**24
    exact = bias is None or bounded
    fbias = [relax.const(bias.astype(np.float32))] if bias is not None and exact else []
    rest = None if exact else bias
    te = mutator.builder_.call_te
    family, cpu = mutator.family, mutator.cpu
    note = ""  # the layer's untuned variant where it has two and that is not the target's default
    lanes = few_outputs_lanes(oc, ic, cpu) if int(a.groups) == 1 and bounded and isinstance(fill, int) else 0
    if lanes:
        # fewer output channels than a vector (a segmentation head's mask): the integer kernels'
        # blocks of 16 (sdot: 4 × 4) multiplied 15 zero filters per real one — MediaPipe pose
        # landmark int8's 3×3 8 → 1 layer 3.33 / 1.74 M A72 / A76 cycles; in float, summed across
        # the input channels' lanes, exactly (the sums stay below 2²⁴)
        call = te(conv2d_nhwc_lanes, x, relax.const(np.ascontiguousarray(weights.astype(np.float32))), *fbias,
                  **geometry, lanes=lanes, signature=sig, primfunc_name_hint="conv2d_nhwc")
        return call, True, rest
    if int(a.groups) == 1 and isinstance(fill, int) and \
            winograd_eligible((kh, kw), geometry["strides"], geometry["dilation"], ic, oc):
        wanted, default = mutator.winograd, int8_variant(family)
        note = default if default != wanted.target_default else ""
        oh, ow = (int(v) for v in conv.ty.shape.values[1:3])
        tile = winograd_tile(sig, (kh, kw), oh, ow, ic, oc, geometry, wanted.choice, default, wanted.min_channels)
        if tile:
            # a constant whose sums can leave int32 (ai-edge-quantizer's −2³¹ bias on a live
            # channel) is added after the cast, in int32, where they wrap as the runtimes' do
            wraps = largest >= 2**31
            call = _winograd(mutator, x, weights, geometry, tile, sig, None if wraps else bias, note)
            return call, True, bias if wraps else None
    # A first layer (≤ 4 input channels, a kernel row of at most 16 bytes on plain NEON, 2-4 wide
    # on sdot) reads its taps along x as one group of steps of the family's row kernel
    # (dot.tap_row: the kernel's taps). On the Pi 5 each tap's quad was a broadcast load and a
    # step of its own; A76 estimate, the layer's M cycles: SqueezeNet 1.94 → 1.72, VGG block
    # 1.87 → 1.58, VGG-style CNN 0.48 → 0.41. On the Pi 4 it ran as the fp32 kernel over the
    # same integers (padding each tap's channels to a 4-deep step of smull and pairwise adds had
    # measured slower still): FMLA's 4 products a cycle where smull gives 8. On the Pi 5 not
    # where the epilogue looks values up in a table (a SiLU, a hard-swish: 16 registers, which
    # the step's weights leave it without): YOLOv8n-style 1.31 → 1.60, MobileNetV3 0.64 → 0.71
    row = dot.tap_row(family, kw, ic) if (family is not None and int(a.groups) == 1
                                          and geometry["dilation"][1] == 1
                                          and (family == "neon" or mutator.binding not in mutator.looked_up)) else None
    # A 1×1 layer over few channels on plain NEON reads each pixel's channels as a row of pairs
    # too (dot.pointwise_pairs), straight from its input
    pairs = dot.pointwise_pairs(family, ic) if (row is None and kh == kw == 1 and int(a.groups) == 1
                                                and not any(padding)) else None
    if pairs:
        row = (ic // dot.PAIR, dot.PAIR)
    # the kernel's per-channel constant: the bias less what the family's data shift adds (an
    # unsigned family's x + 128: Σ(x + 128)·w − 128·Σw = Σx·w), in int32 as the kernel's sums
    # wrap (common.wrapped_int32)
    shift = dot.data_shift("int8", family) if family is not None else 0
    offset = wrapped_int32((np.zeros(oc, np.int64) if bias is None else bias.astype(np.int64))
                           - shift * weights.astype(np.int64).sum(axis=(1, 2, 3)))
    if int(a.groups) == 1 and family is not None and (row is not None or not (
            family == "neon" and ic <= FLOAT_FIRST_LAYER and exact)):
        if row is not None:
            steps, size = row
            pixel = dot.row_pixel(size, ic)  # sdot pads a pixel's channels to a quad
            taps = np.zeros((oc, kh, kw, pixel), weights.dtype)
            taps[..., :ic] = weights
            flat = np.zeros((oc, kh, 1, steps * size), weights.dtype)  # a row's taps, then zeros
            flat[..., :kw * pixel] = taps.reshape(oc, kh, 1, -1)
            packed = dot.packed_weights(flat, family, size, dot.row_block(size, oc))
        else:
            packed = dot.packed_weights(weights, family)
        as_float, offset, unbias = _float_sums(cpu, weights, offset)
        extra = [relax.const(offset.astype(np.int32))] if bias is not None or shift or as_float else []
        call = te(conv2d_nhwc_int8, x, relax.const(packed), *extra, **geometry, out_channels=oc, family=family,
                  narrow=dot.narrow_weights(weights), signature=sig, default_variant=note, float_sums=as_float,
                  taps=kw if row is not None else 0, pairs=pairs or 0, **unbias, primfunc_name_hint="conv2d_nhwc_int8")
        return call, as_float, None
    if int(a.groups) == 1:
        oci, _rw = register_tile(oc, int(conv.ty.shape.values[2]), cpu)
        call = te(conv2d_nhwc_packed, x, relax.const(packed_weights(weights.astype(np.float32), oci)), *fbias, **geometry, out_channels=oc, signature=sig,
                  out_dtype="float32", default_variant=note, primfunc_name_hint="conv2d_nhwc")
        return call, True, rest
    depthwise = int(a.groups) == ic == oc and ic_g == 1
    on_sdot = depthwise and family == "sdot" and _sdot_depthwise(x, ic, kw, geometry)
    if on_sdot or (depthwise and dot.integer_depthwise(family) and dot.narrow_weights(weights)):
        # the sdot kernel over column quads (dilation 1 only: it takes no dilation), else NEON's tap pairs
        fn, packed, geo = ((depthwise_conv2d_nhwc_int8_sdot, dot.depthwise_quads(weights),
                            {key: value for key, value in geometry.items() if key != "dilation"}) if on_sdot
                           else (depthwise_conv2d_nhwc_int8, dot.depthwise_pairs(weights), geometry))
        as_float, offset, unbias = _float_sums(cpu, weights, offset)
        call = te(fn, x, relax.const(packed),
                  *([relax.const(offset.astype(np.int32))] if bias is not None or as_float else []), kernel=(kh, kw),
                  **geo, float_sums=as_float, **unbias, primfunc_name_hint="depthwise_conv2d_nhwc_int8")
        return call, as_float, None
    if depthwise:
        packed = depthwise_weights(weights.astype(np.float32), cpu)
        call = te(depthwise_conv2d_nhwc, x, relax.const(packed), *fbias, **geometry, out_dtype="float32",
                  primfunc_name_hint="depthwise_conv2d_nhwc")
        return call, True, rest
    return None


def _sdot_depthwise(x: Any, channels: int, kw: int, geometry: dict[str, Any]) -> bool:
    """Whether a depthwise layer on the sdot family takes its sdot kernel (:func:`.dot.sdot_depthwise`):
    dilation 1 and a static width only."""
    shape = static_shape(x)
    if tuple(geometry["dilation"]) != (1, 1) or shape is None:
        return False
    _top, left, _bottom, right = geometry["padding"]
    return dot.sdot_depthwise(channels, out_size(shape[2], kw, geometry["strides"][1], 1, left, right))


class _WinogradChoice(NamedTuple):
    choice: ConvChoice  # per conv signature, "direct" | "winograd" (else the int8 default)
    target_default: str  # the variant the target gives unmeasured float layers
    min_channels: int


def _winograd(mutator: Any, x: Any, weights: Any, geometry: dict[str, Any], tile: int, sig: str, bias: Any,
              note: str) -> Any:
    """An exact int8 layer as Winograd in float32: the int8 input padded with its zero point
    (``fill``) and read as float, the integer weights transformed; the sums rounded to integers
    (the integer kernel's wherever the transforms' rounding error stays under a half), then the
    layer's constant added in float (beyond 2²⁴ it rounds by a part in 2²⁴ of the sum: far below
    a requantizing step)."""
    b = mutator.builder_
    out = legalize_winograd(b, x, weights.astype(np.float32), geometry, tile, sig, mutator.cpu, fill=geometry["fill"],
                            default_variant=note)
    out = relax.op.round(b.emit(out))
    return out if bias is None else relax.op.add(b.emit(out), relax.const(bias.astype(np.float32)))


def _float_sums(cpu: CpuFacts, weights: Any, offset: Any) -> tuple[bool, Any, dict[str, Any]]:
    """Whether an integer kernel returns its sums as floats by their bit pattern (the kernel's
    ``float_sums``: where converting them is slow, :data:`..kernels.cpu.SLOW_CONVERTS`), the
    per-channel ``offset`` it adds then, and its ``unbias`` argument (none, or a float32 per
    channel). Taken where every sum stays below 2²² (|x| ≤ 128). A channel whose filter is all
    zeros sums its constant alone, which may be anything: ai-edge-quantizer stores −2³¹ for
    such a channel (MediaPipe hand landmark: up to 741 of a layer's channels), which kept its
    whole layer converting with ``scvtf``. Such a channel now adds 0 and takes off
    1.5 · 2²³ − float(constant) instead of 1.5 · 2²³, where that gives float(constant) exactly
    (and within int32, for the integer users of the sums)."""
    if not cpu.slow_converts:
        return False, offset, {}
    reach = 128 * np.abs(weights.astype(np.int64)).reshape(len(weights), -1).sum(axis=1)
    wide = (reach == 0) & (np.abs(offset) >= FLOAT_BIAS_LIMIT)
    if int((reach + np.abs(offset))[~wide].max(initial=0)) >= FLOAT_BIAS_LIMIT:
        return False, offset, {}
    if not wide.any():
        return True, offset + FLOAT_BIAS_BITS, {}
    value = offset[wide].astype(np.float32)  # what converting the sum gives
    less = (np.float64(FLOAT_BIAS) - value.astype(np.float64)).astype(np.float32)
    if not (np.array_equal(np.float32(FLOAT_BIAS) - less, value) and np.all((value >= -2.0**31) & (value < 2.0**31))):
        return False, offset, {}
    unbias = np.full(len(offset), FLOAT_BIAS, np.float32)
    unbias[wide] = less
    return True, np.where(wide, 0, offset) + FLOAT_BIAS_BITS, {"unbias": relax.const(unbias)}


def _channel_constant(expr: Any, channels: int) -> Any | None:
    """An int32 constant of one value per channel along the last axis, flattened; else None."""
    value = const_array(expr)
    if value is None or value.dtype != np.int32 or value.size != channels or value.shape[-1:] != (channels,):
        return None
    return value.reshape(-1)


def _biased(func: Any) -> set[Any]:
    """The convolutions whose only user adds an int32 constant per output channel to them."""
    readers = readers_of(func)
    out = set()
    for block in func.body.blocks:
        for b in block.bindings:
            (user, *more) = readers.get(b.var, [None])
            if (op_name(b.value) == "relax.nn.conv2d" and not more and op_name(user) == "relax.add"
                    and user.args[0].same_as(b.var)
                    and _channel_constant(user.args[1], int(b.var.ty.shape.values[-1])) is not None):
                out.add(b.var)
    return out


# Ops an int8 layer's epilogue passes through before a lookup (requantize, shift, clip, casts)
_EPILOGUE = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.astype", "relax.clip",
                       "relax.round", "relax.maximum", "relax.minimum", "relax.floor", "relax.right_shift"})


def _looked_up(func: Any, hops: int = 12) -> set[Any]:
    """The convolutions (and their bias adds) whose value reaches a table lookup (``take``:
    :class:`.int8_elementwise.Int8Tables`) through elementwise ops alone, each with one reader."""
    readers = readers_of(func)
    var_of = {b.value: b.var for block in func.body.blocks for b in block.bindings}
    out = set()
    for value, var in var_of.items():
        if op_name(value) != "relax.nn.conv2d":
            continue
        chain = [var]
        for _ in range(hops):
            (reader, *more) = readers.get(chain[-1], [None])
            name = op_name(reader)
            if more or (name not in _EPILOGUE and name != "relax.take"):
                break
            if name == "relax.take":
                out.update(chain)
                break
            chain.append(var_of[reader])
    return out


@relax.expr_functor.mutator
class _Int8(relax.PyExprMutator):
    """Each convolution's bias add (its only user) becomes the kernel's; a float32 kernel's
    sums are cast to int32 for their users and the casts back to float32 dropped."""

    def __init__(self, module: Any, deferred: set[Any], family: str | None, cpu: CpuFacts, winograd: _WinogradChoice,
                 looked_up: set[Any]):
        super().__init__(module)
        self.family, self.cpu = family, cpu  # the target's dot-product instruction, its vector facts
        self.winograd = winograd  # which eligible 3×3 layers are Winograd in float
        self.deferred = deferred  # convolutions made kernels at their bias add
        self.looked_up = looked_up  # convolutions (and bias adds) whose epilogue ends in a table lookup
        self.binding: Any = None  # the binding being rewritten
        self.floats: set[Any] = set()  # int32 vars that are casts of a float32 kernel's integral sums

    def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
        self.binding = binding.var
        new = None if binding.var in self.deferred else self._rewrite(self.visit_expr(binding.value))
        if new is None:
            super().visit_var_binding_(binding)
            return
        def emit(expr: Any) -> Any:
            return emit_like(self.builder_, binding.var, expr)

        call, is_float, rest = new
        out = emit(call)
        if is_float:
            out = emit(relax.op.astype(out, "int32"))
            self.floats.add(out)
        if rest is not None:
            out = emit(relax.op.add(out, relax.const(rest.astype(np.int32))))
        self.set_var_remap(binding.var, out)

    def _rewrite(self, value: Any) -> tuple[Any, bool, Any] | None:
        name = op_name(value)
        if name == "relax.astype" and str(value.attrs.dtype) == "float32" and value.args[0] in self.floats:
            return self.lookup_binding(value.args[0]).args[0], False, None  # the float sums themselves
        if name == "relax.nn.conv2d":
            return _int8_kernel(self, value, None)
        if name == "relax.add" and isinstance(value.args[0], relax.Var):
            conv = self.lookup_binding(value.args[0])
            if op_name(conv) == "relax.nn.conv2d" and is_tensor(value):
                return _int8_kernel(self, conv, _channel_constant(value.args[1], int(value.ty.shape.values[-1])))
        return None


def integer_conv_weights(call: Any) -> Any | None:
    """The int8 weights of an int8 × int8 → int32 convolution with constant weights (an exact
    int8 layer, :class:`.int8_layers.ExactInt8Layers`), else None."""

    if op_name(call) != "relax.nn.conv2d" or str(call.attrs.out_dtype) != "int32":
        return None
    weights = const_array(call.args[1])
    return weights if weights is not None and weights.dtype == np.int8 else None


@relax.expr_functor.mutator
class _Float(relax.PyExprMutator):
    def visit_call_(self, op: Any) -> Any:  # noqa: N802
        new = super().visit_call_(op)
        weights = integer_conv_weights(new)
        if weights is None:
            return new
        a = new.attrs
        x = self.builder_.emit(relax.op.astype(new.args[0], "float32"))
        conv = self.builder_.emit(relax.op.nn.conv2d(
            x, relax.const(weights.astype(np.float32)), strides=a.strides, padding=a.padding, dilation=a.dilation,
            groups=int(a.groups), data_layout=str(a.data_layout), kernel_layout=str(a.kernel_layout),
            out_layout=str(a.out_layout), out_dtype="float32"))
        return relax.op.astype(conv, "int32")


@module_pass(opt_level=0)
class Int8ConvolutionsInFloat(MutatorPass):
    """For GPU targets: int8 × int8 → int32 convolutions as float32 convolutions of the same
    integers, cast back (exact: the sums stay below 2²⁴, checked at import) — the kernels TVM's
    GPU schedules handle, as before edgetune had integer kernels."""

    mutator = _Float


_FUSES_AFTER = {"relax.add", "relax.subtract", "relax.multiply", "relax.maximum", "relax.minimum", "relax.clip",
                "relax.right_shift", "relax.left_shift", "relax.astype", "relax.take"}


def _dropped(func: Any) -> dict[Any, Any]:
    """var → the clipped float var its widening cast reads instead."""
    values = bindings_of(func)
    users = {var: [op_name(v) if v is not None else "return" for v in readers]
             for var, readers in readers_of(func).items()}
    out = {}
    for var, value in values.items():
        narrow = values.get(value.args[0]) if op_name(value) == "relax.astype" else None
        clip = values.get(narrow.args[0]) if op_name(narrow) == "relax.astype" else None
        if op_name(clip) != "relax.clip" or not users.get(value.args[0]) == users.get(narrow.args[0]) == ["relax.astype"]:
            continue
        if not users.get(var) or not set(users[var]) <= _FUSES_AFTER:
            continue
        wide, small = str(value.ty.dtype), str(narrow.ty.dtype)
        if small not in ("int8", "uint8", "int16") or wide not in ("int16", "int32", "int64"):
            continue
        lo, hi, info, into = immediate(clip.args[1]), immediate(clip.args[2]), np.iinfo(small), np.iinfo(wide)
        if lo is not None and hi is not None and info.min <= lo <= hi <= info.max and into.min <= info.min and into.max >= info.max:
            out[var] = narrow.args[0]
    return out


@relax.expr_functor.mutator
class _RoundTrips(relax.PyExprMutator):
    def __init__(self, mod: Any, drop: dict[Any, Any]):
        super().__init__(mod)
        self.drop = drop

    def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
        if binding.var not in self.drop:
            return super().visit_var_binding_(binding)
        new = relax.op.astype(self.visit_expr(self.drop[binding.var]), str(binding.value.ty.dtype))
        self.set_var_remap(binding.var, emit_like(self.builder_, binding.var, new))
        return None


def _without_round_trips(mod: Any, func: Any) -> Any:
    drop = _dropped(func)
    return _RoundTrips(mod, drop).visit_expr(func) if drop else func


@module_pass(opt_level=0)
class NarrowingRoundTripsDropped:
    """``astype(astype(clip(x, lo, hi), int8), int32)`` as ``astype(clip(x, lo, hi), int32)``
    where ``[lo, hi]`` lies inside the narrow type, so the narrow cast cannot wrap: the same
    values. Requantized int8 tensors that an XNNPACK add, an int8 ReLU or a lookup widens again
    are this (a cast down and up per element in every such epilogue, ~13 % of a 64×64×24 int8
    layer's time). Only where the clipped and the int8 tensor have no other reader and the
    widened one feeds elementwise arithmetic, i.e. where both casts land in one kernel: else the
    producing kernel hands over the float tensor (4× the bytes) to a cast kernel of its own
    (seen on BlazeFace, whose int8 residuals are also cast again for the next block)."""

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        return map_functions(mod, _without_round_trips)


