#!/usr/bin/env bash
# End-to-end evaluation of the rule-based teams on a small manifest of the real data samples.
# Usage: benchmarks/demo_real_data.sh OUT_DIR [REAL_DATA_DIR]
# Writes OUT_DIR/{corpus.jsonl, manifest.jsonl(+.report.json), records.jsonl, report/}.
set -euo pipefail
OUT=${1:?usage: demo_real_data.sh OUT_DIR [REAL_DATA_DIR]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REAL=${2:-$(cd "$ROOT/.." && pwd)/shared/data/real}
# The repository's venv (README's `bash scripts/setup.sh`), no activation needed; MAOPD overrides it,
# and a `maopd` on PATH is used when the venv is not there.
MAOPD=${MAOPD:-$ROOT/.venv/bin/maopd}
if [ ! -x "$MAOPD" ]; then
  MAOPD=$(command -v maopd) || { echo "no $ROOT/.venv/bin/maopd and no maopd on PATH: run bash scripts/setup.sh" >&2; exit 1; }
fi
mkdir -p "$OUT"

"$MAOPD" eval corpus "$REAL/hotpotqa_distractor_dev300.jsonl:hotpotqa" "$REAL/2wiki_dev200_context.jsonl:2wiki" \
  "$REAL/musique_ans_dev200_paragraphs.jsonl:musique" "$REAL/popqa1000_paragraphs.json:popqa" \
  "$REAL/dpr_nq_dev_sample.json:dpr-nq" --out "$OUT/corpus.jsonl"
# Bamboogle and the NQ sample carry no paragraphs: their questions are asked against the pool.
"$MAOPD" eval manifest \
  --dataset "hotpotqa=$REAL/hotpotqa_distractor_dev300.jsonl:hotpotqa" --count hotpotqa=40 \
  --dataset "2wikimultihopqa=$REAL/2wiki_dev200_context.jsonl:2wiki" --count 2wikimultihopqa=40 \
  --dataset "musique=$REAL/musique_ans_dev200_paragraphs.jsonl:musique" --count musique=40 \
  --dataset "popqa=$REAL/popqa1000_paragraphs.json:popqa" --count popqa=40 \
  --dataset "bamboogle=$REAL/bamboogle_test_flashrag.jsonl" --count bamboogle=40 \
  --dataset "nq=$REAL/nq_test_sample_flashrag.jsonl" --count nq=17 \
  --out "$OUT/manifest.jsonl"
for run in scripted:hierarchical scripted:cascade scripted-noisy-answerer:hierarchical; do
  "$MAOPD" eval run --manifest "$OUT/manifest.jsonl" --corpus "$OUT/corpus.jsonl" \
    --policy "${run%%:*}" --workflow "${run#*:}" --out "$OUT/records.jsonl"
done
"$MAOPD" eval score "$OUT/records.jsonl" --out "$OUT/report" \
  --compare scripted-hierarchical scripted-cascade \
  --compare scripted-hierarchical scripted-noisy-answerer-hierarchical
