#!/usr/bin/env bash
# Installs what building and testing gather-linear needs, at pinned versions, on Debian 12
# (bookworm) with the CUDA 13 toolkit already present. Safe to run again: it only installs
# what is missing or at another version. (The Python packages that the PyTorch operator's tests
# need are pinned in python/requirements-test.txt; the Makefile installs them into .venv.)
set -euo pipefail

APT_PACKAGES=(
  cmake=3.25.1-1
  ninja-build=1.11.1-2~deb12u1
  ccache=4.8+really4.7.5-1
  libopenblas-dev=0.3.21+ds-4
  libgtest-dev=1.12.1-0.2
  googletest=1.12.1-0.2
)

missing=()
for spec in "${APT_PACKAGES[@]}"; do
  name=${spec%%=*} version=${spec#*=}
  installed=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)
  [[ "$installed" == "$version" ]] || missing+=("$spec")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "install_deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install_deps: nvcc is in /usr/local/cuda/bin; add it to PATH" >&2
fi
command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]] || {
  echo "install_deps: the CUDA 13 toolkit (nvcc) is required and cannot be installed from Debian's packages" >&2
  exit 1
}

# `make test` builds the PyTorch operator's test virtualenv (.venv) with the python3 on PATH.
python3 -c "import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))" 2>/dev/null || {
  echo "install_deps: python3 >= 3.10 with the venv and ensurepip modules is required (Debian: python3-venv)" >&2
  exit 1
}

# CUTLASS headers for the Hopper tensor-core kernels (pinned wheel from PyPI, into .deps/).
"$(dirname "$0")/fetch_cutlass.sh"
