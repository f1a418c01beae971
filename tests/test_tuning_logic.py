"""The tuner's pure parts: objectives, the multi-network scheduler, Droplet moves, records files."""

from __future__ import annotations

import math

import pytest

from edgetune.errors import UsageError
from edgetune.tuning import droplet
from edgetune.tuning.records import RecordStore
from edgetune.tuning.scheduler import Network, Objective, Scheduler, TaskState, parse_amounts


def _sched(kind: str, targets=(None, None), weights=(1.0, 1.0)) -> Scheduler:
    # task 0 only in A, task 1 only in B, task 2 shared (called twice by A, once by B)
    tasks = [TaskState("fused_conv2d_add", 1e9), TaskState("fused_dense", 1e8), TaskState("fused_conv2d1_add", 2e9)]
    nets = [Network("A", {0: 1, 2: 2}, weights[0], targets[0]), Network("B", {1: 1, 2: 1}, weights[1], targets[1])]
    return Scheduler(tasks, Objective(kind, nets))


def _warm(s: Scheduler, times=(0.010, 0.004, 0.020)) -> None:
    for i, t in enumerate(times):
        s.record(i, 8, t, baseline=t * 3)


def test_warmup_measures_every_task_first_heaviest_first():
    s = _sched("sum")
    order = []
    for _ in range(3):
        i = s.next_task()
        order.append(i)
        s.record(i, 8, 0.01)
    assert order == [2, 0, 1]  # by FLOPs × calls


def test_network_latency_counts_shared_task_with_multiplicity():
    s = _sched("sum")
    _warm(s)
    assert s.latency(0) == pytest.approx(0.010 + 2 * 0.020)
    assert s.latency(1) == pytest.approx(0.004 + 0.020)
    assert s.baseline_latency(0) == pytest.approx(3 * (0.010 + 2 * 0.020))


def test_targets_objective_starves_a_network_that_meets_its_target():
    s = _sched("targets", targets=(0.001, 1.0))  # A far from target, B already met
    _warm(s)
    picks = set()
    for _ in range(30):
        i = s.next_task()
        picks.add(i)
        s.record(i, 8, s.tasks[i].best * 0.97)
    assert 1 not in picks  # B's own task gets nothing
    assert picks <= {0, 2}


def test_all_targets_met_stops():
    s = _sched("targets", targets=(1.0, 1.0))
    _warm(s)
    assert s.targets_met()
    assert s.next_task() is None


def test_sum_weights_and_geomean_gradients():
    s = _sched("sum", weights=(2.0, 1.0))
    _warm(s)
    chain = s._chain(s.latencies())
    assert chain == {0: 2.0, 1: 1.0, 2: 5.0}  # shared task: 2 calls × 2 + 1 call × 1
    g = Objective("geomean", s.objective.networks)
    lat = [0.05, 0.025]
    assert g.grad(lat) == pytest.approx([1 / (2 * 0.05), 1 / (2 * 0.025)])
    assert g.value(lat) == pytest.approx((math.log(0.05) + math.log(0.025)) / 2)


def test_targets_objective_needs_every_target():
    with pytest.raises(UsageError, match="latency target for B"):
        _sched("targets", targets=(0.01, None))


def test_early_stop_takes_a_task_out():
    s = Scheduler([TaskState("t", 1.0)], Objective("sum", [Network("n", {0: 1})]), early_stop=2)
    s.record(0, 8, 1.0)
    s.record(0, 8, 1.0)
    s.record(0, 8, 1.0)
    assert s.tasks[0].stopped
    assert s.next_task() is None


def test_a_task_stopped_without_a_time_does_not_stop_the_others():
    # an embedding lookup whose every candidate failed stopped a BERT-style encoder's tuning
    # after its first round: the network had no latency while that task had no time
    s = Scheduler([TaskState("take", 1.0), TaskState("dense", 1e9)], Objective("sum", [Network("n", {0: 1, 1: 1})]))
    s.tasks[0].stop("all of its design space measured")
    s.record(1, 1, 2e-3)
    assert s.latencies() == [2e-3]
    assert s.next_task() == 1
    s.tasks[1].best = None  # a live task without a time still leaves the latency unknown
    assert s.latencies() is None


def _flat(times, skip_tail):
    tasks = [TaskState(f"t{i}", 1e6) for i in range(len(times))]
    s = Scheduler(tasks, Objective("sum", [Network("n", {i: 1 for i in range(len(times))})]), skip_tail=skip_tail)
    for i, t in enumerate(times):
        s.record(i, 1, t)
    return s


def test_smallest_tasks_together_under_the_tail_share_keep_their_default():
    s = _flat([0.060, 0.036, 0.003, 0.001], skip_tail=0.05)  # shares 60 %, 36 %, 3 %, 1 %
    picks = set()
    for _ in range(20):
        i = s.next_task()
        picks.add(i)
        s.record(i, 8, s.tasks[i].best * 0.99)
    assert 0 in picks and picks.isdisjoint({2, 3})
    assert "too small to pay" in s.tasks[2].stopped and "too small to pay" in s.tasks[3].stopped
    assert _flat([0.060, 0.036, 0.003, 0.001], skip_tail=0.0).tail(s.latencies()) == set()


def test_tail_never_covers_more_than_its_share_of_a_network_of_small_tasks():
    s = _flat([0.001] * 40, skip_tail=0.05)  # 40 tasks of 2.5 % each: only two fit in 5 %
    assert len(s.tail(s.latencies())) == 2
    s.next_task()
    assert sum(1 for t in s.tasks if t.stopped) == 2


