"""Models made the way today's exporters make them, with random weights (no model hub here):
Ultralytics' YOLO export (detect, pose, segment heads; YOLO11 and YOLO26 architectures, from
their YAML files), timm classifiers through torch's legacy and dynamo exporters, transformers'
T5 encoder, and Hugging Face decoders with a key/value cache through optimum's ONNX export.

Each export runs in a subprocess (the exporters import torch and write progress to stdout) and is
kept in ``tests/.models/exported/`` (ignored by git), keyed by its arguments, so a test or a
benchmark run exports once. :func:`available` says whether the exporters are installed
(``pip install '.[dev]'`` installs them).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

CACHE = Path(__file__).resolve().parent / ".models" / "exported"

_YOLO = """
import os, sys
os.environ["YOLO_OFFLINE"] = "1"
from ultralytics import YOLO
import torch
torch.manual_seed(0)
out, cfg, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
opset = int(sys.argv[4]) if sys.argv[4] else None
path = YOLO(cfg).export(format="onnx", imgsz=size, opset=opset, simplify=False, dynamic=False)
os.replace(path, out)
"""

_TIMM = """
import sys, torch, timm
out, name, size, dynamo = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "dynamo"
torch.manual_seed(0)
model = timm.create_model(name, pretrained=False).eval()
x = torch.randn(1, 3, size, size)
if dynamo:  # torch's dynamo exporter (opset 20: Gelu, LayerNormalization as ops; weights in a .data file)
    torch.onnx.export(model, (x,), out, dynamo=True, opset_version=20, external_data=True)
else:
    torch.onnx.export(model, (x,), out, dynamo=False, opset_version=17, input_names=["input"], output_names=["logits"])
"""


_T5 = """
import sys, torch
from transformers import T5Config, T5EncoderModel
out, layers, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
config = T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=layers, num_heads=8)  # t5-small's widths
model = T5EncoderModel(config).eval()
ids, mask = torch.randint(0, 32128, (1, seq)), torch.ones(1, seq, dtype=torch.int64)
torch.onnx.export(model, (ids, mask), out, dynamo=False, opset_version=17, input_names=["input_ids", "attention_mask"],
                  output_names=["last_hidden_state"])
"""


_DECODER = """
import sys, tempfile, torch
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig
from optimum.exporters.onnx import main_export
out, arch = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
if arch == "gpt2":
    config = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=128)
else:  # Llama: rotary embeddings, grouped-query attention (2 key/value heads of 4), RMS norm, SiLU gate
    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=128,
                         intermediate_size=256, vocab_size=1000, max_position_embeddings=128)
with tempfile.TemporaryDirectory() as tmp:
    AutoModelForCausalLM.from_config(config).eval().save_pretrained(tmp + "/hf")
    main_export(tmp + "/hf", tmp + "/onnx", task="text-generation-with-past")
    import shutil
    shutil.move(tmp + "/onnx/model.onnx", out)
"""


def available(*modules: str) -> bool:
    """Whether every exporter module (``ultralytics``, ``timm``, ``torch``) is importable."""
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _export(script: str, args: list[str], name: str, timeout: float = 900) -> Path:
    key = hashlib.sha256("\0".join([script, *args]).encode()).hexdigest()[:10]
    out = CACHE / f"{name}-{key}.onnx"
    if out.is_file():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(f".partial{os.getpid()}.onnx")
    env = dict(os.environ, YOLO_OFFLINE="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", script, str(partial), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=CACHE, env=env)
    if proc.returncode or not partial.is_file():
        raise RuntimeError(f"exporting {name} failed: {(proc.stderr or proc.stdout).strip()[-800:]}")
    data = partial.with_name(partial.name + ".data")
    if data.is_file():  # torch names the weights file after the model file: keep the pair together
        import onnx

        model = onnx.load(str(partial))
        onnx.save(model, str(out), save_as_external_data=True, location=out.name + ".data")
        partial.unlink()
        data.unlink()
    else:
        partial.replace(out)
    return out


def yolo(cfg: str = "yolo11n.yaml", size: int = 320, opset: int | None = None) -> Path:
    """An Ultralytics export of ``cfg`` (``yolo11n.yaml``, ``yolo11n-pose.yaml``,
    ``yolo11n-seg.yaml``, ``yolo26n.yaml``…) at ``size``², random weights."""
    return _export(_YOLO, [cfg, str(size), str(opset or "")], Path(cfg).stem + f"-{size}")


def timm_model(name: str = "mobilenetv3_large_100", size: int = 224, dynamo: bool = False) -> Path:
    """A timm classifier exported by torch (``dynamo``: the dynamo exporter at opset 20)."""
    return _export(_TIMM, [name, str(size), "dynamo" if dynamo else "legacy"], f"{name}-{size}-{'dynamo' if dynamo else 'legacy'}")


def t5_encoder(layers: int = 6, seq: int = 32) -> Path:
    """transformers' T5 encoder at t5-small's widths (random weights), exported by torch."""
    return _export(_T5, [str(layers), str(seq)], f"t5-encoder-{layers}x{seq}")


def decoder_with_past(arch: str = "gpt2") -> Path:
    """A two-layer causal decoder (``gpt2`` or ``llama``; random weights) as optimum exports it
    for ``text-generation-with-past``: ``input_ids``, ``attention_mask``, ``position_ids`` and
    ``past_key_values.N.key / .value`` in, ``logits`` and ``present.N.*`` out, every length a
    dynamic axis."""
    return _export(_DECODER, [arch], f"{arch}-decoder-with-past")
