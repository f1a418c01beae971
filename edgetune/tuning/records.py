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

from .._tvm.constants import FAILED_RUN_SECS as FAILED
from .._tvm.constants import LOWERING_KEYS
from .._tvm.constants import RECORDS_FILE as RECORDS
from .._tvm.constants import WORKLOADS_FILE as WORKLOADS
from ..errors import UsageError
from ..util import cache_dir, to_ms, write_atomic
from .record_check import impossible_time, run_secs_problem
from .record_check import row_problem as record_problem_row

log = logging.getLogger(__name__)

META = "profile.json"
DEFAULTS = "defaults.json"  # per workload: the default schedule's measured seconds
REJECTED = "rejected_records.json"  # record lines set aside (:meth:`RecordStore.quarantine`)
VETOES = "network_checks.json"  # per workload: a record the network check found slower inside its network
LENGTHS = "shape_weights.json"  # per workload of symbolic shape: the lengths (and weights) its records were timed at
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
        dropped = self.repair()
        self.quarantine()
        return dropped

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

    def quarantine(self) -> int:
        """Move record lines edgetune could not have written (:mod:`.record_check`: a trace with
        foreign instructions or annotations, impossible run times) out of the records file into
        ``rejected_records.json`` beside it, so no search starts from them; a warning names
        each. Only the holder of :meth:`lock` may call this. Returns how many moved."""
        path = self.dir / RECORDS
        if not path.is_file():
            return 0
        count = len(self.workloads())
        keep, rejected = [], []
        for n, line in enumerate(path.read_bytes().splitlines(keepends=True), 1):
            problem = record_problem(line, count)
            (rejected if problem else keep).append(line)
            if problem:
                log.warning("records in %s: record line %d refused and set aside: %s", self.dir, n, problem)
        if rejected:
            with (self.dir / REJECTED).open("ab") as fh:
                fh.write(b"".join(rejected))
            write_atomic(path, b"".join(keep))
        return len(rejected)

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
        """Per workload hash: trials measured, failures, best mean time, default time. Records
        are read before workloads (a writer appends a workload before its records, so every
        record read has its workload); a line edgetune could not have written is skipped."""
        rows = list(_lines(self.dir / RECORDS))
        hashes = self.workloads()
        trials: dict[str, list[int]] = {}
        best: dict[str, float] = {}
        defaults = self.defaults()
        for row in rows:
            if record_problem_row(row, len(hashes)):
                continue
            idx, rec = row
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
        return {h: WorkloadStats(h, c[0], c[1], to_ms(best.get(h)), to_ms(defaults.get(h))) for h, c in trials.items()}

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

    def shape_weights(self) -> dict[str, dict[str, float]]:
        """Per workload hash of a kernel of symbolic shape: the lengths its records were timed
        at, ``{"LENGTH": weight}`` (a record's time is the weighted mean over them)."""
        return self._objects(LENGTHS)

    def record_shape_weights(self, weights: dict[str, dict[str, float]]) -> None:
        """Remember the lengths symbolic kernels are timed at (under :meth:`lock`)."""
        if weights:
            write_atomic(self.dir / LENGTHS, json.dumps({**self.shape_weights(), **weights}, indent=1))

    def vetoes(self) -> dict[str, dict[str, Any]]:
        """Per workload hash: why its best record is not applied (:mod:`.network_check`)."""
        return self._objects(VETOES)

    def _objects(self, name: str) -> dict[str, Any]:
        """A JSON file of the store that maps workload hashes to objects ({} when missing or damaged)."""
        try:
            found = json.loads((self.dir / name).read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): v for k, v in found.items() if isinstance(v, dict)} if isinstance(found, dict) else {}

    def record_vetoes(self, vetoes: dict[str, dict[str, Any]]) -> None:
        """Add vetoes by workload hash (under :meth:`lock`); each holds ``best_ms``, the best
        record's mean time when it was vetoed."""
        if vetoes:
            write_atomic(self.dir / VETOES, json.dumps({**self.vetoes(), **vetoes}, indent=1))

    def drop_vetoes(self, hashes: list[str]) -> None:
        """Take vetoes back (under :meth:`lock`): the network check found them not to pay."""
        dropped = set(hashes)
        left = {k: v for k, v in self.vetoes().items() if k not in dropped}
        write_atomic(self.dir / VETOES, json.dumps(left, indent=1))

    def standing_vetoes(self, stats: dict[str, WorkloadStats] | None = None) -> dict[str, dict[str, Any]]:
        """The vetoes that still hold: their workload has no record faster than the one vetoed
        (a faster one is applied until the next tune's network check decides on it). ``stats``:
        :meth:`stats`, where the caller has them."""
        stats = self.stats() if stats is None else stats
        out = {}
        for shash, veto in self.vetoes().items():
            s = stats.get(shash)
            vetoed = veto.get("best_ms")
            if s is not None and s.best_ms is not None and isinstance(vetoed, (int, float)) and s.best_ms >= vetoed * (1 - 1e-9):
                out[shash] = veto
        return out

    @contextlib.contextmanager
    def snapshot(self, leave_out: frozenset[str] = frozenset()) -> Iterator[Path]:
        """A consistent copy of the records (complete lines only) for a reader while a tuning
        run may be appending: readers never write to the store. The records of the workloads in
        ``leave_out`` (hashes: those under a standing veto, for a build) are not copied."""
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory(prefix="edgetune-records-") as tmp:
            # records first: every record then finds its workload (written before it)
            records, workloads = ((self.dir / n).read_bytes() if (self.dir / n).is_file() else b"" for n in (RECORDS, WORKLOADS))
            workloads = workloads[:_valid_prefix(workloads)]
            count = workloads.count(b"\n")
            lines = records[:_valid_prefix(records)].splitlines(keepends=True)
            kept = [line for line in lines if not record_problem(line, count)]
            if len(kept) < len(lines):
                log.warning("records in %s: %d record line(s) edgetune could not have written are not used "
                            "(`edgetune tune` on these records sets them aside)", self.dir, len(lines) - len(kept))
            if leave_out:
                hashes = [json.loads(w)[0] for w in workloads.splitlines()]
                kept = [line for line in kept if hashes[json.loads(line)[0]] not in leave_out]
            (Path(tmp) / WORKLOADS).write_bytes(workloads)
            (Path(tmp) / RECORDS).write_bytes(b"".join(kept))
            for name in (META, DEFAULTS, LENGTHS):
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
                "vetoed": len(self.standing_vetoes(stats)), "bytes": size}

    # ---- moving records between machines

    def export(self, archive: Path) -> Path:
        """Write the records (and the profile they are for) into a ``.tar.gz``."""
        with self.snapshot() as snap, tarfile.open(archive, "w:gz") as tar:
            for name in (META, DEFAULTS, WORKLOADS, RECORDS, LENGTHS):
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
        meta, theirs, rows, theirs_defaults = _parse_archive(archive, files)
        if meta.get("profile") not in (None, self.profile):
            raise UsageError(f"{archive} holds records for profile '{meta.get('profile')}', not '{self.profile}'",
                             f"import it with --device {meta.get('profile')}")
        _replay(archive, theirs, rows, self.profile)  # every schedule re-derived before anything is written
        lengths = self._their_lengths(archive, files, {h for h, _ir in theirs})
        existing = self.dir / META
        target = json.loads(existing.read_text()).get("target", {}) if existing.is_file() else meta.get("target", {})
        if meta.get("target") not in (None, target):
            log.warning("%s was measured with another '%s' target; its timings may not hold here", archive.name, self.profile)
        for key in meta.get("lowerings", [LEGACY_LOWERING]):
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
        self.record_defaults({k: v for k, v in theirs_defaults.items() if k not in self.defaults()})
        self.record_shape_weights(lengths)
        return len(new_workloads), len(new_records)

    def _their_lengths(self, archive: Path, files: dict[str, bytes], theirs: set[str]) -> dict[str, dict[str, float]]:
        """The archive's lengths of symbolic kernels (:meth:`shape_weights`), checked: UsageError
        where a kernel has records here timed at other lengths (their times would not compare)."""
        try:
            found = json.loads(files.get(LENGTHS, b"{}") or b"{}")
        except (ValueError, UnicodeDecodeError, RecursionError):
            found = None
        if not (isinstance(found, dict) and all(
                k in theirs and isinstance(v, dict) and v and all(
                    all(x.isdigit() for x in n.split("x")) and isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for n, w in v.items())
                for k, v in found.items())):
            raise UsageError(f"records archive {archive.name} is refused: its {LENGTHS} is not lengths and weights of "
                             "its workloads", "import only archives written by `edgetune records export`")
        ours, stats = self.shape_weights(), self.stats()
        clash = sorted(h for h, v in found.items() if h in stats and ours.get(h) != v)
        if clash:
            raise UsageError(f"records archive {archive.name} times {len(clash)} kernel(s) of symbolic shape at other "
                             "lengths than the records here: their times do not compare",
                             "import it into another records directory (--records)")
        return {str(k): {str(n): float(w) for n, w in v.items()} for k, v in found.items()}


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
                if member.isfile() and member.name in (META, DEFAULTS, WORKLOADS, RECORDS, LENGTHS):
                    out[member.name] = tar.extractfile(member).read()  # type: ignore[union-attr]
            return out
    except (OSError, tarfile.TarError) as err:
        raise UsageError(f"cannot read records archive {archive}: {err}", "give a file written by `edgetune records export`") from err


