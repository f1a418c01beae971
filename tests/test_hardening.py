"""Faults found in review, each with the test that failed before its fix (no board needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess

from conftest import run_edgetune


def test_tracker_stop_does_not_signal_a_reused_pid(tmp_path):
    """After a reboot the tracker's recorded pid can belong to an unrelated process (group):
    `tracker stop` must check it is still the tracker before signalling."""
    victim = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        state = tmp_path / "cache" / "tracker" / "tracker.json"
        state.parent.mkdir(parents=True)
        for started in (0.0, 12345.0):  # an old state file (no start time), and a stale start time
            state.write_text(json.dumps({"host": "127.0.0.1", "port": 9190, "pid": victim.pid, "started": started}))
            res = run_edgetune("tracker", "stop", env={"EDGETUNE_CACHE_DIR": str(tmp_path / "cache")})
            assert res.returncode == 0, res.stderr
            assert victim.poll() is None, "an unrelated process was killed"
            assert not state.exists()  # the stale state was dropped
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
