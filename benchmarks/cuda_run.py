"""edgetune's CUDA path on a real NVIDIA GPU: packages built here, run there by the on-device loader.

No Jetson is at hand, and the host that builds has no GPU. When a machine with an NVIDIA GPU is
lent, this runs the same route a Jetson package takes — kernels compiled to a cubin by nvcc on
a GPU-less host, loaded by ``edgetune_runtime`` from the runtime bundle, no compiler and no TVM
compiler library on the GPU machine — with a stand-in profile (``benchmarks/cuda/gpu-sm90.toml``: the GPU's
sm arch, an x86-64 host) in place of the Jetson's sm_87 + aarch64::

    # here: build the packages and a runtime bundle for the GPU machine's Python into DIR
    .venv/bin/python benchmarks/cuda_run.py prepare DIR [--profile gpu-sm90] [--python 3.12]
    # on the GPU machine, with nothing of edgetune installed (the bundle is on PYTHONPATH):
    python3 benchmarks/cuda_run.py measure DIR --json OUT.json
    # here: the table from that JSON, saved as benchmarks/results/cuda_run.json
    .venv/bin/python benchmarks/cuda_run.py report OUT.json

``measure`` runs, for each package, the loader's reference check (outputs against onnxruntime's,
computed here when the package was built), its timing (median of ``--runs`` after warm-up, the
GPU synchronised per run) and the per-kernel profile; and it loads a package whose kernels are
for a Jetson Orin's GPU (sm_87, ``benchmarks/cuda/gpu-sm87.toml``) to see that the loader
refuses it with a clear message before the driver would, and what the driver says when the
loader's check is bypassed. A table is printed; JSON written.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TARGETS = HERE / "cuda"
# name: (how it is made, input shape override or None). Small enough that the packages and the
# runtime bundle travel together to a lent machine (64 MiB there).
MODELS: dict[str, str] = {
    "squeezenet": "examples/squeezenet.onnx (fp32 CNN)",
    "squeezenet-int8": "squeezenet through onnxruntime's static QDQ quantizer",
    "bert-small@64": "BERT-style encoder, 2 layers x 256, 64 tokens (tests/zoo_transformers.py)",
    "bert-small@64-int8": "the same, dynamically quantized (MatMulInteger / DynamicQuantizeLinear)",
    "vit-tiny": "ViT-style encoder, 2 layers x 192, 64x64 image, patch 8 (65 tokens)",
    "t5-small@32": "T5-style encoder (RMS norm, relative position bias), 2 layers x 128, 32 tokens",
    "whisper-small@100": "Whisper-style encoder (convolution front end), 2 layers x 128, 80 mels x 200 frames",
}


# ---------------------------------------------------------------- prepare (the host, no GPU)


def _model(name: str, work: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    import quant_models
    import zoo_transformers as zt

    if name == "squeezenet":
        return REPO / "examples" / "squeezenet.onnx"
    if name == "squeezenet-int8":
        return quant_models.qdq_onnx(REPO / "examples" / "squeezenet.onnx", work / "squeezenet-qdq.onnx")
    if name.startswith("bert-small@64"):
        model = zt.bert(work / "bert-small.onnx", layers=2, hidden=256, heads=4, seq=64, vocab=1000)
        return zt.dynamic_int8(model, work / "bert-small-int8.onnx") if name.endswith("-int8") else model
    if name == "vit-tiny":
        return zt.vit(work / "vit-tiny.onnx", layers=2, hidden=192, heads=3, image=64, patch=8)
    if name == "t5-small@32":
        return zt.t5_encoder(work / "t5-small.onnx", layers=2, hidden=128, heads=4, seq=32)
    if name == "whisper-small@100":
        return zt.whisper_encoder(work / "whisper-small.onnx", layers=2, hidden=128, heads=4, mels=80, frames=200)
    raise SystemExit(f"unknown model {name!r}: {', '.join(MODELS)}")


def _package(model: Path, profile: str, out: Path) -> dict[str, Any]:
    env = dict(os.environ, EDGETUNE_TARGETS_DIR=str(TARGETS))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "edgetune", "package", str(model), "--device", profile, "-o", str(out),
                           "--force"], capture_output=True, text=True, env=env)
    took = time.perf_counter() - start
    if proc.returncode:
        return {"built": False, "error": (proc.stderr.strip().splitlines() or ["?"])[-1], "build_s": round(took, 1)}
    return {"built": True, "build_s": round(took, 1), "mb": round(sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e6, 1)}


def prepare(args: argparse.Namespace) -> None:
    from edgetune.bundle import runtime_bundle

    out: Path = args.dir
    out.mkdir(parents=True, exist_ok=True)
    bundle = runtime_bundle("x86_64", args.python)
    runtime = out / "runtime"
    shutil.rmtree(runtime, ignore_errors=True)
    # the GPU machine's own numpy serves, and C++ headers and sources are for compiling: what may
    # travel to a lent machine is 64 MiB in all (the bundle's numpy alone is 60 MB)
    shutil.copytree(bundle, runtime, ignore=shutil.ignore_patterns("numpy", "numpy.libs", "numpy-*", "bin", "3rdparty",
                                                                   "include", "src"))
    built: dict[str, Any] = {"profile": args.profile, "python": args.python, "packages": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = _model(name, Path(tmp))
            built["packages"][name] = info = _package(model, args.profile, out / "packages" / name)
            print(f"{name}: {info}", flush=True)
        # the same model with kernels for a Jetson Orin's GPU (sm_87), to see how the loader and
        # the driver treat a package for another GPU than the one at hand
        import models as test_models

        small = test_models.exporter_style_onnx(Path(tmp) / "small.onnx")
        built["other_gpu"] = _package(small, "gpu-sm87", out / "other-gpu" / "small-sm87")
    (out / "prepared.json").write_text(json.dumps(built, indent=2))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20
    print(f"prepared {out} ({size:.0f} MiB)")


# ---------------------------------------------------------------- measure (the GPU machine)


def _loader(args: list[str], runtime: Path, cwd: Path | None = None) -> tuple[int, Any, str]:
    env = dict(os.environ, PYTHONPATH=str(runtime), TVM_USE_RUNTIME_LIB="1")
    proc = subprocess.run([sys.executable, "-m", "edgetune_runtime", *args, "--json"], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        data = None
    return proc.returncode, data, proc.stderr.strip()[-2000:]


def _gpu() -> str:
    proc = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                          capture_output=True, text=True)
    return proc.stdout.strip() or proc.stderr.strip()


def _bypassed(package: Path, runtime: Path) -> str:
    """What the driver says about a package of another GPU's kernels, with the loader's check skipped."""
    code = ("import edgetune_runtime.loader as L\n"
            "L.check_gpu = lambda *args: None\n"
            f"print(L.load({str(package)!r}).check()['passed'])")
    env = dict(os.environ, PYTHONPATH=str(runtime), TVM_USE_RUNTIME_LIB="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    err = [line for line in lines if "CUDA" in line or "Error" in line]
    return (err or lines or ["?"])[-1][:300]


def measure(args: argparse.Namespace) -> None:
    root: Path = args.dir.resolve()
    runtime = root / "runtime"
    result: dict[str, Any] = {"gpu": _gpu(), "python": platform.python_version(), "rows": {}}
    print(f"GPU: {result['gpu']}", flush=True)
    for package in sorted((root / "packages").iterdir()):
        row: dict[str, Any] = {}
        rc, info, err = _loader(["info", str(package)], runtime)
        row["info"] = info if rc == 0 else err
        rc, check, err = _loader(["check", str(package)], runtime)
        row["check"] = check if check is not None else {"passed": False, "error": err}
        rc, bench, err = _loader(["bench", str(package), "--runs", str(args.runs), "--profile"], runtime)
        row["bench"] = bench if bench is not None else {"error": err}
        result["rows"][package.name] = row
        print(f"{package.name}: check {row['check'].get('passed')}, p50 "
              f"{(row['bench'].get('latency') or {}).get('p50_ms', row['bench'].get('error'))} ms", flush=True)
    other = root / "other-gpu" / "small-sm87"
    if other.is_dir():
        rc, _, err = _loader(["check", str(other)], runtime)
        result["other_gpu"] = {"loader": err.splitlines()[0] if err else f"exit {rc}, no message",
                               "driver (loader's check bypassed)": _bypassed(other, runtime)}
    text = json.dumps(result, indent=2, default=str)
    if args.json:
        args.json.write_text(text)
    report_rows(result)


# ---------------------------------------------------------------- report


def report_rows(result: dict[str, Any]) -> None:
    print(f"\nGPU: {result['gpu']} (Python {result['python']})")
    print(f"{'package':22} {'check':>6} {'max abs err':>12} {'median ms':>10} {'kernels':>8}  top kernel (share)")
    for name, row in result["rows"].items():
        check, bench = row.get("check") or {}, row.get("bench") or {}
        errs = [o.get("max_abs_error", float("nan")) for o in (check.get("outputs") or {}).values()]
        kernels = [k for k in (bench.get("profile") or {}).get("kernels") or [] if k.get("kind") != "runtime"]
        top = kernels[0] if kernels else None
        top_text = f"{top['name'][:44]} ({top['pct']:.0f} %)" if top else str(bench.get("error", ""))[-60:]
        p50 = (bench.get("latency") or {}).get("p50_ms", float("nan"))
        print(f"{name:22} {str(check.get('passed')):>6} {max(errs, default=float('nan')):>12.3g} {p50:>10.3f} "
              f"{len(kernels):>8}  {top_text}")
    for key, text in result.get("other_gpu", {}).items():
        print(f"sm_87 package on this GPU, {key}: {text}")


def report(args: argparse.Namespace) -> None:
    result = json.loads(args.json_file.read_text())
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.json_file.resolve() != (RESULTS / "cuda_run.json").resolve():
        shutil.copy2(args.json_file, RESULTS / "cuda_run.json")
    report_rows(result)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="build the packages and the runtime bundle (here, no GPU needed)")
    prep.add_argument("dir", type=Path)
    prep.add_argument("--profile", default="gpu-sm90", help="the GPU's profile (benchmarks/cuda/ or a user directory)")
    prep.add_argument("--python", default="3.12", help="the GPU machine's python3 (major.minor)")
    prep.add_argument("--models", default=",".join(MODELS))
    meas = sub.add_parser("measure", help="run the packages on this machine's GPU")
    meas.add_argument("dir", type=Path)
    meas.add_argument("--runs", type=int, default=100)
    meas.add_argument("--json", type=Path)
    rep = sub.add_parser("report", help="the table from a measure JSON")
    rep.add_argument("json_file", type=Path)
    args = p.parse_args()
    {"prepare": prepare, "measure": measure, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
