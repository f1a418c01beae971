"""Operations on one board over SSH: check, setup (push the runtime bundle), deploy a package."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import tarfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bundle import PYTHON, PYTHONS, baselines_bundle, baselines_key, bundle_key, runtime_bundle
from ..errors import PackageError, RemoteCommandError, RemoteError, ToolchainError, UsageError
from ..profiles import Profile, get_profile
from ..util import cache_dir, file_lock, sha256_file, write_atomic
from .facts import FACTS_COMMAND, BoardFacts, parse_facts
from .inventory import Board
from .ssh import SSHConnection, connect

log = logging.getLogger(__name__)

MIN_DISK_MB = 300


class RemoteBoard:
    """A board, its profile and an SSH connection, with edgetune's layout under ``~/.edgetune``."""

    def __init__(self, board: Board, conn: SSHConnection | None = None):
        self.board = board
        self.profile: Profile = get_profile(board.profile)
        self.conn = conn or connect(board)
        self._facts: BoardFacts | None = None

    def __enter__(self) -> "RemoteBoard":
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    def facts(self, refresh: bool = False) -> BoardFacts:
        """Facts reported by the board (cached per connection)."""
        if self._facts is None or refresh:
            self._facts = parse_facts(self.conn.run(FACTS_COMMAND, timeout=120).stdout)
        return self._facts

    @property
    def root(self) -> str:
        return f"{self.facts().home}/.edgetune"

    @property
    def py(self) -> str:
        """The board's ``python3`` as major.minor: the runtime bundle is built for it (RemoteError
        when there is no bundle for it)."""
        version = major_minor(self.facts().python)
        if version not in PYTHONS:
            raise RemoteError(f"board {self.board.name} has python3 {version or 'missing'}; edgetune's runtime needs "
                              f"one of {', '.join(PYTHONS)}", "install one of those Pythons on the board as python3")
        return version

    def runtime_key(self) -> str:
        return bundle_key(self.profile.arch, self.py)

    def baselines_key(self) -> str:
        return baselines_key(self.profile.arch, self.py)

    def runtime_dir(self) -> str:
        """Where this edgetune's runtime bundle lives on the board."""
        return f"{self.root}/runtime/{self.runtime_key()}"

    def baselines_dir(self) -> str:
        """Where the optional baselines bundle (onnxruntime, LiteRT) lives on the board."""
        return f"{self.root}/runtime/{self.baselines_key()}"

    def has_baselines(self) -> bool:
        return self.baselines_key() in self.facts().runtimes

    def python(self, args: list[str], timeout: float = 300, check: bool = True, cwd: str | None = None) -> Any:
        """Run ``python3 ARGS`` with the runtime bundle on PYTHONPATH, then the baselines bundle
        (a missing directory there is harmless; numpy comes from the runtime bundle)."""
        path = f"{self.runtime_dir()}:{self.baselines_dir()}"
        cmd = f"PYTHONPATH={shlex.quote(path)} TVM_USE_RUNTIME_LIB=1 python3 {shlex.join(args)}"
        if cwd:
            cmd = f"cd {shlex.quote(cwd)} && {cmd}"
        return self.conn.run(cmd, timeout=timeout, check=check)


def major_minor(version: str) -> str:
    """``3.10.12`` → ``3.10`` (empty for a board without python3)."""
    return ".".join(version.split(".")[:2])


@dataclass(frozen=True)
class CheckItem:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class CheckReport:
    """`devices check`: each item with ok/detail; ``ok`` when all pass."""

    board: str
    items: tuple[CheckItem, ...]
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(i.ok for i in self.items)


