"""Board facts parser against recorded outputs."""

from pathlib import Path

from edgetune.remote.facts import parse_facts

GOLDEN = Path(__file__).parent / "golden"


def test_pi4_facts():
    f = parse_facts((GOLDEN / "facts_pi4.txt").read_text())
    assert (f.home, f.arch, f.cpus, f.python) == ("/home/pi", "aarch64", 4, "3.11.2")
    assert f.model.startswith("Raspberry Pi 4") and f.mem_mb == 3793 and f.disk_free_mb == 23988
    assert f.runtimes == ("aarch64-cp311-tvm0.27.0.post1",) and f.cuda == ""


def test_jetson_without_python():
    f = parse_facts((GOLDEN / "facts_jetson_no_python.txt").read_text())
    assert f.python == "" and f.cuda == "12.6" and f.cpus == 6 and f.runtimes == ()


def test_truncated_output():
    f = parse_facts("@@home\n/root\n@@arch\narm64\n")
    assert f.arch == "aarch64" and f.cpus == 0 and f.python == ""
