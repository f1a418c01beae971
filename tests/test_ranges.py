"""Range packages (``--input-shape input_ids=1,1..N``): one symbolic-shape library (the default
for ONNX) or buckets (padding and cutting back), the range's own reference check at several
lengths, and what they refuse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import zoo
import zoo_transformers as zt
from onnx import TensorProto, helper

import edgetune_runtime
from edgetune.errors import UsageError, VerificationError
from edgetune.importer import import_model
from edgetune.package import PackageOptions, package
from edgetune.ranges import LengthRange, check_lengths, default_buckets, split
from edgetune.util import parse_input_shapes
from edgetune_runtime import InputError

NAMES = ("input_ids", "attention_mask", "token_type_ids")


def test_ranges_parse_for_package_only():
    assert parse_input_shapes(["input_ids=1,1..256"], ranges=True) == {"input_ids": (1, (1, 256))}
    with pytest.raises(UsageError, match="ranges are for `edgetune package`, `tune` and `inspect`"):
        parse_input_shapes(["input_ids=1,1..256"])
    for bad in ("x=1,9..2", "x=1,0..4", "x=1,a..4"):
        with pytest.raises(UsageError, match="malformed --input-shape"):
            parse_input_shapes([bad], ranges=True)

def test_several_ranges_are_variables_shared_by_span():
    # one range shared by every input that has it: the length, as before
    fixed, rng = split({"ids": (1, (1, 64)), "mask": (1, (1, 64)), "x": (3,)})
    assert rng.spans == {"length": (1, 64)} and rng.axes == {"ids": {1: "length"}, "mask": {1: "length"}}
    assert fixed == {"x": (3,)} and not rng.multi and (rng.lo, rng.hi) == (1, 64)
    # batch × length: two variables, each shared across the inputs
    _fixed, rng = split({"ids": ((1, 4), (1, 64)), "mask": ((1, 4), (1, 64))})
    assert rng.spans == {"length0": (1, 4), "length1": (1, 64)} and rng.multi
    assert rng.axes["mask"] == {0: "length0", 1: "length1"}
    assert rng.shapes_at((3, 17), {}) == {"ids": (3, 17), "mask": (3, 17)}
    assert rng.end == (4, 64) and rng.timed_points()[-1] == (4, 64)
    assert rng.timed_points() == [(1, 8), (1, 16), (2, 32), (4, 64)]
    points = rng.check_points()
    assert points[0] == (1, 1) and points[-1] == (4, 64) and (1, 64) in points and (4, 1) in points
    with pytest.raises(UsageError, match="several ranges, where one length is needed"):
        _ = rng.hi
    # height × width with the same span: one input's two axes are two variables
    _fixed, rng = split({"x": (1, 3, (32, 96), (32, 96))})
    assert rng.axes == {"x": {2: "length0", 3: "length1"}}
    with pytest.raises(UsageError, match="ambiguous"):
        split({"x": (1, 3, (32, 96), (32, 96)), "y": (1, (32, 96))})
    # different ranges on different inputs: two variables (the reference check says whether the model agrees)
    assert split({"a": (1, (1, 64)), "b": (1, (1, 32))})[1].multi


def test_a_length_given_two_ranges_fails_its_import_with_a_hint(encoder):
    """An encoder's input_ids and attention_mask must share a length: given two ranges, they are
    two variables, TVM cannot follow the model, and the hint says why."""
    from edgetune.errors import ModelError

    shapes = {"input_ids": (1, (1, 64)), "attention_mask": (1, (1, 32)), "token_type_ids": (1, (1, 64))}
    with pytest.raises(ModelError) as info:
        import_model(encoder, shapes)
    assert "2 independent variables (length0 1..64, length1 1..32)" in info.value.hint
    assert "give them the same range" in info.value.hint


@pytest.mark.parametrize("lo, hi, buckets", [(1, 256, [16, 32, 64, 128, 256]), (10, 100, [16, 32, 56, 100]),
                                             (64, 64, [64]), (1, 4096, [256, 512, 1024, 2048, 4096])])
def test_default_buckets_halve_from_the_end(lo, hi, buckets):
    assert default_buckets(lo, hi) == buckets
    lengths = check_lengths(LengthRange({"length": (lo, hi)}, {}, {}), buckets)
    assert lengths[0] == lo and lengths[-1] == hi
    assert len(buckets) == 1 or any(n not in buckets for n in lengths)  # padding is exercised


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    """A BERT-style encoder whose sequence axis is dynamic in the file, as exporters write it."""
    return zt.bert(tmp_path_factory.mktemp("range") / "enc.onnx", layers=1, hidden=32, heads=2, seq=8, vocab=50,
                   dynamic=True)


def _ranged(hi: int, lo: int = 1) -> dict:
    return {name: (1, (lo, hi)) for name in NAMES}


def _inputs(length: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((1, length), "int64")
    mask[0, max(1, length * 3 // 4):] = 0  # a caller's own padding inside its length stays the caller's
    return {"input_ids": rng.integers(0, 50, (1, length)).astype("int64"), "attention_mask": mask,
            "token_type_ids": rng.integers(0, 2, (1, length)).astype("int64")}


def _serves_every_length(result, encoder, lengths=(1, 7, 8, 9, 23, 40)) -> None:
    model = edgetune_runtime.load(result.path)
    session = ort.InferenceSession(str(encoder))
    for length in lengths:
        inputs = _inputs(length, length)
        (name, got), = model.run(**inputs).items()
        want = session.run(None, inputs)[0]
        assert got.shape == want.shape == (1, length, 32)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if max(lengths) != 40:
        return
    with pytest.raises(InputError, match=r"length 41 is outside the package's range 1\.\.40") as info:
        model.run(**_inputs(41, 0))
    assert "1..41" in info.value.hint
    uneven = _inputs(9, 0)
    uneven["attention_mask"] = uneven["attention_mask"][:, :8]
    with pytest.raises(InputError, match="lengths differ"):
        model.run(**uneven)
    assert model.check()["passed"]


def test_one_symbolic_library_serves_every_length_in_its_range(encoder, tmp_path):
    result = package(PackageOptions(model=encoder, device="host", output=tmp_path / "pkg", input_shapes=_ranged(40)))
    m = result.manifest
    assert m["kind"] == "range" and m["range"]["symbolic"] and m["range"]["buckets"] == [40]
    v = m["verification"]
    assert v["status"] == "passed" and sorted(v["lengths"], key=int) == ["1", "21", "40"], v
    assert sorted(p.name for p in result.path.iterdir() if p.is_dir()) == ["edgetune_runtime", "symbolic"]
    inner = json.loads((result.path / "symbolic" / "manifest.json").read_text())
    assert inner["length_range"] == [1, 40] and [s.get("range_axis") for s in inner["inputs"]] == [1, 1, 1]
    assert inner["outputs"][0]["range_axis"] == 1 and inner["outputs"][0]["shape"] == [1, 40, 32]
    assert not inner["schedules"]["naive"], inner["schedules"]  # every kernel has its schedule
    kinds = {k["kind"] for k in inner["kernels"].values()}
    assert {"dense", "matmul", "softmax", "layer-norm"} <= kinds, kinds
    _serves_every_length(result, encoder)
    # long lengths too, multiples of the tiles among them (a tile count TVM was told a bound for
    # wrongly once made 200 and 256 tokens wrong and 255 right)
    long = package(PackageOptions(model=encoder, device="host", output=tmp_path / "long", input_shapes=_ranged(256),
                                  verify=False))
    _serves_every_length(long, encoder, (16, 96, 200, 255, 256))
    timed = edgetune_runtime.load(result.path).measure(runs=3, max_warmup_s=1.0, profile=True, profile_runs=4)
    assert sorted(timed["buckets"], key=int) == ["8", "16", "24", "40"]  # the lengths buckets would have
    # the profile's calibration pass skips kernels, not the VM's shape functions (garbage sizes otherwise)
    assert all(any(k["kind"] == "dense" for k in b["profile"]["kernels"]) for b in timed["buckets"].values())


def test_a_bucket_package_pads_each_length_to_the_next_bucket(encoder, tmp_path):
    result = package(PackageOptions(model=encoder, device="host", output=tmp_path / "pkg", input_shapes=_ranged(40),
                                    buckets=(8, 16, 24, 40)))
    m = result.manifest
    assert m["kind"] == "range" and m["range"]["buckets"] == [8, 16, 24, 40] and not m["range"].get("symbolic")
    v = m["verification"]
    assert v["status"] == "passed" and sorted(v["lengths"], key=int) == ["1", "21", "40"], v
    assert sorted(p.name for p in result.path.iterdir() if p.is_dir()) == ["b16", "b24", "b40", "b8", "edgetune_runtime"]
    _serves_every_length(result, encoder)


def _centring(tmp_path: Path) -> Path:
    """x − mean(x over the sequence): without a mask, padded positions would take part."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n", 4])
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1), helper.make_node("Sub", ["x", "m"], ["y"])]
    model = tmp_path / "centre.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "centre", [x], [y]), opset_imports=[helper.make_opsetid("", 13)], ir_version=8),
              str(model))
    return model


