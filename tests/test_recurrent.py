"""Recurrent layers (ONNX LSTM / GRU / RNN), If and --bind: real TVM builds against onnxruntime."""

import json
import shutil

import numpy as np
import onnxruntime as ort
import pytest
import rnn_models as rm
from conftest import run_edgetune

import edgetune_runtime
from edgetune.errors import ModelError
from edgetune.package import PackageOptions, package

TOL = 1e-4  # the bar: relative to the output's magnitude


def _package(model, out, device="host", **kw):
    return package(PackageOptions(model=model, device=device, output=out, rtol=TOL, **kw))


def _ort(model, feeds):
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _rel(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))


# every attribute edgetune handles, in both code paths; plain forward LSTM and RNN are each a
# subset of another variant
VARIANTS = {
    "lstm-reverse-nobias": ("LSTM", {"direction": "reverse", "bias": False}),
    "lstm-bidir-const-state-peephole-clip": ("LSTM", {"direction": "bidirectional", "initial": "const",
                                                      "peephole": True, "clip": 0.3}),
    "lstm-state-inputs": ("LSTM", {"initial": "input"}),
    "lstm-input-forget": ("LSTM", {"input_forget": 1}),
    "lstm-relu-acts": ("LSTM", {"activations": ["Sigmoid", "Relu", "Tanh"]}),
    "gru": ("GRU", {}),
    "gru-bidir-lbr-state-inputs": ("GRU", {"direction": "bidirectional", "linear_before_reset": 1, "initial": "input"}),
    "gru-reverse-clip": ("GRU", {"direction": "reverse", "clip": 0.3, "initial": "const"}),
    "rnn-bidir-relu": ("RNN", {"direction": "bidirectional", "activations": ["Relu", "Tanh"]}),
    "rnn-const-state-nobias": ("RNN", {"initial": "const", "bias": False}),
}


# 5 steps run unrolled (Relax ops per step), 40 steps as one loop kernel per direction
@pytest.mark.parametrize("steps", [5, 40])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_recurrent_variants_match_onnxruntime(tmp_path, variant, steps):
    op, kw = VARIANTS[variant]
    model = rm.single_layer(tmp_path / f"{variant}.onnx", op, steps=steps, **kw)
    result = _package(model, tmp_path / "pkg")
    v = result.verification
    assert v["status"] == "passed" and v["max_rel_error"] <= TOL, v
    assert set(v["outputs"]) == {"Y", "Y_h"} | ({"Y_c"} if op == "LSTM" else set())
    kinds = result.manifest["schedules"]["kinds"]
    assert ("recurrent" in kinds) == (steps > 32), kinds  # the loop kernel, beyond 32 steps only
    assert not result.manifest["schedules"]["naive"]


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_batch_major_layout_matches_the_time_major_model(tmp_path, op):
    # onnxruntime refuses layout=1, so the reference is the same weights in layout 0 between
    # transposes, built here independently of edgetune's rewrite
    kw = {"direction": "bidirectional", "initial": "input"}
    batch_major = rm.single_layer(tmp_path / "bm.onnx", op, steps=6, batch=3, layout=1, **kw)
    time_major = rm.single_layer(tmp_path / "tm.onnx", op, steps=6, batch=3, layout=0, **kw)
    result = _package(batch_major, tmp_path / "pkg")
    assert any("layout=1" in n for n in result.manifest["model"]["notes"])
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (3, 6, 6)).astype("float32")
    h0 = rng.uniform(-1, 1, (3, 2, 8)).astype("float32")
    feeds = {"x": x, "rnn_h0": h0}
    if op == "LSTM":
        feeds["rnn_c0"] = rng.uniform(-1, 1, (3, 2, 8)).astype("float32")
    got = edgetune_runtime.load(result.path).run(**feeds)
    tm_feeds = {k: v.transpose(1, 0, 2) for k, v in feeds.items()}
    want = _ort(time_major, tm_feeds)
    assert _rel(got["Y"], want["Y"].transpose(2, 0, 1, 3)) <= TOL
    assert _rel(got["Y_h"], want["Y_h"].transpose(1, 0, 2)) <= TOL


