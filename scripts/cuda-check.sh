#!/usr/bin/env bash
# The whole CUDA check in one device call: CUDA op tests, GEMV bench, goldens through the GPU
# (all layers, then partial), then llama2-7b-shape decode/prefill speed; a short table last.
# Device-run packaging, not part of the product (docs/performance-cuda.md describes a run).
#   scripts/cuda-check.sh pack [SET]  (here, no GPU) builds build-cuda and fills .gpu-data/ (bin/,
#       lib/, goldens/, tools/): carry ".gpu-data" to the device. SET: a (default), b or c
#       (the 2025-26 families), which golden files (64 MiB carry limit).
#   scripts/cuda-check.sh             (device) uses .gpu-data/bin if present, else builds the full
#       tree (cmake -DHEARTH_CUDA=ON) there. Env: OUT (logs), SKIP_SPEED=1, SPEED_TYPES,
#       BUDGET_S (default 570: later steps are skipped rather than run past a 600 s call),
#       DECODE_PROFILE=0 (skip the decode profiles), PREFILL_PROFILE=0 (skip the prefill ones).
#       AB="A B ...": an A/B run instead of the full check: the default op tests, then for each
#       setting (hearth flags joined by ',' such as --cuda-chain-depth=0,--no-cuda-graphs, or
#       '-' for the defaults) `hearth bench -p 512 -n 128` on SPEED_TYPES (or the setting's
#       types=a+b); a table of tok/s per setting. With AB: AB_PPROFILE="f16 ..." adds a
#       prefill profile per setting, AB_DPROFILE="f16 ..." a decode profile (64-token prompt,
#       80 tokens), AB_GEMV=1 runs the GEMV bench once first, AB_BENCH=0 skips the
#       `hearth bench -p 512 -n 128` runs.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${HEARTH_GPU_DATA:-$ROOT/.gpu-data}
BUILD=${BUILD:-$ROOT/build-cuda}
SHARED=${HEARTH_SHARED_SRC:-$ROOT/../shared}
TARGETS="hearth golden_test cuda_ops_test hearth-cuda-bench"
BINS="apps/cli/hearth tests/golden/golden_test tests/ops/cuda/cuda_ops_test tools/hearth-cuda-bench"

