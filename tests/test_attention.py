"""Attention as one kernel: the chain exporters write (reshape → transpose → Q·Kᵀ → scale →
bias/mask → softmax → ·V → transpose → reshape) runs as the fused attention kernel wherever its
shapes make whole tiles, on x86 and NEON (pi4, under qemu), against onnxruntime; shapes that do
not tile run on padded rows and keys; a symbolic length (a range package's one library) keeps
the unfused kernels (tests/test_ranges.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import zoo_transformers as zt
from models import checked_package

from edgetune._tvm.kernels.attention import padded, tiles
from edgetune._tvm.kernels.cpu import CpuFacts

DEVICES = ["host", pytest.param("pi4", marks=pytest.mark.qemu)]


def _kinds(model: Path, tmp_path: Path, device: str, request) -> dict:
    sched = checked_package(model, tmp_path, device, request).manifest["schedules"]
    assert not sched.get("naive"), sched
    return sched["kinds"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["bert", "whisper", "t5"])
def test_attention_chains_run_as_one_kernel(tmp_path, request, device, form):
    # BERT: scores / √d + mask; Whisper: q · d^-½ before the scores, no mask; T5: no scale, a
    # constant position bias [1, H, S, S] and a mask. Two layers share one kernel.
    if form == "bert":
        model = zt.bert(tmp_path / "m.onnx", layers=2, hidden=64, heads=4, seq=32)
    elif form == "whisper":
        model = zt.whisper_encoder(tmp_path / "m.onnx", layers=2, hidden=64, heads=4, mels=16, frames=64)
    else:
        model = zt.t5_encoder(tmp_path / "m.onnx", layers=2, hidden=64, heads=4, seq=16)
    kinds = _kinds(model, tmp_path, device, request)
    assert kinds.get("attention") == 1, kinds
    assert "softmax" not in kinds and "matmul" not in kinds, kinds


def test_cross_attention_with_a_causal_mask(tmp_path, request):
    # a decoder: causal self-attention over 16 tokens (mask [1, 1, 16, 16]) and cross-attention
    # of 16 queries over 32 encoder states — rows and keys of different counts
    model = zt.t5_decoder(tmp_path / "m.onnx", layers=1, hidden=64, heads=4, seq=16, enc_seq=32)
    kinds = _kinds(model, tmp_path, "host", request)
    assert kinds.get("attention") == 2 and "softmax" not in kinds, kinds


@pytest.mark.parametrize("device", DEVICES)
def test_a_prime_token_count_runs_on_padded_rows_and_keys(tmp_path, request, device):
    # ViT's 16 patches + the class token: 17 queries and keys make no register tile; the kernel
    # computes 24 rows and 32 keys (AVX-512; NEON: 24 and 20), the softmax and ·V over the 17
    # real keys, the output cropped to 17 rows
    model = zt.vit(tmp_path / "m.onnx", layers=1, hidden=64, heads=4, image=32, patch=8)
    kinds = _kinds(model, tmp_path, device, request)
    assert kinds.get("attention") == 1 and "softmax" not in kinds, kinds


def _chain(path: Path, key_perms: list[list[int]], merged: list[int]) -> Path:
    """The attention chain over inputs q, k, v [1, 16, 64] (4 heads of 16): K's transpose as
    ``key_perms`` (one or several in a row), the heads' output reshaped to ``merged``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = []

    def heads(x: str, perms: list[list[int]]) -> str:
        nodes.append(helper.make_node("Reshape", [x, "split"], [f"{x}0"]))
        for n, perm in enumerate(perms):
            nodes.append(helper.make_node("Transpose", [f"{x}{n}"], [f"{x}{n + 1}"], perm=perm))
        return f"{x}{len(perms)}"

    q, k, v = heads("q", [[0, 2, 1, 3]]), heads("k", key_perms), heads("v", [[0, 2, 1, 3]])
    nodes += [helper.make_node("MatMul", [q, k], ["s"]),
              helper.make_node("Mul", ["s", "scale"], ["ss"]),
              helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", v], ["o"]),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge"], ["y"])]
    inits = [numpy_helper.from_array(np.array([1, 16, 4, 16], np.int64), "split"),
             numpy_helper.from_array(np.array(merged, np.int64), "merge"),
             numpy_helper.from_array(np.array(0.25, np.float32), "scale")]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16, 64]) for n in "qkv"]
    graph = helper.make_graph(nodes, "attn", vi, [helper.make_tensor_value_info("y", TensorProto.FLOAT, merged)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def test_an_output_reshaped_otherwise_keeps_its_reshape(tmp_path, request):
    # the heads' output [1, 16, 4, 16] reshaped to [1, 64, 16] (not the usual [1, 16, 64]): the
    # kernel writes [1, 16, 4, 16] and the reshape stays after it
    model = _chain(tmp_path / "m.onnx", [[0, 2, 3, 1]], [1, 64, 16])
    assert _kinds(model, tmp_path, "host", request).get("attention") == 1


def test_kt_written_as_two_transposes(tmp_path, request):
    # k.transpose(1, 2) then .transpose(-1, -2), as an exporter that does not fold them writes Kᵀ
    model = _chain(tmp_path / "m.onnx", [[0, 2, 1, 3], [0, 1, 3, 2]], [1, 16, 64])
    kinds = _kinds(model, tmp_path, "host", request)
    assert kinds.get("attention") == 1 and "softmax" not in kinds, kinds


def test_tiles_fill_half_the_registers_and_refuse_ragged_shapes():
    avx512 = CpuFacts(lanes=16, registers=32, fma_latency=4, x86=True)
    neon = CpuFacts(lanes=4, registers=32, fma_latency=4, aarch64=True)
    avx2 = CpuFacts(lanes=8, registers=16, fma_latency=4, x86=True)
    # (row block, score rows, score keys, output rows, output columns)
    assert tiles(256, 256, 32, avx512) == (32, 8, 32, 8, 32)  # MiniLM: 8 × 2 and 8 × 2 vectors
    assert tiles(256, 256, 64, avx512) == (32, 8, 32, 4, 64)  # BERT-base: 4 × 4 vectors of output
    assert tiles(256, 256, 64, neon) == (32, 8, 8, 4, 16)
    assert tiles(256, 256, 64, avx2) == (32, 4, 16, 2, 32)  # 16 registers: 8 accumulators
    assert tiles(16, 16, 64, avx512) == (16, 16, 16, 4, 64)  # one vector of keys, 16 rows
    assert tiles(17, 17, 64, avx512) is None  # prime
    assert tiles(122, 122, 64, avx512) is None  # 2 × 61: two-row tiles
    assert tiles(64, 20, 64, avx512) is None  # keys not whole vectors
    # …computed padded: rows to whole score tiles, keys to whole vectors
    assert padded(257, 257, 64, avx512) == (264, 272)
    assert padded(197, 197, 64, neon) == (200, 200)
    assert padded(122, 122, 64, avx512) == (128, 128)
    assert padded(256, 256, 64, avx512) == (256, 256)  # tiles as they are
    assert padded(1, 16, 64, avx512) is None  # one query (a decoder's step): not padded to 8