def _parse_archive(archive: Path, files: dict[str, bytes]) -> tuple[dict[str, Any], list[Any], list[Any], dict[str, float]]:
    """(meta, workloads, records, defaults) of an exported archive, every line checked
    (:mod:`.record_check`); UsageError naming the malformed lines, before anything is written."""
    def bad(what: str) -> UsageError:
        return UsageError(f"records archive {archive.name} is refused: {what}",
                          "import only archives written by `edgetune records export` from people you trust")

    if WORKLOADS not in files or RECORDS not in files:
        raise bad(f"it lacks {WORKLOADS} or {RECORDS}")
    for name, data in files.items():
        try:
            data.decode()
        except UnicodeDecodeError:
            raise bad(f"{name} is not text") from None
    try:
        meta = json.loads(files.get(META, b"{}") or b"{}")
        workloads = [json.loads(line) for line in _text_lines(files[WORKLOADS])]
        defaults = json.loads(files.get(DEFAULTS, b"{}") or b"{}")
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise bad(f"unreadable metadata, workloads or defaults ({str(err)[:100]})") from None
    problem = _meta_problem(meta) or _defaults_problem(defaults)
    if problem:
        raise bad(problem)
    for n, w in enumerate(workloads, 1):
        if not (isinstance(w, list) and len(w) == 2 and isinstance(w[0], str) and w[0].isdigit() and isinstance(w[1], str)):
            raise bad(f"workload line {n} is not [hash, IR]")
    rows, problems = [], []
    for n, line in enumerate(_text_lines(files[RECORDS]), 1):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            row = None
        why = record_problem_row(row, len(workloads))
        if why:
            problems.append(f"record line {n}: {why}")
        else:
            rows.append((row[0], row[1]))
    if problems:
        raise bad("; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else ""))
    return meta, workloads, rows, {str(k): float(v) for k, v in defaults.items()}


def _meta_problem(meta: Any) -> str | None:
    if not isinstance(meta, dict):
        return f"{META} is not an object"
    lowerings = meta.get("lowerings", [LEGACY_LOWERING])
    if not (isinstance(lowerings, list) and lowerings and all(k in LOWERING_KEYS for k in lowerings)):
        return f"its lowerings {lowerings!r} are not a list of {', '.join(sorted(LOWERING_KEYS))}"
    if not isinstance(meta.get("profile", ""), str) or not isinstance(meta.get("target", {}), dict):
        return f"{META} names no profile or target"
    return None


def _defaults_problem(defaults: Any) -> str | None:
    if not isinstance(defaults, dict):
        return f"{DEFAULTS} is not an object"
    for key, value in defaults.items():
        if not key.isdigit() or isinstance(value, bool) or not isinstance(value, (int, float)) or run_secs_problem([value]):
            return f"{DEFAULTS} holds {key!r}: {value!r}, not a workload's time"
    return None


def _replay(archive: Path, workloads: list[Any], rows: list[Any], profile: str) -> None:
    """Replay every record on its workload (TVM) and check its times against the device's peak;
    UsageError naming the records that fail."""
    from .. import _tvm
    from .._tvm import metaschedule as ms
    from ..devices import resolve_device
    from ..errors import EdgetuneError

    try:
        prof = resolve_device(profile)
        peak = _tvm.peak_gflops(prof, _tvm.make_target(prof.target_spec()))
    except EdgetuneError:
        peak = None
    problems, work_of = [], {}
    for n, (idx, rec) in enumerate(rows, 1):
        why, flops, factor = ms.replay_problem(workloads[idx], rec)
        flops, factor = work_of.setdefault(idx, (flops, factor))  # the first replay's (a failed one says 0)
        why = why or next((w for w in (impossible_time(flops, float(t), peak and peak * factor) for t in rec[1]) if w),
                          None)
        if why:
            problems.append(f"record line {n}: {why}")
    if problems:
        raise UsageError(f"records archive {archive.name} is refused: " + "; ".join(problems[:3])
                         + (f"; and {len(problems) - 3} more" if len(problems) > 3 else ""),
                         "import only archives written by `edgetune records export` from people you trust")


def record_problem(line: bytes, workloads: int) -> str | None:
    """:func:`.record_check.row_problem` of one raw record line."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return "not JSON"
    return record_problem_row(row, workloads)


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