if [ "${1:-}" = pack ]; then
  set -e
  grep -qx '/.gpu-data/' "$ROOT/.git/info/exclude" || echo '/.gpu-data/' >>"$ROOT/.git/info/exclude"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_CUDA=ON >/dev/null
  ninja -C "$BUILD" -j2 $TARGETS
  rm -rf "$DATA" && mkdir -p "$DATA/bin" "$DATA/lib" "$DATA/tools" "$DATA/goldens"
  for b in $BINS; do
    strip -o "$DATA/bin/$(basename $b)" "$BUILD/$b"
  done
  # Non-system shared libraries the binaries need (the device image has glibc, libstdc++ and
  # CUDA 13 with cuBLAS; ICU, curl, ssl, ... may be missing).
  ldd "$DATA"/bin/* | awk '/=> \//{print $3}' | sort -u |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcudart|libcublas|libcublasLt)\.so' |
    while read -r l; do cp -L "$l" "$DATA/lib/"; done
  cp "$SHARED/tools/mkgguf.py" "$SHARED/models/vocab/ggml-vocab-llama-spm.gguf" "$DATA/tools/"
  case "${2:-a}" in
    a) files="llama2-tiny/model.safetensors llama2-tiny/llama2-tiny-q8_0.gguf kjv-13m/kjv-13m-q4_0.gguf" ;;
    b) files="llama2-tiny/llama2-tiny-bf16.gguf llama3-tiny/llama3-tiny-q4_0.gguf
         llama-k256/llama-k256-q6_k.gguf llama-k256/llama-k256-q5_k_m.gguf" ;;
    # the 2025-26 families (the forward pass's optional ops on the GPU)
    c) files="qwen3-tiny/model.safetensors gemma2-tiny/model.safetensors
         phi3-tiny/model.safetensors qwen2-yarn-tiny/model.safetensors" ;;
  esac
  for f in $files; do
    d=$(dirname "$f")
    mkdir -p "$DATA/goldens/$d"
    cp "$SHARED/goldens/$f" "$DATA/goldens/$f"
    extras="golden.json golden.safetensors config.json tokenizer_config.json"
    # set b is all GGUF (vocabulary inside): its tokenizer.model copies would not fit the carry
    [ "${2:-a}" = b ] || extras="$extras tokenizer.model"
    for extra in $extras; do
      [ -e "$SHARED/goldens/$d/$extra" ] && cp "$SHARED/goldens/$d/$extra" "$DATA/goldens/$d/"
    done
  done
  # Binaries, libraries and goldens travel as one xz tarball (ICU's data alone is 31 MB raw; the
  # bf16 goldens shrink too), under the 64 MiB carry with the working tree.
  (cd "$DATA" && tar -cf - bin lib goldens | xz -T2 -6 >binlib.tar.xz && rm -rf bin lib goldens)
  du -sh "$DATA" "$DATA"/*
  exit 0
fi

OUT=${OUT:-$BUILD/out}
mkdir -p "$OUT"
T0=$(date +%s)
BUDGET=${BUDGET_S:-570}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# timeout for a step: at most $1 seconds, never past the budget (1 = no time left: skip it)
cap() {
  local l
  l=$(left)
  [ "$l" -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 1))
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 |
  tee "$OUT/gpu.txt"

# Binaries: carried ones, else a full-tree build here. Goldens: in the tarball or beside it.
GOLD=$DATA
if [ -f "$DATA/binlib.tar.xz" ]; then
  mkdir -p /tmp/hearth-bin && tar -xJf "$DATA/binlib.tar.xz" -C /tmp/hearth-bin
  DATA_BIN=/tmp/hearth-bin
  [ -d "$DATA_BIN/goldens" ] && GOLD=$DATA_BIN
else
  DATA_BIN=$DATA
fi
if [ -x "$DATA_BIN/bin/hearth" ]; then
  BIN=$DATA_BIN/bin
  export LD_LIBRARY_PATH=$DATA_BIN/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  BUILD_RC=0
  echo "== using carried binaries ($BIN)"
else
  echo "== build (full tree, -DHEARTH_CUDA=ON)"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEARTH_CUDA=ON \
    >"$OUT/build.log" 2>&1 && ninja -C "$BUILD" $TARGETS >>"$OUT/build.log" 2>&1
  BUILD_RC=$?
  grep -E "error|FAILED|Could NOT" "$OUT/build.log" | head -20
  BIN=$OUT/bin && mkdir -p "$BIN"
  for b in $BINS; do ln -sf "$BUILD/$b" "$BIN/"; done
fi
T1=$(date +%s)

# The 7B-shape GGUFs take a while to write: start them now, behind the tests.
W=${SPEED_DIR:-/tmp/hearth-7b}
types=${SPEED_TYPES:-"q4_0 q4_k q8_0 f16"}
if [ "${SKIP_SPEED:-0}" != 1 ] && [ -f "$DATA/tools/mkgguf.py" ]; then
  mkdir -p "$W"
  for t in $types; do
    [ -f "$W/7b-$t.gguf" ] || python3 "$DATA/tools/mkgguf.py" "$W/7b-$t.gguf" --shape llama2-7b \
      --type "$t" --vocab-from "$DATA/tools/ggml-vocab-llama-spm.gguf" >"$OUT/mkgguf-$t.log" 2>&1 &
  done
fi

echo "== CUDA op tests"
HEARTH_REQUIRE_GPU=1 timeout 180 "$BIN/cuda_ops_test" >"$OUT/ops.log" 2>&1
OPS_RC=$?
grep -E "^\[  FAILED|Failure|Expected|Which is|^\[  PASSED" "$OUT/ops.log" | head -40
# The decode profiles' 64-token prompt (the A/B settings' and the full check's).
pids=$(python3 -c "import random; random.seed(2); print(','.join(str(random.randint(100, 31999)) for _ in range(64)))")
if [ -n "${AB:-}" ]; then
  wait
  # The kernels take no settings: their bench runs once, before the settings.
  [ "${AB_GEMV:-0}" = 1 ] && timeout "$(cap 60)" "$BIN/hearth-cuda-bench" \
    --dtypes "${AB_DTYPES:-F16,Q4_0,Q4_K,Q8_0}" 2>&1 | sed -n '/^== GEMV/,/^ *$/p' |
    awk '{print $1, $2, $5, $6, $7, $8}'
  for setting in $AB; do
    # types=f16+q4_k inside a setting: bench only those files for it
    ts=$types && [[ $setting == *types=* ]] && ts=$(echo "$setting" | sed -E 's/.*types=([^,]*).*/\1/;s/\+/ /g')
    flags=$(echo "$setting" | tr ',' '\n' | grep -v '^types=' | grep -v '^-$' | tr '\n' ' ')
    echo "== A/B $setting"
    # AB_PPROFILE="f16 q4_0": the prefill profile's third pass for those files under the setting.
    for t in ${AB_PPROFILE:-}; do
      [ "$(cap 60)" -gt 20 ] || continue
      f="$OUT/pprofile-$t-${setting//[^A-Za-z0-9]/}.txt"
      timeout "$(cap 90)" "$BIN/hearth" bench -m "$W/7b-$t.gguf" $flags --cuda-profile \
        -p 512 -n 0 -r 2 --gpu-layers all >"$f.md" 2>"$f"
      echo "prefill profile $t: $(grep -E "pp512" "$f.md" | tr -s ' ')"
      sed -n '/prefill profile 3:/,/host wall/p' "$f" | grep -vE "^ +(embed|add|copy) "
    done
    # AB_DPROFILE="f16": where a decode token's GPU time goes under the setting.
    for t in ${AB_DPROFILE:-}; do
      [ "$(cap 60)" -gt 20 ] || continue
      f="$OUT/dprofile-$t-${setting//[^A-Za-z0-9]/}.txt"
      timeout "$(cap 60)" "$BIN/hearth" run -m "$W/7b-$t.gguf" $flags --cuda-profile \
        --tokens "$pids" -n 80 --ignore-eos --temp 0 -c 1024 --gpu-layers all --json 2>"$f" >/dev/null
      echo "decode profile $t:"
      grep -A16 "hearth cuda profile" "$f" || tail -3 "$f"
    done
    [ "${AB_BENCH:-1}" = 1 ] || continue
    for t in $ts; do
      [ "$(cap 60)" -gt 20 ] || { echo "$t SKIPPED (time budget)"; continue; }
      j=$(timeout "$(cap 150)" "$BIN/hearth" bench -m "$W/7b-$t.gguf" $flags -p 512 -n 128 -r 2 \
        --gpu-layers all --json 2>>"$OUT/ab.log")
      python3 -c "import json,sys; j=json.loads(sys.argv[1]); print('$setting $t', '  '.join('%s %.1f' % (f['test'], f['mean']) for f in j['figures'] if f['unit'] == 'tok/s'))" "$j" 2>>"$OUT/ab.log" ||
        echo "$setting $t FAILED (ab.log)"
    done
  done | tee "$OUT/ab.txt"
  [ "$OPS_RC" = 0 ]
  exit