def test_full_length_sequence_lens_is_accepted_and_shorter_is_refused_by_node(tmp_path):
    full = rm.single_layer(tmp_path / "full.onnx", "GRU", steps=4, batch=2, seq_lens=np.array([4, 4]))
    assert _package(full, tmp_path / "ok").verification["status"] == "passed"
    short = rm.single_layer(tmp_path / "short.onnx", "LSTM", steps=4, batch=2, seq_lens=np.array([4, 2]))
    with pytest.raises(ModelError, match=r"LSTM node 'rnn_lstm': sequence_lens \[4, 2\] is shorter"):
        _package(short, tmp_path / "short")
    assert not (tmp_path / "short").exists()


def test_unsupported_activation_is_refused_naming_the_node(tmp_path):
    model = rm.single_layer(tmp_path / "hs.onnx", "RNN", activations=["HardSigmoid"])
    with pytest.raises(ModelError, match="RNN node 'rnn_rnn': activation.*HardSigmoid"):
        _package(model, tmp_path / "pkg")


def test_crnn_host_package_matches_onnxruntime(tmp_path):
    model = rm.crnn(tmp_path / "crnn.onnx", width=160)  # 40 columns: the LSTMs run as loops
    result = _package(model, tmp_path / "pkg")
    v = result.verification
    assert v["status"] == "passed" and v["max_rel_error"] <= TOL, v
    assert result.manifest["outputs"][0]["shape"] == [40, 1, 37]
    assert "recurrent" in result.manifest["schedules"]["kinds"]


def test_constant_if_folds_and_data_dependent_if_runs_both_branches(tmp_path):
    # the frame-length If of the VAD folds once the shape is fixed; the sign If cannot
    model = rm.data_if(tmp_path / "if.onnx")
    result = _package(model, tmp_path / "pkg")
    assert result.verification["status"] == "passed"
    loaded = edgetune_runtime.load(result.path)
    for sign in (1.0, -1.0):
        x = (sign * np.abs(np.random.default_rng(0).uniform(0.1, 1, (1, 16)))).astype("float32")
        assert _rel(loaded.run(x=x)["y"], _ort(model, {"x": x})["y"]) <= TOL, sign


def _stream(step, frames, hidden=32):
    """Feed each frame with the state the previous one returned; the probabilities, in order."""
    state = np.zeros((2, 1, hidden), dtype="float32")
    probs = []
    for frame in frames:
        out = step(frame, state)
        probs.append(float(out["output"][0, 0]))
        state = out["stateN"]
    return np.array(probs)


def test_streaming_vad_with_bound_sample_rate_matches_onnxruntime_frame_by_frame(tmp_path):
    model = rm.streaming_vad(tmp_path / "vad.onnx")
    result = _package(model, tmp_path / "pkg", bindings={"sr": "16000"})
    m = result.manifest
    assert result.verification["status"] == "passed"
    assert [i["name"] for i in m["inputs"]] == ["input", "state"] and m["bound_inputs"] == {"sr": 16000}
    loaded = edgetune_runtime.load(result.path)
    frames = np.random.default_rng(5).uniform(-1, 1, (4, 1, 512)).astype("float32")
    got = _stream(lambda f, s: loaded.run(input=f, state=s), frames)
    want = _stream(lambda f, s: _ort(model, {"input": f, "state": s, "sr": np.array(16000)}), frames)
    assert np.abs(got - want).max() <= TOL
    assert len(set(np.round(got, 6))) > 1  # the state carries over: frames differ
    # the bound input may be passed with its bound value, never with another
    loaded.run(input=frames[0], state=np.zeros((2, 1, 32), "float32"), sr=np.array(16000))
    with pytest.raises(edgetune_runtime.InputError, match="bound to 16000"):
        loaded.run(input=frames[0], state=np.zeros((2, 1, 32), "float32"), sr=np.array(8000))


def test_unbound_sample_rate_stays_a_real_branch(tmp_path):
    model = rm.streaming_vad(tmp_path / "vad.onnx")
    result = _package(model, tmp_path / "pkg")
    assert [i["name"] for i in result.manifest["inputs"]] == ["input", "state", "sr"]
    loaded = edgetune_runtime.load(result.path)
    frame = np.random.default_rng(6).uniform(-1, 1, (1, 512)).astype("float32")
    state = np.random.default_rng(7).uniform(-1, 1, (2, 1, 32)).astype("float32")
    outs = []
    for sr in (16000, 8000):
        feeds = {"input": frame, "state": state, "sr": np.array(sr)}
        got, want = loaded.run(**feeds), _ort(model, feeds)
        assert _rel(got["stateN"], want["stateN"]) <= TOL, sr
        outs.append(got["output"])
    assert not np.allclose(outs[0], outs[1])  # the two front ends differ


