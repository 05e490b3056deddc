"""The vLLM side of ``VLLMPolicy``: one ``vllm.LLM`` engine behind a JSON-lines pipe.

Runs inside the separate vLLM venv (``scripts/setup_vllm.sh``), so it imports only the standard
library, vLLM and its torch, never this project. ``maopd.agents.vllm_policy`` starts it as
``<vllm venv>/bin/python -I agents/vllm_worker.py '<engine kwargs as JSON>' <its own pid>`` and
exchanges one JSON object per line:

  -> {"op": "generate", "requests": [{"prompt_ids": [...], "seed": s, "sampling": {...}}, ...]}
  <- {"ok": true, "results": [{"token_ids", "logprobs", "finish_reason", "stop_reason"}, ...]}
  -> {"op": "reload_weights"}   reload the weights from the model directory, drop the prefix cache
  <- {"ok": true}
  -> {"op": "shutdown"}

``sampling`` holds ``vllm.SamplingParams`` fields. Failures answer ``{"ok": false, "error": ...}``
with the exception's one line; the traceback goes to stderr (the log file).
The first line the worker writes is ``{"ok": true, "ready": ..., "vllm": version, "torch_threads": n}``
once the engine is up (``n``: the threads vLLM left its model to compute with). vLLM logs to
stdout, so the protocol uses a private copy of the original stdout and fd 1 is pointed at stderr
before vLLM is imported.

The worker exits when its parent does, even in the middle of loading or generating (a killed
trainer closes no pipe in time to be read): a watchdog thread sees that its parent is no longer
the pid it was given (which also catches a parent that died before the watchdog started).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

import torch


def _exit_with_parent(parent: int, interval_s: float = 1.0) -> None:
    """End this process, at once, when ``parent`` has gone (we are re-parented)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _protocol_streams():
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return sys.stdin, out


def _generate(llm, vllm_api, requests: list[dict]) -> list[dict]:
    prompts = [vllm_api.TokensPrompt(prompt_token_ids=r["prompt_ids"]) for r in requests]
    params = [vllm_api.SamplingParams(n=1, seed=r["seed"], logprobs=0, **r["sampling"]) for r in requests]
    results = []
    for output in llm.generate(prompts, params, use_tqdm=False):
        completion = output.outputs[0]
        token_ids = list(completion.token_ids)
        # logprobs=0 returns, per step, a dict holding just the sampled token's Logprob.
        logprobs = [step[token].logprob for step, token in zip(completion.logprobs, token_ids)]
        results.append(
            {
                "token_ids": token_ids,
                "logprobs": logprobs,
                "finish_reason": completion.finish_reason,
                "stop_reason": completion.stop_reason,
            }
        )
    return results


def _repack_tied_lm_head(worker) -> bool:
    """Rebuild the CPU GEMM's packed copy of an lm_head tied to the embedding; True if tied.

    ``reload_weights`` writes new values into the (shared) embedding weight, but on the CPU the
    lm_head computes logits from a packed copy made at load time, which vLLM 0.32 does not rebuild
    for a tied head (it logs "ParallelLMHead: Failed to load weights"): logits would come from the
    old embedding. Qwen3's smaller models are tied, like our tiny ones.
    """
    model = worker.model_runner.get_model()
    head = getattr(model, "lm_head", None)
    if head is None:
        return False
    shares_weight = (
        module is not head
        and isinstance(getattr(module, "weight", None), torch.Tensor)
        and module.weight.data_ptr() == head.weight.data_ptr()
        for module in model.modules()
    )
    if not any(shares_weight):
        return False
    head.quant_method.process_weights_after_loading(head)
    return True


def main() -> None:
    engine_kwargs, parent = json.loads(sys.argv[1]), int(sys.argv[2])
    _exit_with_parent(parent)
    requests_in, replies = _protocol_streams()
    import vllm

    llm = vllm.LLM(**engine_kwargs)
    ready = {"ok": True, "ready": True, "vllm": vllm.__version__, "torch_threads": torch.get_num_threads()}
    replies.write(json.dumps(ready) + "\n")
    for line in requests_in:
        message = json.loads(line)
        try:
            if message["op"] == "generate":
                reply = {"ok": True, "results": _generate(llm, vllm, message["requests"])}
            elif message["op"] == "reload_weights":
                llm.collective_rpc("reload_weights")
                llm.collective_rpc(_repack_tied_lm_head)
                # Cached KV blocks were computed with the old weights.
                llm.reset_prefix_cache()
                reply = {"ok": True}
            elif message["op"] == "shutdown":
                break
            else:
                reply = {"ok": False, "error": f"unknown op {message['op']!r}"}
        except Exception as exc:  # noqa: BLE001 -- the caller gets the error; the engine stays up
            traceback.print_exc()
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
        replies.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
