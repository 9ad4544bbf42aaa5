#!/usr/bin/env bash
# Install the Debian 12 packages qkv needs, and only those that are missing. Idempotent: a second
# run installs nothing. Uses sudo when not root. Says clearly what it could not do.
#
#   scripts/install-deps.sh            build + test dependencies (C++, MPI, and Debian's Python
#                                      numpy / h5py / matplotlib, which tests and tools use)
#   scripts/install-deps.sh --python   also PyTorch, for benchmarks and the PyTorch bridge
#   scripts/install-deps.sh --dev      also the developers' tools: perf (linux-perf) for the
#                                      profiles of docs/performance.md
set -euo pipefail

packages=(
  g++ cmake make pkg-config
  libxtensor-dev libxtensor-blas-dev xtl-dev libxsimd-dev
  libopenblas-dev liblapack-dev
  libdnnl-dev                   # oneDNN: the bfloat16 products of train.precision: bf16
  doctest-dev libhdf5-dev hdf5-tools libyaml-cpp-dev libcli11-dev
  libopenmpi-dev openmpi-bin
  python3 python3-numpy python3-h5py python3-matplotlib
  chromium fonts-wqy-microhei   # the viewer's and the studio's browser tests (tests/viewer/browser_test.py)
  libcpp-httplib-dev            # qkv serve: the studio's local HTTP server
  pybind11-dev python3-pybind11 python3-pytest   # import qkv: the Python module and its tests
  fortunes fortunes-zh          # the corpora of configs/fortunes.yaml and configs/zh.yaml (tests make their own)
)
for arg in "$@"; do
  case $arg in
    --python) packages+=(python3-torch) ;;
    --dev) packages+=(linux-perf) ;;
    *) echo "install-deps: unknown option '$arg' (expected --python or --dev)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: not root and no sudo: cannot install ${missing[*]}" >&2
    echo "install-deps: ask an administrator to run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq; then
  echo "install-deps: 'apt-get update' failed (network or apt sources?); trying the install anyway" >&2
fi
if ! "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "install-deps: could not install: ${missing[*]}" >&2
  echo "install-deps: see the apt-get messages above; qkv needs Debian 12 (bookworm) packages" >&2
  exit 1
fi
echo "install-deps: done"