def check_board(board: Board) -> CheckReport:
    """Reachable? arch matches profile? python? runtime installed and importable? disk? cpu?

    Raises RemoteError subclasses when the board cannot be reached at all.
    """
    with RemoteBoard(board) as rb:
        f = rb.facts()
        py = major_minor(f.python)
        items = [
            CheckItem("ssh", True, f"{rb.conn.target.user}@{rb.conn.target.host}:{rb.conn.target.port}"),
            CheckItem("arch", f.arch == rb.profile.arch, f"board {f.arch or '?'}, profile {rb.profile.name} needs {rb.profile.arch}"),
            CheckItem("python", py in PYTHONS, f"python3 {f.python or 'missing'} (runtime bundles exist for {', '.join(PYTHONS)})"),
            CheckItem("disk", f.disk_free_mb >= MIN_DISK_MB, f"{f.disk_free_mb} MB free in {f.home} (setup needs {MIN_DISK_MB} MB)"),
            CheckItem("cpu", f.cpus > 0, f"{f.cpus} cores, {f.mem_mb} MB RAM" + (f", {f.model}" if f.model else "")),
        ]
        if rb.profile.runtime == "cuda":
            want = str(rb.profile.toolchain.cuda_major)
            items.append(CheckItem("cuda", f.cuda.split(".")[0] == want, f"CUDA {f.cuda or 'not found'}, profile needs {want}.x"))
        if py not in PYTHONS:
            return CheckReport(board.name, tuple(items), dict(f.__dict__, timing={}))
        items.append(runtime := _runtime_item(rb, f))
        timing: dict[str, Any] = {}
        if runtime.ok:
            item, timing = board_timing(rb)
            items.append(item)
            items.append(CheckItem("baseline", True, "onnxruntime and LiteRT installed (bench --baseline)" if rb.has_baselines() else
                                   f"none (optional, for bench --baseline: `edgetune devices setup {board.name} --baselines`)"))
    return CheckReport(board.name, tuple(items), dict(f.__dict__, timing=timing))


TIMING_PROBE = ("import json; from edgetune_runtime import measure as m; s = m.system_state(); "
                "print(json.dumps({'state': s, 'warnings': m.warnings(s)}))")


def board_timing(rb: RemoteBoard) -> tuple[CheckItem, dict[str, Any]]:
    """What would make timings on the board lie (throttling, heat, load, governor), read by the
    runtime's own probe; not ok when the board is throttled or busy now."""
    probe = rb.python(["-c", TIMING_PROBE], check=False, timeout=120)
    data = last_json(probe.stdout)
    if data is None:
        return CheckItem("timing", False, "could not read the board's state: "
                         f"{(probe.stderr.strip().splitlines() or ['?'])[-1][:200]}; `edgetune devices setup --force` "
                         "updates the runtime"), {}
    from edgetune_runtime.measure import describe

    warns = data["warnings"]
    detail = describe(data["state"]) + "".join(f"; {w['text']}" for w in warns)
    return CheckItem("timing", not any(w["level"] == "bad" for w in warns), detail), data


def _runtime_item(rb: RemoteBoard, f: BoardFacts) -> CheckItem:
    key = rb.runtime_key()
    if key not in f.runtimes:
        found = ", ".join(f.runtimes) or "none"
        return CheckItem("runtime", False, f"runtime {key} not installed (found: {found}); run `edgetune devices setup {rb.board.name}`")
    probe = rb.python(["-c", "import tvm, numpy, edgetune_runtime; print(tvm.__version__, edgetune_runtime.__version__)"], check=False, timeout=300)
    if probe.returncode:
        return CheckItem("runtime", False, f"runtime {key} does not import: {(probe.stderr.strip().splitlines() or ['?'])[-1][:200]}")
    tvm_version, loader = probe.stdout.split()[:2]
    return CheckItem("runtime", True, f"TVM runtime {tvm_version}, edgetune_runtime {loader}")


def bundle_archive(arch: str, baselines: bool = False, python: str | None = None) -> Path:
    """The runtime bundle (or the baselines bundle) for ``arch`` and the board's ``python`` as a
    cached .tar.gz, rebuilt when it changes."""
    python = python or PYTHON
    bundle = baselines_bundle(arch, python) if baselines else runtime_bundle(arch, python)
    archive = cache_dir("runtime") / f"{bundle.name}.tar.gz"
    stamp = archive.with_suffix(".stamp")
    with file_lock(archive.with_suffix(".lock"), what=f"the {bundle.name} archive"):
        newest = max(p.stat().st_mtime for p in bundle.rglob("*") if p.is_file())
        if archive.is_file() and stamp.is_file() and float(stamp.read_text() or 0) >= newest:
            return archive
        partial = archive.with_name(f".{archive.name}.partial-{os.getpid()}")
        try:
            with tarfile.open(partial, "w:gz", compresslevel=3) as tar:
                tar.add(bundle, arcname=bundle.name)
            partial.replace(archive)
        finally:
            partial.unlink(missing_ok=True)
        write_atomic(stamp, str(newest))
    return archive


