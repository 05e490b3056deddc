#!/usr/bin/env bash
# Create .venv and install MultiAgent-OPD. The CPU torch wheel goes in first: an unpinned torch
# would pull a multi-GB CUDA build.
#   bash scripts/setup.sh          # core + retrieval extras (what the main job needs)
#   bash scripts/setup.sh --dev    # + test tools and every extra the test suite exercises
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
extras="retrieval"
if [ "${1:-}" = "--dev" ]; then
  extras="retrieval,pyserini,dev,trl,openenv,gem"  # pyserini: ~20 s, ~780 MB incl. deps; its tests need Java 17
fi
.venv/bin/python -m pip install -q -e ".[${extras}]"
if [ "${1:-}" = "--dev" ]; then
  # marl-eval (id-marl-eval 0.0.4) pins pandas==1.4.4, which has no wheel for Python 3.11, and
  # neptune, a logging client; the tests use only its loader (marl_eval.utils.data_processing_utils),
  # which imports numpy and colorama. So it goes in without its dependencies, colorama beside it.
  .venv/bin/python -m pip install -q --no-deps "id-marl-eval==0.0.4" "colorama>=0.4"
fi
