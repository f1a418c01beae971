"""Streaming TFLite models keep their state in resource variables: an init subgraph run once
(``CALL_ONCE``) assigns each variable its first value, and every invocation reads it
(``READ_VARIABLE``) and writes the next one (``ASSIGN_VARIABLE``). A compiled package has no
mutable state, so — as for the LSTM voice-activity detectors whose state is an input and an
output — each variable becomes a model **input** (its value before the call) and a model
**output** (its value after), and the caller feeds the output back on the next call.

The first value is what the model itself reads on its first invocation (LiteRT runs the
original once, all tensors kept), so initializers computed by the init subgraph work too; the
package stores it (``state.npz``) and the loader hands it out (``Model.initial_state()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ModelError

VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE, CALL_ONCE = 142, 143, 144, 129


@dataclass(frozen=True)
class StateVariable:
    """One resource variable as a state input / output pair."""

    variable: str  # the variable's shared name
    input: str  # tensor name of its value before the call (a model input now)
    output: str  # tensor name of its value after the call (a model output now)
    initial: np.ndarray


def has_variables(model: Any) -> bool:
    """Whether a parsed ``tflite.Model`` reads or assigns resource variables in subgraph 0."""
    sub = model.Subgraphs(0)
    codes = {max(model.OperatorCodes(i).BuiltinCode(), model.OperatorCodes(i).DeprecatedBuiltinCode())
             for i in range(model.OperatorCodesLength())}
    if not codes & {READ_VARIABLE, ASSIGN_VARIABLE}:
        return False
    return any(_code(model, sub.Operators(i)) in (READ_VARIABLE, ASSIGN_VARIABLE) for i in range(sub.OperatorsLength()))


def _code(model: Any, op: Any) -> int:
    code = model.OperatorCodes(op.OpcodeIndex())
    return max(code.BuiltinCode(), code.DeprecatedBuiltinCode())


def variables_as_state(data: bytes) -> tuple[bytes, tuple[StateVariable, ...]]:
    """The model with its variables as inputs and outputs (module docstring), and the pairs."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    sub = m.subgraphs[0]
    code = {i: max(c.builtinCode, c.deprecatedBuiltinCode) for i, c in enumerate(m.operatorCodes)}
    handles = {op.outputs[0]: _variable_name(op) for op in sub.operators if code[op.opcodeIndex] == VAR_HANDLE}
    reads: dict[str, int] = {}
    assigns: dict[str, int] = {}
    kept = []
    for op in sub.operators:
        kind = code[op.opcodeIndex]
        if kind in (VAR_HANDLE, CALL_ONCE):
            continue
        if kind in (READ_VARIABLE, ASSIGN_VARIABLE):
            name = handles.get(op.inputs[0])
            if name is None:
                raise ModelError("a READ_VARIABLE / ASSIGN_VARIABLE reads a handle no VAR_HANDLE made")
            table = reads if kind == READ_VARIABLE else assigns
            target = op.outputs[0] if kind == READ_VARIABLE else op.inputs[1]
            if name in table or (kind == READ_VARIABLE and name in assigns):
                raise ModelError(f"variable '{name}' is read or assigned more than once per call, or read after "
                                 "its assignment: only one read, then one assignment, can become state in and out")
            table[name] = target
            continue
        kept.append(op)
    sub.operators = kept
    pairs = []
    for name in sorted(set(reads) | set(assigns)):
        if name not in reads or name not in assigns:
            raise ModelError(f"variable '{name}' is {'read' if name in reads else 'assigned'} but never "
                             f"{'assigned' if name in reads else 'read'}: it cannot become state in and out")
        sub.tensors[reads[name]].name = name
        sub.inputs = [*sub.inputs, reads[name]]
        sub.tensors[assigns[name]].name = f"{name}_next"
        sub.outputs = [*sub.outputs, assigns[name]]
        pairs.append((name, reads[name]))
    builder = flatbuffers.Builder(len(data) * 2 + 1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    initial = _first_values(data, [index for _name, index in pairs])
    state = tuple(StateVariable(name, name, f"{name}_next", value) for (name, _i), value in zip(pairs, initial))
    return bytes(builder.Output()), state


def _variable_name(op: Any) -> str:
    opts = op.builtinOptions
    shared = getattr(opts, "sharedName", None) if opts is not None else None
    container = getattr(opts, "container", None) if opts is not None else None
    name = shared.decode() if isinstance(shared, bytes) else str(shared or "")
    prefix = container.decode() if isinstance(container, bytes) else str(container or "")
    return f"{prefix}/{name}".strip("/") or f"variable_{op.outputs[0]}"


def _first_values(data: bytes, tensors: list[int]) -> list[np.ndarray]:
    """The values the original model's READ_VARIABLE ops give on its first invocation."""
    import warnings

    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "preserve_all_tensors is for debugging"
        interp: Any = Interpreter(model_content=data, experimental_preserve_all_tensors=True,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
    interp.invoke()
    return [np.array(interp.get_tensor(i)) for i in tensors]
