"""The on-device loader: runtime-only TVM, input validation, refusals, its command line."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import edgetune_runtime
from edgetune_runtime import InputError, LoaderError, PackageMismatchError


def _loader(*args, cwd=None):
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1")
    return subprocess.run([sys.executable, "-m", "edgetune_runtime", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_loader_needs_no_compiler_and_no_edgetune(host_package):
    code = (
        "import sys, numpy as np, edgetune_runtime, tvm\n"
        f"m = edgetune_runtime.load({str(host_package)!r})\n"
        "out = m.run(np.zeros((1, 3, 224, 224), 'float32'))\n"
        "print(tvm.base._RUNTIME_ONLY, 'tvm_compiler' in tvm.base._LOADED_LIBS,\n"
        "      any(k == 'edgetune' or k.startswith('edgetune.') for k in sys.modules), list(out))\n"
    )
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True False False ['softmaxout_1']"


def test_run_by_position_and_name(host_package):
    model = edgetune_runtime.load(host_package)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 224, 224)).astype("float32")
    a = model.run(x)["softmaxout_1"]
    b = model.run(data_0=x)["softmaxout_1"]
    assert a.shape == (1, 1000, 1, 1) and np.array_equal(a, b)


@pytest.mark.parametrize("args,kwargs,match", [
    ((np.zeros((1, 3, 224, 224), "float64"),), {}, "needs dtype float32"),
    ((np.zeros((1, 3, 112, 112), "float32"),), {}, r"needs shape \(1, 3, 224, 224\)"),
    ((), {"image": np.zeros((1, 3, 224, 224), "float32")}, "unknown input"),
    ((), {}, "takes 1 input"),
])
def test_input_validation(host_package, args, kwargs, match):
    with pytest.raises(InputError, match=match):
        edgetune_runtime.load(host_package).run(*args, **kwargs)


def _edited(host_package, tmp_path, **changes):
    pkg = tmp_path / "pkg"
    shutil.copytree(host_package, pkg)
    manifest = json.loads((pkg / "manifest.json").read_text())
    for key, value in changes.items():
        if key == "runtime_tvm":
            manifest["runtime"]["tvm"] = value
        else:
            manifest[key] = value
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    return pkg


def test_refuses_other_architecture(host_package, tmp_path):
    with pytest.raises(PackageMismatchError, match="built for aarch64") as info:
        edgetune_runtime.load(_edited(host_package, tmp_path, arch="aarch64"))
    assert "rebuild" in info.value.hint


def test_refuses_other_runtime_version(host_package, tmp_path):
    with pytest.raises(PackageMismatchError, match="needs TVM runtime 0.26.0"):
        edgetune_runtime.load(_edited(host_package, tmp_path, runtime_tvm="0.26.0"))


def test_refuses_other_format(host_package, tmp_path):
    with pytest.raises(PackageMismatchError, match="package format 99"):
        edgetune_runtime.load(_edited(host_package, tmp_path, format=99))


@pytest.mark.parametrize("archs, gpu, ok", [
    (["sm_87"], "8.7", True), (["sm_86"], "8.7", True),  # a cubin runs on its major's later minors
    (["sm_87"], "8.6", False), (["sm_87"], "9.0", False), (["sm_90"], "9.0", True),
    (["sm_100"], "10.0", True), (["sm_100"], "12.0", False), ([], "9.0", True),
])
def test_a_cuda_package_for_another_gpu_is_refused_by_name(archs, gpu, ok):
    from edgetune_runtime.loader import check_gpu

    manifest = {"runtime": {"kind": "cuda", "cuda_archs": archs}}
    if ok:
        check_gpu(manifest, gpu, "the GPU")
        return
    with pytest.raises(PackageMismatchError, match=f"built for {archs[0]}; the GPU is sm_{gpu.replace('.', '')}") as info:
        check_gpu(manifest, gpu, "the GPU")
    assert f"[target] arch is sm_{gpu.replace('.', '')}" in info.value.hint


def test_detects_damaged_library(host_package, tmp_path):
    pkg = _edited(host_package, tmp_path)
    with open(pkg / "model.so", "r+b") as fh:
        fh.seek(1000)
        fh.write(b"\0\1\2\3")
    with pytest.raises(LoaderError, match="does not match its checksum"):
        edgetune_runtime.load(pkg)


def test_cli_info_run_bench_check(host_package, tmp_path):
    info = _loader("info", str(host_package), "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["arch"] in ("x86_64", "aarch64")
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 3, 224, 224), "float32"))
    run = _loader("run", str(host_package), "--input", str(x), "--output", str(tmp_path / "y.npz"), "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["softmaxout_1"]["shape"] == [1, 1000, 1, 1]
    assert np.load(tmp_path / "y.npz")["softmaxout_1"].shape == (1, 1000, 1, 1)
    bench = _loader("bench", str(host_package), "--runs", "5", "--json")
    stats = json.loads(bench.stdout)
    assert bench.returncode == 0 and stats["latency"]["p50_ms"] > 0 and stats["latency"]["runs"] == 5
    check = _loader("check", str(host_package), "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["passed"] is True


def test_cli_errors_are_one_line(host_package, tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 3, 8, 8), "float32"))
    proc = _loader("run", str(host_package), "--input", str(x))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: input 'data_0' needs shape") and "Traceback" not in proc.stderr


def test_package_copy_of_loader_runs_standalone(host_package, tmp_path):
    # the loader copy shipped inside the package is the one that runs from its directory
    proc = subprocess.run([sys.executable, "-c",
                           "import sys; sys.path.insert(0, '.'); import edgetune_runtime as r; "
                           "print(r.__file__); print(r.load('.').check()['passed'])"],
                          capture_output=True, text=True, cwd=host_package, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split()
    assert lines[0].startswith(str(host_package)) and lines[1] == "True"
