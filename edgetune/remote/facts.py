"""Board facts: one shell command and a pure parser (tested against recorded outputs)."""

from __future__ import annotations

from dataclasses import dataclass

from ..profiles import normalize_arch

# Each section starts with a marker line; a missing tool leaves its section empty.
FACTS_COMMAND = r"""
echo '@@home'; echo "$HOME"
echo '@@arch'; uname -m
echo '@@model'; tr -d '\0' < /proc/device-tree/model 2>/dev/null || true
echo '@@cpus'; nproc 2>/dev/null || getconf _NPROCESSORS_ONLN
echo '@@mem_kb'; awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null
echo '@@disk_kb'; df -Pk "$HOME" 2>/dev/null | awk 'NR==2 {print $4}'
echo '@@python'; python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || true
echo '@@cuda'; (nvcc --version 2>/dev/null || cat /usr/local/cuda/version.json 2>/dev/null) | grep -Eo 'release [0-9]+\.[0-9]+|"version" *: *"[0-9]+\.[0-9]+' | head -1 | grep -Eo '[0-9]+\.[0-9]+' || true
echo '@@runtimes'; for d in "$HOME"/.edgetune/runtime/*/; do [ -f "$d.complete" ] && basename "$d"; done 2>/dev/null; true
echo '@@end'
"""


@dataclass(frozen=True)
class BoardFacts:
    """What a board reported about itself."""

    home: str
    arch: str
    model: str
    cpus: int
    mem_mb: int
    disk_free_mb: int
    python: str
    cuda: str
    runtimes: tuple[str, ...]


def parse_facts(text: str) -> BoardFacts:
    """Parse FACTS_COMMAND output; missing sections become empty / zero."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line.strip())

    def first(key: str) -> str:
        return (sections.get(key) or [""])[0]

    def number(key: str) -> int:
        value = first(key)
        return int(value) if value.isdigit() else 0

    return BoardFacts(
        home=first("home"),
        arch=normalize_arch(first("arch")) if first("arch") else "",
        model=first("model"),
        cpus=number("cpus"),
        mem_mb=number("mem_kb") // 1024,
        disk_free_mb=number("disk_kb") // 1024,
        python=first("python"),
        cuda=first("cuda"),
        runtimes=tuple(sections.get("runtimes", [])),
    )
