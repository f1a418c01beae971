"""Pruned 1×1 convolutions onto the sparse kernel (:mod:`..kernels.sparse`), with their epilogue."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import copy_module
from ..kernels.cpu import CpuFacts
from ..kernels.sparse import Csr, Step, sparse_conv1x1, sparse_enough
from .common import const_array, emit_like, immediate, ints, module_pass, op_name, readers_of, relax, static_shape


def _weights(call: Any) -> np.ndarray | None:
    """The ``[out, in]`` weights of a float32 NHWC 1×1 stride-1 convolution without padding,
    dilation or groups, over a static shape; else None."""
    if op_name(call) != "relax.nn.conv2d":
        return None
    a = call.attrs
    weights = const_array(call.args[1])
    layout = str(a.kernel_layout)
    if (weights is None or a.data_layout != "NHWC" or a.out_layout != "NHWC" or sorted(layout) != sorted("OHWI")
            or int(a.groups) != 1 or ints(a.strides) != [1, 1] or any(ints(a.padding)) or ints(a.dilation) != [1, 1]):
        return None
    if static_shape(call.args[0]) is None or any(str(t.ty.dtype) != "float32" for t in (call, call.args[0])):
        return None
    if a.out_dtype and str(a.out_dtype) not in ("", "float32"):
        return None
    weights = weights.transpose([layout.index(axis) for axis in "OHWI"])
    if weights.shape[1:3] != (1, 1) or weights.dtype != np.float32:
        return None
    return np.ascontiguousarray(weights[:, 0, 0, :])


def _step(value: Any, cur: Any, co: int, shape: list[int], residual_taken: bool) -> tuple[Step, Any] | None:
    """The epilogue step ``value`` (a reader of ``cur``) is, with its operand (a bias array or the
    residual variable), else None."""
    name = op_name(value)
    if name == "relax.nn.relu":
        return Step("relu"), None
    if name == "relax.clip":
        lo, hi = (immediate(v) for v in value.args[1:3])
        if lo is None or hi is None:
            return None
        return Step("clip", lo, hi), None
    if name == "relax.nn.pad":
        a = value.attrs
        widths = ints(a.pad_width)  # (before, after) per NHWC axis
        if str(a.pad_mode) != "constant" or float(a.pad_value) != 0.0 or len(widths) != 8 or any(widths[:2] + widths[6:]) \
                or min(widths) < 0:
            return None
        return Step("pad", pads=(widths[2], widths[3], widths[4], widths[5])), None
    if name not in ("relax.add", "relax.maximum", "relax.minimum") or str(value.ty.dtype) != "float32" \
            or static_shape(value) != shape:
        return None
    other = value.args[1] if value.args[0].same_as(cur) else value.args[0]
    if other.same_as(cur):
        return None
    bias = const_array(other)
    if name != "relax.add":  # a clip written as maximum / minimum with a scalar (ONNX Clip's inputs)
        if bias is None or bias.size != 1 or bias.dtype != np.float32:
            return None
        bound = float(bias.reshape(-1)[0])
        return (Step("max", lo=bound) if name == "relax.maximum" else Step("min", hi=bound)), None
    if bias is not None:
        if bias.dtype != np.float32 or bias.size not in (1, co) or (bias.size == co and bias.shape[-1] != co):
            return None
        return Step("bias"), np.ascontiguousarray(np.broadcast_to(bias.reshape(-1), (co,)), dtype=np.float32)
    if not residual_taken and isinstance(other, relax.Var) and static_shape(other) == shape \
            and str(other.ty.dtype) == "float32":
        return Step("residual"), other
    return None


def _layers(func: Any) -> tuple[dict[Any, tuple[Any, np.ndarray, list[tuple[Step, Any]]]], set[Any], dict[Any, Any]]:
    """Each sparse layer's last variable → (the convolution, its weights, the epilogue steps
    with their operands), the values bound before each layer's last (computed by its kernel),
    and each layer's last variable → the variable of a zero pad of it that its kernel writes as
    well (below). A layer takes a reader only when it is its value's one reader, inside the
    dataflow block. A layer's output read by a zero pad (a depthwise layer's input) and
    otherwise only as other sparse layers' residual is written padded once: the pad's pass over
    it goes, and those layers read their residual inside the border."""
    readers = readers_of(func)
    bound = {}
    for block in func.body.blocks:
        for b in block.bindings:
            bound[b.value] = b.var
    layers, inner, claimed, residual_of = {}, set(), set(), {}
    for block in func.body.blocks:
        for b in block.bindings:
            weights = _weights(b.value) if isinstance(b.value, relax.Call) else None
            if weights is None or not sparse_enough(weights):
                continue
            shape = static_shape(b.value)
            cur, steps, values = b.var, [], [b.value]
            while isinstance(cur, relax.DataflowVar) and len(readers.get(cur, [])) == 1:
                reader = readers[cur][0]
                if reader is None or reader not in bound or reader in claimed:
                    break  # (claimed: the residual add of two layers' outputs is the earlier one's)
                step = _step(reader, cur, weights.shape[0], shape, any(s.kind == "residual" for s, _ in steps))
                if step is None:
                    break
                steps.append(step)
                values.append(reader)
                if step[0].kind == "residual":
                    residual_of.setdefault(step[1], []).append(reader)
                cur = bound[reader]
                if step[0].kind == "pad":
                    break  # (the output's shape is the padded one from here)
            layers[cur] = (b.value, weights, steps)
            inner.update(values[:-1])
            claimed.update(values)
    padded, borders = {}, {}
    for last, (_, weights, steps) in layers.items():
        users = readers.get(last, [])
        pads = [r for r in users if r is not None and op_name(r) == "relax.nn.pad"]
        others = [r for r in users if r is None or op_name(r) != "relax.nn.pad"]
        if (not isinstance(last, relax.DataflowVar) or (steps and steps[-1][0].kind == "pad") or len(pads) != 1
                or not others or len(others) != len(residual_of.get(last, [])) or set(others) != set(residual_of[last])
                or not isinstance(bound[pads[0]], relax.DataflowVar)):
            continue
        step = _step(pads[0], last, weights.shape[0], static_shape(last), True)
        if step is None:
            continue
        steps.append(step)
        inner.add(pads[0])
        padded[last], borders[last] = bound[pads[0]], step[0].pads
    for _, _, steps in layers.values():
        for k, (step, operand) in enumerate(steps):
            if step.kind == "residual" and operand in borders:
                steps[k] = (Step("residual", pads=borders[operand]), operand)
    return layers, inner, padded


@relax.expr_functor.mutator
class _Sparse(relax.PyExprMutator):
    def __init__(self, mod: Any, layers: dict[Any, Any], inner: set[Any], padded: dict[Any, Any]):
        super().__init__(mod)
        self.layers, self.inner, self.padded = layers, inner, padded

    def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802 — TVM's visitor naming
        if binding.var in self.layers:
            conv, weights, steps = self.layers[binding.var]
            csr = Csr.of(weights)
            shape = static_shape(conv.args[0])
            plan = tuple(s for s, _ in steps)
            pixels = int(np.prod(shape[:3]))
            flops = pixels * (2.0 * np.count_nonzero(weights) + weights.shape[0] * len(plan))
            kernel = sparse_conv1x1(tuple(shape), weights.shape[0], csr.stored, plan, flops)
            gv = self.builder_.add_func(kernel, "sparse_conv1x1")
            args = [self.visit_expr(conv.args[0]), *(relax.const(a) for a in (csr.vals, csr.cols, csr.rows))]
            args += [relax.const(v) for s, v in steps if s.kind == "bias"]
            args += [self.visit_expr(v) for s, v in steps if s.kind == "residual"]
            shape = self.padded[binding.var].ty.shape if binding.var in self.padded else binding.value.ty.shape
            out = emit_like(self.builder_, binding.var, relax.call_tir(gv, args, relax.TensorType(shape, "float32")))
            self.set_var_remap(binding.var, out)  # (padded: its readers are the pad and residual steps that know it)
            if binding.var in self.padded:
                self.set_var_remap(self.padded[binding.var], out)
            return None
        if binding.value in self.inner:
            return None  # computed by its layer's kernel
        return super().visit_var_binding_(binding)


@module_pass(opt_level=0)
class SparseConvolutions:
    """Pruned 1×1 convolutions (:func:`..kernels.sparse.sparse_enough`) and the bias, ReLU /
    clip, residual add and zero padding after them as one sparse kernel, on AArch64 CPUs (where the Pi
    estimate measured it; on x86 the dense kernel's wide FMAs are left alone)."""

    def __init__(self, target: Any):
        self.cpu = CpuFacts.of(target)

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        if not self.cpu.aarch64:
            return mod
        for gv, func in list(mod.functions_items()):
            if not isinstance(func, relax.Function):
                continue
            layers, inner, padded = _layers(func)
            if not layers:
                continue
            mutator = _Sparse(mod, layers, inner, padded)
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
            mod = mutator.builder_.get()
        return copy_module(mod)

