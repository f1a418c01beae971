"""ONNX → Relax: TVM's importer with edgetune's converters in front of its map (recurrent
layers, :mod:`.onnx_ops`, :mod:`.onnx_loop`), a failing node named."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core import tvm
from .common import NodeConversionError, conversion_error, quiet_frontend, reason

# Converted while TVM 0.27's frontend walks the graph (If, Constant), not through its converter map.
_ONNX_DIRECT = frozenset({"If", "Constant", "Loop"})  # Loop: edgetune's (:mod:`.onnx_loop`)


def onnx_supported_ops() -> frozenset[str]:
    """ONNX op types (default domain) that convert: TVM's converter map, ``If`` (which TVM's
    frontend handles while walking the graph), edgetune's recurrent layers and its own
    converters (:mod:`.onnx_ops`)."""
    tvm()
    from tvm.relax.frontend.onnx import onnx_frontend

    from .onnx_ops import CONVERTERS
    from .recurrent import GATES

    return frozenset(onnx_frontend._get_convert_map()) | _ONNX_DIRECT | frozenset(GATES) | frozenset(CONVERTERS)


def onnx_importer() -> Any:
    """TVM's ONNX graph importer, with edgetune's LSTM/GRU/RNN converters (sequences up to
    ``recurrent.UNROLL_MAX_STEPS`` steps unrolled, as read at conversion) and :mod:`.onnx_ops`
    in front of its map; a node that fails to convert is named in the error."""
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from . import onnx_loop, onnx_ops, recurrent

    class Importer(fe.ONNXGraphImporter):
        def _check_for_unsupported_ops(self, graph: Any) -> None:
            known = onnx_supported_ops()
            missing = sorted({n.op_type for n in graph.node if n.op_type not in known})
            if missing:
                raise tvm().error.OpNotImplemented(f"not supported: {', '.join(missing)}")

        def _convert_operator(self, op_name: str, inputs: Any, attrs: dict, opset: int) -> Any:
            try:
                if op_name in recurrent.GATES:
                    return self.bb.normalize(recurrent.convert(self.bb, op_name, inputs, attrs,
                                                               recurrent.UNROLL_MAX_STEPS))
                if op_name in onnx_ops.CONVERTERS:
                    return self.bb.normalize(onnx_ops.CONVERTERS[op_name](self.bb, list(inputs), attrs))
                if op_name == "Loop":
                    return self.bb.normalize(onnx_loop.convert_loop(self, list(inputs), attrs))
                return super()._convert_operator(op_name, inputs, attrs, opset)
            except NodeConversionError:
                raise
            except Exception as err:  # TVM's converters raise many types; each means "this node"
                name = attrs.get("tvm_custom", {}).get("name") or "?"
                raise NodeConversionError(f"{op_name} node '{name}': {reason(err)}") from err

    return Importer


def onnx_opset(model: Any) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def onnx_to_relax(model: Any, shapes: Mapping[str, tuple[int | str, ...]], dtypes: Mapping[str, str],
                  bounds: Mapping[str, tuple[int, int]] | None = None) -> Any:
    """Convert an ONNX ModelProto (names already sanitized, checked by the importer) to a Relax
    IRModule, weights embedded. Short recurrent sequences are unrolled, longer ones loop
    (:mod:`.recurrent`). A model with a data-dependent ``If`` keeps its
    ``relax.If``; the bindings around it are regrouped into dataflow blocks so they fuse.

    A dimension given as a name is symbolic (a range of lengths): one variable per name, shared
    by every input that names it, its (min, max) from ``bounds`` recorded on ``main`` so that
    memory is planned for the longest."""
    tvm()
    from tvm import relax, tirx

    symbols = {name: tirx.Var(name, "int64") for dims in shapes.values() for name in dims if isinstance(name, str)}
    typed = {k: [symbols[d] if isinstance(d, str) else d for d in dims] for k, dims in shapes.items()}
    importer = onnx_importer()
    try:
        with quiet_frontend():
            mod = importer(typed, dict(dtypes)).from_onnx(model.graph, onnx_opset(model))
            if any(n.op_type == "If" for n in model.graph.node):
                mod = relax.transform.ConvertToDataflow(min_size=1)(mod)
    except Exception as err:  # TVM raises many types; all mean "could not convert"
        raise conversion_error("ONNX", err) from err
    if symbols:
        spans = {name: (bounds or {}).get(name) for name in symbols}
        if None in spans.values():
            raise ValueError(f"symbolic dimensions without bounds: {sorted(n for n, s in spans.items() if s is None)}")
        mod["main"] = (mod["main"].with_attr("tir_var_upper_bound", {n: hi for n, (_lo, hi) in spans.items()})
                       .with_attr("tir_var_lower_bound", {n: lo for n, (lo, _hi) in spans.items()})
                       .with_attr("tir_non_negative_var", list(symbols)))
    from ..passes.pipeline import integer_layers

    return integer_layers(mod, tflite=False)
