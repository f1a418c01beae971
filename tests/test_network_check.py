"""Tuning never leaves a package slower: the network check at the end of ``edgetune tune``
(packages with and without the records, timed inside the network on the device, records that
make their kernel slower there vetoed) and what ``edgetune package`` does with a veto."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import models
import pytest
from conftest import run_edgetune

from edgetune.package import PackageOptions, package
from edgetune.tuning.records import RecordStore
from edgetune.tuning.session import TuneOptions, tune

FAST = {"batch": 4, "population": 32, "skip_tail": 0.0}
RECORDS, WORKLOADS = "database_tuning_record.json", "database_workload.json"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[Path, Path]:
    """A small CNN tuned for 30 trials on this host, without the check; wide enough (its biggest
    kernel about 50 us) for a slow record to stand out of the timing noise."""
    d = tmp_path_factory.mktemp("nc")
    model = models.small_cnn_onnx(d / "a.onnx", size=64)
    tune(TuneOptions(models=(model,), device="host", trials=30, records=d / "rec", network_check=False, **FAST))
    return model, d / "rec"


def _lines(records: Path) -> tuple[list[str], list[list]]:
    hashes = [json.loads(line)[0] for line in (records / WORKLOADS).read_text().splitlines()]
    rows = [json.loads(line) for line in (records / RECORDS).read_text().splitlines()]
    return hashes, rows


def _mean(row: list) -> float:
    secs = row[1][1]
    return sum(secs) / len(secs)


def _scalar(row: list) -> list:
    """``row``'s schedule made slow for certain: every tile split with its whole extent outside
    (one-row register tiles), no loop vectorized or parallel. A measured candidate with one-row
    tiles ran 1.1-1.25x its kernel's default time inside the network here: not slow enough to
    be vetoed every time on a busy 2-core machine."""
    insts, decisions = row[1][0]
    keep = [i for i, inst in enumerate(insts) if inst[0] not in ("Vectorize", "Parallel")]
    at = {old: new for new, old in enumerate(keep)}
    tiles = [[at[i], [math.prod(d), *[1] * (len(d) - 1)] if isinstance(d, list) else d]
             for i, d in decisions if i in at]
    return [row[0], [[[insts[i] for i in keep], tiles], *row[1][1:]]]


def _append(records: Path, row: list, secs: float) -> None:
    forged = [row[0], [row[1][0], [secs], *row[1][2:]]]
    with (records / RECORDS).open("a") as fh:
        fh.write(json.dumps(forged, separators=(",", ":")) + "\n")


@pytest.mark.long
@pytest.mark.slow
def test_a_record_slower_inside_the_network_is_vetoed_and_packages_keep_the_default(tuned, tmp_path):
    model, original = tuned
    records = tmp_path / "rec"
    shutil.copytree(original, records, ignore=shutil.ignore_patterns("runs", ".lock"))
    # the biggest kernel's best candidate made scalar, filed as its fastest: a record that won
    # alone and loses in the network
    hashes, rows = _lines(records)
    stats = RecordStore(records, "host").stats()
    before = package(PackageOptions(model=model, device="host", output=tmp_path / "before", records=records, verify=False))
    # the biggest kernel by its work (its tuning-time default can be any kernel's on a busy machine)
    biggest = max((k for k in before.manifest["kernels"].values() if k["tuned"]), key=lambda k: k["calls"] * k["flops"])
    shash = biggest["workload"]
    mine = [r for r in rows if hashes[r[0]] == shash and min(r[1][1]) < 1e9]
    _append(records, _scalar(min(mine, key=_mean)), stats[shash].best_ms / 1e3 * 0.5)
    assert RecordStore(records, "host").stats()[shash].best_ms == pytest.approx(stats[shash].best_ms * 0.5)

    notices: list[str] = []
    result = tune(TuneOptions(models=(model,), device="host", trials=0, records=records, **FAST), notice=notices.append)
    assert result.snapshot.spent_now == 0  # the check only
    (check,) = result.checks
    assert check.error is None and check.skipped is None, check
    assert check.default_ms > 0 and check.tuned_ms > 0 and check.kept_ms > 0
    assert any("checking a's records inside the network" in n for n in notices), notices
    vetoes = RecordStore(records, "host").standing_vetoes()
    assert shash in vetoes and {v.workload for v in check.vetoed} == set(vetoes), json.dumps(check.to_json())
    assert all(v.why for v in check.vetoed) and all(v.kept for v in check.kernels if v.workload not in vetoes)
    summary = result.to_json()["network_checks"][0]
    assert summary["network"] == "a" and any(k["workload"] == shash and not k["kept"] for k in summary["kernels"])

    pkg = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg", records=records))
    assert pkg.verification["status"] == "passed"
    kernels = pkg.manifest["kernels"]
    assert not any(k["tuned"] for k in kernels.values() if k["workload"] in vetoes)
    assert any("keep their default schedule" in n for n in pkg.manifest["schedules"]["notes"])
    if pkg.manifest["tuning"]:
        assert all("vetoed" in r for r in pkg.manifest["tuning"]["tasks"] if r["workload"] in vetoes)

    shown = run_edgetune("records", "show", "--device", "host", "--records", str(records), "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["summary"]["vetoed"] == len(vetoes), shown.stderr

    # a faster record than the one vetoed lifts the veto until the next check decides on it
    best_real = min(mine, key=_mean)
    _append(records, best_real, stats[shash].best_ms / 1e3 * 0.25)
    assert shash not in RecordStore(records, "host").standing_vetoes()
    again = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg2", records=records))
    assert any(k["tuned"] for k in again.manifest["kernels"].values() if k["workload"] == shash)


@pytest.mark.slow
def test_without_records_the_check_has_nothing_to_do_and_says_so(tmp_path):
    model = models.small_cnn_onnx(tmp_path / "a.onnx")
    result = tune(TuneOptions(models=(model,), device="host", trials=0, records=tmp_path / "rec", **FAST))
    (check,) = result.checks
    assert check.skipped == "no record applies to it" and not check.kernels
    assert not (tmp_path / "rec" / "network_checks.json").exists()
