"""Records are code and boards are shared: hostile record archives, the records store under a
writer, who may connect, and the data-loss windows (each test fails without its fix)."""

from __future__ import annotations

import copy
import errno
import json
import random
import tarfile
import time
from pathlib import Path

import pytest
import records_helpers as rh
from conftest import run_edgetune

from edgetune.errors import PackageError, UsageError
from edgetune.tuning.records import RecordStore


def _archive(tmp_path: Path, mutate=None, name: str = "r.tar.gz") -> Path:
    """An exported archive of a real store, its record lines passed through ``mutate``."""
    src = rh.write_store(tmp_path / f"src-{name}")
    archive = src.export(tmp_path / f"clean-{name}")
    if mutate is None:
        return archive
    files = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            files[member.name] = tar.extractfile(member).read()
    mutate(files)
    out = tmp_path / name
    with tarfile.open(out, "w:gz") as tar:
        for member_name, data in files.items():
            info = tarfile.TarInfo(member_name)
            info.size = len(data)
            import io

            tar.addfile(info, io.BytesIO(data))
    return out


def _records(files: dict[str, bytes]) -> list:
    return [json.loads(line) for line in files[rh.RECORDS].decode().splitlines() if line.strip()]


def _set_records(files: dict[str, bytes], rows: list) -> None:
    files[rh.RECORDS] = "".join(json.dumps(r) + "\n" for r in rows).encode()


def _store_bytes(store: RecordStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(store.dir.iterdir()) if p.is_file() and p.name != ".lock"}


def _target_store(tmp_path: Path) -> RecordStore:
    dst = rh.write_store(tmp_path / "dst")
    return dst


def _with_instruction(inst):
    def mutate(files):
        rows = _records(files)
        rows[1][1][0][0].append(inst)
        _set_records(files, rows)
    return mutate


@pytest.mark.parametrize("inst,match", [
    (["Annotate", ["b0", "\"/tmp/evil.ll\""], ["pragma_import_llvm"], []], "annotates 'pragma_import_llvm'"),
    (["Annotate", ["b0", 1], ["pragma_import_c"], []], "annotates 'pragma_import_c'"),
    (["EvilKind", [], [], []], "'EvilKind', which edgetune's design spaces never produce"),
    (["Tensorize", ["l1"], ["foreign_intrin", True], []], "tensorizes with 'foreign_intrin'"),
    (["Split", ["b0", "None", 8], [True, False], ["l9", "l10"]], "does not replay"),
], ids=["pragma_import_llvm", "pragma_import_c", "unknown-kind", "foreign-intrinsic", "no-replay"])
def test_hostile_record_is_refused_by_line_and_nothing_is_written(tmp_path, inst, match):
    dst = _target_store(tmp_path)
    before = _store_bytes(dst)
    with pytest.raises(UsageError, match=rf"record line 2: .*{match}"):
        dst.import_(_archive(tmp_path, _with_instruction(inst)))
    assert _store_bytes(dst) == before


# schedule methods that are no trace instruction (reads of the schedule, its copy, its seed)
NOT_INSTRUCTIONS = {"get", "get_sref", "copy", "fork_seed"}


def test_every_schedule_primitive_edgetune_calls_is_a_trace_instruction_its_records_may_hold():
    """A record is refused on reading when its trace holds an instruction outside the allow-list:
    a primitive the design spaces call that the list lacks makes every record using it vanish
    from the store (a padded layout kernel's DecomposePadding did)."""
    import re

    from edgetune._tvm.constants import TRACE_INSTRUCTIONS

    source = "\n".join(p.read_text() for p in (Path(__file__).parents[1] / "edgetune" / "_tvm").rglob("*.py"))
    called = set(re.findall(r"\bsch\.([a-z_]+)\(", source)) - NOT_INSTRUCTIONS
    kinds = {"".join(w.capitalize() for w in name.split("_")).replace("Sblock", "SBlock").replace("Rfactor", "RFactor")
             for name in called}
    assert kinds - TRACE_INSTRUCTIONS == set()


