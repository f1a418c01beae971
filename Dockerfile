# edgetune's cross-compile environment: TVM 0.27 (pinned), aarch64 and armhf cross toolchains,
# NVIDIA's CUDA 13.0 nvcc (PyPI wheels) for Jetson kernels, and the aarch64 runtime bundle
# pre-fetched so `edgetune devices setup` needs no network inside the container.
#
#   docker build -t edgetune .
#   docker run --rm -v "$PWD:/work" edgetune edgetune package /work/model.onnx --device pi4 -o /work/out
FROM debian:bookworm-slim

ARG DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Versions are bookworm's (12.x) at the time of writing; bump them with Debian point releases.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates=20250419~deb12u2 \
      python3.11=3.11.2-6+deb12u9 \
      python3.11-venv=3.11.2-6+deb12u9 \
      gcc=4:12.2.0-3 \
      g++=4:12.2.0-3 \
      binutils=2.40-2 \
      g++-aarch64-linux-gnu=4:12.2.0-3 \
      g++-arm-linux-gnueabihf=4:12.2.0-3 \
      openssh-client=1:9.2p1-2+deb12u10 \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 edgetune \
 && python3.11 -m venv /opt/edgetune \
 && install -d -o edgetune /opt/edgetune-cache /work
ENV PATH=/opt/edgetune/bin:$PATH \
    EDGETUNE_CACHE_DIR=/opt/edgetune-cache \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Dependencies first (exact TVM pins and the CUDA 13.0 wheels live in pyproject.toml), so a
# source change does not reinstall them.
COPY pyproject.toml README.md /src/
COPY edgetune /src/edgetune
COPY edgetune_runtime /src/edgetune_runtime
# Behind a TLS-intercepting proxy, pass its CA bundle: --build-arg PIP_CERT=/path (mounted).
ARG PIP_CERT=
RUN if [ -z "$PIP_CERT" ]; then unset PIP_CERT; fi \
 && pip install "/src[jetson]" \
 && rm -rf /src

USER 1000
# The board runtime bundle (aarch64 TVM runtime wheels, trimmed) and the libcuda stub, cached
# in the image: packaging and `devices setup` then work offline.
RUN if [ -z "$PIP_CERT" ]; then unset PIP_CERT; fi \
 && python -c "from edgetune.bundle import runtime_bundle; from edgetune.remote.board import bundle_archive; runtime_bundle('aarch64'); bundle_archive('aarch64')" \
 && python -c "from edgetune.toolchain import cuda_stub_dir; cuda_stub_dir()" \
 && edgetune targets

WORKDIR /work
CMD ["edgetune", "--help"]
