"""The documentation: the site builds with warnings as errors (a broken link, an anchor that is
gone, a page outside the navigation), every link in the README resolves, and the generated
performance pages match the saved benchmark results."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "edgetune package" in cli and "--precision" in cli  # generated from the Typer app


def test_readme_links_resolve():
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    local = [link.split("#")[0] for link in links if not re.match(r"[a-z]+://", link)]
    missing = [link for link in local if link and not (REPO / link).exists()]
    assert missing == []


def test_readme_is_short_and_has_the_two_commands():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "./scripts/install.sh && .venv/bin/edgetune package examples/squeezenet.onnx" in text
    assert "\n.venv/bin/python -m pytest\n" in text


def test_performance_pages_match_the_saved_results():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "report.py"), "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
