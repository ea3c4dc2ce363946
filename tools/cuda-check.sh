#!/usr/bin/env bash
# One-call CUDA check for the device machine: builds the CUDA backend (a minimal CMake project over
# src/{base,tensor,kernels,backend} + tests/unit/cuda, so unrelated deps are not needed), runs the
# CUDA op tests and the GEMV/GEMM bench, and prints a short table last. Logs go to $OUT.
# Usage: tools/cuda-check.sh   (env: OUT=dir for logs, GTEST_SRC=googletest source if none installed)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-cuda-check}
OUT=${OUT:-$BUILD/out}
GTEST_SRC=${GTEST_SRC:-$ROOT/.cuda-deps/googletest}
mkdir -p "$BUILD/proj" "$OUT"
export CUDACXX=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu.txt"

cat > "$BUILD/proj/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.24)
project(hearth_cuda_check LANGUAGES C CXX CUDA)
set(PROJECT_SOURCE_DIR "$ROOT")
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
# Newer g++ (device image) no longer pulls <cstdint> in transitively; some src/ files rely on it.
set(CMAKE_CXX_FLAGS "\${CMAKE_CXX_FLAGS} -include cstdint")
set(HEARTH_CUDA ON)
add_compile_options(\$<\$<COMPILE_LANGUAGE:CXX>:-Wall> \$<\$<COMPILE_LANGUAGE:CXX>:-Wno-unused-parameter>)
find_package(Threads REQUIRED)
find_package(CUDAToolkit REQUIRED)
include("$ROOT/cmake/hearth-helpers.cmake")
find_package(GTest QUIET)
if(NOT GTest_FOUND)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory("$GTEST_SRC" gtest)
  add_library(GTest::gtest ALIAS gtest)
  add_library(GTest::gtest_main ALIAS gtest_main)
endif()
include(GoogleTest)
enable_testing()
set(HEARTH_SHARED_RESOLVED "$ROOT/../shared")
add_subdirectory("$ROOT/src/base" base)
add_subdirectory("$ROOT/src/tensor" tensor)
add_subdirectory("$ROOT/src/kernels" kernels)
add_subdirectory("$ROOT/src/backend" backend)
add_library(hearth_test_support STATIC "$ROOT/tests/support/test-data.cpp")
target_include_directories(hearth_test_support PUBLIC "$ROOT/tests" "$ROOT/src")
target_link_libraries(hearth_test_support PUBLIC GTest::gtest)
target_compile_definitions(hearth_test_support PRIVATE HEARTH_SHARED_DEFAULT_DIR="$ROOT/../shared"
  HEARTH_SOURCE_DIR="$ROOT" HEARTH_BINARY_DIR="$BUILD/b")
add_subdirectory("$ROOT/tests/unit/cuda" cuda_tests)
EOF

echo "== configure + build"
cmake -S "$BUILD/proj" -B "$BUILD/b" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" >"$OUT/build.log" 2>&1 &&
  ninja -C "$BUILD/b" cuda_ops_test hearth-cuda-bench >>"$OUT/build.log" 2>&1
BUILD_RC=$?
grep -E "error|FAILED" "$OUT/build.log" | head -30
T1=$(date +%s)

TEST_RC=1
if [ $BUILD_RC -eq 0 ]; then
  echo "== CUDA op tests"
  HEARTH_REQUIRE_GPU=1 timeout 240 "$BUILD/b/cuda_tests/cuda_ops_test" >"$OUT/tests.log" 2>&1
  TEST_RC=$?
  grep -E "^\[  FAILED|Failure|error:|Expected|Which is|rel|^\[==========\]|PASSED" "$OUT/tests.log" | head -60
fi
T2=$(date +%s)

BENCH_RC=1
if [ $BUILD_RC -eq 0 ]; then
  echo "== bench"
  timeout 240 "$BUILD/b/backend/cuda/hearth-cuda-bench" >"$OUT/bench.log" 2>&1
  BENCH_RC=$?
  tail -3 "$OUT/bench.log" | grep -i error
fi
T3=$(date +%s)

echo
echo "== summary: build rc=$BUILD_RC ($((T1 - T0))s)  tests rc=$TEST_RC ($((T2 - T1))s)  bench rc=$BENCH_RC ($((T3 - T2))s)"
grep -E "^\[  PASSED|^\[  FAILED  \] [0-9]+" "$OUT/tests.log" 2>/dev/null
sed -n '/^device:/,/^copy bandwidth/p' "$OUT/bench.log" 2>/dev/null
sed -n '/^== GEMV/,$p' "$OUT/bench.log" 2>/dev/null
[ $BUILD_RC -eq 0 ] && [ $TEST_RC -eq 0 ] && [ $BENCH_RC -eq 0 ]