def test_bind_errors_name_the_input(tmp_path):
    model = rm.streaming_vad(tmp_path / "vad.onnx")
    with pytest.raises(ModelError, match="--bind names unknown input"):
        _package(model, tmp_path / "a", bindings={"rate": "16000"})
    with pytest.raises(ModelError, match="--bind sr=fast: not a value for input 'sr'"):
        _package(model, tmp_path / "b", bindings={"sr": "fast"})


def test_inspect_lists_recurrent_layers_control_flow_and_bindable_inputs(tmp_path):
    model = rm.streaming_vad(tmp_path / "vad.onnx")
    r = run_edgetune("inspect", str(model))
    assert r.returncode == 0, r.stderr
    assert "dec_lstm" in r.stdout and "input/output" in r.stdout  # streaming state
    assert "If 'if_sr'" in r.stdout and "reads input(s) sr" in r.stdout
    assert "If 'if_short'" in r.stdout and "folds at import" in r.stdout
    assert "bindable inputs (only steer control flow or shapes): sr" in r.stdout
    crnn = rm.crnn(tmp_path / "crnn.onnx", width=160)
    data = json.loads(run_edgetune("inspect", str(crnn), "--json").stdout)
    assert [(x["op"], x["direction"], x["steps"], x["runs_as"]) for x in data["recurrent"]] == \
        [("LSTM", "bidirectional", 40, "loop")] * 2
    assert data["bindable"] == [] and data["unsupported_ops"] == []


@pytest.mark.slow
@pytest.mark.cross
def test_crnn_for_pi4_and_streaming_vad_for_pi5_under_qemu(tmp_path, qemu):
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("aarch64-linux-gnu-g++ is not installed (scripts/install-system-deps.sh installs it)")
    crnn = _package(rm.crnn(tmp_path / "crnn.onnx", width=160), tmp_path / "crnn-pi4", device="pi4").verification
    assert crnn["status"] == "passed" and "qemu-aarch64" in crnn["executed_on"] and crnn["max_rel_error"] <= TOL, crnn
    vad = _package(rm.streaming_vad(tmp_path / "vad.onnx"), tmp_path / "vad-pi5", device="pi5",
                   bindings={"sr": "16000"}).verification
    assert vad["status"] == "passed" and "qemu-aarch64" in vad["executed_on"] and vad["max_rel_error"] <= TOL, vad


@pytest.mark.long
def test_tuning_skips_loop_kernels_and_tuned_packages_keep_branches(tmp_path):
    # the CRNN's loop kernels are not tasks; the unbound VAD (a data-dependent If) tunes, and the
    # package built from its records still runs both branches right
    crnn = rm.crnn(tmp_path / "crnn.onnx", width=160)
    listed = run_edgetune("tune", str(crnn), "--device", "host", "--list-tasks", "--json")
    assert listed.returncode == 0, listed.stderr
    tasks = json.loads(listed.stdout)
    assert tasks and not any("loop" in row["task"] for row in tasks)
    from edgetune.tuning.session import TuneOptions, tune

    vad = rm.streaming_vad(tmp_path / "vad.onnx")
    records = tmp_path / "rec"
    result = tune(TuneOptions(models=(vad,), device="host", trials=12, records=records, batch=4, population=32,
                              network_check=False))
    assert result.failures == 0 and result.stop_reason == "budget spent" and result.snapshot.spent == 12, result
    assert any(t.kind == "dense" and t.trials for t in result.snapshot.tasks), result.snapshot.tasks  # the recurrent layer's gate products
    pkg = _package(vad, tmp_path / "pkg", records=records)
    assert pkg.manifest["tuning"]["tuned_tasks"] > 0 and pkg.verification["status"] == "passed"
    loaded = edgetune_runtime.load(pkg.path)
    feeds = {"input": np.full((1, 512), 0.25, "float32"), "state": np.zeros((2, 1, 32), "float32")}
    for sr in (16000, 8000):
        got, want = loaded.run(**feeds, sr=np.array(sr)), _ort(vad, {**feeds, "sr": np.array(sr)})
        assert _rel(got["output"], want["output"]) <= TOL, sr
