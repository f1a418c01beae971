"""Tuning records on disk: one MetaSchedule JSON database per device profile.

The two files are append-only JSON lines (``database_workload.json``: ``[hash, ir]``;
``database_tuning_record.json``: ``[workload index, [trace, run_secs, target, args]]``), so a
killed run leaves at most one torn last line, which :meth:`RecordStore.repair` cuts off. Reading
statistics, listing, exporting and importing need no TVM.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._tvm.metaschedule import FAILED_RUN_SECS as FAILED  # constants only: importing it loads no TVM
from .._tvm.metaschedule import RECORDS_FILE as RECORDS
from .._tvm.metaschedule import WORKLOADS_FILE as WORKLOADS
from ..errors import UsageError
from ..util import cache_dir, write_atomic

log = logging.getLogger(__name__)

META = "profile.json"
DEFAULTS = "defaults.json"  # per workload: the default schedule's measured seconds
LEGACY_LOWERING = "nchw"  # what edgetune 0.1 tuned (TVM's own legalization)


def default_dir(profile: str) -> Path:
    """Where records for ``profile`` live unless ``--records`` says otherwise."""
    return cache_dir() / "records" / profile


def list_stores() -> list["RecordStore"]:
    """Every profile's records under the user cache."""
    root = cache_dir() / "records"
    if not root.is_dir():
        return []
    return [RecordStore(d, d.name) for d in sorted(root.iterdir()) if (d / WORKLOADS).is_file()]


