"""Rewrites of a TFLite flatbuffer before TVM sees it (and before LiteRT computes the reference).

* **Sparse weights.** MediaPipe's detectors store some convolution weights in TFLite's sparse
  format (block-CSR), expanded at run time by a ``DENSIFY`` operator; TVM 0.27 refuses both.
  A constant sparse tensor is expanded here, once, into a dense constant, and the ``DENSIFY``
  operator is dropped (the values are unchanged: only their storage differs).
* **MediaPipe's ``Convolution2DTransposeBias``** (its segmentation models) is a transposed
  convolution plus bias, inputs ``(input, weights OHWI, bias)``, options a raw
  ``TfLiteTransposeConvParams`` (padding, stride_w, stride_h). Its output is
  ``stride·(in−1) + k − p`` with ``p = max(0, k − (in−1) mod stride − 1)`` for SAME and 0 for
  VALID, the first ``p // 2`` rows/columns cut: exactly what the builtin ``TRANSPOSE_CONV`` with
  a bias input computes for that output shape (TFLite pads ``p // 2`` at the top/left too). So
  the op becomes a builtin ``TRANSPOSE_CONV`` with that output shape as a constant input, which
  TVM converts and LiteRT runs (it cannot run the custom op without MediaPipe's resolver).
  :func:`transpose_conv_bias_reference` is MediaPipe's loop in numpy, for the tests.

* **Operator codes written one way only.** A code below 127 belongs in both ``builtin_code``
  and ``deprecated_builtin_code``; TFLite reads the larger, but the ``tflite`` package TVM reads
  with trusts the deprecated field for small codes. ai-edge-quantizer writes its QUANTIZE ops with
  ``deprecated_builtin_code`` 0 (ADD to that reader): both fields are set alike.
* **Weights stored after the flatbuffer.** Newer converters and ai-edge-quantizer write large
  buffers past the end of the flatbuffer (``Buffer.offset``/``size`` into the file) instead of
  inline; TVM 0.27's frontend reads only inline data. They are moved inline (same bytes).

The flatbuffer is edited through the object API that ships with LiteRT (``schema_py_generated``).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ..errors import ModelFormatError

DENSIFY, CUSTOM, TRANSPOSE_CONV = 124, 32, 67
PLACEHOLDER = 127  # PLACEHOLDER_FOR_GREATER_OP_CODES: deprecated_builtin_code of codes ≥ 127
MEDIAPIPE_DECONV = "Convolution2DTransposeBias"
_NUMPY = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 9: np.int8, 7: np.int16}
_TFLITE_PADDING = {1: "SAME", 2: "VALID"}  # TfLitePadding in the custom options
_SCHEMA_PADDING = {"SAME": 0, "VALID": 1}  # tflite::Padding in TransposeConvOptions


def needs_rewrite(model: Any) -> bool:
    """Whether a parsed ``tflite.Model`` has sparse tensors, MediaPipe's transposed conv or
    buffers stored outside the flatbuffer."""
    if any(model.Buffers(i).Offset() > 1 for i in range(model.BuffersLength())):
        return True
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = _builtin_field(code)
        if builtin < PLACEHOLDER and builtin not in (0, code.DeprecatedBuiltinCode()):
            return True
    for s in range(model.SubgraphsLength()):
        sub = model.Subgraphs(s)
        if any(sub.Tensors(i).Sparsity() is not None for i in range(sub.TensorsLength())):
            return True
    return any((model.OperatorCodes(i).CustomCode() or b"") == MEDIAPIPE_DECONV.encode()
               for i in range(model.OperatorCodesLength()))


def rewrite(data: bytes) -> tuple[bytes, tuple[str, ...]]:
    """The model with sparse constants densified and MediaPipe's transposed convolutions as
    builtins, and a note per kind of change (empty when nothing changed)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    inlined = _inline_buffers(m, data)
    for code in m.operatorCodes or []:
        code.builtinCode = max(code.builtinCode, code.deprecatedBuiltinCode)
        code.deprecatedBuiltinCode = min(code.builtinCode, PLACEHOLDER)
    densified = deconvs = 0
    for sub in m.subgraphs or []:
        kept = []
        for op in sub.operators or []:
            code = m.operatorCodes[op.opcodeIndex]
            builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
            if builtin == DENSIFY:
                _densify_op(m, sub, op, schema)
                densified += 1
                continue
            if builtin == CUSTOM and (code.customCode or b"").decode(errors="replace") == MEDIAPIPE_DECONV:
                _deconv_as_builtin(m, sub, op, schema)
                deconvs += 1
            kept.append(op)
        sub.operators = kept
        for t in sub.tensors or []:
            if t.sparsity is not None:
                raise ModelFormatError(f"sparse tensor '{_name(t)}' is not the constant input of a DENSIFY operator",
                                       "only constant sparse weights are supported")
    builder = flatbuffers.Builder(len(data) * 2 + 1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    notes = []
    if inlined:
        notes.append(f"{inlined} weight buffer(s) stored after the flatbuffer moved inline")
    if densified:
        notes.append(f"{densified} sparse weight tensor(s) densified at import (DENSIFY)")
    if deconvs:
        notes.append(f"{deconvs} MediaPipe {MEDIAPIPE_DECONV} op(s) imported as TRANSPOSE_CONV + bias")
    return bytes(builder.Output()), tuple(notes)


def _builtin_field(code: Any) -> int:
    """The raw ``builtin_code`` of a ``tflite.OperatorCode`` (its accessor answers the
    deprecated field for codes below 127)."""
    import flatbuffers

    offset = code._tab.Offset(10)
    return code._tab.Get(flatbuffers.number_types.Int32Flags, offset + code._tab.Pos) if offset else 0


def _inline_buffers(m: Any, data: bytes) -> int:
    """Buffers with ``offset``/``size`` (their bytes after the flatbuffer, in the file) made
    inline; returns how many."""
    count = 0
    for buf in m.buffers or []:
        if buf.offset > 1:
            if buf.offset + buf.size > len(data):
                raise ModelFormatError("a weight buffer lies past the end of the file", "the file is truncated: export it again")
            buf.data = np.frombuffer(data, np.uint8, count=buf.size, offset=buf.offset)
            buf.offset = buf.size = 0
            count += 1
    return count


def _name(t: Any) -> str:
    return (t.name or b"?").decode(errors="replace") if isinstance(t.name, bytes) else str(t.name)


def _new_buffer(m: Any, schema: Any, array: np.ndarray) -> int:
    buf = schema.BufferT()
    buf.data = np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=np.uint8)
    m.buffers.append(buf)
    return len(m.buffers) - 1


