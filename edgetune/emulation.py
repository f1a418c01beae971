"""Run foreign-architecture packages on this host under qemu-user, for the reference check.

An aarch64 Debian Python (debootstrap, first stage, unpacked) serves as the interpreter; the
runtime bundle supplies TVM's runtime. Both are cached (README: Development, testing without a
board).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .bundle import runtime_bundle
from .errors import ToolchainError, VerificationError
from .profiles import Profile
from .toolchain import emulator
from .util import cache_dir, file_lock

log = logging.getLogger(__name__)

DEBIAN_ARCH = {"aarch64": "arm64"}
SUITE = "bookworm"


def debian_mirror() -> str:
    """The Debian mirror this host's apt uses (or ``$EDGETUNE_DEBIAN_MIRROR``)."""
    if os.environ.get("EDGETUNE_DEBIAN_MIRROR"):
        return os.environ["EDGETUNE_DEBIAN_MIRROR"]
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources")) + [Path("/etc/apt/sources.list")]
    for path in sources:
        if path.is_file():
            text = path.read_text()
            match = re.search(r"^URIs:\s*(\S+/debian)/?\s*$", text, re.M) or re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)/?\s", text, re.M)
            if match:
                return match.group(1)
    raise ToolchainError("cannot find a Debian mirror in the apt sources", "set EDGETUNE_DEBIAN_MIRROR")


def sysroot(arch: str) -> Path:
    """A cached Debian root for ``arch`` with python3, built with debootstrap's first stage on
    first use (as root, or as any user under ``fakeroot``: no package is configured, only
    unpacked), then every package unpacked with ``dpkg -x``."""
    root = cache_dir("sysroot") / f"{arch}-{SUITE}"
    if (root / ".complete").is_file():
        return root
    debootstrap = shutil.which("debootstrap") or next(
        (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if Path(p).is_file()), None)
    if debootstrap is None:
        raise ToolchainError("debootstrap is needed to build the emulated Python", "sudo apt-get install debootstrap")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("fakeroot") is None:
            raise ToolchainError("building the emulated Python as a normal user needs fakeroot", "sudo apt-get install fakeroot")
        prefix = ["fakeroot"]
    with file_lock(root.with_name(root.name + ".lock"), what=f"the {arch} sysroot"):
        if (root / ".complete").is_file():
            return root
        shutil.rmtree(root, ignore_errors=True)
        log.info("building an %s Debian sysroot for emulation (once, ~1 min)", arch)
        cmd = [*prefix, debootstrap, "--foreign", f"--arch={DEBIAN_ARCH[arch]}", "--variant=minbase", "--include=python3",
               SUITE, str(root), debian_mirror()]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise ToolchainError(f"debootstrap failed: {(proc.stdout + proc.stderr).strip().splitlines()[-1:]}",
                                 "check network access to the Debian mirror")
        for deb in sorted((root / "var/cache/apt/archives").glob("*.deb")):
            unpacked = subprocess.run(["dpkg", "-x", str(deb), str(root)], capture_output=True, text=True)
            if unpacked.returncode:
                raise ToolchainError(f"unpacking {deb.name} into the {arch} sysroot failed: "
                                     f"{(unpacked.stderr or unpacked.stdout).strip()[-300:] or unpacked.returncode}",
                                     "check the disk space under the cache directory, then package again")
        (root / ".complete").write_text(SUITE)
    return root


def unavailable_reason(profile: Profile) -> str | None:
    """Like :func:`available`, and also builds (or fails to build) the sysroot and bundle: None
    when a reference check can run under emulation, else why not — the package is then written
    with its check marked skipped, rather than failing."""
    reason = available(profile)
    if reason:
        return reason
    try:
        sysroot(profile.arch)
        runtime_bundle(profile.arch)
    except ToolchainError as err:
        return f"{err.message} ({err.hint})" if err.hint != err.default_hint else err.message
    return None


def available(profile: Profile) -> str | None:
    """None when ``profile`` packages can be run here under emulation, else the reason."""
    if profile.runtime != "cpu":
        return f"the {profile.runtime} runtime needs the board's GPU"
    if profile.arch not in DEBIAN_ARCH:
        return f"no emulated runtime for {profile.arch} (no {profile.arch} TVM runtime wheel)"
    if emulator(profile) is None:
        return f"{profile.toolchain.emulator or 'qemu-user'} is not installed (sudo apt-get install qemu-user-static)"
    return None


def run_loader(profile: Profile, package: Path, args: list[str], timeout: float | None = None) -> dict[str, Any]:
    """Run ``python -m edgetune_runtime ARGS PACKAGE --json`` under qemu; returns its JSON.
    ``timeout`` (default ``$EDGETUNE_EMULATION_TIMEOUT`` or 900 s) ends it with a VerificationError."""
    timeout = timeout or float(os.environ.get("EDGETUNE_EMULATION_TIMEOUT", "900"))
    qemu = emulator(profile)
    root = sysroot(profile.arch)
    bundle = runtime_bundle(profile.arch)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(bundle), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(cache_dir())}
    # cwd=package: `python -m` puts it first on sys.path, so the package's own loader copy runs.
    cmd = [str(qemu), "-L", str(root), str(root / "usr/bin/python3.11"), "-m", "edgetune_runtime", *args, ".", "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=package)
    except subprocess.TimeoutExpired:
        raise VerificationError(
            f"the emulated reference check did not finish within {timeout:.0f} s",
            "emulation runs 5-20x slower than a board: raise EDGETUNE_EMULATION_TIMEOUT (seconds), or package "
            "with --no-verify and check on the board (`edgetune deploy`)") from None
    result = check_answer(proc)
    if result is None:
        why = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise ToolchainError(f"the emulated runtime failed (exit code {proc.returncode}): {why[:300]}")
    return result


def check_answer(proc: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
    """The JSON a finished ``python -m edgetune_runtime check --json`` printed last, or None
    where it gave none: ``check`` exits 1 when the outputs differ (its JSON is the answer), any
    other failure has none."""
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    return result if isinstance(result, dict) and proc.returncode in (0, 1) else None
