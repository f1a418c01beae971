"""Compare packages built inside the Docker image with packages built on the host.

    python scripts/compare_packages.py IMAGE_OUT HOST_OUT      (each holding pi4/ and jetson/)

Same ELF machine and CUDA architectures; for pi4, the same reference inputs and outputs, and
both libraries pass the reference check when run under qemu-aarch64 here. Exit 1 on a mismatch.
"""

import json
import sys
from pathlib import Path

import numpy as np

from edgetune import elf, emulation
from edgetune.profiles import get_profile


def main(image: Path, host: Path) -> int:
    failures = []
    for name in ("pi4", "jetson"):
        a, b = image / name / "model.so", host / name / "model.so"
        facts = {"image": (elf.machine(a), elf.cuda_archs(a)), "host": (elf.machine(b), elf.cuda_archs(b))}
        print(f"{name:7} image {facts['image']}  host {facts['host']}")
        if facts["image"] != facts["host"]:
            failures.append(f"{name}: architectures differ")
    with np.load(image / "pi4" / "reference.npz") as ri, np.load(host / "pi4" / "reference.npz") as rh:
        for key in ri.files:
            if not np.allclose(ri[key], rh[key], rtol=1e-5, atol=1e-6):
                failures.append(f"pi4 reference {key} differs")
    profile = get_profile("pi4")
    for label, pkg in (("image", image / "pi4"), ("host", host / "pi4")):
        result = emulation.run_loader(profile, pkg, ["check"])
        worst = max(o["max_abs_error"] for o in result["outputs"].values())
        print(f"pi4 {label:5} package under qemu-aarch64: passed={result['passed']} max abs error {worst:.3g}")
        if not result["passed"]:
            failures.append(f"pi4 {label} package fails its reference check")
    manifest = json.loads((image / "jetson" / "manifest.json").read_text())
    print(f"jetson image manifest: cuda_archs {manifest['runtime']['cuda_archs']}, verification {manifest['verification']['status']}")
    for failure in failures:
        print(f"MISMATCH: {failure}")
    print("packages agree" if not failures else f"{len(failures)} mismatch(es)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
