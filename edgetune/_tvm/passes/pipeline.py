"""The compiler core's pipeline: the one place the order of edgetune's graph passes is written.

A model's Relax module goes through three pass lists, each a ``tvm.transform.Sequential`` (so
TVM's instruments can time or dump every step):

1. :func:`integer_layers` — at import, on the module the frontend made: int8 layers computed as the
   runtime computes them (the scheme they report is stored on the module);
2. :func:`prepare_passes` — at build and at task extraction: inference decomposition, clean-ups,
   the NHWC layout change and per-channel affine folding, RMS norm and attention chains onto
   their kernels (CPU), int8 convolutions onto integer kernels, pruned 1×1 convolutions onto the
   sparse kernel (AArch64);
3. :func:`fuse_passes` — legalization to edgetune's kernels (a custom LegalizeOps map), fusion
   hints, then FuseOps/FuseTIR, then biases moved into the sums' init: the PrimFuncs tuning
   records and default schedules apply to.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..constants import SCHEME_ATTR
from ..core import tvm
from ..kernels.winograd import ConvChoice
from ..targets import Lowering
from .attention import FusedAttention
from .bias_init import BiasIntoInit
from .cleanups import (
    Conv1dAsConv2d,
    DecomposedLayerNorm,
    DecomposedRMSNorm,
    DivideAsMultiply,
    DropDropout,
    FoldConstantsNumpy,
    FoldRest,
    NCHWConv2dTranspose,
    SumOfStackToAdd,
    TransposedConvAsConv,
    WideConcatsAsTrees,
)
from .common import relax
from .fusion import BroadcastsApart, CroppedKernelsFusable, TableLookupsElementwise
from .gpu import IntegerPowersAsProducts, TwoStepReductions
from .int8_dense import IntegerDense
from .int8_elementwise import (
    Int8Concats,
    Int8LayoutMoves,
    Int8MaxPools,
    Int8Prelus,
    Int8Relus,
    Int8Rescales,
    Int8SumsWithoutDivide,
    Int8Tables,
    XnnpackInt8Adds,
    XnnpackInt8Resizes,
)
from .int8_kernels import Int8Convolutions, Int8ConvolutionsInFloat, NarrowingRoundTripsDropped
from .int8_layers import ExactInt8Layers
from .int8_scheme import integer_runs_as, quantization_scheme, quantized_layers
from .layout import FoldAffineIntoConv, PadsApart, ToNHWC
from .legalize import keeps_half, packed_legalize_map
from .precision import InHalf
from .sparse import SparseConvolutions


def _run(passes: list[Any], mod: Any) -> Any:
    return tvm().transform.Sequential(passes)(mod)


# ---------------------------------------------------------------- 1. import: int8 layers


def integer_layers(mod: Any, tflite: bool) -> Any:
    """``mod`` with its quantized convolution / dense layers as exact integer sums
    (:class:`.int8_layers.ExactInt8Layers`) — and for TFLite, int8 ADDs and ReLUs as LiteRT's
    XNNPACK computes them — the quantization scheme, with what each pass rewrote, kept on the
    module. A float model gets only the elementwise passes (QDQ chains as tables)."""
    scheme = quantization_scheme(mod)
    concats, pools, moves = Int8Concats(), Int8MaxPools(), Int8LayoutMoves()
    rescales, sums, tables = Int8Rescales(), Int8SumsWithoutDivide(), Int8Tables()
    if scheme is None:  # a float model (or only elementwise QDQ chains: those as tables)
        return _run([moves, concats, pools, rescales, tables, sums], mod)
    layers = quantized_layers(mod)
    exact, adds, relus, prelus = ExactInt8Layers(), XnnpackInt8Adds(), Int8Relus(), Int8Prelus()
    resizes = XnnpackInt8Resizes()
    mod = _run([exact, *([resizes, adds, relus] if tflite else []), prelus, moves, concats, pools, rescales, tables, sums], mod)
    counts = exact.counts
    float_layers = list((Counter(layers) - Counter(counts["rewritten"])).elements())
    scheme.update(exact=counts["layers"], exact_bounded=counts["bounded"], integer=counts["integer"],
                  float_layers=float_layers, fixed_point_adds=adds.count if tflite else 0,
                  fixed_point_resizes=resizes.count if tflite else 0,
                  relus=relus.count if tflite else 0, prelus=prelus.count,
                  concats=concats.count, max_pools=pools.count,
                  layout_moves=moves.count, rescales=rescales.count, sums_without_divide=sums.count,
                  tables=tables.count,
                  requantized_as="LiteRT's XNNPACK" if tflite else "onnxruntime's QLinearConv / MLAS",
                  runs_as=integer_runs_as(None, known=False))
    return mod.with_attr(SCHEME_ATTR, json.dumps(scheme))


# ---------------------------------------------------------------- 2. prepare: the unfused graph


def prepare_passes(target: Any, lowering: Lowering, conv_choice: ConvChoice = "auto") -> list[Any]:
    """The passes from an imported module to the unfused graph of ``lowering`` on ``target``
    (``conv_choice``: which exact int8 3×3 layers run as Winograd in float,
    :class:`.int8_kernels.Int8Convolutions`)."""
    cpu = target.kind.name == "llvm"
    passes = [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings(),
              NCHWConv2dTranspose(), WideConcatsAsTrees()]
    if not cpu:
        passes.append(Int8ConvolutionsInFloat())  # GPU schedules handle float kernels only
    if lowering.layout == "nchw" and not lowering.pack:  # TVM's own lowering (GPUs, --layout nchw)
        return passes + ([InHalf()] if lowering.half else [])
    passes += [DropDropout(), SumOfStackToAdd(), Conv1dAsConv2d(), DecomposedLayerNorm(), DivideAsMultiply(),
               FoldConstantsNumpy(), TransposedConvAsConv(),
               relax.transform.CanonicalizeBindings()]  # ToNHWC follows values through calls only
    if lowering.layout == "nhwc":
        # transposes to NCHW that nothing uses would count as uses of the conv outputs
        passes += [ToNHWC(), FoldConstantsNumpy(), relax.transform.DeadCodeElimination(["main"]), FoldAffineIntoConv()]
        if cpu and str(target.attrs.get("mtriple", "")).startswith("aarch64"):
            passes.append(PadsApart())
    if cpu:
        passes.append(DecomposedRMSNorm())
    if lowering.half:  # after the float32 foldings (affine into weights, norms recognised), before the kernels
        passes += [InHalf(keeps_half), FoldConstantsNumpy()]
    if cpu:
        passes += [FusedAttention(target), Int8Convolutions(target, conv_choice)]
    passes += [NarrowingRoundTripsDropped(), relax.transform.CanonicalizeBindings(),
               relax.transform.DeadCodeElimination(["main"]), FoldRest(), IntegerDense(target)]
    if cpu and lowering.layout == "nhwc":
        passes.append(SparseConvolutions(target))
    return passes


def prepare(mod: Any, target: Any, lowering: Lowering, conv_choice: ConvChoice = "auto") -> Any:
    """The unfused graph of ``lowering``: :func:`prepare_passes` run on ``mod``."""
    return _run(prepare_passes(target, lowering, conv_choice), mod)


def for_gpu(mod: Any, half: bool = False) -> Any:
    """What a GPU build (TVM's own pipeline) starts from: int8 convolutions as float ones;
    static shapes made tensors folded to constants (ONNX Gather's bound for negative indices:
    else a host-side ``shape_to_tensor`` and two kernels run per call); layer norms written out
    as ``layer_norm`` (one row kernel); the powers left as products
    (:class:`.gpu.IntegerPowersAsProducts`: nvcc's fast math made ``(x − mean)²`` NaN);
    whole-tensor reductions in two steps (:class:`.gpu.TwoStepReductions`); with ``half`` the
    graph in float16 (:class:`.precision.InHalf`: DLight's matmul rule then takes tensor cores)."""
    passes = [Int8ConvolutionsInFloat(), FoldConstantsNumpy(), DecomposedLayerNorm(), IntegerPowersAsProducts(),
              TwoStepReductions(), relax.transform.DeadCodeElimination(["main"])]
    return _run(passes + ([InHalf(), FoldConstantsNumpy()] if half else []), mod)


# ---------------------------------------------------------------- 3. legalize and fuse


def fuse_passes(target: Any, lowering: Lowering, conv_choice: ConvChoice = "auto") -> list[Any]:
    """The passes from the unfused graph to fused PrimFuncs. ``NATIVE`` is exactly TVM's zero
    pipeline (records made with it must match); edgetune's lowering legalizes to its own kernels
    (3×3 stride-1 convolutions direct or Winograd by ``conv_choice``, :func:`..kernels.winograd.winograd_tile`) and
    hints FuseOps."""
    custom = packed_legalize_map(target, conv_choice) if lowering.pack else None
    passes = [relax.backend.DispatchSampling(), relax.backend.DispatchSortScan(),
              relax.transform.LegalizeOps(customize_legalize_map=custom), relax.transform.AnnotateTIROpPattern()]
    if not lowering.pack:  # TVM's own lowering (records made with it must match)
        passes.append(relax.transform.FoldConstant())
    else:
        passes += [TableLookupsElementwise(), BroadcastsApart(), CroppedKernelsFusable(), FoldRest()]
    passes += [relax.transform.FuseOps(), relax.transform.FuseTIR()]
    if lowering.pack:
        passes.append(BiasIntoInit())  # the micro-kernels' sums start at their layer's bias
    return passes


def fuse(mod: Any, target: Any, lowering: Lowering, conv_choice: ConvChoice = "auto") -> Any:
    """The fused module of ``lowering``: what tuning extracts tasks from and what the build
    schedules (records apply to exactly these PrimFuncs)."""
    prepared = prepare(mod, target, lowering, conv_choice)
    with target:
        return _run(fuse_passes(target, lowering, conv_choice), prepared)
