"""What `pip install .` gives a user: the wheel holds every module and the profiles, and the
installed tool works from a fresh venv (no editable install, no repository on the path)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                           "--quiet", "-w", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (found,) = out.glob("edgetune-*.whl")
    return found


def _source_modules() -> set[str]:
    mods = set()
    for root in ("edgetune", "edgetune_runtime"):
        for path in (REPO / root).rglob("*.py"):
            if "__pycache__" not in path.parts:
                mods.add(str(path.relative_to(REPO)))
    return mods


def test_wheel_holds_every_module_and_profile(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(_source_modules() - names)
    assert not missing, f"modules missing from the wheel: {missing}"
    profiles = {p.name for p in (REPO / "edgetune" / "targets").glob("*.toml")}
    assert profiles and {f"edgetune/targets/{p}" for p in profiles} <= names
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)


def test_installed_wheel_runs_from_a_fresh_venv(wheel, tmp_path):
    """The wheel in a fresh venv, its dependencies borrowed from this environment's site-packages
    (a plain path entry: that directory's own .pth files, the editable install among them, are
    not processed, so only the wheel provides edgetune)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--quiet",
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    probe = ("import importlib, pkgutil, edgetune, edgetune_runtime, sys\n"
             "assert edgetune.__file__.startswith(sys.prefix), edgetune.__file__\n"
             "for pkg in (edgetune, edgetune_runtime):\n"
             "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
             "        if not m.name.endswith('__main__'):  # importing it runs the CLI\n"
             "            importlib.import_module(m.name)\n"
             "from edgetune.profiles import load_profiles\n"
             "print(sorted(load_profiles()))\n")
    res = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr + res.stdout
    assert "pi4" in res.stdout and "host" in res.stdout
    cli = subprocess.run([str(venv / "bin" / "edgetune"), "tune", str(REPO / "examples" / "squeezenet.onnx"),
                          "--device", "host", "--list-tasks", "--records", str(tmp_path / "records"), "--json"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr
    assert '"kind": "conv2d"' in cli.stdout
