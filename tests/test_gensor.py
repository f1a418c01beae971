"""Gensor search: the construction graph's Markov chain (pure Python), the states, moves and
scores of a real task's graph, and a short real tune on this host interrupted and resumed (the
stand-in board runs it in test_remote.py)."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time

import models
import pytest
from conftest import record_lines, run_edgetune

from edgetune.tuning import droplet, gensor

INVALID = (5, 5)


def _score(key: tuple[int, int]) -> float:
    """Two hills on a 10×10 grid: the higher at (7, 2), a lower one at (1, 8); one invalid cell."""
    if key == INVALID:
        return -math.inf
    x, y = key
    return max(-((x - 7) ** 2 + (y - 2) ** 2), -3 - ((x - 1) ** 2 + (y - 8) ** 2))


def _expand(key: tuple[int, int]) -> list[tuple[int, int]]:
    x, y = key
    return [(x + dx, y + dy) for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)) if 0 <= x + dx < 10 and 0 <= y + dy < 10]


def _chain(seed: int = 0, chunk: int = 8) -> gensor.Chain:
    return gensor.Chain(_expand, lambda keys: [_score(k) for k in keys], random.Random(seed), chunk=chunk)


@pytest.mark.parametrize("chunk", [1, 8])
def test_rows_are_distributions_over_improving_neighbours(chunk):
    chain = _chain(chunk=chunk)
    for x in range(10):
        for y in range(10):
            if (x, y) == INVALID:
                continue
            row = chain.transitions((x, y))
            assert math.isclose(sum(p for _k, p in row), 1.0)
            if row == [((x, y), 1.0)]:  # absorbing: every neighbour seen, none better
                node = chain.nodes[(x, y)]
                assert node.seen == len(node.successors)
                assert all(_score(k) <= _score((x, y)) for k in node.successors)
                continue
            assert all(k in _expand((x, y)) and _score(k) > _score((x, y)) and p > 0 for k, p in row)
            assert INVALID not in [k for k, _p in row]
            by_score = sorted(row, key=lambda kp: _score(kp[0]))
            assert [p for _k, p in by_score] == sorted(p for _k, p in row)  # better neighbours more likely
    # the invalid state is dropped from a state's neighbours once evaluated (lazily: with chunk 1
    # a state with an improving first neighbour never evaluates the rest)
    assert all(INVALID not in n.successors[: n.seen] for n in chain.nodes.values() if n.successors)
    assert chunk == 1 or INVALID not in chain.nodes[(4, 5)].successors


def test_walks_end_on_the_hills_and_rounds_stop_when_nothing_new_is_found():
    chain = _chain(seed=3)
    rng = random.Random(1)
    starts = [(rng.randrange(10), rng.randrange(10)) for _ in range(12)]
    starts = [s for s in starts if s != INVALID]
    for s in starts:
        end, steps, absorbed = chain.walk(s)
        assert absorbed and end in {(7, 2), (1, 8)}
        assert steps <= abs(s[0] - end[0]) + abs(s[1] - end[1])  # every step improves: no detours
    chain.next_round()
    first = chain.run_round([(0, 9), (9, 0), (0, 0), (9, 9)], want=4, max_walks=40, max_evaluated=1000)
    assert first.found[0] == (7, 2) and set(first.found) == {(7, 2), (1, 8)}  # best first
    assert not chain.converged
    for _ in range(chain.patience):
        chain.next_round()
        again = chain.run_round([(0, 9), (9, 0)], want=4, max_walks=20, max_evaluated=1000)
        assert again.found == []
    assert chain.converged  # the stopping rule: rounds in a row without a new absorbing state


def test_a_round_stops_at_its_evaluation_budget():
    chain = _chain()
    chain.next_round()
    stats = chain.run_round([(0, 9)], want=5, max_walks=100, max_evaluated=6)
    assert stats.walks == 1 and stats.evaluated <= 6 + 8  # the walk in progress finishes its chunk


def test_the_gpu_model_knows_the_size_of_the_gpu_it_tunes_for():
    """A GPU of the profile's arch on this machine is asked for its SMs and L2; elsewhere the
    arch's table row (an H100-class sm_90 was once taken for 16 SMs and 4 MB)."""
    from edgetune._tvm.core import tvm
    from edgetune._tvm.metaschedule.gensor import GPU_SIZES, hardware_of, local_gpu_size

    for arch in ("sm_87", "sm_90"):
        hw = hardware_of(tvm().target.Target({"kind": "cuda", "arch": arch}))
        here = local_gpu_size(arch)
        assert (hw.sms, hw.l2) == (here or GPU_SIZES[arch]) and hw.gpu
    assert GPU_SIZES["sm_90"][0] > 100 and GPU_SIZES["sm_87"][0] == 8


