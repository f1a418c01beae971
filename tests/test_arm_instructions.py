"""Executed aarch64 instructions per inference, counted exactly under qemu-user: a regression
metric for the ARM kernels that does not depend on how busy the machine is.

Each model below is packaged for the Pi 4 and run under the dynamic ``qemu-aarch64`` with
benchmarks/armsim's counting plugin; the count per inference must stay within TOLERANCE of the
number stored in tests/golden/arm_instructions.json. When kernels change on purpose, update the
number there with the reason (``EDGETUNE_UPDATE_GOLDEN=1`` rewrites it; say why in the commit).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import armsim  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "arm_instructions.json"
TOLERANCE = 0.03


def _mobilenet(out: Path) -> Path:
    import zoo

    return zoo.mobilenet_v3(out / "mobilenet_v3-96.onnx", size=96, classes=100)


def _encoder(out: Path) -> Path:
    import zoo_transformers as zt

    return zt.bert(out / "bert-2x128-32.onnx", layers=2, hidden=128, heads=4, seq=32)


def _cnn(out: Path) -> Path:  # a 3×3 stride-1 layer of 32 channels: Winograd on Arm
    import models

    return models.small_cnn_onnx(out / "cnn-32x48.onnx", width=32, size=48)


def _cnn_int8(out: Path) -> Path:  # the same, quantized as onnxruntime's users do: NEON int8 kernels
    import quant_models

    return quant_models.qdq_onnx(_cnn(out), out / "cnn-32x48-qdq.onnx")


def _mobilenet_int8(out: Path) -> Path:  # hard-swish as table lookups in the int8 epilogues (NEON tbl)
    import quant_models

    return quant_models.qdq_onnx(_mobilenet(out), out / "mobilenet_v3-96-qdq.onnx")


MODELS = {"mobilenet_v3@96": _mobilenet, "bert-2x128@32": _encoder, "cnn-32x48": _cnn, "cnn-32x48-int8": _cnn_int8,
          "mobilenet_v3@96-int8": _mobilenet_int8}


@pytest.fixture(scope="module")
def counting(qemu: None) -> None:
    missing = [t for t in armsim.missing_tools() if not t.startswith("llvm")]
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (scripts/install-system-deps.sh installs them)")


@pytest.mark.parametrize("name", list(MODELS))
def test_instructions_per_inference_on_pi4(name: str, counting: None, tmp_path: Path) -> None:
    from edgetune.package import PackageOptions, package

    model = MODELS[name](tmp_path)
    pkg = tmp_path / "pkg"
    package(PackageOptions(model=model, device="pi4", output=pkg, verify=False))
    # --no-verify packages carry no reference inputs: the benchmark's helper wants them, so write them
    from edgetune.check import write_reference
    from edgetune.importer import import_model

    write_reference(pkg, import_model(model), 0)
    inputs = armsim.package_inputs(pkg, tmp_path / "inputs.npz")
    counts = armsim.count(armsim.BOARDS["pi4"], "edgetune", pkg, inputs, runs=2, cache=tmp_path / "counts")
    assert counts.regions == 2
    # kept: the same run again is read back, not emulated (an emulation would not finish in 1 ms)
    again = armsim.count(armsim.BOARDS["pi4"], "edgetune", pkg, inputs, runs=2, timeout=1e-3, cache=tmp_path / "counts")
    assert (again.regions, again.blocks, again.maps) == (counts.regions, counts.blocks, counts.maps)
    measured = counts.instructions
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {"models": {}}
    if os.environ.get("EDGETUNE_UPDATE_GOLDEN"):
        golden["models"][name] = round(measured)
        GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")
        pytest.skip(f"stored {measured:,.0f} instructions for {name}")
    stored = golden["models"].get(name)
    assert stored, f"no stored count for {name}: run with EDGETUNE_UPDATE_GOLDEN=1 once"
    change = measured / stored - 1
    assert change <= TOLERANCE, (
        f"{name} on pi4 now executes {measured:,.0f} instructions per inference, {100 * change:+.1f} % against the "
        f"stored {stored:,}: a kernel got slower on ARM (or update {GOLDEN.name} on purpose, with the reason)")
    assert change >= -TOLERANCE, (
        f"{name} on pi4 now executes {measured:,.0f} instructions per inference, {100 * change:+.1f} % against the "
        f"stored {stored:,}: store the new number in {GOLDEN.name} (EDGETUNE_UPDATE_GOLDEN=1) with the reason, so "
        "a later regression is measured from it")


def test_load_widths() -> None:
    """Bytes per load, as the estimate's bytes-per-multiply-accumulate column counts them."""
    cases = {"ldr q0, [x1]": 16, "ldp q0, q1, [x2, #32]": 32, "ldr s3, [x0, #4]": 4, "ldrb w1, [x2]": 1,
             "ldrsw x1, [x2]": 4, "ld1 { v0.4s, v1.4s }, [x0]": 32, "ld1r { v2.4s }, [x3]": 4,
             "ld1 { v0.s }[1], [x0]": 4, "ldp x1, x2, [sp]": 16, "fmla v0.4s, v1.4s, v2.4s": 0}
    assert {ins: armsim._bytes_loaded(ins) for ins in cases} == cases


