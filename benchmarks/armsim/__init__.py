"""Raspberry Pi CPU time without a Pi: executed instructions counted under qemu-user, cycles
estimated by llvm-mca's models of the boards' cores.

How an estimate is made (`estimate`):
1. The workload (an edgetune package, onnxruntime or LiteRT/XNNPACK on a model; aarch64 builds
   of each, from edgetune's runtime and baselines bundles) runs under the *dynamic*
   ``qemu-aarch64`` with the board's ``-cpu`` and a root whose ``/proc/cpuinfo`` is the board's
   (qemu 7.2 passes the host's x86 one through: onnxruntime's cpuinfo then crashes and XNNPACK
   cannot see the core), single-threaded, with ``tbcount.c`` loaded as a TCG plugin: it counts
   each translated block's executions between the marks ``guest.py`` sets around N inferences.
2. Every hot block (covering 99.5 % of executed instructions) is disassembled and given to
   ``llvm-mca`` (LLVM 19) as a loop: its steady-state cycles per iteration × executions, summed,
   is the estimate; the rest is charged at the covered part's cycles per instruction. Blocks
   the translator cut without a branch (at a 4 KiB page boundary, or where its buffer filled)
   are joined with the next ones first, as the core runs them (``join_split_blocks``).
   Core models: ``cortex-a72`` for the Pi 4 (LLVM models it as an A57: 3-wide, two 64-bit FP
   pipes, a pessimistic FMLA latency) and ``neoverse-n1`` for the Pi 5's Cortex-A76 (the same
   core; LLVM's ``cortex-a76`` maps to the A57 model, ~2× wrong for NEON), with the A76's
   4-instruction/cycle dispatch as a cap (the N1 model dispatches 8).
3. Blocks are attributed to libraries (the guest's memory map) and, for edgetune's library, to
   its kernels (the library's symbols).

What it ignores: caches and DRAM (memory-bound kernels come out optimistic: bytes loaded per
multiply-accumulate are reported beside them), TLB, branch mispredictions, several cores.
Differences under ~15 % are inside the method's error. Instruction counts are exact and do not
depend on the host's load.
"""

from __future__ import annotations

import bisect
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SYSTEM_DIRS = ("bin", "etc", "lib", "lib64", "sbin", "usr")  # what the emulated Python needs of its root
LLVM = Path(os.environ.get("EDGETUNE_LLVM_BIN", "/usr/lib/llvm-19/bin"))


@dataclass(frozen=True)
class Board:
    """What the estimate needs to know about a board's core."""

    name: str
    qemu_cpu: str
    mca_cpu: str
    ghz: float
    dispatch_cap: float | None  # instructions per cycle the front end sustains, where the model overstates it
    isa: str  # llvm-mc -mattr of what the core has: executed instructions outside it are reported
    cpuinfo_features: str
    cpuinfo_part: tuple[str, str, str]  # variant, part, revision
    vector_mac_pipes: int  # 128-bit FMLA / SDOT issued per cycle: 8 × this fp32 FLOP per cycle


BOARDS = {
    # BCM2711: 4× Cortex-A72 at 1.5 GHz (1.8 GHz on boards made since 2020); no crypto extension.
    # A72 software optimisation guide: one FMLA (128-bit) issued per cycle on the F0/F1 pair → 8 FLOP/cycle.
    "pi4": Board("pi4", "cortex-a72", "cortex-a72", 1.5, None, "+v8a,+neon,+crc",
                 "fp asimd evtstrm crc32 cpuid", ("0x0", "0xd08", "3"), 1),
    # BCM2712: 4× Cortex-A76 at 2.4 GHz; v8.2 with dot product and fp16. A76 guide: two 128-bit FMLA
    # pipes (V0, V1) → 16 FLOP/cycle; 4 instructions decoded per cycle.
    "pi5": Board("pi5", "cortex-a76", "neoverse-n1", 2.4, 4.0,
                 "+v8.2a,+neon,+crc,+lse,+rcpc,+rdm,+fullfp16,+dotprod,+aes,+sha2",
                 "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp",
                 ("0x4", "0xd0b", "1"), 2),
}
# Every A64 encoding llvm-objdump should decode, whatever the board has (the ISA check is separate).
ALL_FEATURES = "+v8.2a,+dotprod,+fullfp16,+fp16fml,+rcpc,+crc,+aes,+sha2,+lse,+i8mm,+bf16,+sve,+sve2"
# vector multiply(-accumulate)s that carry a kernel's products: FMLA (fp32), SDOT (Armv8.2 int8), and
# on cores without a dot product the widening multiplies int8 kernels use (smull: 8 products)
MAC = re.compile(r"^(fmla|fmls|sdot|udot|usdot|sudot|smmla|ummla|usmmla|mla|mls|[su]mlal2?|[su]mlsl2?|[su]mull2?|bfmmla|bfdot)$")
BRANCHY = re.compile(r"^(b|bl|b\.\w+|cbn?z|tbn?z|adrp?|ldr|ldrsw|prfm)$")
STORE_POST = re.compile(r"^(st\w*)\s+(.*),\s*\[(\w+)\],\s*(#?-?(?:0x[0-9a-f]+|\d+)|x\d+)$")
STORE_PRE = re.compile(r"^(st\w*)\s+(.*),\s*\[(\w+),\s*#(-?(?:0x[0-9a-f]+|\d+))\]!$")