def test_state_graph_of_a_real_task(tmp_path):
    """A dense layer in MetaSchedule's generic design space: every evaluated neighbour is one
    decision away and replays; rows sum to one; walks are absorbed; a batch is distinct states."""
    import numpy as np

    from edgetune._tvm import metaschedule as ms
    from edgetune.profiles import get_profile
    from edgetune.tuning.tasks import build_task_set

    ts = build_task_set([models.dense_onnx(tmp_path / "dense.onnx")], get_profile("host"))
    task = max(ts.tasks, key=lambda t: t.flops)
    strategy = ms.gensor_search(gensor.Chain, droplet.moves, seed=1)
    inst = strategy._inst  # the Python object behind TVM's PySearchStrategy: driven directly here
    ctx = ms.TaskContext(task.workload, ts.target, 1, 1, ms.SearchConfig(), generic=True)
    (tmp_path / "db").mkdir()
    inst._initialize_with_tune_context(ctx.ctx)
    inst.pre_tuning(64, 8, ctx.design_space(), ms.open_database(tmp_path / "db"), ms.make_cost_model(1))
    try:
        chain = inst.chain
        chain.next_round()
        inst._calibrate()
        start = inst._random_state()
        assert start is not None and math.isfinite(chain._scores([start])[0])
        row = chain.transitions(start)
        assert math.isclose(sum(p for _k, p in row), 1.0)
        node = chain.nodes[start]
        assert node.successors, "a real schedule has moves"
        _sketch, codes = inst.vectors[start]
        for k in node.successors[: node.seen]:
            assert inst.cands[k] is not None  # replays and passes the postprocessors
            assert int((np.asarray(inst.vectors[k][1]) != np.asarray(codes)).sum()) == 1  # one move away
        if row != [(start, 1.0)]:
            assert all(chain.nodes[k].score > node.score for k, _p in row)
        end, _steps, absorbed = chain.walk(start)
        assert absorbed
        last = chain.nodes[end]
        assert last.seen == len(last.successors) and all(chain.nodes[k].score <= last.score + 1e-9
                                                         for k in last.successors)
        batch = inst.generate_measure_candidates()
        assert batch and len({ctx.key(c) for c in batch}) == len(batch) <= 8
    finally:
        inst.post_tuning()


@pytest.mark.long
@pytest.mark.slow
def test_gensor_tune_on_host_resumes_after_ctrl_c(tmp_path):
    model = models.dense_onnx(tmp_path / "dense.onnx")
    records = tmp_path / "rec"
    args = ["tune", str(model), "--device", "host", "--search", "gensor", "--rules", "generic", "--trials", "24",
            "--batch", "6", "--skip-tail", "0", "--records", str(records), "--no-network-check"]
    proc = subprocess.Popen([sys.executable, "-m", "edgetune", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while record_lines(records) < 8 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "tuning ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-2000:]
    assert "run the same command to resume" in err and "Traceback" not in err
    done = record_lines(records)
    assert 8 <= done < 24
    again = run_edgetune(*args, "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    result = json.loads(again.stdout)
    assert result["trials_total"] == 24 and result["trials_this_run"] == 24 - done  # resumed, not restarted
    assert result["batches"].get("gensor", 0) >= 1 and result["failed_candidates"] == 0, result
    assert record_lines(records) == 24
