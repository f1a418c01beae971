"""The compiler core's pipeline: the one place the order of edgetune's graph passes is written."""

from __future__ import annotations

import json
from typing import Any

from ..core import tvm
from ..kernels.winograd import ConvChoice
from ..targets import NATIVE, Lowering
from .cleanups import drop_dropout, fold_constants_numpy, fold_rest, nchw_conv2d_transpose, sum_of_stack_to_add
from .fusion import broadcasts_apart, table_lookups_elementwise
from .int8_kernels import int8_convolutions, int8_convolutions_in_float, narrowing_round_trips_dropped
from .int8_scheme import quantization_scheme
from .layout import fold_affine_into_conv, to_nhwc
from .legalize import packed_legalize_map


def prepare(mod: Any, target: Any, lowering: Lowering) -> Any:
    """Inference decomposition and the layout change: the unfused graph of this lowering."""
    from tvm import relax

    steps = [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
    mod = nchw_conv2d_transpose(tvm().transform.Sequential(steps)(mod))
    if target.kind.name != "llvm":
        mod = int8_convolutions_in_float(mod)
    if lowering == NATIVE:
        return mod
    mod = fold_constants_numpy(sum_of_stack_to_add(drop_dropout(mod)))
    mod = relax.transform.CanonicalizeBindings()(mod)  # to_nhwc follows values through calls only
    if lowering.layout == "nhwc":
        mod = fold_constants_numpy(to_nhwc(mod))
        # transposes to NCHW that nothing uses would count as uses of the conv outputs
        mod = fold_affine_into_conv(relax.transform.DeadCodeElimination(["main"])(mod))
    if target.kind.name == "llvm":
        mod = int8_convolutions(mod, target)
    mod = narrowing_round_trips_dropped(mod)
    return fold_rest(tvm().transform.Sequential([relax.transform.CanonicalizeBindings(),
                                                  relax.transform.DeadCodeElimination(["main"])])(mod))


def fuse(mod: Any, target: Any, lowering: Lowering, conv_choice: ConvChoice = "auto") -> Any:
    """The fused module of ``lowering``: what tuning extracts tasks from and what the build
    schedules (records apply to exactly these PrimFuncs). ``conv_choice`` picks direct or
    Winograd kernels for 3×3 stride-1 convolutions (see :func:`winograd_tile`)."""
    from tvm import relax

    prepared = prepare(mod, target, lowering)
    custom = packed_legalize_map(target, conv_choice) if lowering.pack else None
    with target:
        legal = tvm().transform.Sequential([
            relax.backend.DispatchSampling(),
            relax.backend.DispatchSortScan(),
            relax.transform.LegalizeOps(customize_legalize_map=custom),
            relax.transform.AnnotateTIROpPattern(),
        ])(prepared)
        if lowering == NATIVE:  # exactly TVM's zero pipeline: records made with it must match
            legal = relax.transform.FoldConstant()(legal)
        else:
            legal = fold_rest(broadcasts_apart(table_lookups_elementwise(legal)))
        return tvm().transform.Sequential([relax.transform.FuseOps(), relax.transform.FuseTIR()])(legal)


def integer_layers(mod: Any, tflite: bool) -> Any:
    """``mod`` with its quantized convolution / dense layers as exact integer sums
    (:func:`.quantized.exact_int8_layers`) — and for TFLite, int8 ADDs and ReLUs as LiteRT's
    XNNPACK computes them — the quantization scheme kept on the module. A float model as is."""
    from collections import Counter

    from ..constants import SCHEME_ATTR
    from .int8_elementwise import int8_concats, int8_relus, int8_rescales, int8_tables, xnnpack_int8_adds
    from .int8_layers import exact_int8_layers
    from .int8_scheme import quantized_layers

    scheme = quantization_scheme(mod)
    if scheme is None:  # a float model (or only elementwise QDQ chains: those as tables)
        return int8_tables(int8_rescales(int8_concats(mod)[0])[0])[0]
    layers = quantized_layers(mod)
    mod, exact = exact_int8_layers(mod)
    float_layers = list((Counter(layers) - Counter(exact["rewritten"])).elements())
    adds = relus = 0
    if tflite:
        mod, adds = xnnpack_int8_adds(mod)
        mod, relus = int8_relus(mod)
    mod, concats = int8_concats(mod)
    mod, rescales = int8_rescales(mod)
    mod, tables = int8_tables(mod)
    scheme.update(exact=exact["layers"], exact_bounded=exact["bounded"], integer=exact["integer"], float_layers=float_layers,
                  fixed_point_adds=adds, relus=relus,
                  concats=concats, rescales=rescales, tables=tables,
                  requantized_as="LiteRT's XNNPACK" if tflite else "onnxruntime's QLinearConv / MLAS",
                  runs_as="full convolutions and dense layers (as 1×1 convolutions) on the CPU's int8 dot-product "
                          "instruction (AVX-512 VNNI, Arm sdot, NEON smull), depthwise layers (and CPUs without one) as "
                          "exact integer sums in fp32 kernels")
    return mod.with_attr(SCHEME_ATTR, json.dumps(scheme))
