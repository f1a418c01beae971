"""The exact TVM pair is installed and MetaSchedule's JSON path (tvm.ir.save_json) works."""

import subprocess
import sys
from importlib import metadata

from edgetune import _tvm


def test_installed_versions_match_pins():
    assert metadata.version("apache-tvm") == _tvm.TVM_VERSION
    assert metadata.version("apache-tvm-ffi") == _tvm.TVM_FFI_VERSION


def test_save_json_does_not_crash():
    # 0.1.15.x segfaulted here; run in a child so a crash fails the test instead of pytest.
    code = (
        "import tvm; from tvm import relax; from tvm.script import relax as R\n"
        "bb = relax.BlockBuilder(); x = relax.Var('x', R.Tensor((2, 3), 'float32'))\n"
        "with bb.function('main', [x]):\n"
        "    bb.emit_func_output(relax.op.add(x, x))\n"
        "s = tvm.ir.save_json(bb.get()); assert tvm.ir.load_json(s) is not None; print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")


def test_runtime_bundles_follow_the_boards_python():
    import pytest

    from edgetune import bundle
    from edgetune.errors import ToolchainError

    assert bundle.bundle_key("aarch64", "3.10").startswith("aarch64-cp310-tvm")
    assert bundle.bundle_key("aarch64") == bundle.bundle_key("aarch64", "3.11")  # Raspberry Pi OS bookworm's
    host_numpy = f"numpy=={metadata.version('numpy')}"
    assert host_numpy in bundle.requirements("3.11")
    # numpy 2.3 has no Python 3.10 wheel (JetPack 6's Python): the newest release up to the host's that has one
    assert f"numpy>=2.0,<={metadata.version('numpy')}" in bundle.requirements("3.10")
    with pytest.raises(ToolchainError, match="no runtime bundle for Python 3.9"):
        bundle.bundle_key("aarch64", "3.9")
