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
