#!/usr/bin/env bash
# Which LibTorch zrepro builds against, decided in one place (scripts/setup.sh and
# scripts/cuda-build.sh ask it). Prints one line on stdout:
#   <CMake prefix path, or "debian"> <torch version> <CUDA version or "none"> <source, words>
# and what it did on stderr. The choice, first match wins:
#   ZREPRO_LIBTORCH=debian   Debian's libtorch-dev (1.13, CPU): a fallback CI does not build
#                            (see docs/guide/build.md); setup.sh then installs it with apt.
#   ZREPRO_TORCH_PYTHON=PY   the torch of that python (it must be 2.x).
#   python3's own torch      when it is 2.x: the torch the user's DeepSpeed runs on, taken
#                            the way PyTorch's C++ extensions build (torch.utils.cmake_prefix_path).
#   the pinned torch         conformance/requirements.txt's torch==X, installed from PyPI into a
#                            venv (ZREPRO_TORCH_VENV, default ~/.cache/zrepro/torch-venv; made
#                            once, about 5 GB with the CUDA libraries the PyPI wheel depends on;
#                            pip's own cache keeps the download).
# ZREPRO_TORCH_REQUIRE_CUDA=1: refuse a torch without CUDA (scripts/cuda-build.sh).
# --cmake-args: print instead the CMake arguments for that LibTorch, one per line
# (bench/build.sh, scripts/fuzz.sh; scripts/setup.sh adds them itself).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "[torch] $*" >&2; }
fail() { echo "[torch] error: $*" >&2; exit 2; }

probe='import torch, torch.utils; print(torch.__version__.split("+")[0], torch.version.cuda or "none", torch.utils.cmake_prefix_path)'
pin=$(grep -E '^torch==' "$root/conformance/requirements.txt" | cut -d' ' -f1)

choice=${ZREPRO_LIBTORCH:-auto}
case "$choice" in
  debian)
    ver=$(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null | sed -E 's/^([0-9]+\.[0-9]+\.[0-9]+).*/\1/' || true)
    if [ "${1:-}" = --cmake-args ]; then echo "-DZREPRO_TORCH_SOURCE=debian-libtorch-dev"
    else echo "debian ${ver:-1.13} none debian-libtorch-dev"; fi
    exit 0 ;;
  auto|pip) ;;
  *) fail "ZREPRO_LIBTORCH=$choice: expected \"debian\" (Debian's libtorch-dev) or unset (a torch 2.x of pip); unset it or set it to debian" ;;
esac

# A python whose torch is 2.x, or nothing.
torch_of() {
  local py=$1 line
  line=$("$py" -c "$probe" 2>/dev/null) || return 1
  case "$line" in 2.*) echo "$line" ;; *) return 1 ;; esac
}

if [ -n "${ZREPRO_TORCH_PYTHON:-}" ]; then
  command -v "$ZREPRO_TORCH_PYTHON" >/dev/null || fail "ZREPRO_TORCH_PYTHON=$ZREPRO_TORCH_PYTHON: no such python; name a python with torch 2.x, or unset it"
  line=$(torch_of "$ZREPRO_TORCH_PYTHON") ||
    fail "ZREPRO_TORCH_PYTHON=$ZREPRO_TORCH_PYTHON has no torch 2.x ($("$ZREPRO_TORCH_PYTHON" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1)); pip install torch there, or unset it to use the pinned $pin"
  source="ZREPRO_TORCH_PYTHON=$ZREPRO_TORCH_PYTHON"
elif command -v python3 >/dev/null && line=$(torch_of python3); then
  source="python3 ($(command -v python3))"
else
  venv=${ZREPRO_TORCH_VENV:-$HOME/.cache/zrepro/torch-venv}
  if ! line=$(torch_of "$venv/bin/python" 2>/dev/null); then
    say "no torch 2.x in python3: installing the pinned $pin from PyPI into $venv (once; ~5 GB, a few minutes)"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv" ||
      fail "python3 -m venv $venv failed: install python3-venv (apt-get install python3-venv), or name a python with torch 2.x in ZREPRO_TORCH_PYTHON"
    "$venv/bin/python" -m pip install -q "$pin" >&2 ||
      fail "pip could not install $pin into $venv (PyPI must be reachable); or name a python with torch 2.x in ZREPRO_TORCH_PYTHON"
    line=$(torch_of "$venv/bin/python") || fail "$venv/bin/python still has no torch 2.x after installing $pin"
  fi
  source="the pinned $pin in $venv"
fi
read -r ver cuda prefix <<< "$line"
if [ "${ZREPRO_TORCH_REQUIRE_CUDA:-0}" = 1 ] && [ "$cuda" = none ]; then
  fail "torch $ver from $source has no CUDA; install a CUDA wheel ($pin from PyPI is one) or name its python in ZREPRO_TORCH_PYTHON"
fi
say "LibTorch $ver (CUDA $cuda) from $source"
if [ "${1:-}" = --cmake-args ]; then
  printf '%s\n' "-DZREPRO_TORCH_SOURCE=$source" "-DCMAKE_PREFIX_PATH=$prefix"
else
  echo "$prefix $ver $cuda $source"
fi