class ArmsimError(RuntimeError):
    """The estimate cannot run here (a tool missing) or the emulated run failed."""


# ---------------------------------------------------------------- tools and roots


def missing_tools() -> list[str]:
    """What this host lacks for counting (qemu-aarch64, gcc) and for estimating (llvm-19)."""
    need = {"qemu-aarch64 (Debian: qemu-user)": shutil.which("qemu-aarch64"), "gcc": shutil.which("gcc")}
    need["llvm-mca 19 (Debian: llvm-19)"] = str(LLVM / "llvm-mca") if (LLVM / "llvm-mca").is_file() else None
    return [name for name, found in need.items() if not found]


def plugin() -> Path:
    """``libtbcount.so`` built from this directory's source, cached by the source's hash."""
    from edgetune.util import cache_dir

    sources = [HERE / "tbcount.c", HERE / "qemu_plugin.h"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    lib = cache_dir("armsim") / f"libtbcount-{digest}.so"
    if not lib.is_file():
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        proc = subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", f"-I{HERE}", "-o", str(tmp), str(sources[0])],
                              capture_output=True, text=True)
        if proc.returncode:
            raise ArmsimError(f"building the qemu plugin failed: {proc.stderr.strip()[-500:]}")
        tmp.replace(lib)
    return lib


def board_root(board: Board) -> Path:
    """A root for ``qemu -L``: links to the system directories of edgetune's aarch64 sysroot plus
    the board's ``/proc/cpuinfo``. Every other path (/var, /tmp, /home, … where caches, packages
    and models live) stays the host's: a link there would send realpath() of a host path into the
    sysroot."""
    from edgetune.emulation import sysroot
    from edgetune.util import cache_dir

    system = sysroot("aarch64")
    root = cache_dir("armsim", f"root-{board.name}")
    for entry in system.iterdir():
        if entry.name not in SYSTEM_DIRS:
            continue
        link = root / entry.name
        if not link.is_symlink() or os.readlink(link) != str(entry):
            link.unlink(missing_ok=True)
            link.symlink_to(entry)
    variant, part, revision = board.cpuinfo_part
    cpuinfo = "".join(f"processor\t: {n}\nBogoMIPS\t: 108.00\nFeatures\t: {board.cpuinfo_features}\n"
                      f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: {variant}\nCPU part\t: {part}\n"
                      f"CPU revision\t: {revision}\n\n" for n in range(4))
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc" / "cpuinfo").write_text(cpuinfo)
    return root


# ---------------------------------------------------------------- counting


@dataclass
class Counts:
    """Executed blocks inside the marked regions of one run."""

    regions: int
    blocks: list[tuple[int, int, list[str]]]  # (address, executions over all regions, instruction words)
    maps: list[tuple[int, int, int, str]] = field(default_factory=list)  # (start, end, file offset, path)

    @property
    def instructions(self) -> float:
        """Executed instructions per region (per inference)."""
        return sum(count * len(words) for _, count, words in self.blocks) / max(1, self.regions)