@dataclass(frozen=True)
class WorkloadStats:
    """What the records say about one workload."""

    shash: str
    trials: int
    failures: int
    best_ms: float | None  # mean run time of the best valid record
    default_ms: float | None = None  # the kernel as an untuned package builds it

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class RecordStore:
    """A records directory for one profile."""

    def __init__(self, directory: Path, profile: str):
        self.dir = Path(directory)
        self.profile = profile

    # ---- lifecycle

    def exists(self) -> bool:
        return (self.dir / WORKLOADS).is_file()

    def prepare(self, target: dict[str, Any], lowering: str) -> int:
        """Create the directory (MetaSchedule's database does not), record which profile,
        target and lowering it serves, refuse another profile's records, and repair torn lines.
        Call it with :meth:`lock` held. Returns how many torn lines were dropped."""
        self.dir.mkdir(parents=True, exist_ok=True)
        meta = self.dir / META
        if meta.is_file():
            have = json.loads(meta.read_text())
            if have.get("profile") != self.profile:
                raise UsageError(f"{self.dir} holds records for profile '{have.get('profile')}', not '{self.profile}'",
                                 "give another --records directory, or omit it for the profile's default")
            if have.get("target") != target:
                log.warning("the '%s' target changed since these records were measured; they still apply "
                            "but their timings may not hold", self.profile)
        have = json.loads(meta.read_text()) if meta.is_file() else {}
        lowerings = sorted(set(have.get("lowerings", [LEGACY_LOWERING] if self.exists() else [])) | {lowering})
        write_atomic(meta, json.dumps({"profile": self.profile, "target": target, "lowerings": lowerings}, indent=2))
        for name in (WORKLOADS, RECORDS):
            (self.dir / name).touch()
        return self.repair()

    def lowerings(self) -> list[str]:
        """The lowerings whose kernels these records tuned (stores from edgetune 0.1 say none:
        theirs was TVM's own NCHW legalization)."""
        meta = self.dir / META
        have = json.loads(meta.read_text()) if meta.is_file() else {}
        return list(have.get("lowerings", [LEGACY_LOWERING] if self.exists() else []))

    def repair(self) -> int:
        """Cut an incomplete or unparsable tail (a run killed mid-write) from both files. Only
        the holder of :meth:`lock` may call this: a reader would cut a line being appended."""
        dropped = 0
        for name in (WORKLOADS, RECORDS):
            path = self.dir / name
            if not path.is_file():
                continue
            data = path.read_bytes()
            good = _valid_prefix(data)
            if good < len(data):
                dropped += max(1, data[good:].count(b"\n"))
                with path.open("r+b") as fh:
                    fh.truncate(good)
                log.warning("dropped a torn record at the end of %s (an interrupted run)", path.name)
        return dropped

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the directory for one tuning run; a second run on it is refused."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / ".lock"
        with path.open("a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as err:
                fh.seek(0)
                raise UsageError(f"records in {self.dir} are in use by another tuning run (pid {fh.read().strip() or '?'})",
                                 "wait for it to finish, or give this run its own --records directory") from err
            fh.seek(0)
            fh.truncate()
            fh.write(str(os.getpid()))
            fh.flush()
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # ---- reading

    def workloads(self) -> list[str]:
        """Workload hashes in file order (a record's index points into this list)."""
        return [row[0] for row in _lines(self.dir / WORKLOADS)]

    def stats(self) -> dict[str, WorkloadStats]:
        """Per workload hash: trials measured, failures, best mean time, default time."""
        hashes = self.workloads()
        trials: dict[str, list[int]] = {}
        best: dict[str, float] = {}
        defaults = self.defaults()
        for idx, rec in _lines(self.dir / RECORDS):
            if idx >= len(hashes):
                break  # a record whose workload line is still being written
            shash = hashes[idx]
            secs = [float(x) for x in rec[1]] or [FAILED]
            count = trials.setdefault(shash, [0, 0])
            count[0] += 1
            if min(secs) >= FAILED:
                count[1] += 1
                continue
            mean = sum(secs) / len(secs)
            best[shash] = min(best.get(shash, mean), mean)
            if not (rec[0][0] if rec[0] else []):  # edgetune 0.1's "before": plain loops, empty trace
                defaults.setdefault(shash, mean)
        return {h: WorkloadStats(h, c[0], c[1], _ms(best.get(h)), _ms(defaults.get(h))) for h, c in trials.items()}

    def defaults(self) -> dict[str, float]:
        """Per workload hash: seconds of its default schedule, as tuning measured it."""
        try:
            return {str(k): float(v) for k, v in json.loads((self.dir / DEFAULTS).read_text()).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def record_defaults(self, measured: dict[str, float]) -> None:
        """Remember default-schedule times (seconds) by workload hash (under :meth:`lock`)."""
        if measured:
            write_atomic(self.dir / DEFAULTS, json.dumps({**self.defaults(), **measured}, indent=1))

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Path]:
        """A consistent copy of the records (complete lines only) for a reader while a tuning
        run may be appending: readers never write to the store."""
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory(prefix="edgetune-records-") as tmp:
            for name in (WORKLOADS, RECORDS):
                data = (self.dir / name).read_bytes() if (self.dir / name).is_file() else b""
                (Path(tmp) / name).write_bytes(data[:_valid_prefix(data)])
            for name in (META, DEFAULTS):
                if (self.dir / name).is_file():
                    shutil.copy(self.dir / name, Path(tmp) / name)
            yield Path(tmp)

    def summary(self) -> dict[str, Any]:
        """For ``records ls``: totals and where the files are."""
        stats = self.stats()
        size = sum((self.dir / n).stat().st_size for n in (WORKLOADS, RECORDS) if (self.dir / n).is_file())
        return {"profile": self.profile, "path": str(self.dir), "workloads": len(self.workloads()),
                "tuned_workloads": sum(1 for s in stats.values() if s.best_ms is not None),
                "trials": sum(s.trials for s in stats.values()), "failures": sum(s.failures for s in stats.values()),
                "bytes": size}

    # ---- moving records between machines

    def export(self, archive: Path) -> Path:
        """Write the records (and the profile they are for) into a ``.tar.gz``."""
        with self.snapshot() as snap, tarfile.open(archive, "w:gz") as tar:
            for name in (META, DEFAULTS, WORKLOADS, RECORDS):
                if (snap / name).is_file():
                    tar.add(snap / name, arcname=name)
        return archive

    def import_(self, archive: Path) -> tuple[int, int]:
        """Merge an exported archive into this store (duplicates skipped), under the store's lock
        (a tuning run on it refuses the import). Returns (workloads added, records added).
        Raises UsageError for another profile or a malformed archive (nothing is imported)."""
        with self.lock():
            return self._import(archive)

    def _import(self, archive: Path) -> tuple[int, int]:
        files = _read_archive(archive)
        meta, theirs, rows = _parse_archive(archive, files)
        if meta.get("profile") not in (None, self.profile):
            raise UsageError(f"{archive} holds records for profile '{meta.get('profile')}', not '{self.profile}'",
                             f"import it with --device {meta.get('profile')}")
        existing = self.dir / META
        target = json.loads(existing.read_text()).get("target", {}) if existing.is_file() else meta.get("target", {})
        if meta.get("target") not in (None, target):
            log.warning("%s was measured with another '%s' target; its timings may not hold here", archive.name, self.profile)
        self.prepare(target, meta.get("lowerings", [LEGACY_LOWERING])[0])
        for key in meta.get("lowerings", [LEGACY_LOWERING])[1:]:
            self.prepare(target, key)
        ours = self.workloads()
        index = {h: i for i, h in enumerate(ours)}
        new_workloads = []
        for shash, ir in theirs:
            if shash not in index:
                index[shash] = len(ours) + len(new_workloads)
                new_workloads.append([shash, ir])
        have = {_record_key(i, r) for i, r in _lines(self.dir / RECORDS)}
        new_records = []
        for idx, rec in rows:
            row = [index[theirs[idx][0]], rec]
            if _record_key(*row) not in have:
                have.add(_record_key(*row))
                new_records.append(row)
        _append(self.dir / WORKLOADS, new_workloads)
        _append(self.dir / RECORDS, new_records)
        try:
            theirs_defaults = json.loads(files.get(DEFAULTS, b"{}") or b"{}")
        except ValueError:
            theirs_defaults = {}  # informational only: the records themselves were valid
        self.record_defaults({k: float(v) for k, v in theirs_defaults.items() if k not in self.defaults()})
        return len(new_workloads), len(new_records)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _record_key(idx: int, rec: Any) -> str:
    return f"{idx}:{json.dumps(rec[:2], sort_keys=True)}"  # trace and run times


def _append(path: Path, rows: list[Any]) -> None:
    if rows:
        with path.open("a") as fh:
            fh.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
            fh.flush()
            os.fsync(fh.fileno())


def _read_archive(archive: Path) -> dict[str, bytes]:
    try:
        with tarfile.open(archive, "r:*") as tar:
            out = {}
            for member in tar.getmembers():
                if member.isfile() and member.name in (META, DEFAULTS, WORKLOADS, RECORDS):
                    out[member.name] = tar.extractfile(member).read()  # type: ignore[union-attr]
            return out
    except (OSError, tarfile.TarError) as err:
        raise UsageError(f"cannot read records archive {archive}: {err}", "give a file written by `edgetune records export`") from err


def _parse_archive(archive: Path, files: dict[str, bytes]) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """(meta, workloads, records) of an exported archive; UsageError naming the first malformed
    line, before anything is written to the store."""
    def bad(what: str) -> UsageError:
        return UsageError(f"records archive {archive.name} is malformed: {what}",
                          "give a file written by `edgetune records export`")

    if WORKLOADS not in files or RECORDS not in files:
        raise bad(f"it lacks {WORKLOADS} or {RECORDS}")
    try:
        meta = json.loads(files.get(META, b"{}") or b"{}")
        workloads = [json.loads(line) for line in _text_lines(files[WORKLOADS])]
    except (ValueError, UnicodeDecodeError) as err:
        raise bad(f"unreadable metadata or workloads ({err})") from None
    if not isinstance(meta, dict) or any(not (isinstance(w, list) and len(w) == 2 and isinstance(w[0], str)) for w in workloads):
        raise bad("unexpected metadata or workload lines")
    rows = []
    for n, line in enumerate(_text_lines(files[RECORDS]), 1):
        try:
            idx, rec = json.loads(line)
            ok = isinstance(idx, int) and 0 <= idx < len(workloads) and isinstance(rec, list) and len(rec) >= 2
        except (ValueError, TypeError):
            ok = False
        if not ok:
            raise bad(f"record line {n}")
        rows.append((idx, rec))
    return meta, workloads, rows


def _valid_prefix(data: bytes) -> int:
    """Length of the longest prefix made of complete, parsable JSON lines."""
    good = 0
    for line in io.BytesIO(data):
        if not line.endswith(b"\n"):
            break
        if line.strip():
            try:
                json.loads(line)
            except ValueError:
                break
        good += len(line)
    return good


def _text_lines(data: bytes) -> list[str]:
    return [line for line in data.decode().splitlines() if line.strip()]


def _lines(path: Path) -> Iterator[Any]:
    if not path.is_file():
        return
    with path.open() as fh:
        for line in fh:
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError:
                    return  # a torn tail: repair() cuts it before the database opens
