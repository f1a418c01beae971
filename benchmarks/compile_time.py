"""Import + compile + package wall time per model and profile, and package sizes.

    .venv/bin/python benchmarks/compile_time.py [--profiles host,pi4,pi4-32,jetson-orin-nano] [--models ...]

Prints a table and writes benchmarks/results/compile_time.json. Packages are built with
--no-verify so the numbers are the build alone; the reference check is timed separately
for profiles this host can execute (host, and pi4/pi5 under qemu).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import models  # noqa: E402
import zoo  # noqa: E402
from _stamp import stamp  # noqa: E402

from edgetune.errors import EdgetuneError  # noqa: E402
from edgetune.package import PackageOptions, package  # noqa: E402


def _models(workdir: Path, names: list[str]) -> dict[str, Path]:
    makers = {
        "squeezenet": lambda: models.randomized_light("squeezenet", workdir / "squeezenet.onnx"),
        "resnet50": lambda: models.randomized_light("resnet50", workdir / "resnet50.onnx"),
        "face_detection (tflite)": lambda: REPO / "examples" / "face_detection_short_range.tflite",
        "int8 cnn (tflite)": lambda: models.int8_tflite(workdir / "int8.tflite"),
    }
    makers.update({name: (lambda name=name: zoo.ZOO[name](workdir / f"{name}.onnx")) for name in zoo.ZOO})
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(makers)}")
    return {name: makers[name]() for name in names}


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(model: Path, profile: str, out: Path, verify: bool) -> dict:
    start = time.perf_counter()
    result = package(PackageOptions(model=model, device=profile, output=out, verify=verify, force=True))
    wall = time.perf_counter() - start
    return {
        "wall_s": round(wall, 2),
        "import_s": round(result.timings.get("import_s", 0), 2),
        "compile_s": round(result.timings.get("compile_s", 0), 2),
        "verify_s": round(result.timings.get("verify_s", 0), 2),
        "library_mb": round((out / "model.so").stat().st_size / 1e6, 2),
        "package_mb": round(_size(out) / 1e6, 2),
        "verification": result.verification["status"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", default="host,pi4,pi4-32,jetson-orin-nano")
    parser.add_argument("--models", default="squeezenet,resnet50,face_detection (tflite),int8 cnn (tflite)")
    parser.add_argument("--verify", action="store_true", help="also time the reference check where it can run")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "compile_time.json")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgetune-bench-") as tmp:
        work = Path(tmp)
        for model_name, path in _models(work, args.models.split(",")).items():
            for profile in args.profiles.split(","):
                try:
                    row = measure(path, profile, work / "pkg", args.verify)
                except EdgetuneError as err:
                    row = {"error": err.message}
                rows.append({"model": model_name, "profile": profile, **row})
                print(json.dumps(rows[-1]), file=sys.stderr)
    header = f"{'model':26} {'profile':18} {'wall s':>7} {'import':>7} {'compile':>8} {'verify':>7} {'lib MB':>7} {'pkg MB':>7}"
    print(header)
    print("-" * len(header))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:26} {r['profile']:18} error: {r['error']}")
            continue
        print(f"{r['model']:26} {r['profile']:18} {r['wall_s']:7.2f} {r['import_s']:7.2f} {r['compile_s']:8.2f} {r['verify_s']:7.2f} {r['library_mb']:7.2f} {r['package_mb']:7.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"host": platform.machine(), "cpus": __import__("os").cpu_count(), "python": platform.python_version()}
    args.out.write_text(json.dumps({"stamp": stamp(), "meta": meta, "rows": rows}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