fi

echo "== GEMV bench"
timeout 120 "$BIN/hearth-cuda-bench" >"$OUT/bench.log" 2>&1
BENCH_RC=$?
T2=$(date +%s)

# Goldens carried under $DATA/goldens: one gtest filter term per file present.
GOLD_RC=skip PART_RC=skip
if [ -d "$GOLD/goldens" ]; then
  filter=""
  for f in "$GOLD"/goldens/*/*; do
    n=$(basename "$f")
    case "$n" in
      model.safetensors) t="$(basename "$(dirname "$f")")_safetensors" ;;
      *.gguf) t="$n" ;;
      *) continue ;;
    esac
    filter="$filter:*/${t//[^A-Za-z0-9]/_}"
  done
  filter=${filter#:}
  echo "== goldens, all layers on the GPU ($filter)"
  HEARTH_SHARED=$GOLD timeout 240 "$BIN/golden_test" --gpu-layers=all \
    --gtest_filter="$filter" >"$OUT/golden-gpu.log" 2>&1
  GOLD_RC=$?
  grep -E "^\[  FAILED|^\[ kld|^\[  PASSED|Failure|Which is" "$OUT/golden-gpu.log" | head -40
  echo "== goldens, 1 layer on the GPU, the rest on the CPU"
  HEARTH_SHARED=$GOLD timeout 240 "$BIN/golden_test" --gpu-layers=1 \
    --gtest_filter="$filter" >"$OUT/golden-partial.log" 2>&1
  PART_RC=$?
  grep -E "^\[  FAILED|^\[ kld|^\[  PASSED|Failure" "$OUT/golden-partial.log" | head -40
fi
T3=$(date +%s)

# Speed: llama2-7b-shape random GGUFs written here, 512-token prompt, 128 generated tokens.
SPEED=""
if [ "${SKIP_SPEED:-0}" != 1 ] && [ -f "$DATA/tools/mkgguf.py" ]; then
  wait
  ids=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randint(100, 31999)) for _ in range(512)))")
  run_one() {  # type, gpu-layers
    local j
    j=$(timeout "$(cap 120)" "$BIN/hearth" run -m "$W/7b-$1.gguf" --tokens "$ids" -n 128 --ignore-eos \
      --temp 0 -c 1024 --gpu-layers "$2" --json 2>>"$OUT/speed.log")
    echo "$1 ngl=$2 $j" >>"$OUT/speed.log"
    python3 -c "import json,sys; j=json.loads(sys.argv[1]); print('%-5s %-4s pp512 %9.0f tok/s  tg128 %7.1f tok/s' % ('$1', '$2', j['timings']['prompt_tok_s'] if 'timings' in j else j['prompt_tok_s'], j['timings']['gen_tok_s'] if 'timings' in j else j['gen_tok_s']))" "$j" 2>>"$OUT/speed.log" ||
      echo "$1 $2 FAILED (see speed.log)"
  }
  bench_one() {  # type, gpu-layers, [hearth flags]: `hearth bench` (warm-up and repetitions)
    local j
    # F16 is 13.5 GB: one cold and two warm loads of it alone take minutes.
    j=$(timeout "$(cap "$([ "$1" = f16 ] && echo 200 || echo 120)")" "$BIN/hearth" bench -m "$W/7b-$1.gguf" \
      -p 512 -n 128 -r 2 --gpu-layers "$2" ${3:-} --json 2>"$OUT/bench-$1-$2.err")
    echo "rc=$? $1 ngl=$2 $j" >>"$OUT/speed.log"
    grep -v "^hearth bench:" "$OUT/bench-$1-$2.err" | tail -3 >&2
    python3 - "$1" "$2" "$j" 2>>"$OUT/speed.log" <<'PY' ||
import json, sys
t, ngl, j = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
gj = lambda f: '' if f.get('gpu_joules_per_token') is None else ' (%.3f J/tok)' % f['gpu_joules_per_token']
figs = '  '.join('%s %.1f %s%s' % (f['test'], f['mean'], f['unit'], gj(f)) for f in j['figures']
                 if f['unit'] == 'tok/s' or f['test'] == 'load warm')
gpu = [d for d in j['devices'] if d['backend'] == 'gpu']
g = ' | gpu: %s, %s W, %s' % (gpu[0]['name'], gpu[0]['power_w'], gpu[0]['notes']) if gpu else ''
print('%-5s %-4s %s%s' % (t, ngl, figs, g))
PY
      run_one "$1" "$2"
  }
  # Where a 512-token prefill's GPU time goes (the third profiled pass: after the bench's
  # warm-up and one 512-token pass).
  for t in f16 q4_0; do
    [ "${PREFILL_PROFILE:-1}" = 1 ] && [ -f "$W/7b-$t.gguf" ] && [ "$(cap 60)" -gt 1 ] || continue
    echo "== prefill profile $t"
    f="$OUT/pprofile-$t.txt"
    timeout "$(cap 90)" "$BIN/hearth" bench --cuda-profile -m "$W/7b-$t.gguf" -p 512 -n 0 -r 2 \
      --gpu-layers all >/dev/null 2>"$f"
    sed -n '/prefill profile 3:/,/host wall/p' "$f" | grep -vE "^ +(embed|add|copy) " ||
      tail -3 "$f"
  done
  # Where a decode token's GPU time goes (graph replay per token is the figure).
  for t in q4_0 q4_k q8_0 f16; do
    [ "${DECODE_PROFILE:-1}" = 1 ] || break
    [ "$(cap 60)" -gt 1 ] || break
    echo "== profile $t"
    timeout "$(cap 60)" "$BIN/hearth" run --cuda-profile -m "$W/7b-$t.gguf" --tokens "$pids" \
      -n 80 --ignore-eos --temp 0 -c 1024 --gpu-layers all --json 2>"$OUT/profile-$t.txt" >/dev/null
    grep -A16 "hearth cuda profile" "$OUT/profile-$t.txt" |
      grep -E "graph|attention|eager" || tail -3 "$OUT/profile-$t.txt"
  done
  # The same after a 512-token prompt (decode at context ~512-590: 8-10 live attention splits).
  if [ "${DECODE_PROFILE:-1}" = 1 ] && [ "$(cap 60)" -gt 1 ]; then
    echo "== profile q4_0 (-), context ~512-590"
    timeout "$(cap 60)" "$BIN/hearth" run --cuda-profile -m "$W/7b-q4_0.gguf" --tokens "$ids" \
      -n 80 --ignore-eos --temp 0 -c 1024 --gpu-layers all --json 2>"$OUT/profile-q4_0-ctx512.txt" \
      >/dev/null
    grep -A16 "hearth cuda profile" "$OUT/profile-q4_0-ctx512.txt" | grep -E "graph|attention|eager" ||
      tail -3 "$OUT/profile-q4_0-ctx512.txt"
  fi
  echo "== speed (llama2-7b shape, random weights)"
  for t in $types; do
    [ "$(cap 60)" -gt 20 ] || { SPEED+="$t all SKIPPED (time budget)"$'\n'; continue; }
    SPEED+="$(bench_one "$t" all)"$'\n'
  done
  [ "$(left)" -gt 90 ] && SPEED+="$(bench_one q4_0 16)"$'\n'
  # --gpu-layers auto (by free memory: all 32 on an H200), then Q4_0 with greedy chaining off
  # (host argmax between steps) as the A/B for it, then the same Q4_0 bench again: the
  # run-to-run spread to judge differences against.
  [ "$(left)" -gt 60 ] && SPEED+="$(bench_one q4_0 auto) (auto)"$'\n' &&
    SPEED+="$(grep -h -m1 "gpu-layers auto" "$OUT/bench-q4_0-auto.err")"$'\n'
  [ "$(left)" -gt 60 ] && SPEED+="$(bench_one q4_0 all --cuda-chain-depth=0) (--cuda-chain-depth=0)"$'\n'
  [ "$(left)" -gt 60 ] && SPEED+="$(bench_one q4_0 all) (repeat)"$'\n'
  echo -n "$SPEED"
