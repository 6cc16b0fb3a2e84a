#!/usr/bin/env bash
# The GPU bundle: everything scripts/gpu-check.sh needs on a lent GPU machine that this
# one has and that one lacks (no network, no apt; it has g++, CMake, ninja, nvcc, and a
# python3 with a CUDA torch). Run here, on the Debian machine, before a GPU is lent:
#   scripts/gpu-bundle.sh            -> .gpu-bundle/ (ignored by git; ~10 MiB)
#     debs/   the Debian packages the build and the runs need and what they load:
#             OpenMPI (headers, mpirun, the libraries and their own dependencies:
#             PMIx, hwloc, libevent, UCX, libfabric, verbs), cxxopts, nlohmann-json, RE2,
#             GoogleTest, zlib's headers. Unpacked there into a private prefix, never
#             into / (scripts/gpu-prefix.sh).
#     wheels/ DeepSpeed (built here without ops: its ops are JIT-built there with the
#             machine's nvcc when used) and the Python packages it needs that the GPU
#             machine's image lacks (hjson, pydantic and its own needs, a typing-extensions as new as pydantic asks), for
#             scripts/gpu_fidelity.py's real-DeepSpeed side.
# The device tool carries it: run(carry=[".gpu-bundle"]). Its size counts against the
# 64 MiB a call may carry, so it holds only what is listed here.
# Env: ZREPRO_DS_VERSION (default: the conformance pin), ZREPRO_BUNDLE_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${ZREPRO_BUNDLE_DIR:-.gpu-bundle}
ds_version=${ZREPRO_DS_VERSION:-$(grep -E '^deepspeed==' conformance/requirements.txt | cut -d= -f3 | cut -d' ' -f1)}

# Build: headers, CMake packages, link-time .so links. Run: OpenMPI and everything its
# libraries load that a CUDA image lacks (the device's own copy wins where it has one:
# scripts/gpu-prefix.sh drops a bundled library whose soname the machine already has).
debs=(libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common
      libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0
      libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1
      libnuma1 libmunge2
      libcxxopts-dev nlohmann-json3-dev libgtest-dev zlib1g-dev libre2-dev libre2-9)
# Python packages DeepSpeed needs that the GPU image does not have (its image lists
# torch, numpy, ninja, packaging, psutil, py-cpuinfo, tqdm, msgpack, einops, nvidia-ml-py).
py_extra=(hjson pydantic pydantic-core annotated-types typing-inspection typing-extensions)

rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/debs" "$dir.tmp/wheels"
echo "[gpu-bundle] Debian packages: ${debs[*]}"
(cd "$dir.tmp/debs" && apt-get download -q "${debs[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
n=$(ls "$dir.tmp/debs"/*.deb | wc -l)
[ "$n" -eq "${#debs[@]}" ] || { echo "[gpu-bundle] error: downloaded $n of ${#debs[@]} packages (apt-get update first?)" >&2; exit 1; }

# The GPU machine's python is CPython 3.12 on manylinux x86-64.
pip_target=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
echo "[gpu-bundle] wheels: ${py_extra[*]}"
python3 -m pip download -q --no-deps "${pip_target[@]}" -d "$dir.tmp/wheels" "${py_extra[@]}"
# DeepSpeed is an sdist on PyPI: build a pure-Python wheel of it (no prebuilt ops), in a
# throw-away venv so this machine's python stays as it was.
echo "[gpu-bundle] deepspeed==$ds_version (wheel without prebuilt ops)"
venv=$(mktemp -d)
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip setuptools wheel
DS_BUILD_OPS=0 "$venv/bin/pip" wheel -q --no-deps --no-build-isolation -w "$dir.tmp/wheels" "deepspeed==$ds_version"
rm -rf "$venv"

rm -rf "$dir" && mv "$dir.tmp" "$dir"
du -sh "$dir" "$dir/debs" "$dir/wheels"
ls "$dir/wheels"
