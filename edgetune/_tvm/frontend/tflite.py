"""TFLite → Relax: TVM's converter, subclassed."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..constants import QUANTIZED_DATA_MOVEMENT
from ..core import copy_module, tvm
from .common import NodeConversionError, conversion_error, quiet_frontend, reason

COMPLEX64 = 8  # TFLite's TensorType of RFFT2D's output (edgetune writes it as a trailing axis of 2)


@functools.cache
def converter_class() -> Any:
    """The OperatorConverter subclass (built on first use: TVM is imported lazily)."""
    from tvm import relax
    from tvm.relax.frontend.tflite import tflite_frontend as fe

    class Converter(fe.OperatorConverter):
        _SUPPORTED_QUANTIZED_OPS = fe.OperatorConverter._SUPPORTED_QUANTIZED_OPS | QUANTIZED_DATA_MOVEMENT

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.convert_map = {name: self._named(name, fn) for name, fn in self.convert_map.items()}

        def _named(self, name: str, fn: Any) -> Any:
            """``fn`` with its failures naming the operator and its first output tensor."""
            def convert(op: Any) -> Any:
                try:
                    out = fn(op=op)
                    return self.bb.normalize(out) if isinstance(out, relax.Expr) else out
                except NodeConversionError:
                    raise
                except Exception as err:  # TVM's converters raise many types; each means "this op"
                    outputs = op.OutputsAsNumpy() if op.OutputsLength() else []
                    tensor = self.subgraph.Tensors(int(outputs[0])).Name().decode() if len(outputs) else "?"
                    raise NodeConversionError(f"{name} op (output '{tensor}'): {reason(err)}") from err

            return convert

        def convert_expand_dims(self, op: Any) -> Any:
            data, axis_tensor = self.get_input_tensors(op)
            axis = int(np.asarray(self.get_tensor_value(axis_tensor)).reshape(-1)[0])
            rank = len(data.tensor.ShapeAsNumpy())
            return relax.op.expand_dims(self.get_tensor_expr(data), axis if axis >= 0 else rank + 1 + axis)

        def convert_batch_matmul(self, op: Any) -> Any:
            """``adj_x``/``adj_y`` transposes, then a broadcasting matmul. TVM's converter looked a
            constant operand (a mel matrix, weights) up as a computed tensor and read shapes off
            expressions not yet normalised."""
            from tflite.BatchMatMulOptions import BatchMatMulOptions

            if self.is_quantized(op):
                raise NotImplementedError("quantized BATCH_MATMUL is not supported")
            options = _options(op, BatchMatMulOptions)
            flags = (options.AdjX(), options.AdjY()) if options is not None else (False, False)
            operands = []
            for tensor, adjoint in zip(self.get_input_tensors(op), flags):
                x = self.bb.normalize(self.get_tensor_expr(tensor))
                if adjoint:
                    rank = len(x.ty.shape.values)
                    x = relax.op.permute_dims(x, [*range(rank - 2), rank - 1, rank - 2])
                operands.append(x)
            return relax.op.matmul(*operands)

        def convert_gelu(self, op: Any) -> Any:
            """GELU in the form its options name: ``approximate`` is the tanh form (ai-edge-torch
            writes it for torch's ``GELU(approximate="tanh")``). TVM's converter wrote every
            GELU as the exact erf one, up to 4.7e-4 off per activation."""
            from tflite.GeluOptions import GeluOptions

            if self.is_quantized(op):
                return super().convert_gelu(op)
            options = _options(op, GeluOptions)
            (tensor,) = self.get_input_tensors(op)
            x = self.get_tensor_expr(tensor)
            approximate = options is not None and options.Approximate()
            return relax.op.nn.gelu_tanh(x) if approximate else relax.op.nn.gelu(x)

        def convert_prelu(self, op: Any) -> Any:
            """PRELU with its slope broadcast as it is. TVM's converter flattened the input to one
            axis and the slope to a constant the size of the input, so the op fused with nothing
            (a reshape after a convolution ends its fusion group) and read a full-size slope;
            MediaPipe's landmark models put one after nearly every convolution."""
            if self.is_quantized(op):
                return super().convert_prelu(op)
            data, alpha = self.get_input_tensors(op)
            x = self.get_tensor_expr(data)
            shape = [int(d) for d in data.tensor.ShapeAsNumpy()]
            slope_shape = [int(d) for d in alpha.tensor.ShapeAsNumpy()]
            slope = self.get_tensor_expr(alpha)
            if slope_shape and slope_shape[-1] == shape[-1] and all(d == 1 for d in slope_shape[:-1]):
                return relax.op.nn.prelu(x, relax.op.reshape(slope, [shape[-1]]), axis=len(shape) - 1)
            zero = relax.const(0, self.get_tensor_type_str(data.tensor.Type()))
            return relax.op.where(relax.op.greater_equal(x, zero), x, relax.op.multiply(x, slope))

        def convert_split_v(self, op: Any) -> Any:
            """SPLIT_V with its sizes resolved first: one size may be −1 (the rest of the axis),
            which TVM's converter folded into its split points as −1."""
            data, sizes_tensor, axis_tensor = self.get_input_tensors(op)
            shape = [int(d) for d in data.tensor.ShapeAsNumpy()]
            axis = int(np.asarray(self.get_tensor_value(axis_tensor)).reshape(-1)[0]) % len(shape)
            sizes = [int(v) for v in np.asarray(self.get_tensor_value(sizes_tensor)).reshape(-1)]
            if sizes.count(-1) == 1:
                sizes[sizes.index(-1)] = shape[axis] - (sum(sizes) + 1)
            points = [int(p) for p in np.cumsum(sizes)[:-1]]
            parts = relax.op.split(self.get_tensor_expr(data), points, axis)
            return relax.Tuple([relax.TupleGetItem(parts, i) for i in range(len(sizes))]) if len(sizes) > 1 else parts

        def convert_cast(self, op: Any) -> Any:
            """A CAST of a complex tensor (RFFT2D's [..., 2] of real and imaginary parts) is its
            real part, as TensorFlow casts complex to real (BirdNET's spectrogram); others TVM's."""
            (data,) = self.get_input_tensors(op)
            if data.tensor.Type() != COMPLEX64:
                return super().convert_cast(op)
            real = relax.op.squeeze(relax.op.strided_slice(self.get_tensor_expr(data), axes=[-1], begin=[0], end=[1]),
                                    axis=[-1])
            out = self.get_output_tensors(op)[0]
            dtype = self.get_tensor_type_str(out.tensor.Type())
            return real if dtype == "float32" else relax.op.astype(real, dtype)

        def convert_rfft2d(self, op: Any) -> Any:
            data, length = self.get_input_tensors(op)
            fft = [int(v) for v in np.asarray(self.get_tensor_value(length)).reshape(-1)]
            shape = [int(d) for d in data.tensor.ShapeAsNumpy()]
            return rfft2d(self.bb, self.get_tensor_expr(data), shape, fft)

    return Converter


def rfft2d(bb: Any, x: Any, shape: list[int], fft: list[int]) -> Any:
    """TFLite's RFFT2D of real ``x`` (``shape``) with ``fft`` = [rows, columns], as
    ``[..., rows, columns // 2 + 1, 2]`` (real, imaginary)."""
    from tvm import relax

    rows, cols = fft
    rank = len(shape)
    for axis, want in ((rank - 2, rows), (rank - 1, cols)):
        have = shape[axis]
        if have > want:
            x = bb.normalize(relax.op.strided_slice(x, axes=[axis], begin=[0], end=[want]))
        elif have < want:
            widths = [0] * (2 * rank)
            widths[2 * axis + 1] = want - have
            x = bb.normalize(relax.op.nn.pad(x, widths, pad_value=0.0))
    bins = cols // 2 + 1
    n, k = np.arange(cols)[:, None], np.arange(bins)[None, :]
    angle = 2 * np.pi * n * k / cols
    re = bb.normalize(relax.op.matmul(x, relax.const(np.cos(angle).astype(np.float32))))
    im = bb.normalize(relax.op.matmul(x, relax.const((-np.sin(angle)).astype(np.float32))))
    if rows > 1:  # a complex DFT over the rows: (C + iS)(re + i·im)
        m = np.arange(rows)
        turn = 2 * np.pi * m[:, None] * m[None, :] / rows
        c, s = relax.const(np.cos(turn).astype(np.float32)), relax.const((-np.sin(turn)).astype(np.float32))
        re, im = (bb.normalize(relax.op.subtract(relax.op.matmul(c, re), relax.op.matmul(s, im))),
                  bb.normalize(relax.op.add(relax.op.matmul(c, im), relax.op.matmul(s, re))))
    return relax.op.stack([re, im], axis=-1)


def _options(op: Any, kind: type) -> Any | None:
    """``op``'s builtin options read as ``kind`` (a ``tflite`` options class); None where the
    operator carries none (each field then at its schema default)."""
    raw = op.BuiltinOptions()
    if raw is None:
        return None
    options = kind()
    options.Init(raw.Bytes, raw.Pos)
    return options


def tflite_supported_ops() -> frozenset[str]:
    """TFLite builtin operator names edgetune's converter (TVM's, subclassed: :func:`converter_class`) converts."""
    tvm()
    return frozenset(converter_class()(None, None, None, None).convert_map)


def tflite_unsupported(model: Any) -> list[str]:
    """Everything in subgraph 0 the TFLite converter rejects up front (all at once)."""
    tvm()
    conv = converter_class()(model, model.Subgraphs(0), None, None)
    try:
        conv.check_unsupported_ops()
    except Exception as err:  # noqa: BLE001 — tvm.error.OpNotImplemented, or quantization errors
        return parse_unsupported(str(err))
    return []


def parse_unsupported(text: str) -> list[str]:
    """The operator names in the frontend's message: each line lists them after its colon, up to
    the sentence's end (the explanation after it names no operator)."""
    import re

    ops = set()
    for line in text.splitlines():
        _head, sep, rest = line.partition(": ")
        if sep:
            ops.update(re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", re.split(r"\.(?:\s|$)", rest)[0]))
    return sorted(ops) or [text.strip().splitlines()[0]]


def tflite_to_relax(model: Any, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str]) -> Any:
    """Convert a parsed tflite.Model to a Relax IRModule (weights are constants); int8 layers
    computed as LiteRT computes them (:func:`..passes.pipeline.integer_layers`), the quantization scheme kept on the
    module (:func:`quantization_scheme`)."""
    tvm()
    from tvm.relax.frontend.tflite import tflite_frontend

    try:
        with quiet_frontend():
            mod = tflite_frontend.from_tflite(model, shape_dict=dict(shapes), dtype_dict=dict(dtypes),
                                              op_converter=converter_class())
    except Exception as err:
        raise conversion_error("TFLite", err) from err
    from ..passes.pipeline import integer_layers

    return integer_layers(mod, tflite=True)


def rename_inputs(mod: Any, mapping: Mapping[str, str]) -> Any:
    """Rename parameters of ``main`` (names TVM's CUDA codegen cannot carry, e.g. ``a/b:0``)."""
    tvm()
    from tvm import relax

    func = mod["main"]
    new_params = [relax.Var(mapping.get(p.name, p.name), p.ty) for p in func.params]
    pairs = list(zip(func.params, new_params))

    @relax.expr_functor.mutator
    class _Rename(relax.PyExprMutator):
        def visit_var_(self, op: Any) -> Any:  # noqa: N802 — TVM's visitor naming
            return next((new for old, new in pairs if op.same_as(old)), op)

    body = _Rename(mod).visit_expr(func.body)
    new = relax.Function(new_params, body, func.ret_ty, func.is_pure, func.attrs)
    out = copy_module(mod)
    out[out.get_global_var("main")] = new
    return out