@pytest.mark.parametrize("mutate,match", [
    (lambda f: f.__setitem__(rh.RECORDS, f[rh.RECORDS] + b'[0,[[],["x"]]]\n'), "record line 6: run time 'x'"),
    (lambda f: f.__setitem__("profile.json", json.dumps({"profile": "host", "lowerings": []}).encode()), "lowerings"),
    (lambda f: f.__setitem__("defaults.json", b'{"123": "slow"}'), "defaults.json holds"),
    (lambda f: f.__setitem__(rh.RECORDS, f[rh.RECORDS] + b'[7,[[[],[]],[0.1],{},[]]]\n'), "workload index 7"),
    (lambda f: f.__setitem__(rh.RECORDS, f[rh.RECORDS] + b'[0,[[[],[]],[1e-13],{"kind":"llvm"},[]]]\n'), "GFLOP/s is beyond"),
    (lambda f: f.__setitem__(rh.RECORDS, f[rh.RECORDS] + b'[0,[[[],[]],[-1],{},[]]]\n'), "not a measured time"),
], ids=["bad-run-time", "empty-lowerings", "bad-defaults", "bad-index", "impossibly-fast", "negative-time"])
def test_malformed_archive_is_refused_before_anything_is_written(tmp_path, mutate, match):
    dst = _target_store(tmp_path)
    before = _store_bytes(dst)
    with pytest.raises(UsageError, match=match):
        dst.import_(_archive(tmp_path, mutate))
    assert _store_bytes(dst) == before
    assert dst.stats()  # the store still reads


def test_workload_filed_under_another_hash_is_refused(tmp_path):
    def mutate(files):
        lines = files[rh.WORKLOADS].decode().splitlines()
        first = json.loads(lines[0])
        first[0] = "12345"
        files[rh.WORKLOADS] = "\n".join([json.dumps(first), *lines[1:]]).encode() + b"\n"

    with pytest.raises(UsageError, match="does not hash to the name"):
        _target_store(tmp_path).import_(_archive(tmp_path, mutate))


def test_hostile_record_on_disk_is_never_used_and_set_aside_by_the_next_tune(tmp_path, caplog):
    store = rh.write_store(tmp_path / "rec")
    rows = [json.loads(line) for line in (store.dir / rh.RECORDS).read_text().splitlines()]
    evil = copy.deepcopy(rows[1])
    evil[1][0][0].append(["Annotate", ["b0", 1], ["pragma_import_llvm"], []])
    evil[1][1] = [1e-6]  # would be the "best"
    with (store.dir / rh.RECORDS).open("a") as fh:
        fh.write(json.dumps(evil) + "\n")
    assert store.stats()[store.workloads()[0]].best_ms == pytest.approx(1.0)  # not the hostile 0.001
    with store.snapshot() as snap:
        assert "pragma_import_llvm" not in (snap / rh.RECORDS).read_text()
    assert store.prepare({"kind": "llvm"}, "nhwc-packed") == 0  # what a tuning run does first, under its lock
    assert "pragma_import_llvm" not in (store.dir / rh.RECORDS).read_text()
    assert "pragma_import_llvm" in (store.dir / "rejected_records.json").read_text()
    assert "set aside" in caplog.text


def test_snapshot_and_stats_read_records_before_workloads(tmp_path, monkeypatch):
    """A writer appends a workload, then its record. Reading the workloads first and the records
    second could see the record without its workload (and stats() then dropped every later
    record). The writer is made to strike exactly between the two reads."""
    store = rh.write_store(tmp_path / "rec")
    extra = rh.matmul(16)
    line = json.dumps(rh.workload_line(extra)) + "\n"
    rec = json.dumps([2, rh.record(rh.trace(extra, 4), [0.0001])]) + "\n"
    original = Path.read_bytes
    armed = {"on": True}

    def read_bytes(self: Path) -> bytes:
        data = original(self)
        if armed["on"] and self.name in (rh.WORKLOADS, rh.RECORDS):
            armed["on"] = False
            with (store.dir / rh.WORKLOADS).open("a") as fh:
                fh.write(line)
            with (store.dir / rh.RECORDS).open("a") as fh:
                fh.write(rec)
        return data

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with store.snapshot() as snap:
        count = len((snap / rh.WORKLOADS).read_text().splitlines())
        indices = [json.loads(r)[0] for r in (snap / rh.RECORDS).read_text().splitlines()]
    assert indices and max(indices) < count


