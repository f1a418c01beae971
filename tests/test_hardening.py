"""Faults found in review, each with the test that failed before its fix (no board needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, REPO, run_edgetune


def test_tracker_stop_does_not_signal_a_reused_pid(tmp_path):
    """After a reboot the tracker's recorded pid can belong to an unrelated process (group):
    `tracker stop` must check it is still the tracker before signalling."""
    victim = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        state = tmp_path / "cache" / "tracker" / "tracker.json"
        state.parent.mkdir(parents=True)
        for started in (0.0, 12345.0):  # an old state file (no start time), and a stale start time
            state.write_text(json.dumps({"host": "127.0.0.1", "port": 9190, "pid": victim.pid, "started": started}))
            res = run_edgetune("tracker", "stop", env={"EDGETUNE_CACHE_DIR": str(tmp_path / "cache")})
            assert res.returncode == 0, res.stderr
            assert victim.poll() is None, "an unrelated process was killed"
            assert not state.exists()  # the stale state was dropped
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged user needs root")
def test_quick_start_works_for_an_ordinary_user():
    """The README's main command as an ordinary user (system packages installed): the emulated
    aarch64 Python is built under fakeroot, and the pi4 package is checked under qemu."""
    import shutil
    import tempfile

    if shutil.which("fakeroot") is None:
        pytest.skip("fakeroot is not installed (scripts/install-system-deps.sh installs it)")
    work = Path(tempfile.mkdtemp(prefix="edgetune-user-"))
    try:
        work.chmod(0o777)
        cache = work / "cache"
        cache.mkdir()
        cache.chmod(0o777)
        shared = Path(os.environ["EDGETUNE_CACHE_DIR"]) / "runtime"
        if shared.is_dir():  # the runtime wheels are the same for everyone: do not download them again
            (cache / "runtime").symlink_to(shared)
        env = {"EDGETUNE_CACHE_DIR": str(cache), "HOME": str(work), "XDG_CONFIG_HOME": str(work / "config"),
               "PATH": "/usr/local/bin:/usr/bin:/bin", "TVM_NUM_THREADS": "2"}
        cmd = [sys.executable, "-m", "edgetune", "package", str(REPO / "examples" / "squeezenet.onnx"),
               "--device", "pi4", "-o", str(work / "out"), "--json"]
        res = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", *cmd],
                             capture_output=True, text=True, timeout=1800, env=env, cwd=work)
        assert res.returncode == 0, res.stderr[-2000:]
        verification = json.loads(res.stdout)["manifest"]["verification"]
        assert verification["status"] == "passed" and "qemu" in verification["executed_on"]
        assert (cache / "sysroot" / "aarch64-bookworm" / ".complete").is_file()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_input_shapes_scoped_per_network(tmp_path):
    """`tune a.onnx b.onnx --input-shape x=…` failed when the models' inputs differ, and two
    models with the same input name could not get different shapes."""
    import models

    a = models.dynamic_cnn_onnx(tmp_path / "a.onnx", "x")
    b = models.dynamic_cnn_onnx(tmp_path / "b.onnx", "x", seed=1)
    c = models.dynamic_cnn_onnx(tmp_path / "c.onnx", "pixels", seed=2)

    def tasks(*args: str) -> list[dict]:
        res = run_edgetune("tune", *args, "--device", "host", "--list-tasks", "--json", "--records", str(tmp_path / "r"))
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    both = tasks(str(a), str(b), "--input-shape", "a:x=1,3,32,32", "--input-shape", "b:x=1,3,48,48")
    convs = [t for t in both if t["kind"] in ("conv2d", "winograd")]
    assert {tuple(sorted(k for k, n in t["weight"].items() if n)) for t in convs} == {("a",), ("b",)}  # two shapes
    shared = tasks(str(a), str(b), "--input-shape", "x=1,3,32,32")  # one plain shape for both models
    assert all(t["weight"]["a"] == t["weight"]["b"] for t in shared)
    mixed = tasks(str(a), str(c), "--input-shape", "x=1,3,32,32", "--input-shape", "pixels=1,3,16,16")
    assert mixed
    typo = run_edgetune("tune", str(a), str(c), "--device", "host", "--list-tasks", "--input-shape", "pixel=1,3,16,16")
    assert typo.returncode != 0 and "unknown input(s) pixel" in typo.stderr and "c: pixels" in typo.stderr


def test_expected_failures_are_one_clear_line(tmp_path, host_package):
    """Each of these ended as "internal error" (exit 70) or a traceback."""
    import shutil
    import tarfile

    from edgetune.remote.inventory import Board, add_board

    add_board(Board("nowhere", "pi4", "127.0.0.1", "nobody", 1, None))
    empty = tmp_path / "not-a-package"
    empty.mkdir()
    noref = tmp_path / "noref"
    shutil.copytree(host_package, noref)
    (noref / "reference.npz").unlink()
    good = tmp_path / "t"
    good.mkdir()
    (good / "database_workload.json").write_text('["1","x"]\n')
    (good / "database_tuning_record.json").write_text('[0,[broken\n')
    with tarfile.open(tmp_path / "bad.tar.gz", "w:gz") as tar:
        for f in good.iterdir():
            tar.add(f, arcname=f.name)
    cases = [
        (("bench", str(empty), "--device", "nowhere"), "is not an edgetune package"),
        (("deploy", str(empty), "--device", "nowhere"), "is not an edgetune package"),
        (("bench", str(noref), "--device", "nowhere"), "has no reference data"),
        (("records", "import", str(tmp_path / "bad.tar.gz"), "--device", "host", "--records", str(tmp_path / "r")),
         "is refused: record line 1"),
    ]
    for args, expected in cases:
        res = run_edgetune(*args)
        assert res.returncode not in (0, 70), (args, res.stderr)
        assert expected in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)
    assert not (tmp_path / "r" / "database_tuning_record.json").exists() or \
        (tmp_path / "r" / "database_tuning_record.json").read_text() == ""


def test_emulation_timeout_is_a_clear_error(tmp_path, squeezenet):
    res = run_edgetune("package", str(squeezenet), "--device", "pi4", "-o", str(tmp_path / "out"),
                       env={"EDGETUNE_EMULATION_TIMEOUT": "1"})
    assert res.returncode not in (0, 70), res.stderr
    assert "did not finish within 1 s" in res.stderr and "--no-verify" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_disk_full_while_packaging_keeps_the_old_package(tmp_path, squeezenet):
    """ENOSPC while writing a package: one clear line, no staging left, the package already at
    the output untouched."""
    import models

    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], check=True)
    try:
        small = models.small_cnn_onnx(tmp_path / "small.onnx")
        out = mnt / "pkg"
        first = run_edgetune("package", str(small), "--device", "host", "-o", str(out))
        assert first.returncode == 0, first.stderr
        before = (out / "manifest.json").read_text()
        full = run_edgetune("package", str(squeezenet), "--device", "host", "-o", str(out), "--force")
        assert full.returncode not in (0, 70), full.stderr
        assert "no space left" in full.stderr.lower() and "Traceback" not in full.stderr, full.stderr
        assert (out / "manifest.json").read_text() == before
        assert sorted(p.name for p in mnt.iterdir()) == ["pkg"]  # no staging directory left
        check = subprocess.run([sys.executable, "-m", "edgetune_runtime", "check", str(out)],
                               capture_output=True, text=True, timeout=300)  # not in-process: it would hold the mount
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.long
@pytest.mark.slow
def test_package_and_export_while_a_tune_writes_the_records(tmp_path):
    """`package` and `records export` used to repair() the records without the lock and could cut
    a line being appended: readers now read a snapshot and never write. The tuning run is caught
    mid-append deterministically: the store's lock held here (as a run holds it) and half of its
    next record line at the end of the file while both readers run."""
    import tarfile

    import models

    from edgetune.tuning.records import RecordStore
    from edgetune.tuning.session import TuneOptions, tune

    net = models.small_cnn_onnx(tmp_path / "net.onnx")
    records = tmp_path / "records"
    tune(TuneOptions(models=(net,), device="host", trials=8, batch=4, population=32, skip_tail=0.0, records=records,
                     network_check=False))
    path = records / "database_tuning_record.json"
    complete = path.read_bytes()
    lines = complete.splitlines(keepends=True)
    pending, lines = lines[-1], lines[:-1]  # the last record, as a run would append it next
    path.write_bytes(b"".join(lines) + pending[: len(pending) // 2])
    torn = path.read_bytes()
    with RecordStore(records, "host").lock():
        pkg = run_edgetune("package", str(net), "--device", "host", "-o", str(tmp_path / "pkg"), "--records", str(records),
                           "--no-verify", "--json")
        assert pkg.returncode == 0, pkg.stderr
        assert json.loads(pkg.stdout)["manifest"]["tuning"]["trials"] > 0  # built from the complete lines
        exp = run_edgetune("records", "export", str(tmp_path / "r.tar.gz"), "--device", "host", "--records", str(records))
        assert exp.returncode == 0, exp.stderr
        assert path.read_bytes() == torn  # neither reader wrote (nor cut the line being appended)
        with tarfile.open(tmp_path / "r.tar.gz") as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("database_tuning_record.json"))
            assert tar.extractfile(member).read() == b"".join(lines)  # complete lines only
        with path.open("ab") as fh:  # the run finishes its append
            fh.write(pending[len(pending) // 2:])
    assert path.read_bytes() == complete


def _segfault(*_args, **_kwargs):
    """A real crash in native code (what a TVM bug does): reads address 0."""
    import ctypes

    return ctypes.string_at(0)


def test_a_crash_inside_tvm_is_one_clear_error_and_writes_nothing(tmp_path, squeezenet, monkeypatch):
    """A segmentation fault in a stage (here the compile, as a TVM bug would) ends ``package``
    with a CrashError naming the stage, the model, the signal and the log that holds the C++
    stack; the output and its staging directory are gone; the progress until then came through."""
    from edgetune.errors import CrashError
    from edgetune.package import PackageOptions, package

    monkeypatch.setattr("edgetune.package.compile_model", _segfault)
    seen: list[str] = []
    with pytest.raises(CrashError) as err:
        package(PackageOptions(model=squeezenet, device="host", output=tmp_path / "pkg"), seen.append)
    assert "TVM crashed while packaging squeezenet.onnx: SIGSEGV" in err.value.message, err.value.message
    log = Path(err.value.hint.split(" are in ")[1].split(" ")[0])
    assert log.is_file() and "Segfault" in log.read_text(errors="replace")
    assert seen and seen[0].startswith("importing")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no package, no staging directory left


def test_a_crash_is_a_one_line_error_of_the_command(tmp_path, squeezenet, monkeypatch):
    from typer.testing import CliRunner

    from edgetune.cli.main import app

    monkeypatch.setattr("edgetune.package.compile_model", _segfault)
    result = CliRunner().invoke(app, ["package", str(squeezenet), "--device", "host", "-o", str(tmp_path / "pkg")])
    assert result.exit_code == 9, result.output
    assert "error: TVM crashed while packaging squeezenet.onnx: SIGSEGV" in result.output
    assert "Traceback" not in result.output and "!!!!!!! Segfault" not in result.output


def test_inspect_reports_a_crash_of_the_import_and_keeps_what_the_file_holds(squeezenet, monkeypatch):
    from edgetune.report import inspect_model

    monkeypatch.setattr("edgetune.report.import_model", _segfault)
    report = inspect_model(squeezenet)
    assert report.import_error and "TVM crashed while importing squeezenet.onnx" in report.import_error
    assert report.ops and report.inputs  # the file's own facts still there


def test_a_stage_forked_beside_the_callers_onnxruntime_session_ends(tmp_path, squeezenet):
    """Sessions of onnxruntime that only the garbage collector frees (in a reference cycle, dropped
    by the caller) are not freed in an isolated stage's child: freeing them there waits forever on
    their thread pools' condition variables, whose threads the fork did not copy (a whole test
    run hung on it; this script hung before the fix)."""
    script = f"""
