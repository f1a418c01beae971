"""Facts about what edgetune's TVM layer converts, as plain data: the importers read them without
importing TVM."""

from __future__ import annotations

# TFLite operators that move int8 values without touching them: allowed quantized when their
# input and output share one quantization (as LiteRT requires of them).
QUANTIZED_DATA_MOVEMENT = frozenset({
    "PAD", "PADV2", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "SLICE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS", "PACK",
    "UNPACK", "GATHER", "TILE", "RESIZE_NEAREST_NEIGHBOR", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
})

# ONNX recurrent layers edgetune converts (:mod:`.frontend.recurrent`): gates per layer, the
# activations it computes, and the longest sequence unrolled.
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
ACTIVATIONS = ("Sigmoid", "Tanh", "Relu")
UNROLL_MAX_STEPS = 32  # longer sequences run as one loop kernel per direction

# The module attribute holding an int8 model's quantization scheme as imported (JSON).
SCHEME_ATTR = "edgetune_quantization"

# MetaSchedule's JSON database, one per records directory: append-only JSON lines.
WORKLOADS_FILE = "database_workload.json"
RECORDS_FILE = "database_tuning_record.json"
FAILED_RUN_SECS = 1e10  # MetaSchedule's run time of a candidate that failed

# The lowerings records are stamped with (``targets.Lowering.key``).
LOWERING_KEYS = frozenset({"nchw", "nhwc-packed"})

# What a tuning record's trace may hold: the instruction kinds and annotation keys edgetune's
# design spaces (its micro-kernel sketches, MetaSchedule's CPU and CUDA rules, their
# postprocessors) produce — collected from the spaces of CNN, int8 and transformer workloads for
# every profile — and the tensor intrinsics edgetune registers. A record is code replayed into
# every build: anything else (``pragma_import_llvm`` links foreign code) is refused.
TRACE_INSTRUCTIONS = frozenset({
    "GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers", "Split", "Fuse", "Reorder",
    "Parallel", "Vectorize", "Unroll", "Bind", "ComputeAt", "ReverseComputeAt", "ComputeInline",
    "ReverseComputeInline", "CacheRead", "CacheWrite", "SetScope", "DecomposeReduction", "DecomposePadding",
    "RFactor", "Tensorize", "Blockize", "LoopPartition", "SamplePerfectTile", "SampleCategorical",
    "SampleComputeLocation", "Annotate", "Unannotate", "EnterPostproc", "StorageAlign", "AddUnitLoop",
    "TransformLayout", "TransformBlockLayout",
})
TRACE_ANNOTATIONS = frozenset({
    "meta_schedule.parallel", "meta_schedule.vectorize", "meta_schedule.unroll_explicit",
    "meta_schedule.unroll_implicit", "meta_schedule.random_compute_producer", "meta_schedule.tiling_structure",
    "meta_schedule.thread_extent_low_inclusive", "meta_schedule.thread_extent_high_inclusive",
    "meta_schedule.cooperative_fetch", "meta_schedule.auto_tensorize", "meta_schedule.auto_tensorize_init",
    "meta_schedule.layout_rewrite_preproc", "pragma_auto_unroll_max_step", "pragma_unroll_explicit",
    "software_pipeline_stage", "software_pipeline_order", "software_pipeline_async_stages",
})
DOT_INTRINSICS = frozenset({"edgetune_dot_16x4_vnni", "edgetune_dot_16x4_vnni_flip", "edgetune_dot_4x4_sdot",
                            "edgetune_dot_4x4_neon", "edgetune_dot_4x16_neon", "edgetune_dot_4x16_neon_narrow"})
