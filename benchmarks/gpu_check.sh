#!/usr/bin/env bash
# GPU check, at most 8 minutes on one H200 (the parts' time limits add up to 480 s): one Stage II
# trainer step at the paper's batch size (B = 32, G = 5; FSDP2 + bf16 + gradient checkpointing
# under torchrun, PPO-ptx, the continuous decode engine with its decode step under
# torch.compile "reduce-overhead", i.e. CUDA graphs), the rollout throughput benchmark at paper
# scale (compiled engine vs the chunked engine vs static/dynamic-cache HF generate), and, when a
# CUDA vLLM venv is present, vLLM rollouts; all on a ~0.1 B random Qwen3 built from a config
# (nothing is downloaded). CI never runs it on a GPU.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]               # OUT_DIR: $1, else $OUT, else gpu_check_results
#   bash benchmarks/gpu_check.sh --cpu-smoke [OUT_DIR]   # the same parts, tiny, on CPU (benchmarks/tests/test_gpu_check.py)
#
# Each part runs under `timeout` and writes OUT_DIR/<part>.log; results go to OUT_DIR/*.json and
# OUT_DIR/summary.txt. A failed part does not stop the others; the exit status is 1 if any failed.
# PYTHON picks the main venv's python (default: python). The vLLM part needs a CUDA vLLM venv
# (MAOPD_VLLM_PYTHON or MAOPD_VLLM_VENV, see agents/vllm_policy.py); without one it is skipped.
# --cpu-smoke checks that the script and its commands run: a tiny model, B = 1-2, a few tokens, no
# FSDP/torchrun, no compile (the compiled decode step is tested on CPU in tests/agents/test_decode_engine.py).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=gpu
if [ "${1:-}" = "--cpu-smoke" ]; then MODE=cpu; shift; fi
OUT_DIR=${1:-${OUT:-gpu_check_results}}
PYTHON=${PYTHON:-python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"

if [ "$MODE" = gpu ]; then
  if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: no CUDA device visible to torch ($("$PYTHON" -c 'import torch; print(torch.__version__)' 2>&1)); nothing run" | tee "$SUMMARY" >&2
    exit 2
  fi
  { nvidia-smi; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; } > "$OUT_DIR/nvidia_smi.txt" 2>&1 || true
fi
echo "gpu_check ($MODE) $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" > "$SUMMARY"

failed=0
part() {  # part NAME SECONDS COMMAND...: run under timeout, log, record the outcome
  local name=$1 limit=$2 start status=0
  shift 2
  start=$(date +%s)
  echo "== $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1 || status=$?
  local took=$(( $(date +%s) - start ))
  if [ "$status" = 0 ]; then
    echo "$name: ok (${took}s)" | tee -a "$SUMMARY"
  else
    echo "$name: FAILED, exit $status after ${took}s (log: $OUT_DIR/$name.log)" | tee -a "$SUMMARY"
    tail -n 20 "$OUT_DIR/$name.log" >&2
    failed=1
  fi
}

MODEL="$OUT_DIR/model"
STAGE2=(--config configs/gpu_check_stage2.yaml --fresh model.path="$MODEL" teacher.path="$MODEL"
        ptx.data="$OUT_DIR/ptx_data.jsonl" run_dir="$OUT_DIR/stage2_run")
if [ "$MODE" = gpu ]; then
  part build_model 60 "$PYTHON" benchmarks/gpu_check.py build-model --out "$MODEL" --ptx-data "$OUT_DIR/ptx_data.jsonl" \
    --result "$OUT_DIR/model.json"
  if "$PYTHON" -c "import sys; from maopd.agents.vllm_policy import vllm_python; sys.exit(0 if vllm_python() else 1)"; then
    part vllm_rollout 240 "$PYTHON" benchmarks/gpu_check.py vllm --model "$MODEL" --result "$OUT_DIR/vllm_rollout.json"
  else
    echo "vllm_rollout: SKIPPED, no vLLM venv (set MAOPD_VLLM_PYTHON to the python of a CUDA vLLM 0.32 venv)" | tee -a "$SUMMARY"
  fi
  part stage2_step 240 "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node 1 -m maopd.cli train "${STAGE2[@]}"
  part rollout_throughput 180 "$PYTHON" benchmarks/rollout_throughput.py --model "$MODEL" --device cuda \
    --questions 32 --group-size 5 --max-new-tokens 64 --max-batch-size 512 --compile reduce-overhead --skip naive \
    --threads 4 --out "$OUT_DIR/rollout_throughput.json"
else
  part build_model 120 "$PYTHON" benchmarks/gpu_check.py build-model --tiny --out "$MODEL" \
    --ptx-data "$OUT_DIR/ptx_data.jsonl" --result "$OUT_DIR/model.json"
  part stage2_step 300 "$PYTHON" -m maopd.cli train "${STAGE2[@]}" model.device=cpu model.gradient_checkpointing=false \
    distributed.fsdp=false distributed.mixed_precision=none rollout.batch_size=1 rollout.group_size=2 rollout.max_new_tokens=6 \
    rollout.generation_batch_size=8 rollout.decode_compile=null rollout.dynamic_sampling_rounds=0 env.max_steps=5 \
    optim.minibatches=1 ptx.batch_size=1 ptx.seq_len=32
  part rollout_throughput 300 "$PYTHON" benchmarks/rollout_throughput.py --small --model "$MODEL" --questions 1 \
    --group-size 2 --max-new-tokens 4 --max-batch-size 8 --skip naive --threads 1 \
    --out "$OUT_DIR/rollout_throughput.json"
fi
[ -f "$OUT_DIR/stage2_run/metrics.jsonl" ] && cp "$OUT_DIR/stage2_run/metrics.jsonl" "$OUT_DIR/stage2_step_metrics.jsonl"

exit "$failed"