def test_stats_under_a_concurrent_writer_never_lose_records(tmp_path):
    import threading

    store = rh.write_store(tmp_path / "rec")
    extra = [rh.matmul(n) for n in (8, 16, 24, 40, 48, 56)]  # none the store has (64, 32)
    stop = threading.Event()

    def writer() -> None:
        for i, mod in enumerate(extra):
            with (store.dir / rh.WORKLOADS).open("a") as fh:
                fh.write(json.dumps(rh.workload_line(mod)) + "\n")
            with (store.dir / rh.RECORDS).open("a") as fh:
                fh.write(json.dumps([2 + i, rh.record(rh.trace(mod, 4), [0.0001])]) + "\n")
            time.sleep(0.001)
        stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    while not stop.is_set():
        stats = store.stats()
        assert stats[store.workloads()[0]].trials == 4  # the first workload's records are always all there
    thread.join()
    assert len(store.stats()) == 8


@pytest.mark.slow
def test_records_import_fuzz_is_a_clean_import_or_one_clear_line(tmp_path):
    """Mutated archives (bytes flipped, lines dropped or duplicated, fields swapped) either import
    or are refused with a UsageError; the store changes only on a clean import."""
    clean = _archive(tmp_path)
    with tarfile.open(clean) as tar:
        base = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    rng = random.Random(0)
    deadline = time.monotonic() + 60
    outcomes = {"imported": 0, "refused": 0}
    n = 0
    while n < 2000 and time.monotonic() < deadline:
        n += 1
        files = dict(base)
        target = rng.choice([rh.RECORDS, rh.RECORDS, rh.WORKLOADS, "profile.json", "defaults.json"])
        data = bytearray(files.get(target, b"{}"))
        kind = rng.randrange(4)
        if kind == 0 and data:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:
            lines = bytes(data).splitlines(keepends=True)
            if lines:
                del lines[rng.randrange(len(lines))]
            data = bytearray(b"".join(lines))
        elif kind == 2:
            data += bytes(rng.choice([b'[0,[[],[0.1]]]\n', b'{"a":1}\n', b'[99,[[[["Fuse",[],[],[]]],[]],[1],{},[]]]\n',
                                      b'[0,[[[["Annotate",["b0",1],["pragma_import_llvm"],[]]],[]],[1],{},[]]]\n', b"\xff\xfe\n"]))
        else:
            data = bytearray(bytes(data).replace(b"meta_schedule.parallel", b"pragma_import_llvm"))
        files[target] = bytes(data)
        archive = tmp_path / "fuzz.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            for member_name, blob in files.items():
                import io

                info = tarfile.TarInfo(member_name)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
        dst = RecordStore(tmp_path / f"dst{n % 4}", "host")
        before = _store_bytes(dst) if dst.dir.is_dir() else {}
        try:
            dst.import_(archive)
            outcomes["imported"] += 1
        except UsageError as err:
            assert "\n" not in err.message
            assert (_store_bytes(dst) if dst.dir.is_dir() else {}) == before, err.message
            outcomes["refused"] += 1
    assert outcomes["refused"] > 50 and n >= 200, (n, outcomes)


# ---------------------------------------------------------------- who may connect


def test_tracker_on_a_network_address_needs_yes():
    result = run_edgetune("tracker", "start", "--host", "0.0.0.0", "--port", "0")
    assert result.returncode != 0 and "--yes" in result.stderr and "Traceback" not in result.stderr


