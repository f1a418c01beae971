#!/usr/bin/env bash
# Install everything edgetune needs on Debian 12 into ./.venv (system packages via
# install-system-deps.sh, then the Python packages with exact TVM pins).
#   EDGETUNE_PYTHON=python3.11  interpreter to build the venv from
#   EDGETUNE_EXTRAS=dev,jetson  optional dependency groups (jetson = NVIDIA's nvcc wheels)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-system-deps.sh

PY="${EDGETUNE_PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || { echo "error: edgetune needs Python 3.11 (set EDGETUNE_PYTHON)" >&2; exit 1; }

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=24" setuptools wheel
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${EDGETUNE_EXTRAS:-dev,jetson}]"
.venv/bin/edgetune --version
if [[ ",${EDGETUNE_EXTRAS:-dev,jetson}," == *",dev,"* ]]; then .venv/bin/python scripts/fetch_test_models.py; fi
