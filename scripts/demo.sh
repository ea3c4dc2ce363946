#!/usr/bin/env bash
# The main job: build, then generate King James prose with the trained kjv-13m model from
# ../shared (or $HEARTH_SHARED), from its Hugging Face directory and from its 4-bit GGUF.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED="${HEARTH_SHARED:-$(cd .. && pwd)/shared}"
scripts/build.sh
build/apps/cli/hearth info -m "$SHARED/goldens/kjv-13m/kjv-13m-q4_k_m.gguf"
echo
build/apps/cli/hearth run -m "$SHARED/goldens/kjv-13m" -p "And the king said" -n 64 --temp 0
echo
build/apps/cli/hearth run -m "$SHARED/goldens/kjv-13m/kjv-13m-q4_k_m.gguf" \
  -p "In the beginning" -n 64 --temp 0.7 --seed 7