fi
T4=$(date +%s)

echo
echo "== summary: setup ${BUILD_RC} ($((T1 - T0))s)  ops rc=$OPS_RC  bench rc=$BENCH_RC ($((T2 - T1))s)" \
  " goldens gpu=$GOLD_RC partial=$PART_RC ($((T3 - T2))s)  speed ($((T4 - T3))s)"
for f in ops golden-gpu golden-partial; do
  echo "$f: $(grep -E "^\[  PASSED|^\[  FAILED  \] [0-9]+" "$OUT/$f.log" 2>/dev/null | tr '\n' ' ')"
done
grep -E "^copy bandwidth" "$OUT/bench.log" 2>/dev/null
sed -n '/^== GEMV/,$p' "$OUT/bench.log" 2>/dev/null | awk '{print $1, $2, $5, $6, $7, $8, $11, $12, $13}'
grep -h "^attention pp512" "$OUT/bench.log" 2>/dev/null
for f in "$OUT"/pprofile-*.txt; do
  [ -f "$f" ] && echo "$(basename "$f" .txt): $(sed -n '/prefill profile 3:/,/host wall/p' "$f" | grep -E "^  (pass|attention|gemm) " | tr -s ' ' | tr '\n' ';') first 512-token pass: $(sed -n '/prefill profile 2:/,/host wall/p' "$f" | grep -E "^  pass " | tr -s ' ')"
done
echo -n "$SPEED"
[ "$BUILD_RC" = 0 ] && [ "$OPS_RC" = 0 ] && [ "$GOLD_RC" != 1 ] && [ "$PART_RC" != 1 ]
