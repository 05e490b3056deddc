#!/usr/bin/env bash
# The testbed v4 design's levers on one π_0 build, on dev: each lever one `maopd tune collapse` run
# (the hierarchy in three arms: unforced, forced no search, forced search), then the lever table.
# Usage: benchmarks/testbed_v4_levers.sh OUT_DIR [MODEL_DIR]     (resumable: a finished lever is kept)
set -euo pipefail
OUT=${1:?usage: testbed_v4_levers.sh OUT_DIR [MODEL_DIR]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODEL=${2:-$ROOT/models/base-dd42a075b23e5e60}
MAOPD=${MAOPD:-$ROOT/.venv/bin/maopd}
MIX=(--questions 200 --hop-mix 1-hop=100,2-hop=40,comparison=60)
declare -A LEVERS=(
  [dev_split]=""
  [band_popular]="--band popular ${MIX[*]}"
  [band_middle]="--band middle ${MIX[*]}"
  [band_long_tail]="--band long_tail ${MIX[*]}"
  [popular_dense_retriever]="--band popular ${MIX[*]} --env retriever.kind=dense"
  [popular_topk_1]="--band popular ${MIX[*]} --env topk=1"
  [popular_passages_200_chars]="--band popular ${MIX[*]} --env max_passage_chars=200"
  [popular_max_steps_8]="--band popular ${MIX[*]} --env max_steps=8"
)
ORDER=(dev_split band_popular band_middle band_long_tail popular_dense_retriever popular_topk_1 popular_passages_200_chars popular_max_steps_8)
for lever in "${ORDER[@]}"; do
  [ -f "$OUT/$lever/collapse.json" ] && continue
  # shellcheck disable=SC2086  # the lever's options are words
  "$MAOPD" tune collapse --model "$MODEL" ${LEVERS[$lever]} --out "$OUT/$lever"
done
"$MAOPD" tune collapse-levers $(for lever in "${ORDER[@]}"; do echo "$lever=$OUT/$lever"; done) --out "$OUT"
