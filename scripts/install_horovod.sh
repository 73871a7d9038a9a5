#!/usr/bin/env bash
# Build Horovod 0.28.1 (PyTorch + Gloo, NCCL when nvcc and a GPU are present) against the torch of
# the given Python, from the PyPI sdist, patched at build time; cache the wheel so a second set-up
# takes seconds.  Usage: scripts/install_horovod.sh PYTHON
set -euo pipefail
PY=${1:-python3}
HVD_VERSION=0.28.1

if "$PY" - <<'PYEOF' 2>/dev/null; then
import horovod.torch as hvd, sys
sys.exit(0 if hvd.gloo_built() else 1)
PYEOF
  echo "horovod: already installed with torch + Gloo"
  exit 0
fi

TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__.replace("+", "_"))')
PY_TAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
NCCL=0
if command -v nvcc >/dev/null 2>&1 && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
   && "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  NCCL=1
fi
KEY="horovod-${HVD_VERSION}-torch${TORCH_VERSION}-${PY_TAG}-nccl${NCCL}"
CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/xover/wheels/$KEY"

wheel=$(ls "$CACHE_DIR"/horovod-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  echo "horovod: building $KEY (a few minutes, once; cached in $CACHE_DIR)"
  "$PY" -m pip install -q numpy packaging wheel setuptools psutil pyyaml cloudpickle cmake
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$HVD_VERSION" -d "$WORK"
  tar -xzf "$WORK"/horovod-$HVD_VERSION.tar.gz -C "$WORK"
  SRC="$WORK/horovod-$HVD_VERSION"
  # torch >= 2.1 needs C++17; Horovod 0.28.1 compiles its extension as C++14 (fixed on its master).
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"
  # gcc >= 13 no longer includes these transitively (Horovod master "Fix build on gcc 13").
  sed -i '0,/#include <string>/s//#include <stdexcept>\n#include <string>/' "$SRC/horovod/common/common.h"
  grep -q '#include <string>' "$SRC/horovod/common/common.h" || sed -i '1i #include <string>\n#include <stdexcept>' "$SRC/horovod/common/common.h"
  export CMAKE_POLICY_VERSION_MINIMUM=3.5   # CMake >= 4 rejects Gloo's cmake_minimum_required(2.8.12)
  export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
  export HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
  export MAKEFLAGS="-j$(nproc)"
  if [ "$NCCL" = 1 ]; then export HOROVOD_GPU_OPERATIONS=NCCL; fi
  mkdir -p "$WORK/out"
  if ! "$PY" -m pip wheel --no-build-isolation --no-deps --no-cache-dir "$SRC" -w "$WORK/out" >"$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log" >&2
    echo "horovod: the build FAILED (log above). Run '.venv/bin/xover doctor' to see what is missing." >&2
    exit 1
  fi
  mkdir -p "$CACHE_DIR"
  cp "$WORK"/out/horovod-*.whl "$CACHE_DIR/"
  wheel=$(ls "$CACHE_DIR"/horovod-*.whl | head -n 1)
fi
"$PY" -m pip install -q --no-deps "$wheel"
"$PY" -m pip install -q psutil pyyaml cloudpickle packaging cffi  # horovod's own dependencies (installed --no-deps)
echo "horovod: installed from $wheel"
