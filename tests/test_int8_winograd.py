"""Exact int8 3×3 layers as Winograd in float32 where the integer kernel multiplies no faster
than fp32 (the Pi 4's NEON without `sdot`, x86 without VNNI): the int8 input read as float and
padded with its zero point, the integer weights transformed, the sums rounded back to integers
and requantized as before — outputs within a step of onnxruntime. Boards with a fast integer
dot product (`sdot`, VNNI) keep the integer kernel by default; tuning measures both
(edgetune/_tvm/passes/int8_kernels.py, kernels/winograd.py: int8_variant)."""

from __future__ import annotations

import json

import models
import numpy as np
import pytest
import quant_models
from conftest import EXAMPLES, run_edgetune

from edgetune import _tvm
from edgetune._tvm.kernels.dot import dot_family
from edgetune.importer import import_model
from edgetune.package import PackageOptions, package
from edgetune.profiles import get_profile


@pytest.fixture(scope="module")
def qdq_cnn(tmp_path_factory: pytest.TempPathFactory):
    """A QDQ CNN (onnxruntime's static quantizer) whose second layer is a 3×3 stride-1
    convolution of 32 channels on 16×16 after a ReLU: its input's zero point is not 0, so the
    padding is the zero point; one model per activation type."""
    out = tmp_path_factory.mktemp("int8-winograd")
    cnn = models.small_cnn_onnx(out / "cnn.onnx", width=32, size=32)
    return {a: quant_models.qdq_onnx(cnn, out / f"cnn-{a}.onnx", activations=a) for a in ("int8", "uint8")}


def _winograd_kernels(manifest: dict) -> list[str]:
    return [k for k in manifest["kernels"] if "winograd" in k]


def _variants(model_path, device: str) -> dict[str, tuple[str, str]]:
    """Per kernel with a signature: (variant, the variant an untuned build gives it)."""
    from edgetune.tuning.tasks import model_workloads

    target = _tvm.make_target(get_profile(device).target_spec())
    model = import_model(model_path)
    return {wl.name: (wl.variant, wl.default_variant) for wl in
            model_workloads(model, target, _tvm.lowering_for(target, "auto").key) if wl.signature}


@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_pi4_runs_int8_3x3_layers_as_winograd_within_a_step(qdq_cnn, tmp_path, qemu, activations):
    result = package(PackageOptions(model=qdq_cnn[activations], device="pi4", output=tmp_path / "pkg"))
    v = result.verification
    assert v["status"] == "passed" and "qemu-aarch64" in v["executed_on"], v
    assert _winograd_kernels(result.manifest), result.manifest["kernels"]


def test_pi5_keeps_the_sdot_kernel_and_tuning_measures_both(qdq_cnn):
    pi5 = _variants(qdq_cnn["int8"], "pi5")
    variants = sorted(pi5.values())
    # one 3×3 stride-1 layer: its integer kernel (the untuned choice on sdot) and its Winograd one
    assert [v for v, _ in variants].count("winograd") == 1 and ("direct", "direct") in variants, pi5
    assert ("winograd", "direct") in variants, pi5
    pi4 = _variants(qdq_cnn["int8"], "pi4")
    assert ("winograd", "") in pi4.values() and ("direct", "") in pi4.values(), pi4  # the target's default: Winograd


def test_winograd_sums_are_the_integer_sums_on_a_cpu_without_dot_products(qdq_cnn, tmp_path):
    """x86 without VNNI: the same layer as Winograd; its outputs equal the integer kernel's
    (the VNNI host package) — the rounded sums are the exact ones for a layer this size."""
    targets = tmp_path / "targets"
    targets.mkdir()
    host = (EXAMPLES.parent / "targets" / "host.toml").read_text()
    (targets / "x86-haswell.toml").write_text(host.replace('mcpu = "native"', 'mcpu = "haswell"'))
    env = {"EDGETUNE_TARGETS_DIR": str(targets)}
    proc = run_edgetune("package", str(qdq_cnn["int8"]), "--device", "x86-haswell", "-o", str(tmp_path / "hsw"), "--json",
                        env=env)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads(proc.stdout)["manifest"]
    assert manifest["verification"]["status"] == "passed", manifest["verification"]
    assert _winograd_kernels(manifest), manifest["kernels"]
    vnni = package(PackageOptions(model=qdq_cnn["int8"], device="host", output=tmp_path / "host"))
    if dot_family(_tvm.make_target(get_profile("host").target_spec())) != "vnni":
        pytest.skip("this host has no AVX-512 VNNI: its package is the Winograd one too")
    assert not _winograd_kernels(vnni.manifest)
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    outs = [_run_host(tmp_path / d, x) for d in ("hsw", "host")]
    np.testing.assert_array_equal(outs[0], outs[1])


def _run_host(pkg, x):
    from edgetune_runtime import load

    module = load(pkg)
    return next(iter(module.run(image=x).values()))


@pytest.mark.parametrize(("device", "factor"), [("pi4", 2.0), ("pi5", 4.0)])
def test_int8_kernels_are_checked_against_their_own_peak(qdq_cnn, device, factor):
    """A dot-product kernel multiplies faster than fp32 FMAs: its timings are checked (and its
    share of peak shown) against the fp32 peak times its family's factor — VNNI kernels on this
    host ran at 2.5× the fp32 peak and were refused as 'impossible timing'."""
    from edgetune.tuning.record_check import PEAK_MARGIN, impossible_time
    from edgetune.tuning.tasks import model_workloads

    target = _tvm.make_target(get_profile(device).target_spec())
    wls = model_workloads(import_model(qdq_cnn["int8"]), target, _tvm.lowering_for(target, "auto").key)
    factors = {wl.kind: wl.peak_factor for wl in wls}
    assert factors["conv2d-int8"] == factor and factors["winograd"] == 1.0, factors
    conv = next(wl for wl in wls if wl.kind == "conv2d-int8")
    fast = conv.flops / (1.5 * PEAK_MARGIN * 10e9)  # 1.5 × what a 10 GFLOP/s fp32 peak allows
    assert impossible_time(conv.flops, fast, 10.0)
    assert impossible_time(conv.flops, fast, 10.0 * conv.peak_factor) is None