def test_timed_out_tracker_request_is_withdrawn():
    """A request that gives up leaves no queued request behind to take the next freed board."""
    import socket

    from tvm import rpc
    from tvm.rpc.tracker import Tracker

    from edgetune.errors import RpcError
    from edgetune.remote.rpc import request_session

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    port = free_port()
    tracker = Tracker("127.0.0.1", port, port_end=port + 1, silent=True)
    server_port = free_port()
    server = rpc.Server("127.0.0.1", server_port, server_port + 1, key="board", tracker_addr=("127.0.0.1", port),
                        silent=True)
    try:
        addr = ("127.0.0.1", port)
        deadline = time.monotonic() + 30
        held = None
        while held is None and time.monotonic() < deadline:
            try:
                held = request_session(addr, "board", timeout=5)
            except RpcError:
                time.sleep(0.5)
        assert held is not None
        with pytest.raises(RpcError, match="became free within"):
            request_session(addr, "board", timeout=1)  # the board is busy: give up
        del held  # the board is free again: it must go to the next request, not the withdrawn one
        assert request_session(addr, "board", timeout=30) is not None
    finally:
        server.terminate()
        tracker.terminate()


def test_proxy_jump_hosts_parse_ipv6():
    from edgetune.remote.ssh import _host_port

    assert _host_port("[fe80::1]:2222") == ("fe80::1", "2222")
    assert _host_port("fe80::1") == ("fe80::1", "")
    assert _host_port("jump.example:22") == ("jump.example", "22")
    assert _host_port("jump") == ("jump", "")


# ---------------------------------------------------------------- data-loss windows, integrity


def test_backup_left_by_a_killed_build_is_restored_not_deleted(tmp_path):
    from edgetune.package_files import remove_stale

    out = tmp_path / "pkg"
    backup = tmp_path / ".pkg.old-999999"  # a build killed between its two renames
    backup.mkdir()
    (backup / "manifest.json").write_text("{}")
    remove_stale(out)
    assert (out / "manifest.json").is_file() and not backup.exists()


def test_disk_full_while_writing_the_tarball_says_the_package_is_there(tmp_path, squeezenet, monkeypatch):
    from edgetune import package as pkg

    def full(_path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pkg, "write_tarball", full)
    out = tmp_path / "sq"
    with pytest.raises(PackageError, match="the package itself is complete"):
        pkg.package(pkg.PackageOptions(model=squeezenet, device="host", output=out, tar=True, verify=False))
    assert (out / "manifest.json").is_file()


