#!/usr/bin/env bash
# Cross-builds the kernels and tests/ops for AArch64 (the main build with HEARTH_KERNELS_ONLY=ON,
# no host libraries needed; GoogleTest is built from /usr/src/googletest) and runs them under
# qemu-aarch64, once with every NEON level the emulated CPU has and once forced to baseline NEON
# (no sdot).
# Usage: scripts/test-arm.sh [build-dir]   (default: build-arm in the repo root)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-arm}"
for tool in aarch64-linux-gnu-g++ qemu-aarch64 cmake ninja; do
  command -v "$tool" >/dev/null || { echo "test-arm.sh: missing $tool (apt-get install g++-aarch64-linux-gnu qemu-user cmake ninja-build)" >&2; exit 1; }
done
[ -d /usr/src/googletest ] || { echo "test-arm.sh: missing /usr/src/googletest (apt-get install googletest)" >&2; exit 1; }

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_KERNELS_ONLY=ON \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchain-aarch64.cmake" \
  -DHEARTH_GTEST_SOURCE=/usr/src/googletest >/dev/null
ninja -C "$build" ops_kernels_test

run() { qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu max "$build/tests/ops/ops_kernels_test" "$@"; }
echo "== ops_kernels_test under qemu-aarch64 -cpu max (NEON + dotprod)"
run
# Baseline NEON (no sdot) is only exercised when the CPU lacks dotprod: emulate one.
echo "== ops_kernels_test under qemu-aarch64 -cpu cortex-a72 (NEON without dotprod)"
qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu cortex-a72 "$build/tests/ops/ops_kernels_test" \
  --gtest_filter='KernelTables.*:Matmul.*'
