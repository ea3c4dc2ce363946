#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this after setup-debian.sh):
#   1. release build + every CTest test (unit, ops, golden, e2e with real clients, fuzz replay);
#   2. an ASan + UBSan build with clang and libFuzzer: the parsers' fuzz targets run briefly and
#      the unit, golden and bad-input tests run again under the sanitizers;
#   3. the CUDA backend compiled and linked (when nvcc is installed; no GPU needed);
#   4. the ARM NEON kernels cross-built and tested under qemu-aarch64.
# Test data: $HEARTH_SHARED, default ../shared beside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
export HEARTH_SHARED="${HEARTH_SHARED:-$(cd .. && pwd)/shared}"
# Prepacked weights go to a cache beside the build, not the user's ~/.cache.
export HEARTH_CACHE_DIR="${HEARTH_CACHE_DIR:-$PWD/build/weight-cache}"
[ -d "$HEARTH_SHARED/goldens" ] || { echo "test.sh: no test data at $HEARTH_SHARED" >&2; exit 1; }
jobs="$(nproc)"
section() { printf '\n==== %s (%s)\n' "$1" "$(date +%T)"; }

section "release build"
scripts/build.sh

# The server's tests drive it with the official openai npm client and headless Chromium.
if [ -f tests/e2e/server/package-lock.json ]; then
  section "npm packages for the server tests"
  (cd tests/e2e/server && npm ci --no-audit --no-fund --loglevel=error)
fi

section "release tests"
ctest --preset release -j "$jobs" --timeout 900

section "ASan + UBSan build (clang, libFuzzer)"
cmake --preset asan-ubsan >/dev/null
cmake --build --preset asan-ubsan -j "$jobs"
section "ASan + UBSan tests"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Everything except: the server's load and timing tests (they measure the server, and ran in the
# release pass), the install test (it links a plain client against the installed library, and
# clang puts the sanitizer runtime only into executables), and the GPU-only tests.
ctest --preset asan-ubsan -j "$jobs" --timeout 900 -E "server_load|server_limits|InstallTest|Cuda"

# CI has nvcc but no GPU: the CUDA backend must compile and link; its tests run on the device
# (scripts/cuda-check.sh) and the ones here skip for lack of a GPU.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  section "CUDA build (compile and link only)"
  # One real architecture is enough to prove the code compiles; the release build's default
  # adds a PTX copy for newer GPUs, which would double nvcc's time here for nothing.
  cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90a-real >/dev/null
  cmake --build --preset cuda -j "$jobs" --target hearth cuda_ops_test golden_test \
    hearth-persistent-probe
fi

section "ARM NEON kernels under qemu"
scripts/test-arm.sh build-arm

section "all test stages passed"