def test_loader_refuses_a_manifest_that_does_not_check_the_library(host_package, tmp_path):
    import shutil

    import edgetune_runtime
    from edgetune_runtime.errors import LoaderError

    copy_dir = tmp_path / "pkg"
    shutil.copytree(host_package, copy_dir)
    manifest = json.loads((copy_dir / "manifest.json").read_text())
    manifest["files"] = {}
    (copy_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(LoaderError, match="library 'model.so' is not one of the files it checks"):
        edgetune_runtime.load(copy_dir)


@pytest.mark.long
@pytest.mark.slow
def test_loader_manifest_fuzz_is_a_clean_load_or_one_clear_line(host_package, tmp_path):
    import shutil

    import edgetune_runtime
    from edgetune_runtime.errors import LoaderError

    pkg = tmp_path / "pkg"
    shutil.copytree(host_package, pkg)
    base = json.loads((host_package / "manifest.json").read_text())
    rng = random.Random(1)
    values = [None, 0, -1, 1.5, "", "x", "../etc/passwd", [], {}, [1, 2], {"a": 1}, True, "model.so", 10**12]

    def mutate(node, depth=0):
        if isinstance(node, dict) and node and (depth == 0 or rng.random() < 0.7):
            key = rng.choice(sorted(node))
            if rng.random() < 0.3:
                del node[key]
            elif rng.random() < 0.5 and isinstance(node[key], (dict, list)):
                mutate(node[key], depth + 1)
            else:
                node[key] = rng.choice(values)
        elif isinstance(node, list) and node:
            i = rng.randrange(len(node))
            if isinstance(node[i], (dict, list)) and rng.random() < 0.6:
                mutate(node[i], depth + 1)
            else:
                node[i] = rng.choice(values)

    loaded = refused = 0
    deadline = time.monotonic() + 60
    for _ in range(600):
        if time.monotonic() > deadline:
            break
        manifest = copy.deepcopy(base)
        for _ in range(rng.randrange(1, 4)):
            mutate(manifest)
        (pkg / "manifest.json").write_text(json.dumps(manifest))
        try:
            model = edgetune_runtime.load(pkg)
            model.run(*model.timing_inputs())
            loaded += 1
        except LoaderError as err:
            assert "\n" not in err.message
            refused += 1
    assert refused > 100 and loaded + refused >= 100


# ---------------------------------------------------------------- leaks and one-line failures


def test_bad_tuning_options_leave_no_worker_pool_or_candidate_directory(squeezenet, tmp_path, monkeypatch):
    """The tuning loop started its worker pool and candidate directory before checking its
    options: a library caller's bad weight left both behind."""
    import glob
    import os
    import tempfile

    from edgetune.tuning.options import TuneOptions
    from edgetune.tuning.session import tune

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # not another test process's tuning run
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "edgetune-tune-*")))
    with pytest.raises(UsageError, match="--weight names no model: nonet"):
        tune(TuneOptions(models=(squeezenet,), device="host", records=tmp_path / "rec", trials=8,
                         weights={"nonet": 2.0}))
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "edgetune-tune-*"))) == before


def test_compilers_started_by_pool_workers_can_be_interrupted():
    """Workers start with SIGINT/SIGTERM blocked (shielded from the terminal's Ctrl-C); the
    processes they start must not inherit that mask."""
    import subprocess
    import sys

    from edgetune._tvm import metaschedule as ms

    probe = ("import re; s = open('/proc/self/status').read(); "
             "print(*(re.search(k + r':\\s*([0-9a-f]+)', s).group(1) for k in ('SigBlk', 'SigIgn')))")
    pool = ms.shielded_pool(1, 30)
    try:
        out = pool.submit(subprocess.check_output, [sys.executable, "-c", probe], text=True).result()
    finally:
        pool.shutdown()
    blocked, ignored = (int(v, 16) for v in out.split())
    for sig in (2, 15):  # SIGINT, SIGTERM
        assert not blocked & (1 << (sig - 1)) and not ignored & (1 << (sig - 1)), out


def test_runtime_bench_of_a_package_without_reference_data(squeezenet, tmp_path):
    import subprocess
    import sys

    from edgetune.package import PackageOptions, package

    out = tmp_path / "noref"
    package(PackageOptions(model=squeezenet, device="host", output=out, verify=False))
    bench = subprocess.run([sys.executable, "-m", "edgetune_runtime", "bench", str(out), "--runs", "3", "--json",
                            "--max-warmup", "1"], capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0 and "Traceback" not in bench.stderr, bench.stderr
    check = subprocess.run([sys.executable, "-m", "edgetune_runtime", "check", str(out)], capture_output=True, text=True,
                           timeout=300)
    assert check.returncode == 2 and "no reference" in check.stderr and "Traceback" not in check.stderr


def test_bench_baseline_source_uses_the_unchanged_model(host_package, squeezenet, tmp_path):
    import shutil

    result = run_edgetune("bench", str(host_package), "--device", "host", "--runs", "3", "--baseline", "source", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["baseline"]["runtime"].startswith("onnxruntime")
    moved = tmp_path / "pkg"
    shutil.copytree(host_package, moved)
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["model"]["path"] = str(tmp_path / "gone.onnx")
    (moved / "manifest.json").write_text(json.dumps(manifest))
    gone = run_edgetune("bench", str(moved), "--device", "host", "--runs", "3", "--baseline", "source")
    assert gone.returncode != 0 and "is not there any more" in gone.stderr
