#!/usr/bin/env bash
# Installs the Debian packages zrepro needs (only those missing), finds or installs the
# LibTorch it builds against (scripts/torch-prefix.sh: the user's torch 2.x, else the
# pinned one from PyPI in a venv; ZREPRO_LIBTORCH=debian for Debian's 1.13) and builds
# into build/ (or --build-dir DIR). Idempotent: a second call only rebuilds what changed.
# The configure step prints which LibTorch, CUDA runtime and NCCL it links.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=build
if [ "${1:-}" = --build-dir ]; then build_dir=${2:?--build-dir needs a folder}; fi

packages=(build-essential cmake ninja-build pkg-config libopenmpi-dev openmpi-bin
          libcxxopts-dev libgtest-dev libbenchmark-dev nlohmann-json3-dev zlib1g-dev
          libyaml-cpp-dev libre2-dev)
# Debian's LibTorch only when asked for; otherwise a venv needs python3's venv module.
if [ "${ZREPRO_LIBTORCH:-}" = debian ]; then
  packages+=(libtorch-dev libopenblas0-pthread)
elif ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  packages+=(python3 python3-venv)
fi
# scripts/test.sh adds what only the tests need (chromium: ab.html in a headless browser).
read -r -a extra <<< "${ZREPRO_EXTRA_PACKAGES:-}"
packages+=("${extra[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# ZREPRO_NO_APT=1: a machine without apt or network (the lent GPU machine: scripts/gpu-check.sh
# supplies the packages from its bundle in a private prefix instead).
if ((${#missing[@]})) && [ -z "${ZREPRO_NO_APT:-}" ]; then
  echo "[setup] installing: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's LibTorch falls back to the reference BLAS (25x slower) unless OpenBLAS owns libblas.so.3.
if [ "${ZREPRO_LIBTORCH:-}" = debian ] && [ -z "${ZREPRO_NO_APT:-}" ] && ! readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep -q openblas; then
  echo "[setup] warning: libblas.so.3 does not point at OpenBLAS; matmuls will be slow" >&2
fi

# The LibTorch: its CMake prefix goes first in CMAKE_PREFIX_PATH. A build folder made for
# another LibTorch is configured afresh (cmake/torch.cmake refuses a mix).
torch_line=$(scripts/torch-prefix.sh)  # its failure (exit 2, the reason on stderr) ends set-up here
read -r torch_prefix torch_version _ torch_source <<< "$torch_line"
torch_args=(-DZREPRO_TORCH_SOURCE="$torch_source")
if [ "$torch_prefix" != debian ]; then
  torch_args+=(-DCMAKE_PREFIX_PATH="$torch_prefix")
  torch_dir=$(realpath -m "$torch_prefix/Torch")
else
  torch_dir=$(realpath -m /usr/lib/x86_64-linux-gnu/cmake/Torch)
fi
cached=$(sed -n 's/^Torch_DIR:PATH=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
if [ -n "$cached" ] && [ "$(realpath -m "$cached")" != "$torch_dir" ]; then
  echo "[setup] $build_dir/ was configured for the LibTorch at $cached; configuring it afresh for $torch_version at $torch_dir (a full rebuild)"
  rm -rf "$build_dir/CMakeCache.txt" "$build_dir/CMakeFiles"
fi

build_type=${ZREPRO_BUILD_TYPE:-RelWithDebInfo}
# ccache when present (CI has none): a translation unit that hits takes 0.6 s
# instead of ~20 s. The sloppiness lets it cache units built with the torch PCH.
# ZREPRO_CCACHE=0 turns it off.
# (Set in the launcher itself, so a plain `ninja` in the build folder caches too; an
# empty launcher undoes it where ccache went away.)
launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=)
if [ "${ZREPRO_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;ccache")
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" "${launcher[@]}" "${torch_args[@]}" ${ZREPRO_CMAKE_ARGS:-} | { grep '^-- zrepro:' || true; }
# ZREPRO_BUILD_TARGETS: only these targets (default: all).
read -r -a targets <<< "${ZREPRO_BUILD_TARGETS:-}"
cmake --build "$build_dir" -j "${ZREPRO_JOBS:-$(nproc)}" ${targets[@]:+--target "${targets[@]}"}