def test_a_task_another_network_needs_is_not_in_the_tail():
    tasks = [TaskState("big", 1e9), TaskState("shared", 1e6)]
    nets = [Network("A", {0: 1, 1: 1}), Network("B", {1: 1})]  # 'shared' is ~1 % of A, all of B
    s = Scheduler(tasks, Objective("sum", nets), skip_tail=0.05)
    s.record(0, 1, 0.1)
    s.record(1, 1, 0.001)
    assert s.tail(s.latencies()) == set()


def test_parse_amounts():
    assert parse_amounts(["det=25ms", "cls=800us"], ["det", "cls"], "latency", unit=True) == pytest.approx({"det": 0.025, "cls": 0.0008})
    assert parse_amounts(["a=2"], ["a"], "weight", unit=False) == {"a": 2.0}
    for bad in (["x=1"], ["det"], ["det=fast"], ["det=-1ms"]):
        with pytest.raises(UsageError):
            parse_amounts(bad, ["det"], "latency", unit=True)


def test_droplet_tile_moves_keep_the_extent():
    for factors in ([1, 2, 4, 8], [3, 1, 1, 5], [64, 1]):
        for new in droplet.tile_moves(factors, 0):
            assert math.prod(new) == math.prod(factors)
            assert sum(1 for a, b in zip(new, factors) if a != b) == 2
    assert all(new[-1] <= 8 for new in droplet.tile_moves([1, 1, 2, 8], 8))


def test_droplet_moves_cover_tiles_and_categoricals_not_compute_locations():
    decs = [(3, "SamplePerfectTile", [2, 2], (2, 64)), (5, "SampleCategorical", 1, ([0, 16, 64], [0.3, 0.3, 0.4])),
            (7, "SampleComputeLocation", 2, ())]
    got = droplet.moves(decs)
    assert (3, [1, 4]) in got and (3, [4, 1]) in got
    assert (5, 0) in got and (5, 2) in got
    assert all(idx != 7 for idx, _ in got)


def test_fit_tile_to_a_new_extent():
    assert droplet.fit_tile([2, 4, 8], 64) == [2, 4, 8]
    for factors, extent in (([2, 4, 8], 96), ([1, 7, 3], 10), ([16, 1, 16], 1), ([1, 64], 64)):
        fitted = droplet.fit_tile(factors, extent)
        assert math.prod(fitted) == extent
    assert droplet.fit_tile([1, 1, 32], 64, max_innermost=16)[-1] <= 16


def test_record_stats_baselines_and_torn_tail(tmp_path):
    import records_helpers

    store = records_helpers.write_store(tmp_path / "rec")
    big, small = records_helpers.hashes(store)
    stats = store.stats()
    assert stats[big].trials == 4 and stats[big].failures == 1 and stats[big].best_ms == pytest.approx(1.0)
    assert stats[big].default_ms == pytest.approx(3.0) and stats[small].default_ms is None
    with (store.dir / "database_tuning_record.json").open("a") as fh:
        fh.write('[1,[[["Get')  # a run killed mid-write
    assert store.repair() == 1
    assert store.stats()[small].trials == 1
    assert (store.dir / "database_tuning_record.json").read_text().endswith("]\n")


def test_records_export_import_merges_without_duplicates(tmp_path):
    import records_helpers

    src = records_helpers.write_store(tmp_path / "rec")
    archive = src.export(tmp_path / "r.tar.gz")
    dst = RecordStore(tmp_path / "other", "host")
    dst.prepare({"kind": "llvm"}, "nhwc-packed")
    assert dst.import_(archive) == (2, 5)
    assert dst.import_(archive) == (0, 0)
    assert dst.stats()[records_helpers.hashes(src)[0]].trials == 4
    with pytest.raises(UsageError, match="profile 'host'"):
        RecordStore(tmp_path / "pi", "pi4").import_(archive)


def test_records_of_another_profile_are_refused(tmp_path):
    RecordStore(tmp_path / "r", "host").prepare({}, "nhwc-packed")
    with pytest.raises(UsageError, match="records for profile 'host'"):
        RecordStore(tmp_path / "r", "pi4").prepare({}, "nhwc-packed")


def test_second_tuning_run_on_the_same_records_is_refused(tmp_path):
    store = RecordStore(tmp_path / "r", "host")
    with store.lock():
        with pytest.raises(UsageError, match="in use by another tuning run"):
            with RecordStore(tmp_path / "r", "host").lock():
                pass


def test_tvm_tensor_intrinsics_register_with_the_cheap_stack_and_it_is_put_back():
    """MetaSchedule imports TVM's tensor intrinsics when a tuning run starts; edgetune imports
    them first with a stack that skips the module lookups of deep frames (24 s → 5 s). The same
    intrinsics result (all 122 compared by their scripts when this was written), and Python's
    ``inspect.stack`` is the original afterwards."""
    import subprocess
    import sys

    code = (
        "import inspect\n"
        "full = inspect.stack\n"
        "from edgetune._tvm.core import tensor_intrinsics\n"
        "tensor_intrinsics()\n"
        "assert inspect.stack is full\n"
        "from tvm.s_tir import TensorIntrin\n"
        "import tvm.s_tir.tensor_intrin.arm_cpu as arm, tvm.s_tir.tensor_intrin.x86 as x86\n"
        "for name in (arm.ARM_DOT_4x4_i8_SDOT_INTRIN, x86.VNNI_DOT_16x4_INTRIN):\n"
        "    t = TensorIntrin.get(name)\n"
        "    print(name, 'T.call_llvm_pure_intrin' in t.impl.script(), 'T.sblock' in t.desc.script())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert len([line for line in lines if line.endswith("True True")]) == 2, out.stdout
