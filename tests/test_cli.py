"""The command line as a user meets it: output, exit codes, one-line errors, nothing half-written."""

import json

import models
import pytest
from conftest import EXAMPLES, run_edgetune


def test_help_and_version():
    proc = run_edgetune("--help")
    assert proc.returncode == 0 and "package" in proc.stdout and "inspect" in proc.stdout
    assert run_edgetune("--version").stdout.startswith("edgetune ")


def test_targets_lists_profiles():
    proc = run_edgetune("targets")
    assert proc.returncode == 0
    for name in ("host", "pi4", "pi5", "pi4-32", "jetson-orin-nano"):
        assert name in proc.stdout
    data = json.loads(run_edgetune("targets", "--json").stdout)
    assert {p["name"] for p in data} >= {"pi4", "jetson-orin-nano"}


def test_inspect_json(squeezenet):
    proc = run_edgetune("inspect", str(squeezenet), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["inputs"] == [{"name": "data_0", "shape": [1, 3, 224, 224], "dtype": "float32"}]
    assert report["ops"]["Conv"] == 26 and report["unsupported_ops"] == []
    assert report["params"] > 1_000_000 and 0.3e9 < report["flops"] < 2e9


def test_inspect_human_shows_unsupported(tmp_path):
    proc = run_edgetune("inspect", str(models.unsupported_onnx(tmp_path / "u.onnx")))
    assert proc.returncode == 0
    assert "Celu" in proc.stdout and "unsupported" in proc.stdout


def test_package_json_and_runtime_hint(tmp_path):
    proc = run_edgetune("package", str(EXAMPLES / "face_detection_short_range.tflite"), "-d", "host", "-o", str(tmp_path / "fd"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # --json: stdout is JSON only
    assert data["manifest"]["verification"]["status"] == "passed"
    human = run_edgetune("package", str(EXAMPLES / "face_detection_short_range.tflite"), "-d", "host", "-o", str(tmp_path / "fd"), "--force")
    assert "reference check passed" in human.stdout and "python -m edgetune_runtime run" in human.stdout


def _truncated(tmp_path, squeezenet):
    path = tmp_path / "truncated.onnx"
    path.write_bytes(squeezenet.read_bytes()[:50_000])
    return path


@pytest.mark.parametrize("case,code,message", [
    ("truncated", 3, "is not a valid ONNX model"),
    ("extension", 3, "cannot tell the model format"),
    ("unsupported", 3, "cannot convert: Celu, LpNormalization"),
    ("shape", 2, "malformed --input-shape"),
    ("profile", 2, "unknown device profile 'raspberry'"),
    ("compiler", 4, "cross compiler 'aarch64-edgetune-missing-g++'"),
])
def test_bad_input_gives_one_clear_line(tmp_path, squeezenet, case, code, message):
    model, extra, env = squeezenet, [], {}
    if case == "truncated":
        model = _truncated(tmp_path, squeezenet)
    elif case == "extension":
        model = tmp_path / "model.h5"
        model.write_bytes(b"\x89HDF")
    elif case == "unsupported":
        model = models.unsupported_onnx(tmp_path / "u.onnx")
    elif case == "shape":
        extra = ["--input-shape", "data_0=1;3;224;224"]
    elif case == "compiler":
        targets = tmp_path / "targets"
        targets.mkdir()
        (targets / "weird.toml").write_text('description = "x"\narch = "aarch64"\nruntime = "cpu"\n[target]\nkind = "llvm"\n'
                                            '[toolchain]\ncc = "aarch64-edgetune-missing-g++"\n')
        env = {"EDGETUNE_TARGETS_DIR": str(targets)}
    device = {"profile": "raspberry", "compiler": "weird"}.get(case, "host")
    out = tmp_path / "out"
    proc = run_edgetune("package", str(model), "-d", device, "-o", str(out), *extra, env=env)
    assert proc.returncode == code, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert any(ln.startswith("hint:") for ln in proc.stderr.splitlines())
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_debug_shows_traceback(tmp_path, squeezenet):
    proc = run_edgetune("package", str(_truncated(tmp_path, squeezenet)), "-d", "host", "-o", str(tmp_path / "o"),
                        env={"EDGETUNE_DEBUG": "1"})
    assert proc.returncode == 3 and "Traceback" in proc.stderr


def test_package_for_a_board_uses_its_profile(tmp_path, exporter_onnx):
    assert run_edgetune("devices", "add", "lab-pi", "--profile", "pi4-32", "--host", "192.0.2.9").returncode == 0
    proc = run_edgetune("package", str(exporter_onnx), "--device", "lab-pi", "-o", str(tmp_path / "p"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["manifest"]["profile"]["name"] == "pi4-32"


def test_inspect_lists_kernels_and_their_default_schedules(squeezenet):
    res = run_edgetune("inspect", str(squeezenet), "--device", "host", "--json")
    assert res.returncode == 0, res.stderr
    kernels = json.loads(res.stdout)["kernels"]
    kinds = {k["kind"] for k in kernels}
    assert {"conv2d", "winograd"} <= kinds and "naive" not in kinds
    assert abs(sum(k["flops_share"] for k in kernels) - 1.0) < 1e-6
    human = run_edgetune("inspect", str(squeezenet), "--device", "pi4")
    assert "without a default schedule (0.0% of the FLOPs)" in human.stdout
    # ARM: Winograd too (fewer cycles by the Pi estimate), the other convolutions direct
    arm = json.loads(run_edgetune("inspect", str(squeezenet), "--device", "pi4", "--json").stdout)["kernels"]
    assert {"conv2d", "winograd"} <= {k["kind"] for k in arm}


def test_every_help_reads_in_80_columns():
    """Each command's help wraps at the terminal's width (hard line breaks in docstrings joined,
    no panels), and a group's list of commands shows each one's whole short help."""
    from typer.testing import CliRunner

    from edgetune.cli.main import app
    from edgetune.cli.reference import commands

    runner = CliRunner()
    for path, cmd in commands():
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert res.exit_code == 0, (path, res.output)
        lines = res.output.splitlines()
        assert [ln for ln in lines if len(ln) > 80] == [], path
        if getattr(cmd, "commands", None):
            listing = lines[lines.index("Commands:") + 1:]
            assert not [ln for ln in listing if ln.rstrip().endswith("...")], (path, listing)