@pytest.mark.skipif(not (armsim.LLVM / "llvm-mca").is_file() or shutil.which("gcc") is None, reason="needs llvm-19")
def test_estimate_of_a_known_loop() -> None:
    """A block of 8 FMLAs into 8 accumulators (enough to cover the FMLA latency) executed 1000
    times: one 128-bit FMLA pipe (A72) issues them in ~8 cycles, two (A76) in ~4; all of them
    count as multiply-accumulates."""
    block = [f"4e31ce0{d}" for d in range(8)]  # fmla v0..v7.4s, v16.4s, v17.4s
    counts = armsim.Counts(1, [(0x1000, 1000, block)])
    est = armsim.estimate(counts, [armsim.BOARDS["pi4"], armsim.BOARDS["pi5"]])
    assert est["instructions"] == 8000 and est["fmla_share"] == 1.0
    assert 7000 <= est["boards"]["pi4"]["cycles"] <= 9000, est["boards"]["pi4"]
    assert 3500 <= est["boards"]["pi5"]["cycles"] <= 4500, est["boards"]["pi5"]


@pytest.mark.skipif(not (armsim.LLVM / "llvm-mca").is_file() or shutil.which("gcc") is None, reason="needs llvm-19")
def test_a_loop_body_cut_by_the_translator_is_estimated_whole() -> None:
    """qemu ends a translated block at a 4 KiB page boundary and where its buffer fills: a loop
    body of 8 loads and 8 FMLAs is counted as two or three blocks, wherever the code's placement
    cuts it. The core overlaps the loads with the FMLAs; each piece given to llvm-mca alone would
    not (8 + 8 cycles on the A72 instead of ~8). Joined, the pieces estimate as the whole body,
    however it was cut; pieces split by a branch stay apart."""
    loads = [f"{0x3dc00000 | k << 10 | (16 + k):08x}" for k in range(8)]  # ldr q16+k, [x0, #16k]
    fmlas = [f"{0x4e38cc00 | (16 + k) << 5 | k:08x}" for k in range(8)]  # fmla vk.4s, v16+k.4s, v24.4s
    tail = ["f1000421", f"{0x54000001 | ((-17) & 0x7FFFF) << 5:08x}"]  # subs x1, x1, #1; b.ne (loop)
    pi4 = armsim.BOARDS["pi4"]

    def cycles(blocks: list[tuple[int, int, list[str]]]) -> float:
        return armsim.estimate(armsim.Counts(1, blocks), [pi4])["boards"]["pi4"]["cycles"]

    whole = cycles([(0x0FE0, 1000, loads + fmlas + tail)])
    split = cycles([(0x0FE0, 1000, loads), (0x1000, 1000, fmlas + tail)])
    assert split == pytest.approx(whole, rel=1e-9)
    for cuts in ((3, 11), (5, 6), (1, 17)):  # three pieces, cut elsewhere (the last ends in the branch)
        body = loads + fmlas + tail
        pieces = [(0x0FE0 + 4 * a, 1000, body[a:b]) for a, b in zip((0, *cuts), (*cuts, len(body)))]
        assert cycles(pieces) == pytest.approx(whole, rel=1e-9), cuts
    assert armsim.join_split_blocks([(0x0FE0, 1000, loads), (0x1000, 1200, fmlas + tail)]) == [
        (0x0FE0, 1000, loads + fmlas + tail), (0x1000, 200, fmlas + tail)]  # 200 entries not from the loads
    branch = tail[-1]
    apart = cycles([(0x0FDC, 1000, loads + [branch]), (0x1000, 1000, fmlas + tail)])
    assert apart > 1.5 * whole, (apart, whole)


@pytest.mark.skipif(not (armsim.LLVM / "llvm-mca").is_file() or shutil.which("gcc") is None, reason="needs llvm-19")
def test_branches_far_into_the_estimated_code_keep_every_block() -> None:
    """Blocks are given to llvm-mca one after another in one file; a branch's target must be made
    local ("."), or past tbnz's ±32 KiB range from the file's start llvm-mca cannot encode it and
    drops the block — and every later block's cycles then belonged to the block before it (a
    YOLO-style int8 package's estimate was 5 % high that way)."""
    nops = ["d503201f"] * 9000  # 36 KB of code before the branch
    tbnz, bne = "37000040", "54000041"  # tbnz w0, #0, +8; b.ne +8
    asm = armsim._disassemble([nops, ["f1000421", tbnz], ["f1000421", bne]])
    assert asm[1] == ["subs x1, x1, #0x1", "tbnz w0, #0x0, ."] and asm[2][-1] == "b.ne .", asm[1:]
    assert len(armsim._mca(asm, armsim.BOARDS["pi4"])) == 3
