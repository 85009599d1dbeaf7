#!/usr/bin/env bash
# Build Horovod (PyTorch + Gloo, MPI on request; no TensorFlow/MXNet) against the installed torch, cache
# the wheel outside the clone, and install it. Used by `make horovod` and docker/jobs/Dockerfile.train.
#   docker/jobs/build_horovod.sh [PYTHON]        (default: python3)
# Environment: HOROVOD_VERSION (0.28.1); HOROVOD_WITH_MPI=1 also builds the MPI controller (for
# mpirun / SageMaker's MPI launcher; needs an MPI); HOROVOD_GPU_OPERATIONS=NCCL for CUDA tensors.
# Horovod 0.28.1 (the latest release) asks CMake for C++14 while torch >= 2.x headers need C++17, so
# `pip install horovod` fails to compile; the sdist is patched in both CMakeLists before building.
# The cache key is horovod version + torch version + Python tag (+ the MPI / GPU variant): a new
# torch builds a new wheel.
set -euo pipefail

PY="${1:-python3}"
HOROVOD_VERSION="${HOROVOD_VERSION:-0.28.1}"
CACHE_ROOT="${DLTRAIN_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dltrain/wheels}"

torch_version="$("$PY" -c 'import torch; print(torch.__version__)')"
py_tag="$("$PY" -c 'import sys; print(f"cp{sys.version_info.major}{sys.version_info.minor}")')"
[[ -z "${HOROVOD_GPU_OPERATIONS:-}" ]] && unset HOROVOD_GPU_OPERATIONS  # empty is not "none" to CMake
variant=""
[[ "${HOROVOD_WITH_MPI:-0}" == 1 ]] && variant+="-mpi"
[[ -n "${HOROVOD_GPU_OPERATIONS:-}" ]] && variant+="-${HOROVOD_GPU_OPERATIONS,,}"
cache_dir="$CACHE_ROOT/horovod-$HOROVOD_VERSION-torch-$torch_version-$py_tag$variant"

if ! compgen -G "$cache_dir/horovod-$HOROVOD_VERSION-*.whl" >/dev/null; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    echo "build_horovod: building horovod $HOROVOD_VERSION for torch $torch_version ($py_tag), ~10 min on 2 cores"
    "$PY" -m pip download -q --no-deps --no-binary :all: -d "$work" "horovod==$HOROVOD_VERSION"
    tar -xzf "$work/horovod-$HOROVOD_VERSION.tar.gz" -C "$work"
    src="$work/horovod-$HOROVOD_VERSION"
    for cmake_file in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
        grep -q 'set(CMAKE_CXX_STANDARD 14)' "$cmake_file" \
            || { echo "build_horovod: $cmake_file has no C++14 line to patch" >&2; exit 1; }
        sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$cmake_file"
    done
    mpi_flag=HOROVOD_WITHOUT_MPI
    [[ "${HOROVOD_WITH_MPI:-0}" == 1 ]] && mpi_flag=HOROVOD_WITH_MPI
    env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 "$mpi_flag=1" HOROVOD_WITHOUT_TENSORFLOW=1 \
        HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
        "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$src"
    mkdir -p "$cache_dir"
    # Move into place last so an interrupted build never leaves a wheel in the cache.
    cp "$work"/dist/horovod-*.whl "$cache_dir/.tmp.whl"
    mv "$cache_dir/.tmp.whl" "$cache_dir/$(basename "$work"/dist/horovod-*.whl)"
fi

# --no-deps: its requirements (cloudpickle, psutil, pyyaml, packaging) come from the constraints file.
"$PY" -m pip install -q --no-deps --force-reinstall "$cache_dir"/horovod-"$HOROVOD_VERSION"-*.whl
HOROVOD_WITH_MPI="${HOROVOD_WITH_MPI:-0}" "$PY" -c 'import os, horovod.torch as hvd
assert hvd.gloo_built(), "horovod built without Gloo"
assert os.environ["HOROVOD_WITH_MPI"] != "1" or hvd.mpi_built(), "horovod built without MPI"
print("horovod", __import__("horovod").__version__, "ok, mpi" if hvd.mpi_built() else "ok")'