@dataclass(frozen=True)
class SetupResult:
    board: str
    runtime: str
    uploaded_mb: float
    already_installed: bool
    baselines: str | None = None  # the baselines bundle's key, when asked for (installed now or before)


def setup_board(board: Board, force: bool = False, baselines: bool = False) -> SetupResult:
    """Install the runtime bundle on the board (no compiler, no internet needed there), and with
    ``baselines`` the frameworks ``bench --baseline`` compares with."""
    with RemoteBoard(board) as rb:
        f = rb.facts()
        if f.arch != rb.profile.arch:
            raise RemoteError(f"board {board.name} is {f.arch}, its profile {rb.profile.name} is {rb.profile.arch}",
                              "fix the board's profile with `edgetune devices add NAME --profile P --force`")
        wanted = [(rb.runtime_key(), False)] + ([(rb.baselines_key(), True)] if baselines else [])
        uploaded = 0.0
        for key, is_baselines in wanted:
            if key in f.runtimes and not force:
                continue
            try:
                archive = bundle_archive(rb.profile.arch, baselines=is_baselines, python=rb.py)
            except ToolchainError as err:
                raise ToolchainError(f"{err.message} (board {board.name}: Python {rb.py})", err.hint) from None
            uploaded += _install_bundle(rb, archive, f"{rb.root}/runtime/{key}")
        return SetupResult(board.name, wanted[0][0], uploaded, uploaded == 0.0, wanted[1][0] if baselines else None)


def _install_bundle(rb: RemoteBoard, archive: Path, target: str) -> float:
    """Unpack ``archive`` beside the live copy at ``target`` on the board, then swap (the live
    copy is moved aside, never deleted before the new one is in place): an interrupted setup
    leaves the previous bundle working, never half of one. Returns MB pushed."""
    remote_runtime = target.rsplit("/", 1)[0]
    rb.conn.run(["mkdir", "-p", remote_runtime])
    remote_archive = f"{remote_runtime}/{archive.name}"
    rb.conn.put(archive, remote_archive)
    q = shlex.quote
    t, old = q(target), q(f"{target}.old")
    # a setup cut between the two moves below left only the .old copy: that is the live one
    rb.conn.run(f"if [ ! -e {t} ] && [ -e {old} ]; then mv {old} {t}; fi; "
                f"rm -rf {t}.new {old} {q(remote_runtime)}/*.partial && mkdir -p {t}.new && "
                f"tar -xzf {q(remote_archive)} -C {t}.new --strip-components=1 --no-same-owner && "
                f"if [ -e {t} ]; then mv {t} {old}; fi && mv {t}.new {t} && rm -rf {old} && rm -f {q(remote_archive)}",
                timeout=600)
    return archive.stat().st_size / 1e6


@dataclass(frozen=True)
class DeployResult:
    board: str
    remote_path: str
    uploaded_files: int
    check: dict[str, Any]


PACKAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def package_name(package: Path) -> str:
    """The name a package gets on the board: its directory's name, which must be plain (an empty
    or odd name would address other packages, or the packages directory itself)."""
    name = package.resolve().name
    if not PACKAGE_NAME.match(name) or set(name) == {"."}:
        raise UsageError(f"cannot deploy a package named {name!r}",
                         "package into a directory with a plain name (letters, digits, . _ -), e.g. -o out/det-pi4")
    return name


def read_manifest(package: Path) -> dict[str, Any]:
    """A package's manifest, read as the loader on the board reads it; PackageError when the
    directory is not a package or its manifest is unreadable."""
    from edgetune_runtime.errors import LoaderError
    from edgetune_runtime.loader import read_manifest as loader_read

    try:
        return loader_read(package)
    except LoaderError as err:
        raise PackageError(err.message, err.hint) from None