def _densify_op(m: Any, sub: Any, op: Any, schema: Any) -> None:
    src, dst = sub.tensors[op.inputs[0]], sub.tensors[op.outputs[0]]
    data = m.buffers[src.buffer].data if src.buffer < len(m.buffers) else None
    if src.sparsity is None or data is None or len(data) == 0:
        raise ModelFormatError(f"DENSIFY of '{_name(src)}' has no constant sparse input",
                               "only constant sparse weights are supported")
    dtype = _NUMPY.get(src.type)
    if dtype is None:
        raise ModelFormatError(f"sparse tensor '{_name(src)}' has unsupported type {src.type}")
    values = np.frombuffer(bytes(bytearray(data)), dtype=dtype)
    dense = densify(tuple(int(d) for d in dst.shape), src.sparsity, values)
    dst.buffer = _new_buffer(m, schema, dense)
    src.sparsity, src.buffer = None, 0  # now unused; buffer 0 is the empty one


def densify(shape: tuple[int, ...], sparsity: Any, values: np.ndarray) -> np.ndarray:
    """Expand TFLite's sparse format (``SparsityParametersT``: traversal order, block map, one
    DENSE or SPARSE_CSR metadata per traversed dimension) into a dense array of ``shape``; the
    same walk as TFLite's ``FormatConverter``."""
    order = [int(x) for x in sparsity.traversalOrder]
    block_map = [int(x) for x in (sparsity.blockMap if sparsity.blockMap is not None else [])]
    dims = sparsity.dimMetadata
    n = len(shape)
    if len(order) != n + len(block_map) or len(dims) != len(order):
        raise ModelFormatError("malformed sparsity parameters (traversal order, block map and metadata disagree)")
    block_size = {n + b: int(dims[order.index(n + b)].denseSize) for b in range(len(block_map))}
    out = np.zeros(shape, dtype=values.dtype)
    index = [0] * len(order)  # per expanded dimension
    pos = 0

    def segments(dm: Any) -> tuple[np.ndarray, np.ndarray]:
        return _int_vector(dm.arraySegments), _int_vector(dm.arrayIndices)

    tables = [segments(dm) if dm.format == 1 else None for dm in dims]

    def walk(level: int, prev: int) -> None:
        nonlocal pos
        if level == len(order):
            orig = index[:n]
            for b, d in enumerate(block_map):
                orig[d] = index[d] * block_size[n + b] + index[n + b]
            out[tuple(orig)] = values[pos]
            pos += 1
            return
        dm, dim = dims[level], order[level]
        if dm.format == 0:  # DENSE
            size = int(dm.denseSize)
            for i in range(size):
                index[dim] = i
                walk(level + 1, prev * size + i)
        else:  # SPARSE_CSR
            seg, idx = tables[level]  # type: ignore[misc]
            for j in range(int(seg[prev]), int(seg[prev + 1])):
                index[dim] = int(idx[j])
                walk(level + 1, j)

    walk(0, 0)
    if pos != values.size:
        raise ModelFormatError(f"sparse tensor holds {values.size} values, its metadata addresses {pos}")
    return out


