"""benchmarks/search_quality.py times the runs' best schedules again, side by side: a tuner's
timing of a small kernel is one draw on a host whose speed moves between levels, so the
benchmark's verdict may rest on times taken together instead."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import search_quality as sq  # noqa: E402

from edgetune._tvm.constants import RECORDS_FILE  # noqa: E402


def test_records_up_to_keeps_the_first_measurements_and_the_rest_of_the_folder(tmp_path):
    records = tmp_path / "run"
    (records / "runs").mkdir(parents=True)
    (records / RECORDS_FILE).write_text("".join(json.dumps([0, [[], [i * 1e-3]]]) + "\n" for i in range(1, 11)))
    (records / "defaults.json").write_text("{}")
    (records / "runs" / "job.json").write_text("{}")
    out = sq.records_up_to(records, 4, tmp_path / "at4")
    lines = (out / RECORDS_FILE).read_text().splitlines()
    assert [json.loads(x)[1][1][0] for x in lines] == [0.001, 0.002, 0.003, 0.004]
    assert (out / "defaults.json").exists() and not (out / "runs").exists()
    # a second copy replaces the first
    out = sq.records_up_to(records, 2, tmp_path / "at4")
    assert len((out / RECORDS_FILE).read_text().splitlines()) == 2


@pytest.mark.long
@pytest.mark.slow
def test_a_short_run_is_timed_again_at_each_budget(tmp_path):
    model = sq.task_model("softmax", tmp_path)
    args = argparse.Namespace(device="host", rules="generic")
    r = sq.run(model, tmp_path / "softmax-evolutionary-0", args, "evolutionary", 0, 6, None)
    assert r["trials"] >= 4 and Path(r["records"]).is_dir()
    again = sq.retime({"softmax": {"evolutionary": {"0": r}}}, {}, [2, 4], "host", tmp_path, rounds=1)
    row = again["tasks"]["softmax"]
    assert row["default"] > 0
    assert set(row["evolutionary"]["0"]) == {"2", "4"} and all(v > 0 for v in row["evolutionary"]["0"].values())
    # each budget's package was built from that many of the run's records
    kept = tmp_path / "retime" / "records" / "softmax-evolutionary-0-2" / RECORDS_FILE
    assert len(kept.read_text().splitlines()) == 2
    rows, verdict = sq.retimed_table(again, [2, 4])
    assert rows[0]["ms"][4] == row["evolutionary"]["0"]["4"] and verdict is None  # no gensor run to judge