def _fingerprint(paths: list[Path], contents: bool) -> str:
    """A hash of files and folders: their bytes (``contents``) or their names, sizes and times."""
    h = hashlib.sha256()
    for top in paths:
        files = sorted(f for f in top.rglob("*") if f.is_file()) if top.is_dir() else [top]
        for f in files:
            h.update(str(f.relative_to(top) if top.is_dir() else f.name).encode())
            if contents:
                h.update(_content(f))
            else:
                st = f.stat()
                h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:32]


def _content(f: Path) -> bytes:
    """What of a file a run depends on: its bytes, less what differs between identical builds (a
    manifest's creation time, the zip entries' dates of an ``.npz``)."""
    if f.suffix == ".npz":
        import numpy as np

        with np.load(f) as data:
            return b"".join(k.encode() + str((data[k].dtype, data[k].shape)).encode() + data[k].tobytes()
                            for k in sorted(data.files))
    if f.name == "manifest.json":
        manifest = json.loads(f.read_text())
        manifest.pop("created", None)
        return json.dumps(manifest, sort_keys=True).encode()
    return f.read_bytes()


def _save_counts(counts: Counts, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    with gzip.open(part, "wt") as f:
        json.dump({"regions": counts.regions, "blocks": counts.blocks, "maps": counts.maps}, f)
    part.replace(path)


def _load_counts(path: Path) -> Counts:
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    return Counts(data["regions"], [tuple(b) for b in data["blocks"]], [tuple(m) for m in data["maps"]])


PEERS = {"ncnn": "ncnn", "ncnn16": "ncnn", "mnn": "MNN", "mnn16": "MNN"}  # side → its PyPI distribution


def peers_site() -> Path:
    """ncnn's and MNN's aarch64 wheels (the versions this host has: ``pip install '.[bench]'``)
    unpacked into one folder for the emulated Python (numpy comes from the runtime bundle)."""
    from importlib import metadata

    from edgetune.bundle import PLATFORMS
    from edgetune.util import cache_dir, file_lock

    pins = sorted({f"{name}=={metadata.version(name)}" for name in PEERS.values()})
    root = cache_dir("armsim", "peers-" + "-".join(p.replace("==", "") for p in pins))
    if (root / ".complete").is_file():
        return root
    with file_lock(root.with_name(root.name + ".lock"), what="the ncnn and MNN aarch64 wheels"):
        if (root / ".complete").is_file():
            return root
        with tempfile.TemporaryDirectory() as tmp:
            platforms = [arg for tag in PLATFORMS["aarch64"] for arg in ("--platform", tag)]
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
                   "3.11", "--implementation", "cp", *platforms, *pins, "-d", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                raise ArmsimError(f"downloading {', '.join(pins)} for aarch64 failed: {proc.stderr.strip()[-400:]}")
            for wheel in Path(tmp).glob("*.whl"):
                with zipfile.ZipFile(wheel) as z:
                    z.extractall(root)
        (root / ".complete").write_text("\n".join(pins) + "\n")
    return root


def _site(kind: str) -> list[str]:
    """What the emulated Python imports for a side: the runtime bundle (edgetune's loader, TVM's
    runtime, numpy), and before it the baselines bundle (onnxruntime, LiteRT) or ncnn / MNN."""
    from edgetune.bundle import baselines_bundle, runtime_bundle

    path = [str(runtime_bundle("aarch64"))]
    if kind in PEERS:
        path.insert(0, str(peers_site()))
    elif kind != "edgetune":
        path.insert(0, str(baselines_bundle("aarch64")))
    return path


def count(board: Board, kind: str, target: Path, inputs: Path, runs: int = 1, timeout: float = 1800,
          cache: Path | None = None, outputs: Path | None = None) -> Counts:
    """Run ``runs`` marked inferences of ``target`` (``kind``: edgetune, onnxruntime, litert,
    ncnn, ncnn16, mnn, mnn16) on ``inputs`` under qemu with the board's core; the blocks
    executed inside the marks. ``outputs``: where the side's outputs on ``inputs`` are saved
    (``out_0``, … in an .npz), so its answer can be checked before its cycles count.

    With ``cache`` (a folder) the counts (and outputs) are kept there under a key of everything
    the run depends on — the target's and inputs' bytes, the side, the board's core, the
    bundles the emulated Python imports, this counter — so an estimate redone after a change to
    the estimating (not to what runs) takes no emulation."""
    from edgetune.util import cache_dir

    missing = [t for t in missing_tools() if not t.startswith("llvm")]
    if missing:
        raise ArmsimError(f"missing: {', '.join(missing)} (scripts/install-system-deps.sh installs them)")
    path = _site(kind)
    if cache is not None:
        key = hashlib.sha256("|".join([
            kind, board.qemu_cpu, board.cpuinfo_features, str(board.cpuinfo_part), str(runs),
            _fingerprint([Path(target), Path(inputs), HERE / "tbcount.c", HERE / "guest.py"], contents=True),
            _fingerprint([Path(p) for p in path], contents=False)]).encode()).hexdigest()[:32]
        stored = Path(cache) / f"{kind}-{board.name}-{key}.json.gz"
        answers = stored.with_name(stored.name.replace(".json.gz", ".outputs.npz"))
        if stored.is_file() and (outputs is None or answers.is_file()):
            if outputs is not None:
                shutil.copyfile(answers, outputs)
            return _load_counts(stored)
        answers.parent.mkdir(parents=True, exist_ok=True)
        counts = count(board, kind, target, inputs, runs, timeout, outputs=answers)
        _save_counts(counts, stored)
        if outputs is not None:
            shutil.copyfile(answers, outputs)
        return counts
    root = board_root(board)
    with tempfile.TemporaryDirectory(prefix="armsim-") as tmp:
        tbs, maps = Path(tmp) / "blocks.txt", Path(tmp) / "maps.txt"
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(path), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONHASHSEED": "0", "HOME": str(cache_dir())}
        cmd = ["qemu-aarch64", "-cpu", board.qemu_cpu, "-L", str(root), "-plugin", f"{plugin()},out={tbs}",
               str(root / "usr/bin/python3.11"), str(HERE / "guest.py"), kind, str(Path(target).resolve()),
               str(Path(inputs).resolve()), str(runs), str(maps), *([str(Path(outputs).resolve())] if outputs else [])]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ArmsimError(f"the emulated {kind} run did not finish within {timeout:.0f} s") from None
        if proc.returncode or not tbs.is_file():
            tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            raise ArmsimError(f"the emulated {kind} run failed: {tail[:400]}")
        return _read(tbs, maps)


def _read(tbs: Path, maps: Path) -> Counts:
    lines = tbs.read_text().splitlines()
    regions = int(lines[0].split()[-1])
    blocks = []
    for line in lines[1:]:
        parts = line.split()
        blocks.append((int(parts[0], 16), int(parts[2]), parts[3:]))
    spans = []
    for line in maps.read_text().splitlines() if maps.is_file() else []:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            spans.append((lo, hi, int(parts[2], 16), parts[5].strip()))
    return Counts(regions, blocks, sorted(spans))


# ---------------------------------------------------------------- estimating


def _disassemble(blocks: list[list[str]]) -> list[list[str]]:
    """Each block's instruction words as assembly llvm-mca takes (branch targets made local)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = Path(tmp) / "b.s", Path(tmp) / "b.o"
        src.write_text(".text\n" + "".join(f".inst 0x{w}\n" for words in blocks for w in words))
        subprocess.run([str(LLVM / "llvm-mc"), "-triple=aarch64", "-filetype=obj", str(src), "-o", str(obj)], check=True)
        out = subprocess.run([str(LLVM / "llvm-objdump"), "-d", "--no-show-raw-insn", "--no-leading-addr",
                              f"--mattr={ALL_FEATURES}", str(obj)], check=True, capture_output=True, text=True).stdout
    lines, started = [], False
    for raw in out.splitlines():
        if raw.startswith("<.text>:"):
            started = True
            continue
        # (objdump puts a tab between mnemonic and operands: one space, as everything below reads it)
        text = re.sub(r"\s*//.*$", "", re.sub(r"\s*<[^>]*>\s*$", "", raw.strip())).replace("\t", " ")
        if not started or not text:
            continue
        mnemonic, _, operands = text.partition(" ")
        if mnemonic in ("<unknown>", "udf") or mnemonic.startswith("<"):
            text = "nop // unknown"
        elif operands and BRANCHY.match(mnemonic):
            head, _, last = operands.rpartition(",")
            if re.fullmatch(r"\s*0x[0-9a-f]+", last):
                text = f"{mnemonic} {head}, ." if head else f"{mnemonic} ."
        lines.append(text)
    result, k = [], 0
    for words in blocks:
        result.append(lines[k:k + len(words)])
        k += len(words)
    if k != len(lines):
        raise ArmsimError(f"disassembly gave {len(lines)} instructions for {k} words")
    return result


def _split_writeback(ins: str) -> list[str]:
    """llvm-mca makes a store's base-register writeback wait for the stored data, serialising
    loops like ``ldr q; fadd; str q, [x0], #16`` (10–16 cycles instead of ~2): model the
    writeback as the separate add the cores' address units do."""
    def add(base: str, imm: str) -> str:
        if imm.startswith("x"):
            return f"add {base}, {base}, {imm}"
        v = int(imm.lstrip("#"), 0)
        return f"{'add' if v >= 0 else 'sub'} {base}, {base}, #{abs(v)}"

    if m := STORE_POST.match(ins):
        return [f"{m.group(1)} {m.group(2)}, [{m.group(3)}]", add(m.group(3), m.group(4))]
    if m := STORE_PRE.match(ins):
        return [add(m.group(3), m.group(4)), f"{m.group(1)} {m.group(2)}, [{m.group(3)}]"]
    return [ins]


def _mca(blocks: list[list[str]], board: Board) -> list[float]:
    """Steady-state cycles per execution of each block on the board's core model."""
    with tempfile.NamedTemporaryFile("w", suffix=".s", delete=False) as f:
        for i, asm in enumerate(blocks):
            body = "\n".join(x for ins in asm for x in _split_writeback(ins))
            f.write(f"# LLVM-MCA-BEGIN b{i}\n{body}\n# LLVM-MCA-END b{i}\n")
    try:
        proc = subprocess.run([str(LLVM / "llvm-mca"), "-mtriple=aarch64-linux-gnu", f"-mcpu={board.mca_cpu}",
                               f"-mattr={ALL_FEATURES}", "-iterations=100", "--skip-unsupported-instructions=any",
                               "--json", "-instruction-info=false", "-resource-pressure=false", f.name],
                              capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if proc.returncode:
        raise ArmsimError(f"llvm-mca failed: {proc.stderr.strip()[-800:]}")
    regions = json.loads(proc.stdout)["CodeRegions"]
    if len(regions) != len(blocks):  # a block llvm-mca could not read would shift every later block's cycles
        raise ArmsimError(f"llvm-mca estimated {len(regions)} of {len(blocks)} blocks: {proc.stderr.strip()[:800]}")
    cycles = [r["SummaryView"]["TotalCycles"] / r["SummaryView"]["Iterations"] for r in regions]
    if board.dispatch_cap:
        cycles = [max(c, len(asm) / board.dispatch_cap) for c, asm in zip(cycles, blocks)]
    return cycles


def _outside_isa(blocks: list[list[str]], weights: list[int], board: Board) -> float:
    """Share of executed instructions the board's core does not have (a wrong -cpu)."""
    unique = sorted({ins for asm in blocks for ins in asm})
    proc = subprocess.run([str(LLVM / "llvm-mc"), "-triple=aarch64", f"-mattr={board.isa}", "-filetype=null"],
                          input="\n".join(unique) + "\n", capture_output=True, text=True)
    bad = {unique[int(m.group(1)) - 1] for m in re.finditer(r"<stdin>:(\d+):\d+: error", proc.stderr)}
    bad |= {u for u in unique if u.startswith("nop // unknown")}
    total = sum(w * len(asm) for asm, w in zip(blocks, weights))
    return sum(w for asm, w in zip(blocks, weights) for ins in asm if ins in bad) / max(1, total)


def _bytes_loaded(ins: str) -> int:
    """Bytes a load instruction reads (0 for anything else)."""
    mnemonic, _, operands = ins.partition(" ")
    if not mnemonic.startswith("ld") or mnemonic.startswith(("ldadd", "ldclr", "ldset", "ldeor")):
        return 0
    if mnemonic.startswith(("ld1", "ld2", "ld3", "ld4")):
        regs = re.findall(r"v\d+\.(\d*)([bhsd])", operands.split("}")[0])
        size = {"b": 1, "h": 2, "s": 4, "d": 8}
        if "[" in operands.split("}")[-1].split(",")[0] or mnemonic.endswith("r"):  # one lane / replicate
            return sum(size[t] for _, t in regs)
        return sum(int(n or 1) * size[t] for n, t in regs)
    first = operands.split(",")[0].strip()
    width = {"q": 16, "d": 8, "s": 4, "h": 2, "b": 1, "x": 8, "w": 4}.get(first[:1], 0)
    if mnemonic.endswith(("rb", "rsb", "urb", "ursb")):
        width = 1
    elif mnemonic.endswith(("rh", "rsh", "urh", "ursh")):
        width = 2
    elif mnemonic in ("ldrsw", "ldursw"):
        width = 4
    return width * (2 if mnemonic.startswith(("ldp", "ldnp", "ldxp", "ldaxp")) else 1)


class Symbols:
    """Addresses → (library, symbol), from the guest's memory map and each library's symbols."""

    def __init__(self, maps: list[tuple[int, int, int, str]]):
        self.maps = maps
        self.starts = [m[0] for m in maps]
        self._tables: dict[str, tuple[list[int], list[str]]] = {}

    def _table(self, path: str) -> tuple[list[int], list[str]]:
        if path not in self._tables:
            addrs, names = [], []
            for dynamic in ([], ["-D"]):  # the symbol table, or a stripped library's exported symbols
                if addrs or not Path(path).is_file() or not (LLVM / "llvm-nm").is_file():
                    break
                out = subprocess.run([str(LLVM / "llvm-nm"), *dynamic, "--defined-only", "-n", "--no-demangle", path],
                                     capture_output=True, text=True).stdout
                for line in out.splitlines():
                    parts = line.split()
                    if len(parts) == 3 and parts[1] in "tTwW":
                        addrs.append(int(parts[0], 16))
                        names.append(parts[2])
            self._tables[path] = (addrs, names)
        return self._tables[path]

    def where(self, address: int) -> tuple[str, str]:
        i = bisect.bisect_right(self.starts, address) - 1
        if i < 0 or not self.maps[i][0] <= address < self.maps[i][1]:
            return "?", "?"
        path = self.maps[i][3]
        base = min(m[0] - m[2] for m in self.maps if m[3] == path)  # where the file's offset 0 lies
        addrs, names = self._table(path)
        j = bisect.bisect_right(addrs, address - base) - 1
        return os.path.basename(path), names[j] if j >= 0 else "?"


def _ends_in_control(word: str) -> bool:
    """Whether an instruction word is of A64's branch, exception and system class (op0 = x101):
    the instructions that end a translated block on their own."""
    return (int(word, 16) >> 26) & 0b111 == 0b101


def join_split_blocks(blocks: list[tuple[int, int, list[str]]]) -> list[tuple[int, int, list[str]]]:
    """Blocks the translator cut where the core sees straight-line code, joined again.

    TCG ends a block at branches, but also at a 4 KiB page boundary and where its buffer of
    generated operations fills (after ~100 NEON instructions): a loop body is counted as two or
    three blocks, cut wherever the code's placement puts a page or the buffer's limit, and
    llvm-mca, given each piece as a loop of its own, overlaps nothing across the cuts (the same
    depthwise kernel, moved by 256 bytes, measured 0.82 → 0.86 M A76 cycles). Executions flow
    through each block that does not end in a branch or system instruction into the block at the
    next address, as far as that block's count allows: a chain of pieces executed together is
    one block (entries into a later piece, and the excess where a piece ran fewer times, are
    blocks of their own)."""
    at: dict[int, list[tuple[int, list[str]]]] = defaultdict(list)
    for address, executions, words in blocks:
        if executions > 0:
            at[address].append((executions, list(words)))
    incoming: dict[int, list[list[Any]]] = defaultdict(list)  # address -> [[executions, words so far]]
    joined: list[tuple[int, int, list[str]]] = []
    for address in sorted(at):
        for n, (executions, words) in enumerate(at[address]):
            flows = incoming.pop(address, []) if n == 0 else []  # (a retranslation takes no flow)
            flows.sort(key=lambda f: -f[0])
            room, taken = executions, []
            for flow in flows:
                k = min(flow[0], room)
                if k > 0:
                    taken.append([k, flow[1], flow[2] + words])
                    room -= k
                if flow[0] > k:  # ran further than this block did: ends before it
                    joined.append((flow[1], flow[0] - k, flow[2]))
            if room > 0:
                taken.append([room, address, list(words)])
            if _ends_in_control(words[-1]) or address + 4 * len(words) not in at:
                joined.extend((start, k, w) for k, start, w in taken)
            else:
                incoming[address + 4 * len(words)].extend([k, start, w] for k, start, w in taken)
    for flows in incoming.values():  # (none: every flow's target is a block)
        joined.extend((start, k, w) for k, start, w in flows)
    return joined


def estimate(counts: Counts, boards: list[Board], coverage: float = 0.995, top: int = 12) -> dict[str, Any]:
    """Estimated cycles per inference on each board's core, the instruction mix and where the
    time goes (libraries; kernels of edgetune's library)."""
    regions = max(1, counts.regions)
    blocks = sorted(join_split_blocks(counts.blocks), key=lambda b: -b[1] * len(b[2]))
    total = sum(c * len(w) for _, c, w in blocks)
    chosen, covered = [], 0
    for block in blocks:
        if covered >= coverage * total:
            break
        chosen.append(block)
        covered += block[1] * len(block[2])
    asm = _disassemble([w for _, _, w in chosen])
    weights = [c for _, c, _ in chosen]
    mix: Counter[str] = Counter()
    loaded = 0
    for lines, weight in zip(asm, weights):
        for ins in lines:
            mix[ins.split()[0]] += weight
            loaded += weight * _bytes_loaded(ins)
    macs = sum(n for m, n in mix.items() if MAC.match(m))
    mac_counts = [weight * sum(1 for ins in lines if MAC.match(ins.split()[0])) for lines, weight in zip(asm, weights)]
    symbols = Symbols(counts.maps)
    where = [symbols.where(a) for a, _, _ in chosen]
    result: dict[str, Any] = {
        "instructions": total / regions, "covered": covered / max(1, total), "blocks": len(chosen),
        "mac_share": macs / max(1, covered), "fmla_share": mix["fmla"] / max(1, covered),
        "dot_share": (mix["sdot"] + mix["udot"]) / max(1, covered),
        "bytes_loaded_per_mac": loaded / macs if macs else None,
        "top_mnemonics": {k: round(v / max(1, covered), 4) for k, v in mix.most_common(10)}, "boards": {}}
    for board in boards:
        cpi = _mca(asm, board)
        cycles = [c * w for c, w in zip(cpi, weights)]
        per_inference = sum(cycles) * total / max(1, covered) / regions
        by_library: dict[str, float] = defaultdict(float)
        for (library, _), c in zip(where, cycles):
            by_library[library] += c / regions
        result["boards"][board.name] = {
            "core_model": board.mca_cpu, "ghz": board.ghz, "cycles": per_inference,
            "ms": per_inference / board.ghz / 1e6, "ipc": total / regions / per_inference,
            "outside_isa": _outside_isa(asm, weights, board),
            "by_library": dict(sorted(by_library.items(), key=lambda kv: -kv[1])[:8]),
            "kernels": _kernels(where, cycles, mac_counts, regions, board, top)}
    return result


def _kernels(where: list[tuple[str, str]], cycles: list[float], macs: list[int], regions: int, board: Board,
             top: int) -> dict[str, dict[str, float]]:
    """The ``top`` costliest (library, symbol) pairs: cycles and vector multiply-accumulates per
    inference, and the share of the core's multiply-accumulate issue slots they fill
    (``mac_use``: 1.0 = a 128-bit FMLA/SDOT on every pipe every cycle)."""
    total: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (library, symbol), c, m in zip(where, cycles, macs):
        entry = total[f"{library}:{symbol}"]
        entry[0] += c / regions
        entry[1] += m / regions
    ranked = sorted(total.items(), key=lambda kv: -kv[1][0])[:top]
    return {name: {"cycles": c, "macs": m, "mac_use": m / c / board.vector_mac_pipes if c else 0.0}
            for name, (c, m) in ranked}


def package_inputs(package: Path, out: Path) -> Path:
    """The package's reference inputs (any architecture's package) as ``in_0, in_1, …`` in
    ``out``: every side of a comparison runs on the same arrays."""
    import numpy as np

    manifest = json.loads((Path(package) / "manifest.json").read_text())
    with np.load(Path(package) / "reference.npz") as data:
        arrays = {f"in_{i}": data[f"input:{spec['name']}"] for i, spec in enumerate(manifest["inputs"])}
    np.savez(out, **arrays)
    return out
