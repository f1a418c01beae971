#!/usr/bin/env bash
# Debian packages edgetune and its tests need: cross compilers (aarch64, armhf), qemu-user for
# running aarch64 packages (the static build for the reference check and the stand-in board; the
# dynamic one, which loads plugins, and LLVM 19's llvm-mca for the Raspberry Pi estimate:
# benchmarks/armsim, tests/test_arm_instructions.py), debootstrap (and fakeroot, for users
# without root) for the emulated board's Python, OpenSSH server and iproute2 for the stand-in
# board, and Python's venv. Idempotent; needs root (or sudo).
set -euo pipefail

PACKAGES=(
  python3-venv python3-dev gcc g++ binutils file ca-certificates
  g++-aarch64-linux-gnu gcc-aarch64-linux-gnu
  g++-arm-linux-gnueabihf gcc-arm-linux-gnueabihf
  qemu-user-static qemu-user llvm-19 debootstrap fakeroot
  openssh-server openssh-client iproute2 procps
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "error: run as root or install sudo" >&2; exit 1; }
  SUDO="sudo"
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "system packages: all present"
  exit 0
fi
echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "system packages: done"