import gc
import time
import numpy as np
import onnxruntime as ort
from edgetune.isolation import isolated

def collect():
    gc.collect()
    return "ended"

gc.disable()  # the cycle below stays for the child's collector to find
holder = {{"sessions": [ort.InferenceSession({str(squeezenet)!r}, providers=["CPUExecutionProvider"]) for _ in range(3)]}}
holder["self"] = holder
for session in holder["sessions"]:
    (spec,) = session.get_inputs()
    for _ in range(5):
        session.run(None, {{spec.name: np.random.rand(*[d if isinstance(d, int) else 1 for d in spec.shape]).astype(np.float32)}})
del holder
time.sleep(0.5)  # the pools' threads asleep
print(isolated("testing", "sessions", collect))
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own process group: the stage's child goes with it
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the isolated stage hung freeing the caller's onnxruntime sessions")
    assert proc.returncode == 0 and out.strip() == "ended", err[-2000:]


# ---------------------------------------------------------------- mutated model files

FUZZ_DRIVER = r"""
import json, sys
from typer.testing import CliRunner
from edgetune.cli.main import app

runner = CliRunner()
for case in json.loads(sys.argv[1]):
    row = {"file": case["file"]}
    for name, args in (("inspect", ["inspect", case["file"]]),
                       ("package", ["package", case["file"], "--device", "host", "-o", case["out"], "--force"])):
        res = runner.invoke(app, args)
        row[name] = {"code": res.exit_code, "stderr": res.stderr[-600:],
                     "escaped": None if res.exception is None or isinstance(res.exception, SystemExit)
                     else repr(res.exception)}
        if res.exit_code:
            break
    print(json.dumps(row), flush=True)
"""


