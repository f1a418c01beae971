"""Attention written out as exporters write it, onto the fused attention kernel
(:mod:`..kernels.attention`).

The chain (BERT, MiniLM, ViT, Whisper, T5 as HF exports them)::

    q  = permute_dims(reshape(xq, [B, S, N, H]), [0, 2, 1, 3])
    kᵀ = permute_dims(reshape(xk, [B, T, N, H]), [0, 2, 3, 1])
    v  = permute_dims(reshape(xv, [B, T, N, Hv]), [0, 2, 1, 3])
    p  = softmax(matmul(q, kᵀ) [· c] [+ bias …], axis=-1)
    y  = reshape(permute_dims(matmul(p, v), [0, 2, 1, 3]), [B, S, N·Hv])   (or without the reshape)

becomes one kernel over ``xq``, ``xk``, ``xv`` (and the biases: a mask, T5's position bias) that
writes ``y``: the three transposes, the score matrix's round trips through memory and the
transpose after ·V are gone. Matched with static shapes; a token count that makes no whole
register tiles (ViT's 197) is computed over padded rows and keys
(:func:`..kernels.attention.padded`); symbolic lengths keep the unfused kernels. The unfused ops
are left to dead-code elimination (they stay, and run, if something else reads them)."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..kernels.attention import attention_fused, padded
from ..kernels.cpu import CpuFacts
from .common import FLOATS, OPAQUE, bindings_of, const_array, emit_like, module_pass, mutate_functions, op_name, relax, static_shape


def _perm(value: Any) -> list[int] | None:
    axes = getattr(getattr(value, "attrs", None), "axes", None)
    return None if axes is None else [int(a) for a in axes]


class _Match(NamedTuple):
    """One attention chain of a function, in its original variables."""

    xq: Any
    xk: Any
    xv: Any
    biases: list[Any]
    scale: float | None
    heads: int
    rank: int  # of the output: 3 ([B, S, N·Hv]) or 4 ([B, S, N, Hv])
    sizes: tuple[int, int]  # the rows and keys computed (:func:`..kernels.attention.padded`)


def _head_source(values: dict[Any, Any], var: Any, perm: list[int]) -> tuple[Any, int] | None:
    """``x`` (``[B, S, N·H]`` or ``[B, S, N, H]``) and N where ``var`` is ``permute_dims(x or
    reshape(x, [B, S, N, H]), perm)`` — the permutation possibly written as several in a row
    (``k.transpose(1, 2)`` then ``.transpose(-1, -2)``: [0, 2, 1, 3] then [0, 1, 3, 2]) —, else
    None."""
    value = values.get(var)
    if op_name(value) != "relax.permute_dims" or _perm(value) is None:
        return None
    total = _perm(value)
    while op_name(values.get(value.args[0])) == "relax.permute_dims" and _perm(values[value.args[0]]) is not None:
        value = values[value.args[0]]
        total = [_perm(value)[i] for i in total]  # permute(permute(x, a), b) = permute(x, a[b])
    if total != perm:
        return None
    split = value.args[0]
    shape = static_shape(split)
    if shape is None or len(shape) != 4:
        return None
    inner = values.get(split)
    if op_name(inner) == "relax.reshape":
        source = inner.args[0]
        src = static_shape(source)
        if src is not None and src == [shape[0], shape[1], shape[2] * shape[3]]:
            return source, shape[2]
    return split, shape[2]


def _logits(values: dict[Any, Any], var: Any) -> tuple[Any, list[Any], float | None] | None:
    """``(matmul, biases, scale)`` where ``var`` is ``matmul [· c] [+ bias …]`` (a scalar
    constant ``c``, adds in any order), else None."""
    biases: list[Any] = []
    scale = None
    while True:
        value = values.get(var)
        name = op_name(value)
        if name == "relax.matmul":
            return var, biases, scale
        if name == "relax.multiply" and scale is None:
            consts = [const_array(a) for a in value.args]
            at = next((n for n, c in enumerate(consts) if c is not None and c.size == 1 and str(c.dtype) in FLOATS), None)
            if at is None:
                return None
            scale, var = float(consts[at].reshape(())), value.args[1 - at]
            continue
        if name == "relax.add" and scale is None:
            a, b = value.args
            sides = [n for n, x in enumerate((a, b)) if _leads_to_matmul(values, x)]
            if len(sides) != 1:
                return None
            side = sides[0]
            biases.append((a, b)[1 - side])
            var = (a, b)[side]
            continue
        return None


def _leads_to_matmul(values: dict[Any, Any], var: Any) -> bool:
    for _ in range(8):
        value = values.get(var)
        name = op_name(value)
        if name == "relax.matmul":
            return True
        if name not in ("relax.add", "relax.multiply"):
            return False
        var = next((a for a in value.args if isinstance(a, relax.Var) and a in values), None)
    return False


def find_attention(func: Any, cpu: CpuFacts) -> dict[Any, _Match]:
    """The attention chains of ``func``: the variable that receives each chain's output
    (``y`` above) → its match."""
    values = bindings_of(func)
    found = {}
    for var, value in values.items():
        rank = 4
        if op_name(value) == "relax.reshape":
            inner_var, rank = value.args[0], 3
            inner = values.get(inner_var)
        else:
            inner_var, inner = var, value
        if op_name(inner) != "relax.permute_dims" or _perm(inner) != [0, 2, 1, 3]:
            continue
        pv = values.get(inner.args[0])
        if op_name(pv) != "relax.matmul":
            continue
        probs = values.get(pv.args[0])
        if op_name(probs) != "relax.nn.softmax" or int(probs.attrs.axis) not in (-1, 3):
            continue
        logits = _logits(values, probs.args[0])
        v = _head_source(values, pv.args[1], [0, 2, 1, 3])
        if logits is None or v is None:
            continue
        scores, biases, scale = logits
        qk = values[scores]
        q = _head_source(values, qk.args[0], [0, 2, 1, 3])
        k = _head_source(values, qk.args[1], [0, 2, 3, 1])
        if q is None or k is None or not (q[1] == k[1] == v[1]):
            continue
        out, merged = static_shape(var), static_shape(inner_var)  # [B, S, N·Hv] (rank 3), [B, S, N, Hv]
        shape = static_shape(scores)  # [B, N, S, T]
        if out is None or merged is None or shape is None:
            continue
        if rank == 3 and out != [merged[0], merged[1], merged[2] * merged[3]]:  # heads merged, nothing else
            continue
        if static_shape(probs) != shape:  # a bias that broadcast the scores to more batches
            continue
        bias_shapes = [static_shape(b) for b in biases]
        dtype = str(qk.ty.dtype)
        if any(s is None or len(s) > 4 for s in bias_shapes) or any(str(b.ty.dtype) != dtype for b in biases):
            continue
        if dtype not in FLOATS:
            continue
        sizes = padded(shape[2], shape[3], static_shape(pv)[-1], cpu.in_dtype(dtype))
        if sizes is None:
            continue
        found[var] = _Match(q[0], k[0], v[0], biases, scale, q[1], rank, sizes)
        if rank == 3:
            found.pop(inner_var, None)  # (matched alone first, as the 4-D output)
    return found


@relax.expr_functor.mutator
class _Rewrite(relax.PyExprMutator):
    def __init__(self, mod: Any, cpu: CpuFacts):
        super().__init__(mod)
        self.cpu, self.matches, self.count = cpu, {}, 0
        self.kernels: dict[tuple[Any, ...], Any] = {}  # one PrimFunc per shape: the layers share it

    def visit_function_(self, func: Any) -> Any:  # noqa: N802
        self.matches = find_attention(func, self.cpu)
        return super().visit_function_(func)

    def visit_var_binding_(self, binding: Any) -> None:  # noqa: N802
        match = self.matches.get(binding.var)
        if match is None:
            super().visit_var_binding_(binding)
            return
        args = [self.visit_expr(x) for x in (match.xq, match.xk, match.xv, *match.biases)]
        key = (match.heads, match.scale, match.rank, *(tuple(static_shape(a)) for a in args))
        if key in self.kernels:
            call = relax.call_tir(self.kernels[key], relax.Tuple(args), binding.var.ty)
        else:
            lanes = self.cpu.in_dtype(str(binding.var.ty.dtype)).lanes
            call = self.builder_.call_te(attention_fused, *args, heads=match.heads, scale=match.scale, lanes=lanes, output_rank=match.rank, rows_to=match.sizes[0],
                                         keys_to=match.sizes[1], primfunc_name_hint="attention")
            gv = self.kernels[key] = call.args[0]  # a kernel of its own: nothing fuses into it
            self.builder_.update_func(gv, self.builder_.get()[gv].with_attr("op_pattern", OPAQUE))
        new = emit_like(self.builder_, binding.var, call)
        self.set_var_remap(binding.var, new)
        self.count += 1


@module_pass(opt_level=0)
class FusedAttention:
    """The pass (see the module docstring); ``count``: chains rewritten by the last run."""

    def __init__(self, target: Any):
        self.cpu = CpuFacts.of(target)
        self.count = 0

    def transform_module(self, mod: Any, _ctx: Any) -> Any:
        mutator = _Rewrite(mod, self.cpu)
        out = mutate_functions(mod, mutator)
        self.count = mutator.count
        return relax.transform.DeadCodeElimination(["main"])(out) if mutator.count else out