def deploy_package(package: Path, board: Board) -> DeployResult:
    """Push a package next to the one on the board, verify every checksum there, run its
    reference check there, and only then swap it in: a failed or interrupted deploy leaves the
    previous package as it was.

    Raises UsageError (odd name), PackageError (not a package), RemoteError (wrong arch, no
    runtime, checksum mismatch, check failed on the board)."""
    package = package.resolve()
    name = package_name(package)
    manifest = read_manifest(package)
    with RemoteBoard(board) as rb:
        if manifest.get("arch") != rb.facts().arch:
            raise RemoteError(f"package is for {manifest.get('arch')}, board {board.name} is {rb.facts().arch}",
                              f"package the model with --device {board.name} (profile {board.profile})")
        if rb.runtime_key() not in rb.facts().runtimes:
            raise RemoteError(f"board {board.name} has no edgetune runtime", f"run `edgetune devices setup {board.name}` first")
        packages = f"{rb.root}/packages"
        final, token = f"{packages}/{name}", uuid.uuid4().hex[:8]
        staging, old = f"{packages}/.{name}.new-{token}", f"{packages}/.{name}.old-{token}"
        q = shlex.quote
        # leftovers of this package's interrupted deploys (the name is validated: the glob is safe); a
        # deploy cut between its two moves left the deployed copy only as .old-*: put it back first
        rb.conn.run(f"mkdir -p {q(packages)} && cd {q(packages)} && "
                    f"if [ ! -e {q(name)} ]; then last=$(ls -dt .{name}.old-* 2>/dev/null | head -n 1); "
                    f"if [ -n \"$last\" ]; then mv \"$last\" {q(name)}; fi; fi && "
                    f"rm -rf .{name}.new-* .{name}.old-*")
        try:
            files = upload_package(rb, package, staging)
            check = _check_on_board(rb, staging)
            if not check.get("passed"):
                worst = {k: v.get("max_abs_error", v.get("error")) for k, v in check.get("outputs", {}).items()}
                raise RemoteError(f"the package failed its reference check on {board.name} ({worst}); "
                                  "the package already there is unchanged", "package the model again and redeploy")
            rb.conn.run(f"if [ -e {q(final)} ]; then mv {q(final)} {q(old)}; fi && mv {q(staging)} {q(final)} && "
                        f"rm -rf {q(old)}")
        except BaseException:
            with contextlib.suppress(Exception):
                rb.conn.run(["rm", "-rf", staging], check=False)
            raise
        return DeployResult(board.name, final, len(files), check)


def upload_package(rb: RemoteBoard, package: Path, remote: str) -> list[Path]:
    """Copy a package directory to ``remote`` on the board and verify every file's checksum there."""
    files = sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for directory in sorted({str(p.parent.relative_to(package)) for p in files}):
        rb.conn.run(["mkdir", "-p", f"{remote}/{directory}" if directory != "." else remote])
    for path in files:
        rb.conn.put(path, f"{remote}/{path.relative_to(package)}", verify=False)
    sums = "".join(f"{sha256_file(p)}  {p.relative_to(package)}\n" for p in files)
    _sha256_check(rb, remote, sums)
    return files


def last_json(stdout: str) -> dict[str, Any] | None:
    """The JSON object a loader command prints as its last line (None when it printed none)."""
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return None


def _check_on_board(rb: RemoteBoard, remote: str) -> dict[str, Any]:
    result = rb.python(["-m", "edgetune_runtime", "check", ".", "--json"], cwd=remote, check=False, timeout=900)
    check = last_json(result.stdout)
    if check is None:
        raise RemoteCommandError(f"the package did not run on {rb.board.name}: "
                                 f"{(result.stderr.strip().splitlines() or ['?'])[-1][:300]}")
    return check


def _sha256_check(rb: RemoteBoard, remote: str, sums: str) -> None:
    listing = f"{remote}/.sha256"
    rb.conn.run(f"printf %s {shlex.quote(sums)} > {shlex.quote(listing)}")
    result = rb.conn.run(f"cd {shlex.quote(remote)} && sha256sum -c --quiet .sha256 && rm -f .sha256", check=False)
    if result.returncode:
        raise RemoteError(f"package files on {rb.board.name} do not match their checksums: {result.stdout.strip()[:300]}", "deploy again")
