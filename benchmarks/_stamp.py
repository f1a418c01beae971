"""Where and when a benchmark result was measured: the commit (and whether the tree had
uncommitted changes), the UTC time, and the machine. Every benchmark's JSON carries it under
``stamp``; ``benchmarks/report.py`` prints it beside each table it generates."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _cpuinfo(field: str) -> str | None:
    """The first ``field`` line of /proc/cpuinfo (None where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    return set((_cpuinfo("flags") or "").split())


# what the benchmarks and benchmarks/report.py write themselves: changed, they leave the code as committed
GENERATED = ("benchmarks/results/", "docs/performance/", "README.md")


def _dirty() -> bool:
    """Whether tracked files other than the generated results differ from the commit."""
    changed = [line[3:] for line in _git("status", "--porcelain", "--untracked-files=no").splitlines()]
    return any(not path.startswith(GENERATED) for path in changed)


def stamp() -> dict[str, Any]:
    flags = cpu_flags()
    isa = next((name for name, flag in (("AVX-512 VNNI", "avx512_vnni"), ("AVX-512", "avx512f"), ("AVX2", "avx2"))
                if flag in flags), platform.machine())
    return {"commit": _git("rev-parse", "--short", "HEAD"), "dirty": _dirty(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": {"cpu": cpu_model(), "isa": isa, "cpus": os.cpu_count(), "system": f"{platform.system()} {platform.release()}",
                        "python": platform.python_version()}}