def _int_vector(vec: Any) -> np.ndarray:
    """The ``values`` of a flatbuffer Int32Vector / Uint16Vector / Uint8Vector union."""
    return np.asarray(getattr(vec, "values", vec), dtype=np.int64)


def deconv_output_hw(in_hw: tuple[int, int], kernel_hw: tuple[int, int], strides: tuple[int, int],
                     padding: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """MediaPipe's output size and (top, left) cut of ``Convolution2DTransposeBias``."""
    out, cut = [], []
    for i, k, s in zip(in_hw, kernel_hw, strides):
        p = max(0, k - (i - 1) % s - 1) if padding == "SAME" else 0
        out.append(s * (i - 1) + k - p)
        cut.append(p // 2)
    return (out[0], out[1]), (cut[0], cut[1])


def _deconv_as_builtin(m: Any, sub: Any, op: Any, schema: Any) -> None:
    raw = bytes(bytearray(op.customOptions if op.customOptions is not None else b""))
    if len(raw) < 12:
        raise ModelFormatError(f"{MEDIAPIPE_DECONV} has {len(raw)} bytes of options, expected 12 (padding, strides)")
    pad_code, stride_w, stride_h = struct.unpack_from("<3i", raw)
    padding = _TFLITE_PADDING.get(pad_code)
    if padding is None or stride_w < 1 or stride_h < 1:
        raise ModelFormatError(f"{MEDIAPIPE_DECONV} has unsupported options (padding {pad_code}, strides {stride_h}×{stride_w})")
    x, w = sub.tensors[op.inputs[0]], sub.tensors[op.inputs[1]]
    n, h, wi, _c = (int(d) for d in x.shape)
    o, kh, kw, _i = (int(d) for d in w.shape)
    (oh, ow), _cut = deconv_output_hw((h, wi), (kh, kw), (stride_h, stride_w), padding)
    shape_t = schema.TensorT()
    shape_t.shape, shape_t.type, shape_t.name = [4], 2, (_name(sub.tensors[op.outputs[0]]) + "/output_shape").encode()
    shape_t.buffer = _new_buffer(m, schema, np.array([n, oh, ow, o], dtype=np.int32))
    sub.tensors.append(shape_t)
    opts = schema.TransposeConvOptionsT()
    opts.padding, opts.strideW, opts.strideH = _SCHEMA_PADDING[padding], stride_w, stride_h
    op.opcodeIndex = _opcode(m, schema, TRANSPOSE_CONV, version=3)  # version 3: the bias input
    op.inputs = [len(sub.tensors) - 1, op.inputs[1], op.inputs[0], op.inputs[2]]
    op.builtinOptionsType = schema.BuiltinOptions.TransposeConvOptions
    op.builtinOptions, op.customOptions = opts, None


def _opcode(m: Any, schema: Any, builtin: int, version: int) -> int:
    for i, c in enumerate(m.operatorCodes):
        if max(c.builtinCode, c.deprecatedBuiltinCode) == builtin and c.version >= version:
            return i
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, min(builtin, 127), version
    m.operatorCodes.append(code)
    return len(m.operatorCodes) - 1


def transpose_conv_bias_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, strides: tuple[int, int],
                                  padding: str) -> np.ndarray:
    """MediaPipe's ``TransposeConvBias`` loop (NHWC input, OHWI weights), vectorized over
    channels: each input pixel scatters ``x · w`` into the output at ``in·stride − cut + k``."""
    n, h, wi, _c = x.shape
    o, kh, kw, _ = w.shape
    (oh, ow), (cut_h, cut_w) = deconv_output_hw((h, wi), (kh, kw), strides, padding)
    out = np.broadcast_to(bias.astype(np.float64), (n, oh, ow, o)).copy()
    for fy in range(kh):
        for fx in range(kw):
            contrib = np.einsum("nhwc,oc->nhwo", x.astype(np.float64), w[:, fy, fx, :].astype(np.float64))
            for iy in range(h):
                y = iy * strides[0] - cut_h + fy
                if not 0 <= y < oh:
                    continue
                for ix in range(wi):
                    xx = ix * strides[1] - cut_w + fx
                    if 0 <= xx < ow:
                        out[:, y, xx, :] += contrib[:, iy, ix, :]
    return out.astype(np.float32)