def _mutations(data: bytes, seed: int) -> dict[str, bytes]:
    """Byte flips, a truncation and a zeroed block of ``data``, at seeded places."""
    import random

    rng = random.Random(seed)
    flipped = bytearray(data)
    for _ in range(8):
        at = rng.randrange(len(flipped))
        flipped[at] ^= 1 << rng.randrange(8)
    zeroed = bytearray(data)
    at = rng.randrange(len(zeroed) - 64)
    zeroed[at:at + rng.randrange(16, 64)] = bytes(64)[: rng.randrange(16, 64)] or b"\0"
    return {f"flips{seed}": bytes(flipped), f"cut{seed}": data[: rng.randrange(16, len(data))],
            f"zeroed{seed}": bytes(zeroed[: len(data)])}


def test_mutated_model_files_end_in_a_clear_error_or_a_verified_package(tmp_path):
    """ONNX and TFLite files with flipped bits, cut short or with a block zeroed, given to
    `inspect` and `package`: each ends in one clear error line or a package whose reference
    check passed — never a signal, a traceback, an internal error or a hang."""
    import models

    sources = {"onnx": models.small_cnn_onnx(tmp_path / "cnn.onnx", width=8, size=16),
               "tflite": EXAMPLES / "face_detection_short_range.tflite"}
    cases = []
    for kind, source in sources.items():
        for seed in (0, 1):
            for label, data in _mutations(source.read_bytes(), seed).items():
                path = tmp_path / f"{kind}-{label}.{kind}"
                path.write_bytes(data)
                cases.append({"file": str(path), "out": str(tmp_path / f"pkg-{kind}-{label}")})
    proc = subprocess.run([sys.executable, "-c", FUZZ_DRIVER, json.dumps(cases)], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]  # no signal, nothing escaped the driver
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(cases)
    for row in rows:
        for command in ("inspect", "package"):
            res = row.get(command)
            if res is None:
                continue
            assert res["escaped"] is None and "Traceback" not in res["stderr"], row
            assert res["code"] != 70, row  # an internal error: a bug, not a clear refusal
            if res["code"]:
                assert res["stderr"].lstrip().startswith("error:"), row
        if row.get("package", {}).get("code") == 0:
            manifest = json.loads((Path(cases[rows.index(row)]["out"]) / "manifest.json").read_text())
            assert manifest["verification"]["status"] == "passed", row
