"""The board inventory: *where to run*, as a validated user TOML file.

``~/.config/edgetune/devices.toml`` (or ``$EDGETUNE_DEVICES_FILE``)::

    [boards.mypi]
    profile = "pi4"          # what to compile for (see `edgetune targets`)
    host = "192.168.1.42"    # or a Host alias from ~/.ssh/config
    user = "pi"
    port = 22
    key = "~/.ssh/id_ed25519"
    rpc-key = "pi4"          # tracker key this board registers under (default: its profile)

Fields left out fall back to ``~/.ssh/config``, then to SSH defaults.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from ..errors import ProfileError, UsageError
from ..profiles import get_profile

_KEYS = {"profile": str, "host": str, "user": str, "port": int, "key": str, "rpc-key": str, "host-key-policy": str}
POLICIES = ("accept-new", "strict")


@dataclass(frozen=True)
class Board:
    """One board: a profile and how to reach it."""

    name: str
    profile: str
    host: str
    user: str | None = None
    port: int | None = None
    key: str | None = None
    rpc_key: str | None = None
    host_key_policy: str = "accept-new"

    @property
    def tracker_key(self) -> str:
        """The key this board registers under with a tracker."""
        return self.rpc_key or self.profile

    def to_toml(self) -> dict[str, Any]:
        """The table written for this board (None fields left out)."""
        data = {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self) if f.name != "name"}
        return {k: v for k, v in data.items() if v is not None}


def inventory_path() -> Path:
    """Where the inventory lives."""
    env = os.environ.get("EDGETUNE_DEVICES_FILE")
    if env:
        return Path(env).expanduser()
    config = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
    return config / "edgetune" / "devices.toml"


def parse_board(name: str, data: dict[str, Any], where: str) -> Board:
    """Validate one ``[boards.NAME]`` table; unknown keys and wrong types are errors."""
    for key, value in data.items():
        if key not in _KEYS:
            raise ProfileError(f"{where}: board '{name}' has unknown key '{key}'", f"allowed: {', '.join(_KEYS)}")
        if not isinstance(value, _KEYS[key]):
            raise ProfileError(f"{where}: board '{name}': '{key}' must be {_KEYS[key].__name__}")
    for key in ("profile", "host"):
        if key not in data:
            raise ProfileError(f"{where}: board '{name}' needs '{key}'")
    policy = data.get("host-key-policy", "accept-new")
    if policy not in POLICIES:
        raise ProfileError(f"{where}: board '{name}': host-key-policy must be one of {', '.join(POLICIES)}")
    get_profile(data["profile"])
    return Board(name, data["profile"], data["host"], data.get("user"), data.get("port"), data.get("key"),
                 data.get("rpc-key"), policy)


def load_inventory(path: Path | None = None) -> dict[str, Board]:
    """All boards by name (empty when the file does not exist)."""
    path = path or inventory_path()
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ProfileError(f"{path} is not valid TOML: {err}", "fix or remove the file") from err
    unknown = set(data) - {"boards"}
    if unknown:
        raise ProfileError(f"{path}: unknown top-level key(s) {', '.join(sorted(unknown))}", "boards go in [boards.NAME] tables")
    return {name: parse_board(name, table, str(path)) for name, table in data.get("boards", {}).items()}


def _toml_value(value: Any) -> str:
    return str(value) if isinstance(value, int) else json.dumps(value)  # JSON strings are TOML basic strings


def save_inventory(boards: dict[str, Board], path: Path | None = None) -> Path:
    """Write the inventory atomically."""
    path = path or inventory_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# edgetune board inventory (edgetune devices add/remove edit this file)", ""]
    for board in boards.values():
        lines.append(f"[boards.{json.dumps(board.name)}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in board.to_toml().items()]
        lines.append("")
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text("\n".join(lines))
    tmp.replace(path)
    return path


def add_board(board: Board, replace_existing: bool = False) -> Path:
    """Add (or with ``replace_existing`` update) a board; validates it first."""
    parse_board(board.name, board.to_toml(), "new board")
    boards = load_inventory()
    if board.name in boards and not replace_existing:
        raise UsageError(f"board '{board.name}' already exists", "pass --force to replace it, or remove it first")
    boards[board.name] = board
    return save_inventory(boards)


def remove_board(name: str) -> Path:
    """Remove a board by name."""
    boards = load_inventory()
    if name not in boards:
        raise UsageError(f"no board named '{name}'", "list boards with `edgetune devices list`")
    del boards[name]
    return save_inventory(boards)


def get_board(name: str) -> Board:
    """The board called ``name``; UsageError listing known boards otherwise."""
    boards = load_inventory()
    if name not in boards:
        known = ", ".join(boards) or "none yet"
        raise UsageError(f"no board named '{name}'", f"known boards: {known}; add one with `edgetune devices add`")
    return boards[name]


__all__ = ["Board", "add_board", "get_board", "inventory_path", "load_inventory", "remove_board", "replace", "save_inventory"]