def test_a_model_that_padding_changes_fails_a_bucket_range_check_and_leaves_nothing(tmp_path):
    model, out = _centring(tmp_path), tmp_path / "pkg"
    with pytest.raises(VerificationError, match="padding changes this model's outputs") as info:
        package(PackageOptions(model=model, device="host", output=out, input_shapes={"x": (1, (1, 32), 4)}, buckets=(16, 32)))
    assert "leave out --buckets" in info.value.hint
    assert not out.exists() and not list(tmp_path.glob(".pkg.*"))


def test_a_model_that_padding_changes_is_exact_as_a_symbolic_package(tmp_path):
    model = _centring(tmp_path)
    result = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg", input_shapes={"x": (1, (1, 32), 4)}))
    assert result.manifest["verification"]["status"] == "passed"
    loaded = edgetune_runtime.load(result.path)
    for length in (1, 5, 32):
        x = np.random.default_rng(length).standard_normal((1, length, 4)).astype("float32")
        np.testing.assert_allclose(loaded.run(x=x)["y"], x - x.mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match=r"outside the package's range 1\.\.32"):
        loaded.run(x=np.zeros((1, 33, 4), "float32"))


@pytest.mark.qemu
def test_a_range_package_for_the_pi_checks_under_emulation(encoder, tmp_path, qemu):
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("aarch64-linux-gnu-g++ is not installed (scripts/install-system-deps.sh installs it)")
    result = package(PackageOptions(model=encoder, device="pi4", output=tmp_path / "pi", input_shapes=_ranged(32),
                                    buckets=(16, 32)))
    v = result.manifest["verification"]
    assert v["status"] == "passed" and "qemu-aarch64" in v["executed_on"] and sorted(v["lengths"], key=int) == ["1", "25", "32"], v


