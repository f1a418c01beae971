"""A package directory's files: its manifest written with every file's hash, the staging
directory installed in place of the old package in one rename, a tarball, and what an
interrupted build left behind. :mod:`.package` and :mod:`.range_package` build into a staging
directory and end with :func:`install`."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetune_runtime.loader import MANIFEST

from .errors import PackageError
from .util import process_alive, sha256_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackageResult:
    """A finished package on disk."""

    path: Path
    manifest: dict[str, Any]
    tarball: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    hints: list[str] = field(default_factory=list)  # what the user may want to know (another precision, ...)

    @property
    def verification(self) -> dict[str, Any]:
        """The manifest's reference-check record."""
        return self.manifest["verification"]


def check_output(output: Path, force: bool) -> None:
    """Refuse an output path that is a file, a non-empty directory without ``force``, or not a package."""
    if output.exists() and not output.is_dir():
        raise PackageError(f"output {output} exists and is not a directory", "choose another -o path")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise PackageError(f"output directory {output} is not empty", "pass --force to replace it, or choose another -o path")
    if output.is_dir() and force and any(output.iterdir()) and not (output / MANIFEST).is_file():
        raise PackageError(f"refusing to replace {output}: it is not an edgetune package", "choose another -o path")


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    """Hash every file but the manifest, then write manifest.json."""
    manifest["files"] = {
        str(p.relative_to(root)): sha256_file(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p != root / MANIFEST and "__pycache__" not in p.parts
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def install(staging: Path, output: Path) -> None:
    """The staging directory in place of ``output`` (an old package there moved aside, then removed)."""
    if output.exists():
        old = output.with_name(f".{output.name}.old-{os.getpid()}")
        output.rename(old)
        staging.rename(output)
        shutil.rmtree(old)
    else:
        staging.rename(output)


def write_tarball(package: Path) -> Path:
    """``<package>.tar.gz`` holding the package directory (written atomically)."""
    tarball = package.with_name(package.name + ".tar.gz")
    partial = tarball.with_name(f".{tarball.name}.partial-{os.getpid()}")
    try:
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(package, arcname=package.name, filter=lambda ti: None if "__pycache__" in ti.name else ti)
        partial.replace(tarball)
    finally:
        partial.unlink(missing_ok=True)
    return tarball


def remove_stale(output: Path) -> None:
    """Staging and backup directories of earlier builds of ``output`` whose process is gone (a
    build killed with SIGKILL cannot clean up after itself). A backup of a package a killed
    build had moved aside but not yet replaced (``output`` missing) is put back, not removed."""
    for path in sorted(output.parent.glob(f".{output.name}.*")):
        match = re.match(rf"^\.{re.escape(output.name)}\.(partial|old|tar\.gz\.partial)-(\d+)", path.name)
        if not match or process_alive(int(match.group(2))):
            continue
        if match.group(1) == "old" and path.is_dir() and not output.exists():
            path.rename(output)
            log.warning("restored %s from the backup an interrupted build left", output)
        elif path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
