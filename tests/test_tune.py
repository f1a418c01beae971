"""Tuning with real MetaSchedule on this host (tiny budgets): records, resume after kill -9,
packages built from records, several networks with objectives, Droplet descent, transfer."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import models
import numpy as np
import pytest
from conftest import built_candidates, record_lines, run_edgetune
from records_helpers import check_against_records, read_records

from edgetune.tuning.records import RecordStore
from edgetune.tuning.session import TuneOptions, tune

FAST = {"batch": 4, "population": 32, "timeout": 60.0, "skip_tail": 0.0,  # budget accounting: every task stays live
        "network_check": False}  # tested on its own (test_network_check.py)


@pytest.fixture(scope="module")
def nets(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("nets")
    return {
        "a": models.small_cnn_onnx(d / "a.onnx"),
        "b": models.small_cnn_onnx(d / "b.onnx", seed=1, head=5),  # same convs as a, another classifier
        "wide": models.small_cnn_onnx(d / "wide.onnx", seed=2, width=24),  # same structure, other shapes
    }


@pytest.fixture(scope="module")
def tuned_a(nets, tmp_path_factory) -> tuple[Path, object]:
    """``a`` tuned for 30 trials: every task measured (its default schedule, then searched)."""
    records = tmp_path_factory.mktemp("rec") / "host"
    result = tune(TuneOptions(models=(nets["a"],), device="host", trials=30, records=records, **FAST))
    return records, result


def _copy(records: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "records"
    shutil.copytree(records, dst, ignore=shutil.ignore_patterns("runs", ".lock"))
    return dst


def test_local_tuning_records_and_estimates(tuned_a, nets):
    records, result = tuned_a
    snap = result.snapshot
    assert snap.spent == 30 and result.stop_reason == "budget spent"
    assert all(t.trials > 0 and t.best_ms is not None and t.default_ms is not None for t in snap.tasks)
    assert {t.kind for t in snap.tasks} >= {"conv2d", "dense"}
    check_against_records(snap, records, "host", nets["a"])
    assert result.time_breakdown["build"] > 0 and result.time_breakdown["run"] > 0
    stats = RecordStore(records, "host").stats()
    assert sum(s.trials for s in stats.values()) == 30
    assert json.loads((records / "profile.json").read_text())["profile"] == "host"


def test_package_applies_records_and_passes_the_reference_check(tuned_a, nets, tmp_path):
    from edgetune.package import PackageOptions, package

    records, result = tuned_a
    tuned = package(PackageOptions(model=nets["a"], device="host", output=tmp_path / "tuned", records=records))
    plain = package(PackageOptions(model=nets["a"], device="host", output=tmp_path / "plain", use_records=False))
    t = tuned.manifest["tuning"]
    # of a convolution with a direct and a Winograd variant, the package uses the one tuning kept
    built = [x for x in result.snapshot.tasks if not x.status.startswith("its ")]
    assert t["tuned_tasks"] == t["total_tasks"] == len(built)
    assert t["trials"] == sum(x.trials for x in built) and t["estimated_latency_ms"] > 0
    assert {r["task"] for r in t["tasks"]} == {x.name for x in built}
    assert plain.manifest["tuning"] is None
    assert tuned.verification["status"] == "passed"
    # every kernel came from a record; without records every one has a default schedule
    assert tuned.manifest["schedules"]["tuned"] == t["total_tasks"]
    assert plain.manifest["schedules"]["tuned"] == 0 and plain.manifest["schedules"]["naive"] == []
    # per-kernel facts for a profile on the board: trials joined by workload hash, not by name
    kernels = tuned.manifest["kernels"]
    assert all(k["tuned"] and k["trials"] >= 1 for k in kernels.values())
    assert sum(k["trials"] for k in kernels.values()) == t["trials"]
    assert not any(k["tuned"] or k["trials"] for k in plain.manifest["kernels"].values())
    bench = run_edgetune("bench", str(tmp_path / "tuned"), "--device", "host", "--profile", "--runs", "10", "--json")
    assert bench.returncode == 0, bench.stderr
    rows = [r for r in json.loads(bench.stdout)["profile"]["kernels"] if r["kind"] != "runtime"]
    assert rows and all(r["tuned"] and r["trials"] >= 1 for r in rows)


def test_list_tasks_cli_shows_records(tuned_a, nets):
    records, _ = tuned_a
    res = run_edgetune("tune", str(nets["a"]), "--device", "host", "--records", str(records), "--list-tasks", "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert {"task", "flops", "weight", "trials", "best_ms"} <= set(rows[0])
    assert all(r["trials"] > 0 for r in rows)


@pytest.mark.long
@pytest.mark.slow
def test_resume_after_kill_9(nets, tmp_path):
    records = tmp_path / "rec"
    args = [sys.executable, "-m", "edgetune", "tune", str(nets["a"]), "--device", "host", "--trials", "36",
            "--batch", "4", "--population", "32", "--skip-tail", "0", "--records", str(records), "--json", "--no-network-check"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while record_lines(records) < 12 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, "tuning ended before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its build/run workers
        proc.wait()
    before = record_lines(records)
    with (records / "database_tuning_record.json").open("a") as fh:
        fh.write('[0,[[["GetSBl')  # as if killed in the middle of a write
    again = run_edgetune(*args[3:])
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)
    assert out["trials_total"] == 36
    assert 0 < out["trials_this_run"] <= 36 - 8  # the earlier run's trials were not spent again
    lines = record_lines(records)
    assert 36 <= lines <= 36 + 5  # at most the batch in flight measured twice
    assert lines >= before
    done = run_edgetune(*args[3:])  # nothing left to do
    assert json.loads(done.stdout)["trials_this_run"] == 0


def test_records_cli_show_export_import(tuned_a, tmp_path):
    records, _ = tuned_a
    show = run_edgetune("records", "show", "--device", "host", "--records", str(records), "--json")
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["summary"]["trials"] == 30
    exp = run_edgetune("records", "export", str(tmp_path / "r.tar.gz"), "--device", "host", "--records", str(records))
    assert exp.returncode == 0, exp.stderr
    imp = run_edgetune("records", "import", str(tmp_path / "r.tar.gz"), "--device", "host", "--records", str(tmp_path / "copy"))
    assert imp.returncode == 0 and "imported 30 records" in imp.stdout
    wrong = run_edgetune("records", "import", str(tmp_path / "r.tar.gz"), "--device", "pi4", "--records", str(tmp_path / "pi"))
    assert wrong.returncode == 2 and "records for profile 'host'" in wrong.stderr


@pytest.mark.slow
def test_two_networks_with_targets_share_tasks_and_starve_the_met_one(nets, tmp_path):
    opts = TuneOptions(models=(nets["a"], nets["b"]), device="host", trials=40, records=tmp_path / "r",
                       objective="targets", targets={"a": 1e-7, "b": 10.0}, **FAST)
    result = tune(opts)
    taskset_calls = {t.name: t for t in result.snapshot.tasks}
    # the convolutions and pooling are one task each, called by both networks; each classifier is b's or a's
    b_only = [name for name, t in taskset_calls.items() if name.endswith("#2")]
    assert len(b_only) == 1, list(taskset_calls)
    assert taskset_calls[b_only[0]].trials == 1  # only its default was measured: b met its target
    a_net, b_net = result.snapshot.networks
    assert b_net.met and not a_net.met
    assert result.snapshot.spent == 40


def test_droplet_improves_or_keeps_the_best(tuned_a, nets, tmp_path):
    records, first = tuned_a
    records = _copy(records, tmp_path)
    measured = len(read_records(records))
    result = tune(TuneOptions(models=(nets["a"],), device="host", trials=24, records=records, search="droplet",
                              enumerate_limit=0, **FAST))
    assert result.batches.get("droplet", 0) >= 1
    # every trial of this run is one more record, and the bests reported are the records' bests
    assert len(read_records(records)) == measured + result.snapshot.spent_now == measured + 24
    check_against_records(result.snapshot, records, "host", nets["a"])


def test_an_encoder_with_embedding_lookups_is_tuned_past_its_first_round(tmp_path):
    # its gathers read token ids, position ids and token types (a 2-row table): the local
    # runner's random integers read outside the tables and killed its worker; the tuning then
    # stopped after the first round ("no task left that pays"), the network's latency unknown
    import zoo_transformers

    model = zoo_transformers.bert(tmp_path / "encoder.onnx", layers=1, hidden=64, heads=4, seq=16)
    result = tune(TuneOptions(models=(model,), device="host", trials=40, records=tmp_path / "r", **FAST))
    snap = result.snapshot
    assert snap.spent_now == 40 and result.stop_reason == "budget spent", result.stop_reason
    assert result.failures == 0 and snap.networks[0].estimate_ms is not None, result.errors
    lookups = [t for t in snap.tasks if t.name.startswith("take")]
    assert lookups and all(t.best_ms is not None for t in lookups), lookups


@pytest.mark.slow
def test_transfer_reuses_exact_and_similar_workloads(tuned_a, nets, tmp_path):
    records, _ = tuned_a
    records = _copy(records, tmp_path)
    result = tune(TuneOptions(models=(nets["wide"],), device="host", trials=12, records=records, transfer=True, **FAST))
    assert result.transferred["similar"] >= 1
    assert result.batches.get("transfer", 0) >= 1
    assert result.failures < result.snapshot.spent_now
    exact = tune(TuneOptions(models=(nets["a"],), device="host", trials=0, records=records, transfer=True, **FAST))
    assert exact.transferred["exact"] == len(exact.snapshot.tasks)


@pytest.mark.cuda
def test_jetson_candidates_are_aarch64_libraries_with_sm87_cubins(nets, tmp_path):
    """GPU schedule rules, and candidates compiled by nvcc here: what a Jetson would time."""
    from edgetune import _tvm, elf, profiles
    from edgetune._tvm import metaschedule as ms
    from edgetune.build import check_toolchain
    from edgetune.errors import ToolchainError
    from edgetune.importer import import_model

    profile = profiles.get_profile("jetson-orin-nano")
    try:
        toolchain = check_toolchain(profile)
    except ToolchainError as err:
        pytest.skip(f"no CUDA 13 nvcc: {err.message}")
    target = _tvm.make_target(profile.target_spec())
    heaviest = max(ms.extract_workloads(import_model(nets["a"]).mod, target, "nchw"), key=lambda w: w.flops)
    for b in built_candidates(heaviest, target, toolchain, tmp_path):
        lib = Path(b.artifact_path)
        assert elf.machine(lib) == "aarch64" and elf.cuda_archs(lib) == ["sm_87"]
        ms.remove_artifact(b.artifact_path)


@pytest.mark.long
@pytest.mark.slow
def test_cli_human_output_and_clear_errors(tuned_a, nets, tmp_path):
    records = _copy(tuned_a[0], tmp_path)
    res = run_edgetune("tune", str(nets["a"]), "--device", "host", "--records", str(records), "--trials", "0",
                       "--no-network-check")
    assert res.returncode == 0, res.stderr
    assert "network a" in res.stdout and "stopped: budget spent" in res.stdout and "edgetune package" in res.stdout
    board = run_edgetune("tune", str(nets["a"]), "--device", "pi4", "--records", str(tmp_path / "r"), "--trials", "8")
    assert board.returncode == 2 and "cannot be measured on this host" in board.stderr and "devices add" in board.stderr
    target = run_edgetune("tune", str(nets["a"]), "--device", "host", "--objective", "targets", "--latency", "x=1ms")
    assert target.returncode == 2 and "NAME one of: a" in target.stderr
    missing = run_edgetune("tune", str(nets["a"]), "--device", "host", "--objective", "targets", "--records", str(tmp_path / "q"))
    assert missing.returncode == 2 and "needs a latency target for a" in missing.stderr
    assert "Traceback" not in board.stderr + target.stderr + missing.stderr


@pytest.mark.long
@pytest.mark.slow
def test_time_budget_alone_reports_progress_to_the_end(nets, tmp_path):
    # the plain-text progress line (stderr not a terminal) compared trials with a trial budget
    # that --time alone leaves unset: the second batch's line crashed the run
    # (the network check on: part of the budget is kept for it, and its line ends the summary)
    res = run_edgetune("tune", str(nets["a"]), "--device", "host", "--records", str(tmp_path / "r"), "--time", "60s",
                       "--batch", "4", "--population", "32")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "stopped: " in res.stdout and "internal error" not in res.stderr, res.stderr[-2000:]
    assert ("s of the 60 s budget for the network check" in res.stderr  # per kernel, or the network's time only
            or "the records stay unchecked" in res.stderr), res.stderr[-2000:]
    assert ("ms with default schedules, " in res.stdout and "ms with every record" in res.stdout
            or "no time left in the budget for it" in res.stdout), res.stdout


@pytest.mark.slow
def test_ctrl_c_saves_measured_batches_and_leaves_no_workers(nets, tmp_path):
    records = tmp_path / "rec"
    args = [sys.executable, "-m", "edgetune", "tune", str(nets["a"]), "--device", "host", "--trials", "60",
            "--batch", "4", "--population", "32", "--skip-tail", "0%", "--records", str(records), "--no-network-check"]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, TMPDIR=str(scratch)))
    deadline = time.monotonic() + 300
    while record_lines(records) < 5 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert "run the same command to resume" in err and "Traceback" not in err
    stats = RecordStore(records, "host").stats()
    assert sum(s.trials for s in stats.values()) >= 5
    assert sum(s.failures for s in stats.values()) == 0  # the interrupted batch was not recorded as failures
    time.sleep(1)
    left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes left behind: {left}"
    assert not list(scratch.glob("edgetune-tune-*")), "candidate build directories left behind"


@pytest.mark.exclusive
def test_tuning_stops_when_nothing_left_pays(nets, tmp_path):
    """Default --skip-tail: the smallest tasks keep their default schedule, and once the rest is
    measured out the job ends before its budget instead of spending it where it cannot pay."""
    opts = {k: v for k, v in FAST.items() if k != "skip_tail"}
    result = tune(TuneOptions(models=(nets["a"],), device="host", trials=400, records=tmp_path / "r", **opts))
    snap = result.snapshot
    assert result.stop_reason.startswith("no task left that pays") and snap.spent < 400, result.stop_reason
    small = [t for t in snap.tasks if t.status.startswith("too small to pay")]
    assert small and all(t.trials == 1 for t in small)  # measured once, at their default
    assert any(t.kind == "conv2d" and t.trials > 1 for t in snap.tasks)  # the convolutions were searched
    check_against_records(snap, tmp_path / "r", "host", nets["a"])


def _drawn(img: np.ndarray, rgb: tuple[int, int, int]) -> int:
    """Pixels of ``rgb`` (within rounding) in a rendered image."""
    pixels = (img[..., :3] * 255).round().astype(int)
    return int((np.abs(pixels - np.array(rgb)).sum(axis=-1) < 30).sum())


def test_records_report_renders_curves_lines_and_the_task_breakdown(tuned_a, tmp_path):
    import base64
    import io
    import re

    import matplotlib.image as mpimg

    records, result = tuned_a
    colors = {"estimate": (31, 119, 180), "untuned line": (127, 127, 127), "latency share": (255, 127, 14),
              "trial share": (44, 160, 44)}
    png = run_edgetune("records", "report", "--device", "host", "--records", str(records), "-o", str(tmp_path / "r.png"))
    assert png.returncode == 0, png.stderr
    img = mpimg.imread(tmp_path / "r.png")
    assert img.shape[0] >= 400 and img.shape[1] >= 1400
    for what, rgb in colors.items():
        assert _drawn(img, rgb) > 40, f"no {what} drawn"
    page = run_edgetune("records", "report", "--device", "host", "--records", str(records), "-o", str(tmp_path / "r.html"),
                        "--network", "a")
    assert page.returncode == 0, page.stderr
    text = (tmp_path / "r.html").read_text()
    embedded = mpimg.imread(io.BytesIO(base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", text).group(1))), format="png")
    assert all(_drawn(embedded, rgb) > 40 for rgb in colors.values())
    assert all(t.name in text for t in result.snapshot.tasks if not t.status.startswith("its "))
    assert "30 trials" in text
    missing = run_edgetune("records", "report", "--device", "host", "--records", str(records), "--network", "zz")
    assert missing.returncode == 2 and "networks with progress: a" in missing.stderr


@pytest.mark.long
@pytest.mark.slow
def test_relative_target_is_a_share_of_the_baseline_timed_on_the_device(tuned_a, nets, tmp_path):
    """--latency a=0.8x: onnxruntime timed on the device first, the target 80 % of its p50; the
    report draws that baseline beside the estimates."""
    import matplotlib.image as mpimg

    records = _copy(tuned_a[0], tmp_path)
    common = ("tune", str(nets["a"]), "--device", "host", "--records", str(records), "--batch", "4", "--population", "32",
              "--objective", "targets", "--no-network-check")
    text = run_edgetune(*common, "--trials", "4", "--latency", "a=0.8x")
    assert text.returncode == 0, text.stderr
    assert "timing a with its own runtime on host" in text.stderr and "(0.8×)" in text.stderr, text.stderr
    assert "a: onnxruntime" in text.stdout and "× of it" in text.stdout, text.stdout
    res = run_edgetune(*common, "--trials", "4", "--latency", "a=0.8x", "--json")  # the job is spent: a new timing only
    assert res.returncode == 0, res.stderr
    (net,) = json.loads(res.stdout)["networks"]
    assert net["baseline_runtime"].startswith("onnxruntime") and net["baseline_ms"] > 0
    assert net["target_ms"] == pytest.approx(0.8 * net["baseline_ms"])
    png = run_edgetune("records", "report", "--device", "host", "--records", str(records), "-o", str(tmp_path / "r.png"))
    assert png.returncode == 0, png.stderr
    assert _drawn(mpimg.imread(tmp_path / "r.png"), (148, 103, 189)) > 40, "no baseline line drawn"  # tab:purple

    twice = run_edgetune(*common, "--latency", "a=0.8x", "--latency", "a=2ms")
    assert twice.returncode == 2 and "two latency targets for a" in twice.stderr
    farm = run_edgetune(*common, "--latency", "a=0.8x", "--tracker", "127.0.0.1:9")
    assert farm.returncode == 2 and "shell on the device" in farm.stderr, farm.stderr