def _speech_encoder(tmp_path: Path) -> Path:
    """A speech encoder without a mask (every frame is speech: padding would change it), its
    frame axis dynamic; the conv front end halves the length."""
    return zt.whisper_encoder(tmp_path / "speech.onnx", layers=1, hidden=32, heads=2, mels=8, dynamic=True)


def _ocr_recognizer(tmp_path: Path) -> Path:
    """The tests' CRNN (conv stack, 2-layer BiLSTM) with its line width dynamic."""
    import rnn_models

    path = rnn_models.crnn(tmp_path / "crnn.onnx", width=64, hidden=16)
    proto = onnx.load(str(path))
    for vi, axis, label in ((proto.graph.input[0], 3, "width"), (proto.graph.output[0], 0, "steps")):
        vi.type.tensor_type.shape.dim[axis].dim_param = label
    onnx.save(proto, str(path))
    return path


@pytest.mark.parametrize("kind", ["speech", "ocr", "ocr-mobile"])
def test_speech_encoders_and_ocr_recognizers_run_at_every_length_of_a_symbolic_package(kind, tmp_path):
    """No mask, an output length that is not the input's (frames / 2, width / 4), a recurrent
    layer over a run-time length: every length at its own size, checked against onnxruntime."""
    if kind == "speech":
        model, name, shape, lengths = _speech_encoder(tmp_path), "input_features", (1, 8, (8, 200)), (8, 9, 16, 31, 63, 200)
    elif kind == "ocr":
        model, name, shape, lengths = _ocr_recognizer(tmp_path), "image", (1, 1, 32, (32, 320)), (32, 37, 100, 320)
    else:  # depthwise convolutions of symbolic width
        model, name, shape, lengths = zoo.ocr_rec(tmp_path / "rec.onnx"), "x", (1, 3, 32, (16, 200)), (16, 17, 99, 200)
    result = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg", input_shapes={name: shape}))
    m = result.manifest
    assert m["range"]["symbolic"] and m["verification"]["status"] == "passed", m["verification"]
    inner = json.loads((result.path / "symbolic" / "manifest.json").read_text())
    assert not inner["schedules"]["naive"], inner["schedules"]
    kinds = {k["kind"] for k in inner["kernels"].values()}
    assert "conv2d" in kinds and {"speech": "matmul", "ocr": "recurrent", "ocr-mobile": "depthwise"}[kind] in kinds, kinds
    loaded, session = edgetune_runtime.load(result.path), ort.InferenceSession(str(model))
    rng = np.random.default_rng(0)
    for length in lengths:
        dims = tuple(length if isinstance(d, tuple) else d for d in shape)
        x = rng.standard_normal(dims).astype("float32")
        (got,), want = loaded.run(**{name: x}).values(), session.run(None, {name: x})[0]
        assert got.shape == want.shape, (length, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.qemu
def test_a_symbolic_range_package_for_the_pi_checks_under_emulation(encoder, tmp_path, qemu):
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("aarch64-linux-gnu-g++ is not installed (scripts/install-system-deps.sh installs it)")
    result = package(PackageOptions(model=encoder, device="pi4", output=tmp_path / "pi", input_shapes=_ranged(32)))
    v = result.manifest["verification"]
    assert result.manifest["range"]["symbolic"]
    assert v["status"] == "passed" and "qemu-aarch64" in v["executed_on"] and sorted(v["lengths"], key=int) == ["1", "17", "32"], v
    speech = package(PackageOptions(model=_speech_encoder(tmp_path), device="pi5", output=tmp_path / "pi-speech",
                                    input_shapes={"input_features": (1, 8, (8, 64))}))
    v = speech.manifest["verification"]
    assert v["status"] == "passed" and "qemu-aarch64" in v["executed_on"] and sorted(v["lengths"], key=int) == ["8", "37", "64"], v


@pytest.mark.slow
def test_tuning_a_range_with_buckets_tunes_each_bucket_and_its_package_applies_them(encoder, tmp_path):
    from conftest import run_edgetune

    records = tmp_path / "records"
    shapes = [f"--input-shape={name}=1,1..16" for name in NAMES]
    res = run_edgetune("tune", str(encoder), "--device", "host", *shapes, "--buckets", "8,16", "--records", str(records),
                       "--trials", "12", "--batch", "4", "--population", "16", "--weight", "enc@16=2", "--json",
                       "--no-network-check")
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert [n["name"] for n in summary["networks"]] == ["enc@8", "enc@16"] and summary["trials_this_run"] > 0
    result = package(PackageOptions(model=encoder, device="host", output=tmp_path / "pkg", input_shapes=_ranged(16),
                                    records=records, buckets=(8, 16)))
    per = result.manifest["range"]["per_bucket"]
    assert per["8"]["tuning"] > 0 and per["16"]["tuning"] > 0, per
    assert result.manifest["verification"]["status"] == "passed"


@pytest.mark.long
@pytest.mark.slow
def test_tuning_a_range_tunes_its_symbolic_kernels_at_the_weighted_lengths_and_its_package_applies_them(tmp_path):
    """A speech encoder without a mask (a bucket package would be wrong): its range is tuned as
    the package builds it, one library of symbolic shape whose kernels are timed at the lengths
    --shape-weights names; the range package applies the records and stays exact at every length."""
    from conftest import run_edgetune

    model, records = _speech_encoder(tmp_path), tmp_path / "records"
    shape = "--input-shape=input_features=1,8,8..200"
    res = run_edgetune("tune", str(model), "--device", "host", shape, "--shape-weights", "16=1,100=2,200=1",
                       "--records", str(records), "--trials", "100", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert [n["name"] for n in summary["networks"]] == ["speech"] and summary["failed_candidates"] == 0, summary
    rows = {t["name"]: t for t in summary["tasks"]}
    assert rows["matmul"]["best_ms"] > 0, rows["matmul"]  # timed at its lengths (the weighted mean)
    assert any(t["trials"] > 1 and t["status"] == "all of its design space measured" for t in rows.values()), rows
    # each symbolic dense / matmul kernel at several register-tile heights; all but the fastest stop
    heights = [t for name, t in rows.items() if "@rows" in name]
    assert heights and all(t["trials"] >= 1 for t in heights), heights
    assert any(t["status"].endswith(" variant is faster") for t in rows.values())
    check, = summary["network_checks"]  # (timed at the range's lengths; a kernel's verdict by its mean)
    assert check["error"] is None and check["default_ms"] > 0 and check["kernels"], check
    kept = {k["workload"] for k in check["kernels"] if k["kept"]}  # (on a busy host the check may veto them all)
    result = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg",
                                    input_shapes={"input_features": (1, 8, (8, 200))}, records=records))
    m = result.manifest
    assert m["range"]["symbolic"] and m["verification"]["status"] == "passed", m
    tuned = (m["tuning"] or {}).get("tuned_tasks", 0)
    assert (tuned >= len(kept) > 0 or tuned == len(kept) == 0) and m["range"]["per_bucket"]["200"]["tuning"] == tuned
    if tuned:  # timed (bench) where its records were: the --shape-weights lengths, weighted alike
        assert m["range"]["timed"] == [16, 100, 200] and m["range"]["timed_weights"] == [1.0, 2.0, 1.0], m["range"]
    if tuned:  # the heights the records chose, by signature, are what the library was built with
        variants = m["tuning"]["variants"]
        assert variants and all(k.startswith("rows ") and v.startswith("rows") for k, v in variants.items()), variants
    assert {k["workload"] for k in m["kernels"].values() if k["tuned"]} >= kept
    loaded, session = edgetune_runtime.load(result.path), ort.InferenceSession(str(model))
    for length in (8, 33, 200):
        x = np.random.default_rng(length).standard_normal((1, 8, length)).astype("float32")
        (got,), want = loaded.run(input_features=x).values(), session.run(None, {"input_features": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
    # records timed at other lengths do not compare: another weighting into the same records is refused
    again = run_edgetune("tune", str(model), "--device", "host", shape, "--shape-weights", "16=1,100=3",
                         "--records", str(records), "--trials", "4")
    assert again.returncode != 0 and "already have records timed at --shape-weights 16=1,100=2,200=1" in again.stderr
    # the lengths travel with exported records, and an import never mixes two weightings
    from edgetune.tuning.records import LENGTHS, RecordStore

    archive = RecordStore(records, "host").export(tmp_path / "records.tar.gz")
    fresh = RecordStore(tmp_path / "fresh", "host")
    assert fresh.import_(archive)[1] > 0 and fresh.shape_weights() == RecordStore(records, "host").shape_weights()
    other = json.loads((fresh.dir / LENGTHS).read_text())
    (fresh.dir / LENGTHS).write_text(json.dumps({h: {"64": 1.0} for h in other}))
    with pytest.raises(UsageError, match="at other lengths than the records here"):
        fresh.import_(archive)


def test_shape_weights_are_lengths_in_the_range_of_a_symbolic_network(tmp_path):
    from edgetune.tuning.tasks import networks_of
    from edgetune.util import parse_shape_weights

    assert parse_shape_weights("16=1,64=4.5,256") == {16: 1.0, 64: 4.5, 256: 1.0}
    for bad in ("16=0", "x=1", "16=1,16=2", "-4=1"):
        with pytest.raises(UsageError, match="malformed --shape-weights"):
            parse_shape_weights(bad)
    model = _speech_encoder(tmp_path)
    net, = networks_of([model], {"input_features": (1, 8, (8, 200))})
    assert net.name == "speech" and net.lengths == {16: 1.0, 32: 1.0, 56: 1.0, 104: 1.0, 200: 1.0}
    net, = networks_of([model], {"input_features": (1, 8, (8, 200))}, shape_weights={100: 2.0, 8: 1.0})
    assert list(net.lengths.items()) == [(8, 1.0), (100, 2.0)]
    with pytest.raises(UsageError, match=r"--shape-weights length\(s\) 300 outside the range 8\.\.200"):
        networks_of([model], {"input_features": (1, 8, (8, 200))}, shape_weights={300: 1.0})
    buckets = networks_of([model], {"input_features": (1, 8, (8, 200))}, buckets=(100, 200))
    assert [n.name for n in buckets] == ["speech@100", "speech@200"] and not any(n.symbolic for n in buckets)
    with pytest.raises(UsageError, match="--shape-weights weights the lengths of a range"):
        networks_of([model], {"input_features": (1, 8, 100)}, shape_weights={100: 1.0})


def test_a_symbolic_kernels_register_tile_height_is_the_default_unless_a_choice_names_one():
    from edgetune._tvm.kernels.cpu import CpuFacts
    from edgetune._tvm.passes.legalize import ROWS, row_height

    sig, x86, arm = "rows dense 32x32", CpuFacts(16, 32, 4), CpuFacts(4, 32, 4, aarch64=True)
    assert row_height(sig, 5, 12, "auto", x86) == (5, (sig, 5))
    assert row_height(sig, 5, 12, {sig: "rows4"}, x86) == (4, (sig, 5))
    assert row_height(sig, 5, 12, {"rows dense 64x64": "rows4"}, x86)[0] == 5
    assert row_height(sig, 5, 12, {ROWS: "2"}, x86)[0] == 2  # (tuning's extraction: every kernel at one height)
    assert row_height(sig, 5, 12, {ROWS: "13"}, x86)[0] == 5  # more rows than the registers hold: the default
    assert row_height(sig, 5, 12, {sig: "direct"}, x86)[0] == 5  # (not a height)
    # on AArch64 an untuned build's height is 4 (measured by the Pi estimate), tuning's choice still wins
    assert row_height(sig, 5, 12, "auto", arm) == (4, (sig, 4))
    assert row_height(sig, 5, 12, {sig: "rows6"}, arm)[0] == 6
    assert row_height(sig, 3, 3, "auto", arm)[0] == 3  # (registers for 3 rows only)


def test_a_symbolic_kernel_is_timed_with_its_arguments_at_each_length(tmp_path):
    """Each symbolic kernel's tasks carry its arguments at each timed length, and tuning
    measures its other register-tile heights beside the default. On the Pi 5's target: which
    heights a dense kernel has depends on the CPU (on an AVX2 host it has one)."""
    from edgetune import _tvm
    from edgetune.devices import resolve_device
    from edgetune.tuning.tasks import model_workloads

    model = import_model(_speech_encoder(tmp_path), {"input_features": (1, 8, (8, 200))})
    target = _tvm.make_target(resolve_device("pi5").target_spec())
    wls = model_workloads(model, target, _tvm.lowering_for(target, "auto").key, {16: 1.0, 100: 3.0})
    by_kind = {w.kind: w for w in wls if "@rows" not in w.name}  # (the default heights)
    dense = by_kind["dense"]
    assert dense.symbolic and [w for w, _a in dense.sizes] == [1.0, 3.0] and dense.lengths == ((16, 1.0), (100, 3.0))
    assert dense.variant == dense.default_variant and dense.signature.startswith("rows dense ")
    others = [w for w in wls if w.signature == dense.signature and w.variant != dense.variant]
    assert others and all(w.name.endswith(f"@{w.variant}") and w.default_variant == dense.variant for w in others)
    (_w, at16), (_w2, at100) = dense.sizes
    tensors16 = [a for a in at16 if a[0] == "tensor"]
    assert tensors16[0][2][1] == 8 and [a for a in at100 if a[0] == "tensor"][0][2][1] == 50  # frames / 2
    assert all(w.sizes for w in wls), [w.name for w in wls if not w.sizes]
    fixed = model_workloads(import_model(_speech_encoder(tmp_path), {"input_features": (1, 8, 100)}), target,
                            _tvm.lowering_for(target, "auto").key)
    assert not any(w.symbolic or w.sizes for w in fixed)


def test_a_symbolic_softmax_sets_its_row_totals_before_their_loops(tmp_path):
    """A row whose length is a multiple of the vector lanes has an empty tail: the tail's total
    must be its identity, not whatever the scratch held (NaN in a speech encoder's attention at
    31 and 63 frames — 16 and 32 scores a row — on AVX-512, one run in three)."""
    from edgetune import _tvm
    from edgetune._tvm.schedules.dispatch import default_schedule
    from edgetune.devices import resolve_device
    from edgetune.tuning.tasks import model_workloads

    for device in ("host", "pi5"):
        target = _tvm.make_target(resolve_device(device).target_spec())
        model = import_model(_speech_encoder(tmp_path), {"input_features": (1, 8, (8, 200))})
        softmax, = [w for w in model_workloads(model, target, _tvm.lowering_for(target, "auto").key)
                    if w.kind == "softmax"]
        sch = default_schedule(softmax.mod, target).sch
        script = sch.mod.script()
        for total in ("softmax_max_tail", "softmax_sum_tail"):
            assert f'T.sblock("{total}_init")' in script, (device, total)


def test_inspect_reports_a_range_at_its_longest_and_how_it_is_built(encoder):
    from edgetune.report import inspect_model

    report = inspect_model(encoder, _ranged(64, lo=4))
    assert report.import_error is None and any(
        "length range 4..64: a range package compiles one library with symbolic shapes (--buckets: fixed lengths "
        "8, 16, 32, 64)" in n for n in report.notes), report.notes


def _batched(batch: int, length: int) -> dict:
    return {name: ((1, batch), (1, length)) for name in NAMES}


def test_batch_and_length_ranges_build_one_symbolic_library_that_serves_every_pair(encoder, tmp_path):
    result = package(PackageOptions(model=encoder, device="host", output=tmp_path / "pkg", input_shapes=_batched(3, 24)))
    m = result.manifest
    assert m["range"]["symbolic"] and m["range"]["vars"] == {"length0": [1, 3], "length1": [1, 24]}, m["range"]
    assert "min" not in m["range"] and m["range"]["timed"][-1] == [3, 24]
    v = m["verification"]  # every range's start and end, an odd point between, the corners that mix them
    assert v["status"] == "passed" and list(v["lengths"]) == ["1x1", "3x13", "1x24", "3x1", "3x24"], v
    assert [s["range_axes"] for s in m["inputs"]] == [{"0": "length0", "1": "length1"}] * 3
    inner = json.loads((result.path / "symbolic" / "manifest.json").read_text())
    assert inner["ranges"] == {"length0": [1, 3], "length1": [1, 24]} and "length_range" not in inner
    model, session = edgetune_runtime.load(result.path), ort.InferenceSession(str(encoder))
    for batch, length in ((1, 1), (2, 9), (3, 24), (3, 16)):
        rng = np.random.default_rng(batch * 100 + length)
        inputs = {"input_ids": rng.integers(0, 50, (batch, length)).astype("int64"),
                  "attention_mask": (rng.uniform(size=(batch, length)) < 0.8).astype("int64"),
                  "token_type_ids": rng.integers(0, 2, (batch, length)).astype("int64")}
        inputs["attention_mask"][:, 0] = 1
        (got,), want = model.run(**inputs).values(), session.run(None, inputs)[0]
        assert got.shape == want.shape == (batch, length, 32)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    ones = {n: np.ones((4, 5), "int64") for n in NAMES}
    with pytest.raises(InputError, match=r"length0 \(input_ids axis 0, .*\) 4 is outside the package's range 1\.\.3"):
        model.run(**ones)
    uneven = {n: np.ones((2, 5 if n == "input_ids" else 6), "int64") for n in NAMES}
    with pytest.raises(InputError, match="the inputs' length1 differ"):
        model.run(**uneven)
    assert model.check()["passed"]
    timed = model.measure(runs=3, max_warmup_s=1.0)
    assert list(timed["buckets"]) == ["2x12", "3x24"]  # every range halving together (while 8 or more)
    # the tuner's network check builds it timed at the points tuned, weighted alike
    from edgetune.tuning.network_check import _timed_weights

    weighted = package(PackageOptions(model=encoder, device="host", output=tmp_path / "w", input_shapes=_batched(3, 24),
                                      verify=False, shape_weights={(1, 8): 1.0, (3, 24): 3.0}))
    assert weighted.manifest["range"]["timed"] == [[1, 8], [3, 24]] and weighted.manifest["range"]["timed_weights"] == [1.0, 3.0]
    assert _timed_weights(weighted.path, 2) == [0.25, 0.75] and _timed_weights(result.path, 2) == [0.5, 0.5]
    assert list(edgetune_runtime.load(weighted.path).measure(runs=3, max_warmup_s=1.0)["buckets"]) == ["1x8", "3x24"]
    with pytest.raises(UsageError, match="several ranges are built as one symbolic-shape library, which --buckets"):
        package(PackageOptions(model=encoder, device="host", output=tmp_path / "b", input_shapes=_batched(3, 24),
                               buckets=(8, 24)))
    assert not (tmp_path / "b").exists()


def test_height_and_width_ranges_of_one_input_are_two_variables(tmp_path):
    """An image model whose height and width both range over 32..96: two variables, not one."""
    model = zoo.mobilenet_v3(tmp_path / "mnv3.onnx", size=64, classes=10)
    proto = onnx.load(str(model))
    for axis, name in ((2, "height"), (3, "width")):
        proto.graph.input[0].type.tensor_type.shape.dim[axis].dim_param = name
    onnx.save(proto, str(model))
    name = proto.graph.input[0].name
    result = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg",
                                    input_shapes={name: (1, 3, (32, 96), (32, 96))}))
    m = result.manifest
    assert m["range"]["vars"] == {"length0": [32, 96], "length1": [32, 96]}
    assert m["verification"]["status"] == "passed" and "32x96" in m["verification"]["lengths"], m["verification"]
    loaded, session = edgetune_runtime.load(result.path), ort.InferenceSession(str(model))
    for h, w in ((41, 90), (96, 33)):
        x = np.random.default_rng(h * w).uniform(-1, 1, (1, 3, h, w)).astype("float32")
        (got,), want = loaded.run(x).values(), session.run(None, {name: x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
    with pytest.raises(InputError, match=r"needs shape \(1,3,length0,length1\) with length0 in 32\.\.96, length1 in 32\.\.96"):
        loaded.run(np.zeros((1, 1, 40, 40), "float32"))


@pytest.mark.qemu
def test_a_batch_and_length_range_package_for_the_pi_checks_under_emulation(encoder, tmp_path, qemu):
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.skip("aarch64-linux-gnu-g++ is not installed (scripts/install-system-deps.sh installs it)")
    result = package(PackageOptions(model=encoder, device="pi5", output=tmp_path / "pi", input_shapes=_batched(2, 20)))
    v = result.manifest["verification"]
    assert v["status"] == "passed" and "qemu-aarch64" in v["executed_on"] and list(v["lengths"]) == \
        ["1x1", "1x11", "1x20", "2x1", "2x20"], v


def test_shape_weights_of_several_ranges_are_points(encoder):
    from edgetune.tuning.tasks import networks_of
    from edgetune.util import parse_shape_weights

    assert parse_shape_weights("1x16=1,4x64=3") == {(1, 16): 1.0, (4, 64): 3.0}
    with pytest.raises(UsageError, match="malformed --shape-weights"):
        parse_shape_weights("16=1,4x64=3")  # one value per range, the same count in every item
    net, = networks_of([encoder], _batched(4, 64))
    assert net.symbolic and list(net.lengths) == [(1, 8), (1, 16), (2, 32), (4, 64)]
    net, = networks_of([encoder], _batched(4, 64), shape_weights={(4, 64): 1.0, (1, 16): 2.0})
    assert list(net.lengths.items()) == [((1, 16), 2.0), ((4, 64), 1.0)]
    with pytest.raises(UsageError, match=r"--shape-weights 16 gives 1 value\(s\) for 2 range\(s\)"):
        networks_of([encoder], _batched(4, 64), shape_weights={16: 1.0})
    with pytest.raises(UsageError, match=r"outside the range length0 1\.\.4 × length1 1\.\.64"):
        networks_of([encoder], _batched(4, 64), shape_weights={(8, 16): 1.0})
    with pytest.raises(UsageError, match="several ranges, where one length is needed"):
        networks_of([encoder], _batched(4, 64), buckets=(32, 64))


@pytest.mark.long
@pytest.mark.slow
def test_tuning_batch_and_length_ranges_times_each_kernel_at_the_weighted_points(encoder, tmp_path):
    from conftest import run_edgetune

    records = tmp_path / "records"
    shapes = [f"--input-shape={n}=1..3,1..24" for n in NAMES]
    res = run_edgetune("tune", str(encoder), "--device", "host", *shapes, "--shape-weights", "1x8=1,3x24=2",
                       "--records", str(records), "--trials", "24", "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert summary["failed_candidates"] == 0 and any(t["best_ms"] for t in summary["tasks"]), summary["tasks"]
    weights = json.loads((records / "host" / "shape_weights.json").read_text()) if (records / "host").is_dir() else \
        json.loads(next(records.rglob("shape_weights.json")).read_text())
    assert weights and all(w == {"1x8": 1.0, "3x24": 2.0} for w in weights.values()), weights
    result = package(PackageOptions(model=encoder, device="host", output=tmp_path / "pkg", input_shapes=_batched(3, 24),
                                    records=records))
    check, = summary["network_checks"]  # (timed at the points; on a busy host it may veto every record)
    assert check["error"] is None and check["default_ms"] > 0, check
    kept = {k["workload"] for k in check["kernels"] if k["kept"]}
    m = result.manifest
    assert m["verification"]["status"] == "passed" and (m["tuning"] or {}).get("tuned_tasks", 0) >= len(kept)
    assert {k["workload"] for k in m["kernels"].values() if k["tuned"]} >= kept
    if m["tuning"]:  # timed (bench) at the points its records were timed at
        assert m["range"]["timed"] == [[1, 8], [3, 24]] and m["range"]["timed_weights"] == [1.0, 2.0], m["range"]


def _paddle_reshape(path: Path) -> Path:
    """The shape chain paddle2onnx writes (PP-OCR's recognizers): the shape cast to int32, sliced,
    cast back to int64 and concatenated with int32 constants cast to int64, into a Reshape; then
    a 2×2 max pool of stride 1 with ``auto_pad`` SAME_UPPER (PP-OCRv5/v6)."""
    rng = np.random.default_rng(3)
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float32).tolist())
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["c"], ["s"]),
             helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.INT32),
             helper.make_node("Slice", ["s32", "from", "to"], ["wide32"]),
             helper.make_node("Cast", ["wide32"], ["wide"], to=TensorProto.INT64),
             helper.make_node("Constant", [], ["k32"], value=helper.make_tensor("k", TensorProto.INT32, [1], [4])),
             helper.make_node("Cast", ["k32"], ["k"], to=TensorProto.INT64),
             helper.make_node("Concat", ["one", "k", "wide"], ["new"], axis=0),
             helper.make_node("Reshape", ["c", "new"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], auto_pad="SAME_UPPER")]
    inits = [helper.make_tensor("from", TensorProto.INT64, [1], [2]), helper.make_tensor("to", TensorProto.INT64, [1], [4]),
             helper.make_tensor("one", TensorProto.INT64, [1], [1]), w]
    graph = helper.make_graph(nodes, "paddle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path


def test_a_shape_chain_computed_in_int32_stays_a_shape_under_a_range(tmp_path):
    """paddle2onnx computes shapes in int32 (Shape → Cast → Slice → Cast → Concat → Reshape):
    under a width range the casts are dropped so the Reshape still reads a shape (it failed with
    "Reshape requires the input new shape to be Shape"), and the SAME pool's pads are explicit
    (TVM's failed computing them from the symbolic width); every width against onnxruntime."""
    model = _paddle_reshape(tmp_path / "paddle.onnx")
    result = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg",
                                    input_shapes={"x": (1, 3, 8, (16, 100))}))
    assert result.manifest["range"]["symbolic"] and result.verification["status"] == "passed", result.verification
    notes = result.manifest["model"]["notes"]
    assert any("integer cast(s) of shape computations dropped" in n for n in notes), notes
    assert any("auto_pad SAME node(s) with explicit pads" in n for n in notes), notes
    loaded, session = edgetune_runtime.load(result.path), ort.InferenceSession(str(model))
    for width in (16, 33, 100):
        x = np.random.default_rng(width).standard_normal((1, 3, 8, width)).astype(np.float32)
        np.testing.assert_allclose(loaded.run(x=x)["y"], session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppocr4_rec", "ppocr6_rec"])
def test_the_real_ppocr_recognizers_package_with_a_width_range(tmp_path, name):
    """RapidOCR's PP-OCRv4 and v6 recognizers (scripts/fetch_test_models.py) with their line width
    a range: one symbolic library, checked against onnxruntime at the range's ends and middle."""
    model = Path(__file__).parent / ".models" / f"{name}.onnx"
    if not model.exists():
        pytest.skip(f"tests/.models/{name}.onnx: run scripts/fetch_test_models.py")
    result = package(PackageOptions(model=model, device="host", output=tmp_path / "pkg",
                                    input_shapes={"x": (1, 3, 48, (160, 640))}))
    assert result.manifest["range"]["symbolic"] and result.verification["status"] == "passed", result.verification
