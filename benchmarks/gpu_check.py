"""Python parts of ``benchmarks/gpu_check.sh``: a small real-architecture model and a vLLM smoke.

``build-model``  a random ``Qwen3ForCausalLM`` (hidden 1024, 8 layers, 16 heads / 8 KV heads,
                 head dim 64, MLP 3072: about 0.1 B parameters; ``--tiny``: hidden 64, 2 layers),
                 built in-process from a transformers config over a tokenizer trained on the embedded world. Nothing is
                 downloaded. Saved in Hugging Face format, so the trainer, vLLM and the throughput
                 benchmark all load the same directory. ``--ptx-data`` also writes the world's
                 passages as a PPO-ptx file (``{"text"}`` lines) for the Stage II step.
``vllm``         ``VLLMPolicy`` on that directory: one batch of team-role prompts, tokens/s, and the
                 gap between vLLM's recorded log-probs and the trainer's re-score of the same ids
                 on the GPU (top-p 1, so the two should agree up to bf16 rounding).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model, save_model
from maopd.agents.tokenizer import train_tokenizer
from maopd.base.arguments import positive_int
from maopd.base.json_files import write_json
from maopd.envs.synthwiki import load_default_world
from maopd.training.ptx import write_rows

CHECK_MODEL = TinyModelConfig(
    hidden_size=1024,
    num_layers=8,
    num_heads=16,
    num_kv_heads=8,
    head_dim=64,
    intermediate_size=3072,
    initializer_range=0.02,
    seed=0,
)


def build_model(out: Path, ptx_data: Path | None, tiny: bool = False) -> dict:
    world = load_default_world()
    texts = [d.contents for d in world.corpus.documents] + [q.question for q in world.splits["train"]]
    tokenizer = train_tokenizer(texts, vocab_size=4096)
    config = TinyModelConfig(initializer_range=0.02, seed=0) if tiny else CHECK_MODEL
    model = build_tiny_model(tokenizer, config)
    save_model(model, tokenizer, out)
    if ptx_data is not None:
        write_rows([{"text": d.contents} for d in world.corpus.documents], ptx_data)
    return {"model_dir": str(out), "parameters": sum(p.numel() for p in model.parameters()), "config": config.__dict__}


def vllm_smoke(model_dir: Path, prompts: int, max_new_tokens: int) -> dict:
    from maopd.agents.chat_tokens import prompt_ids
    from maopd.agents.sampling import SamplingConfig
    from maopd.agents.tiny_model import load_model
    from maopd.agents.vllm_policy import VLLMPolicy
    from maopd.envs import hierarchical_search_v1
    from maopd.training.token_scoring import pad_batch, score_tokens

    env = hierarchical_search_v1.env(split="dev")
    questions = env.questions[:prompts]
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens)
    started = time.perf_counter()
    with VLLMPolicy(
        model_dir, sampling, seed=0, dtype="bfloat16", engine_args={"gpu_memory_utilization": 0.3}
    ) as policy:
        startup_s = time.perf_counter() - started
        ids = []
        for question in questions:
            env.reset(seed=0, options={"question": question})
            ids.append(prompt_ids(policy.tokenizer, env.turn(env.acting_agents()[0]).messages))
        started = time.perf_counter()
        candidates = [c[0] for c in policy.generate(ids, 1, seeds=list(range(len(ids))))]
        generate_s = time.perf_counter() - started
    generated = sum(len(c.token_ids) for c in candidates)

    model, _ = load_model(model_dir, torch.bfloat16, "cuda")
    sequences = [prompt + c.token_ids for prompt, c in zip(ids, candidates)]
    masks = [[0] * len(prompt) + [1] * len(c.token_ids) for prompt, c in zip(ids, candidates)]
    batch = pad_batch(sequences, masks, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        rescored = score_tokens(model, batch.to("cuda"), 1.0).logprobs.cpu()
    gaps = [
        abs(float(rescored[row, len(prompt) + t]) - c.logprobs[t])
        for row, (prompt, c) in enumerate(zip(ids, candidates))
        for t in range(len(c.token_ids))
    ]
    return {
        "engine_startup_s": startup_s,
        "prompts": len(ids),
        "generated_tokens": generated,
        "generate_s": generate_s,
        "tokens_per_s": generated / generate_s,
        "finish_reasons": sorted({c.finish_reason for c in candidates}),
        "logprob_gap_vs_rescore": {"max": max(gaps, default=0.0), "mean": sum(gaps) / max(len(gaps), 1)},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build-model")
    build.add_argument("--out", required=True)
    build.add_argument("--ptx-data", type=Path, help="also write the world's passages here as PPO-ptx data")
    build.add_argument("--tiny", action="store_true", help="a tiny model instead (gpu_check.sh --cpu-smoke)")
    smoke = commands.add_parser("vllm")
    smoke.add_argument("--model", required=True)
    smoke.add_argument("--prompts", type=positive_int, default=64)
    smoke.add_argument("--max-new-tokens", type=positive_int, default=128)
    for command in (build, smoke):
        command.add_argument("--result", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    if args.command == "build-model":
        result = build_model(Path(args.out), args.ptx_data, args.tiny)
    else:
        result = vllm_smoke(Path(args.model), args.prompts, args.max_new_tokens)
    write_json(Path(args.result), result, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
