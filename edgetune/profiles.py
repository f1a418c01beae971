"""Device profiles: *what to compile for*, as validated TOML data.

A profile names an architecture, a TVM target (JSON form), the cross toolchain and what a board
needs. Profiles ship in ``targets/`` (package data ``edgetune.targets``) and users add or override
them in ``$EDGETUNE_TARGETS_DIR`` or ``~/.config/edgetune/targets/``. Unknown keys are errors.
"""

from __future__ import annotations

import os
import platform
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ProfileError

ARCHES = ("aarch64", "armv7l", "x86_64")
RUNTIMES = ("cpu", "cuda")

_SCHEMA: dict[str, dict[str, type | tuple[type, ...]]] = {
    "": {"description": str, "arch": str, "runtime": str, "target": dict, "toolchain": dict, "board": dict},
    "toolchain": {"cc": str, "debian-packages": list, "emulator": str, "cuda-major": int},
    "board": {"python": str, "memory-mb": int, "peak-gflops": (int, float)},
}
_REQUIRED = ("description", "arch", "runtime", "target")


@dataclass(frozen=True)
class Toolchain:
    """Host tools that build for a profile."""

    cc: str = ""  # cross compiler driver; "" = the host's default
    debian_packages: tuple[str, ...] = ()
    emulator: str = ""  # qemu-user binary able to run this arch on the host, if any
    cuda_major: int | None = None


@dataclass(frozen=True)
class Profile:
    """A validated device profile."""

    name: str
    description: str
    arch: str
    runtime: str
    target: dict[str, Any]
    toolchain: Toolchain = field(default_factory=Toolchain)
    board: dict[str, Any] = field(default_factory=dict)
    source: str = "builtin"

    @property
    def is_native(self) -> bool:
        """True when the host can run this profile's code directly."""
        return self.arch == host_arch() and self.runtime == "cpu"

    def target_spec(self) -> dict[str, Any]:
        """The TVM target dict with ``native``/``auto`` placeholders resolved for this host."""
        return _resolve(self.target)


def host_arch() -> str:
    """This machine's architecture in ``uname -m`` spelling, normalised."""
    return normalize_arch(platform.machine())


def normalize_arch(machine: str) -> str:
    """Map uname spellings onto edgetune's: arm64→aarch64, armv7*/armv8l→armv7l."""
    machine = machine.strip().lower()
    if machine in ("arm64", "aarch64"):
        return "aarch64"
    if machine.startswith("armv7") or machine in ("armv8l", "armhf"):
        return "armv7l"
    if machine in ("amd64", "x86_64"):
        return "x86_64"
    return machine


def _resolve(spec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, dict):
            out[key] = _resolve(value)
        elif value == "native" and key in ("mcpu", "mtriple"):
            from . import _tvm

            # LLVM's own default triple names its build toolchain (e.g. x86_64-conda-linux-gnu)
            out[key] = _tvm.host_cpu()[1] if key == "mcpu" else f"{host_arch()}-linux-gnu"
        elif value == "auto" and key == "num-cores":
            out[key] = os.cpu_count() or 1
        else:
            out[key] = value
    return out


def _check_keys(data: dict[str, Any], section: str, where: str) -> None:
    schema = _SCHEMA[section]
    for key, value in data.items():
        if key not in schema:
            label = f"[{section}] " if section else ""
            raise ProfileError(
                f"{where}: unknown key {label}'{key}'",
                f"allowed keys there: {', '.join(schema)}",
            )
        if not isinstance(value, schema[key]):
            kinds = schema[key] if isinstance(schema[key], tuple) else (schema[key],)
            raise ProfileError(f"{where}: '{key}' must be {' or '.join(k.__name__ for k in kinds)}, got {value!r}")


def parse_profile(name: str, data: dict[str, Any], source: str) -> Profile:
    """Validate raw TOML data into a Profile; raises ProfileError naming the bad key."""
    where = f"profile '{name}' ({source})"
    _check_keys(data, "", where)
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise ProfileError(f"{where}: missing key(s) {', '.join(missing)}")
    tool = data.get("toolchain", {})
    board = data.get("board", {})
    _check_keys(tool, "toolchain", where)
    _check_keys(board, "board", where)
    arch = host_arch() if data["arch"] == "native" else data["arch"]
    if arch not in ARCHES:
        raise ProfileError(f"{where}: arch '{data['arch']}' is not one of native, {', '.join(ARCHES)}")
    if data["runtime"] not in RUNTIMES:
        raise ProfileError(f"{where}: runtime '{data['runtime']}' is not one of {', '.join(RUNTIMES)}")
    if data["runtime"] == "cuda" and "cuda-major" not in tool:
        raise ProfileError(f"{where}: a cuda profile needs [toolchain] cuda-major")
    if "kind" not in data["target"]:
        raise ProfileError(f"{where}: [target] needs a 'kind' (llvm, cuda, ...)")
    toolchain = Toolchain(
        cc=tool.get("cc", ""),
        debian_packages=tuple(tool.get("debian-packages", ())),
        emulator=tool.get("emulator", ""),
        cuda_major=tool.get("cuda-major"),
    )
    return Profile(name, data["description"], arch, data["runtime"], data["target"], toolchain, board, source)


def user_dirs() -> list[Path]:
    """Directories searched for user profiles, highest priority last."""
    env = os.environ.get("EDGETUNE_TARGETS_DIR")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    config = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
    return [config / "edgetune" / "targets"]


def _builtin_files() -> list[tuple[str, str, str]]:
    root = resources.files("edgetune.targets")
    return [
        (entry.name.removesuffix(".toml"), entry.read_text(), "builtin")
        for entry in root.iterdir()
        if entry.name.endswith(".toml")
    ]


def _user_files() -> list[tuple[str, str, str]]:
    found = []
    for directory in user_dirs():
        if directory.is_dir():
            found += [(p.stem, p.read_text(), str(p)) for p in sorted(directory.glob("*.toml"))]
    return found


def load_profiles() -> dict[str, Profile]:
    """All profiles by name; a user file overrides a builtin of the same name."""
    profiles: dict[str, Profile] = {}
    for name, text, source in _builtin_files() + _user_files():
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise ProfileError(f"profile '{name}' ({source}) is not valid TOML: {err}") from err
        profiles[name] = parse_profile(name, data, source)
    return dict(sorted(profiles.items()))


def get_profile(name: str) -> Profile:
    """The profile called ``name``; ProfileError listing the known ones otherwise."""
    profiles = load_profiles()
    if name not in profiles:
        import difflib

        close = difflib.get_close_matches(name, profiles, n=1)
        guess = f"did you mean '{close[0]}'? " if close else ""
        raise ProfileError(
            f"unknown device profile '{name}'",
            f"{guess}known profiles: {', '.join(profiles)} (`edgetune targets`)",
        )
    return profiles[name]
