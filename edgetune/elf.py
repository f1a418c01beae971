"""Just enough ELF reading to check what a build produced: the library's machine and the
CUDA architectures of cubins embedded in it (TVM stores nvcc's fatbin inside the .so)."""

from __future__ import annotations

import struct
from pathlib import Path

EM_NAMES = {3: "i386", 40: "armv7l", 62: "x86_64", 183: "aarch64", 190: "cuda"}
EM_CUDA = 190


def _header(data: bytes, offset: int) -> tuple[int, int, int] | None:
    """(e_machine, e_flags, abi_version) of the ELF header at ``offset``, or None."""
    if data[offset:offset + 4] != b"\x7fELF":
        return None
    cls, endian = data[offset + 4], data[offset + 5]
    fmt = "<" if endian == 1 else ">"
    try:
        machine = struct.unpack_from(fmt + "H", data, offset + 18)[0]
        flags = struct.unpack_from(fmt + "I", data, offset + (48 if cls == 2 else 36))[0]
    except struct.error:
        return None
    return machine, flags, data[offset + 8]


def machine(path: Path) -> str:
    """Architecture of an ELF file in ``uname -m`` spelling (``unknown`` if not ELF)."""
    head = _header(path.read_bytes()[:64], 0)
    return EM_NAMES.get(head[0], f"em{head[0]}") if head else "unknown"


def cuda_archs(path: Path) -> list[str]:
    """``sm_XX`` of every CUDA cubin embedded in ``path`` (empty: no compiled GPU code)."""
    data = path.read_bytes()
    found: set[str] = set()
    pos = data.find(b"\x7fELF", 1)
    while pos != -1:
        head = _header(data, pos)
        if head and head[0] == EM_CUDA:
            _, flags, abi = head
            sm = (flags >> 8) & 0xFF if abi >= 8 else flags & 0xFF  # cubin ABI v8 moved the field
            found.add(f"sm_{sm}")
        pos = data.find(b"\x7fELF", pos + 1)
    return sorted(found)
