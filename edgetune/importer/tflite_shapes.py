"""TFLite files whose shapes are decided at run time, made static for TVM.

TensorFlow's converter writes an input with a dynamic dimension as shape signature ``-1`` and
stored size 1, and every tensor after it with sizes computed for that 1; shapes computed in the
graph (``SHAPE`` → ``STRIDED_SLICE`` → ``PACK`` → ``RESHAPE``) are tensors TVM's frontend cannot
read. Once the input shapes are fixed (``--input-shape``; a dynamic leading batch dimension
alone defaults to 1), LiteRT computes every shape: it runs the model once on zeros with all
tensors kept, and

* each tensor's shape (and signature) becomes the size LiteRT allocated for it;
* each tensor that depends on no input *value* — computed from constants and input shapes only
  (shape arithmetic; float16 weights behind ``DEQUANTIZE``) — becomes a constant holding what
  LiteRT computed, and the ops that produced it go. int8 ``DEQUANTIZE``/``QUANTIZE`` of
  constants stay: the int8 import reads them.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..errors import InputShapeError

SHAPE, RANK, DEQUANTIZE, QUANTIZE = 77, 110, 6, 114
READ_VARIABLE, VAR_HANDLE, CALL_ONCE, ASSIGN_VARIABLE = 143, 142, 129, 144
_NEVER_STATIC = {READ_VARIABLE, VAR_HANDLE, CALL_ONCE, ASSIGN_VARIABLE}
_FLOAT16 = 1


def input_signature(model: Any) -> list[tuple[str, list[int], list[int]]]:
    """(name, stored shape, shape signature) of each input of a parsed ``tflite.Model``; the
    signature is the stored shape where the file has none."""
    sub = model.Subgraphs(0)
    out = []
    for i in range(sub.InputsLength()):
        t = sub.Tensors(sub.Inputs(i))
        shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        signature = [int(d) for d in t.ShapeSignatureAsNumpy()] if t.ShapeSignatureLength() else list(shape)
        out.append((t.Name().decode(), shape, signature))
    return out


def choose_shapes(model: Any, overrides: dict[str, tuple[int, ...]]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """Input shapes: ``overrides``, the stored shape of a static input, 1 for a dynamic leading
    batch dimension (with a note); InputShapeError for other dynamic dimensions, with the
    ``--input-shape`` that fixes them."""
    shapes, notes = {}, []
    for name, stored, signature in input_signature(model):
        if name in overrides:
            shape = tuple(overrides[name])
            if len(shape) != len(stored):
                raise InputShapeError(f"--input-shape for '{name}' has {len(shape)} dimensions, the model's input has "
                                      f"{len(stored)}")
            clash = [(s, g) for s, g in zip(shape, signature) if g != -1 and s != g]
            if clash:
                raise InputShapeError(f"--input-shape {name}={','.join(map(str, shape))} contradicts the model's fixed "
                                      f"dims {signature}")
        elif -1 not in signature:
            shape = tuple(stored)
        elif signature.index(-1) == 0 and signature.count(-1) == 1:
            shape = (1, *stored[1:])
            notes.append(f"input '{name}': dynamic batch dimension set to 1")
        else:
            example = ",".join("1" if d == -1 else str(d) for d in signature)
            raise InputShapeError(f"input '{name}' has dynamic dimensions {signature}",
                                  f"fix them with --input-shape {name}={example} (use your real sizes)")
        shapes[name] = shape
    return shapes, notes


def needs_freezing(model: Any, shapes: dict[str, tuple[int, ...]]) -> bool:
    """Whether the file's stored shapes differ from ``shapes``, or it computes shapes or holds
    float16 weights behind DEQUANTIZE."""
    if any(tuple(stored) != shapes[name] or -1 in signature for name, stored, signature in input_signature(model)):
        return True
    sub = model.Subgraphs(0)
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        kind = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if kind in (SHAPE, RANK):
            return True
        if kind == DEQUANTIZE and sub.Tensors(int(op.Inputs(0))).Type() == _FLOAT16:
            return True
    return False


def freeze(data: bytes, shapes: dict[str, tuple[int, ...]]) -> tuple[bytes, list[str]]:
    """The model with static shapes and its input-independent tensors as constants (module
    docstring), and a note of what changed."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    values, sizes = _run(data, shapes)
    m = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    sub = m.subgraphs[0]
    code = {i: max(c.builtinCode, c.deprecatedBuiltinCode) for i, c in enumerate(m.operatorCodes)}
    for index, tensor in enumerate(sub.tensors):
        if index in sizes and tensor.type != 13:  # resource handles keep their (empty) shape
            tensor.shape = list(sizes[index])
            tensor.shapeSignature = list(sizes[index])
    static = _static_tensors(m, sub, code)
    kept, folded = [], 0
    for op in sub.operators:
        kind = code[op.opcodeIndex]
        outs = [o for o in op.outputs if o >= 0]
        keep_int8 = kind in (DEQUANTIZE, QUANTIZE) and sub.tensors[op.inputs[0]].type != _FLOAT16
        if outs and all(o in static and o in values for o in outs) and not keep_int8 and kind not in _NEVER_STATIC:
            for o in outs:
                _make_constant(m, schema, sub.tensors[o], values[o])
            folded += 1
            continue
        kept.append(op)
    sub.operators = kept
    builder = flatbuffers.Builder(len(data) * 2 + 1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    notes = ["tensor shapes computed by LiteRT for the input shapes"]
    if folded:
        notes.append(f"{folded} op(s) computing shapes or float16 weights folded into constants")
    return bytes(builder.Output()), notes


def _run(data: bytes, shapes: dict[str, tuple[int, ...]]) -> tuple[dict[int, np.ndarray], dict[int, tuple[int, ...]]]:
    """Every tensor's value and shape after one LiteRT run on zeros with ``shapes``."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "preserve_all_tensors is for debugging"
        interp: Any = Interpreter(model_content=data, experimental_preserve_all_tensors=True,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    try:
        for d in interp.get_input_details():
            interp.resize_tensor_input(d["index"], list(shapes[d["name"]]))
        interp.allocate_tensors()
        for d in interp.get_input_details():
            interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        interp.invoke()
    except (RuntimeError, ValueError) as err:
        raise InputShapeError(f"LiteRT cannot run the model with input shapes {dict(shapes)}: "
                              f"{str(err).strip().splitlines()[0][:300]}") from err
    values, sizes = {}, {}
    for d in interp.get_tensor_details():
        sizes[d["index"]] = tuple(int(x) for x in d["shape"])
        try:
            values[d["index"]] = np.array(interp.get_tensor(d["index"]))
        except ValueError:  # tensors without data (resources, unused)
            continue
    return values, sizes


def _static_tensors(m: Any, sub: Any, code: dict[int, int]) -> set[int]:
    """Tensors that depend on no input value: constants (an empty one too: a RESHAPE to a scalar
    reads a shape tensor of zero elements, which the file stores without data), shapes of
    tensors, and what ops make of those alone."""
    inputs = set(sub.inputs)
    produced = {o for op in sub.operators for o in op.outputs}
    static = {i for i, t in enumerate(sub.tensors) if i not in inputs and (
        (t.buffer and _has_data(m.buffers[t.buffer])) or (i not in produced and _empty(t)))}
    for op in sub.operators:  # operators are in execution order
        kind = code[op.opcodeIndex]
        if kind in _NEVER_STATIC:
            continue
        if kind in (SHAPE, RANK) or all(i < 0 or i in static for i in op.inputs):
            static.update(o for o in op.outputs if o >= 0)
    return static


def _empty(tensor: Any) -> bool:
    shape = list(tensor.shape) if tensor.shape is not None else []
    return bool(shape) and int(np.prod(shape)) == 0


def _has_data(buffer: Any) -> bool:
    return buffer.data is not None and len(buffer.data) > 0


def _make_constant(m: Any, schema: Any, tensor: Any, value: np.ndarray) -> None:
    buf = schema.BufferT()
    buf.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), np.uint8)
    m.buffers.append(buf)
    tensor.buffer = len(m.buffers) - 1
    tensor.shape = list(value.shape)
    tensor.shapeSignature = list(value.shape)
