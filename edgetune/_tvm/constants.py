"""Facts about what edgetune's TVM layer converts, as plain data: the importers read them without
importing TVM."""

from __future__ import annotations

# TFLite operators that move int8 values without touching them: allowed quantized when their
# input and output share one quantization (as LiteRT requires of them).
QUANTIZED_DATA_MOVEMENT = frozenset({
    "PAD", "PADV2", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "SLICE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS", "PACK",
    "UNPACK", "GATHER", "TILE", "RESIZE_NEAREST_NEIGHBOR", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
})
