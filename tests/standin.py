"""A stand-in Raspberry Pi: a real OpenSSH server in a network namespace this code creates,
reached over a veth pair, with a test user whose ``python3`` and ``uname`` are aarch64 binaries
from a Debian sysroot run by qemu-aarch64-static (as :mod:`edgetune.emulation` runs packages).

sshd runs in a private mount namespace of its own where ``/proc/cpuinfo`` reads as a Raspberry
Pi 4's (qemu-user 7.2 passes the host's x86 text through): the CPU probing of onnxruntime and
XNNPACK (pytorch/cpuinfo) parses it and crashes on x86 text, as it never would on a board.

Everything it starts it stops: the sshd process group, every process of its own test user,
the namespace, the user. Needs root, iproute2, openssh-server and qemu-user-static.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

REQUIRED = ("ip", "unshare", "/usr/sbin/sshd", "ssh-keygen", "qemu-aarch64-static", "useradd", "userdel", "debootstrap")


def unavailable() -> str | None:
    """Why a stand-in board cannot be built here (None if it can)."""
    if os.geteuid() != 0:
        return "the stand-in board needs root (network namespaces, a test user)"
    missing = [t for t in REQUIRED if not (shutil.which(t) or Path(t).exists())]
    if missing:
        return f"missing {', '.join(missing)} (scripts/install-system-deps.sh installs them)"
    probe = f"etprobe{uuid.uuid4().hex[:6]}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode:
        return "cannot create network namespaces here (ip netns add failed)"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _sh(*args: str) -> str:
    proc = subprocess.run(list(args), capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


@dataclass
class StandinBoard:
    """One stand-in board. ``host``/``port``/``user``/``key`` are what edgetune needs."""

    sysroot: Path
    index: int = 0
    workdir: Path | None = None

    def __post_init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        if self.workdir is None:
            # sshd reads authorized_keys as the board's user: every parent must be traversable,
            # which pytest's private tmp dirs are not.
            base = Path("/var/tmp/edgetune-standin")
            base.mkdir(mode=0o755, exist_ok=True)
            self.workdir = base / tag
        self.netns = f"etb{tag}"
        self.veth_host, self.veth_board = f"eth{tag}", f"etb{tag}"
        self.user = f"etb{tag}"
        self.host_ip = self.host = ""  # a free subnet, picked when started
        self.port = 22
        self.home = self.workdir / "home"
        self.key = self.workdir / "id_ed25519"
        self.host_key = self.workdir / "ssh_host_ed25519_key"
        self._sshd: subprocess.Popen | None = None

    # ------------------------------------------------------------ setup

    def _wrappers(self) -> Path:
        bin_dir = self.workdir / "bin"
        bin_dir.mkdir()
        root = self.sysroot
        # `-0 "$0"` makes sys.executable this wrapper, so TVM's worker processes re-enter qemu.
        (bin_dir / "python3").write_text(
            f'#!/bin/sh\nexec qemu-aarch64-static -L {root} -0 "$0" {root}/usr/bin/python3.11 "$@"\n')
        (bin_dir / "uname").write_text(f'#!/bin/sh\nexec qemu-aarch64-static -L {root} {root}/bin/uname "$@"\n')
        for tool in ("python3", "uname"):
            (bin_dir / tool).chmod(0o755)
        (bin_dir / "python3.11").symlink_to("python3")
        return bin_dir

    def _sshd_config(self, bin_dir: Path) -> Path:
        config = self.workdir / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", f"ListenAddress {self.host}", "ListenAddress 127.0.0.1",  # loopback: in its namespace only
            f"HostKey {self.host_key}",
            f"AuthorizedKeysFile {self.workdir}/authorized_keys", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "UsePAM no", "StrictModes no",
            f"PidFile {self.workdir}/sshd.pid", f"AllowUsers {self.user}", "AllowTcpForwarding yes",
            "Subsystem sftp internal-sftp", f"SetEnv PATH={bin_dir}:/usr/bin:/bin", "LogLevel ERROR",
            "MaxSessions 32", "MaxStartups 32",
        ]) + "\n")
        return config

    def start(self) -> "StandinBoard":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)
        # Test processes running side by side (pytest -n) pick subnets and edit /etc/passwd one at a time.
        with _host_lock():
            taken = set(re.findall(r"inet 10\.213\.(\d+)\.", _sh("ip", "-4", "-o", "addr")))
            subnet = next(n for n in range(100, 200) if str(n) not in taken)
            self.host_ip, self.host = f"10.213.{subnet}.{4 * self.index + 1}", f"10.213.{subnet}.{4 * self.index + 2}"
            _sh("ip", "netns", "add", self.netns)
            _sh("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_board)
            _sh("ip", "link", "set", self.veth_board, "netns", self.netns)
            _sh("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.veth_host)
            _sh("ip", "link", "set", self.veth_host, "up")
            for cmd in (["ip", "addr", "add", f"{self.host}/30", "dev", self.veth_board],
                        ["ip", "link", "set", self.veth_board, "up"], ["ip", "link", "set", "lo", "up"]):
                _sh("ip", "netns", "exec", self.netns, *cmd)
            self.home.mkdir()
            # password "*": no password login, but not "locked" (sshd without PAM refuses locked accounts)
            _sh("useradd", "-M", "-d", str(self.home), "-s", "/bin/sh", "-p", "*", self.user)
        _sh("chown", self.user, str(self.home))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key))
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        shutil.copy(self.key.with_suffix(".pub"), self.workdir / "authorized_keys")
        self._sshd_config(self._wrappers())
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self._spawn_sshd()
        return self

    def _cpuinfo(self) -> Path:
        """A Raspberry Pi 4's /proc/cpuinfo, one entry per host CPU."""
        cpu = ("BogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\nCPU implementer\t: 0x41\n"
               "CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n")
        text = "".join(f"processor\t: {i}\n{cpu}\n" for i in range(os.cpu_count() or 1))
        path = self.workdir / "cpuinfo"
        path.write_text(text + "Hardware\t: BCM2835\nRevision\t: c03111\nModel\t\t: Raspberry Pi 4 Model B Rev 1.1\n")
        return path

    def _spawn_sshd(self) -> None:
        # unshare: the bind mount lives and dies in sshd's own mount namespace, never the host's.
        serve = 'mount --bind "$1" /proc/cpuinfo && exec /usr/sbin/sshd -D -e -f "$2"'
        with open(self.workdir / "sshd.log", "a") as log:
            self._sshd = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--propagation", "private",
                 "sh", "-c", serve, "sh", str(self._cpuinfo()), str(self.workdir / "sshd_config")],
                stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        self._wait_listening()

    def _wait_listening(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._sshd and self._sshd.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.workdir / 'sshd.log').read_text()[-500:]}")
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=1):
                return
            time.sleep(0.1)
        raise RuntimeError("sshd did not start listening")

    # ------------------------------------------------------------ faults

    def processes(self) -> list[int]:
        """Pids of every process of the test user (what the board is running)."""
        out = subprocess.run(["pgrep", "-u", self.user], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def kill_user_processes(self, pattern: str) -> None:
        """Kill the board's processes whose command line matches ``pattern``."""
        subprocess.run(["pkill", "-KILL", "-u", self.user, "-f", pattern], capture_output=True)

    def regenerate_host_key(self) -> None:
        """Reinstall the board's SSH identity (a changed host key) and restart sshd."""
        self.host_key.unlink()
        self.host_key.with_suffix(".pub").unlink()
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key))
        self._stop_sshd()
        self._spawn_sshd()

    # ------------------------------------------------------------ teardown

    def _stop_sshd(self) -> None:
        if self._sshd and self._sshd.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._sshd.pid, 15)
            try:
                self._sshd.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self._sshd.pid, 9)
                self._sshd.wait()

    def stop(self) -> None:
        self._stop_sshd()
        subprocess.run(["pkill", "-KILL", "-u", self.user], capture_output=True)
        for _ in range(50):
            if not self.processes():
                break
            time.sleep(0.1)
        with _host_lock():
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
            subprocess.run(["ip", "link", "del", self.veth_host], capture_output=True)
            subprocess.run(["userdel", self.user], capture_output=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


def python_processes(user: str) -> list[str]:
    """Command lines of the user's Python (qemu) processes: what must not outlive a test."""
    out = subprocess.run(["pgrep", "-a", "-u", user, "-f", "python3"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def host_forwarders() -> list[str]:
    """edgetune SSH forwarder processes on this host started by this test process (under
    pytest -n, another worker's forwarders carry another PYTEST_XDIST_WORKER)."""
    out = subprocess.run(["pgrep", "-a", "-f", "edgetune.remote.forward"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line and _same_worker(int(line.split()[0]))]


def _same_worker(pid: int) -> bool:
    mine = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone meanwhile
        return False
    theirs = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"PYTEST_XDIST_WORKER=")), "")
    return theirs == mine


def _host_lock():
    """One stand-in board at a time changes the host's links, subnets and users."""
    from edgetune.util import file_lock

    return file_lock(Path("/var/tmp/edgetune-standin/.lock"), what="the stand-in boards' host setup")
