"""Rollout throughput: the team collector against the generate ceiling and a naive agent loop.

Measured in one run, on one model, as ratios (these machines are noisy):

* **ceiling**: the same rounds of prompts sent straight to ``HFPolicy.generate`` (same prompts,
  seeds and lengths, so the same tokens), without environments, chat templating or bookkeeping.
  ``collector_vs_ceiling`` = ceiling time / collector time (target ≥ 0.7).
* **naive**: what a user writes first, PettingZoo's ``agent_iter`` with one ``policy.act`` call
  per agent turn. ``collector_vs_naive`` = collector tokens/s / naive tokens/s (target ≥ 5 at
  G = 5, B = 8 on the hierarchy). The naive loop runs on ``--naive-questions`` questions only
  (it is slow); tokens/s is comparable across sizes.
* **teacher scoring**: one ``Teacher.score`` prefill over the whole ``TeamBatch``, as a fraction
  of the collector's time (target < 0.25).

    python benchmarks/rollout_throughput.py --out runs/benchmarks/rollout_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from agents.hf_policy import HFPolicy
from agents.sampling import SamplingConfig
from agents.tiny_model import TinyModelConfig, build_tiny_model, load_model
from agents.tokenizer import train_tokenizer
from envs import hierarchical_search_v0
from envs.synthwiki import load_default_world
from training.rollout import TeamRolloutCollector
from training.teacher import Teacher


class GenerateRecorder:
    """Stands in for the policy inside the collector: forwards ``generate`` and keeps every round."""

    def __init__(self, policy: HFPolicy):
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.rounds: list[tuple[list[list[int]], list[int], list[int]]] = []

    def generate(self, prompts, counts, seeds):
        self.rounds.append(([list(p) for p in prompts], list(counts), list(seeds)))
        return self.policy.generate(prompts, counts, seeds)


def build_policy(args, world) -> HFPolicy:
    if args.model:
        model, tokenizer = load_model(args.model, device=args.device)
    else:
        texts = [d.contents for d in world.corpus.documents] + [q.question for q in world.splits["train"]]
        tokenizer = train_tokenizer(texts, vocab_size=2048)
        model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=128, num_layers=2, intermediate_size=256, seed=0))
        model = model.to(args.device)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens)
    return HFPolicy(model, tokenizer, sampling, seed=0, max_batch_size=args.max_batch_size)


def naive_loop(policy: HFPolicy, questions, group_size: int, make_env) -> tuple[int, float]:
    tokens, start = 0, time.perf_counter()
    for question in questions:
        for g in range(group_size):
            env = make_env()
            env.reset(seed=g, options={"question": question})
            for agent in env.agent_iter():
                _, _, terminated, truncated, _ = env.last()
                if terminated or truncated:
                    env.step(None)
                    continue
                output = policy.act([env.turn(agent)])[0]
                tokens += output.output_tokens
                env.step(output)
    return tokens, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="saved model dir (default: a random tiny Qwen3)")
    parser.add_argument("--questions", type=int, default=8, help="B")
    parser.add_argument("--group-size", type=int, default=5, help="G")
    parser.add_argument("--naive-questions", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="torch device of the model, e.g. cuda")
    parser.add_argument("--out", default="runs/benchmarks/rollout_throughput.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    world = load_default_world()
    questions = world.splits["dev"][: args.questions]
    policy = build_policy(args, world)

    def make_env():
        return hierarchical_search_v0.env(split="dev", num_candidates=5)

    recorder = GenerateRecorder(policy)
    start = time.perf_counter()
    batch = TeamRolloutCollector(make_env, recorder).collect(questions, args.group_size, seed=0)
    collector_s = time.perf_counter() - start
    generated = sum(s.num_generated for s in batch.sequences)

    start = time.perf_counter()
    for prompts, counts, seeds in recorder.rounds:
        policy.generate(prompts, counts, seeds)
    ceiling_s = time.perf_counter() - start

    teacher = Teacher(policy.model, temperature=1.0)
    start = time.perf_counter()
    teacher.score(batch.token_batch(policy.pad_id), with_entropy=True)
    teacher_s = time.perf_counter() - start

    naive_tokens, naive_s = naive_loop(policy, questions[: args.naive_questions], args.group_size, make_env)

    result = {
        "command": "python benchmarks/rollout_throughput.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": args.threads,
                    "device": str(next(policy.model.parameters()).device),
                    "load_average_at_end": os.getloadavg()},
        "setting": {"workflow": "hierarchical", "B": args.questions, "G": args.group_size, "answer_candidates": 5,
                    "max_new_tokens": args.max_new_tokens, "model": args.model or "random tiny Qwen3 (hidden 128, 2 layers)"},
        "collector": {"seconds": collector_s, "generated_tokens": generated, "tokens_per_s": generated / collector_s,
                      "rounds": len(recorder.rounds), "sequences": len(batch.sequences)},
        "ceiling": {"seconds": ceiling_s, "tokens_per_s": generated / ceiling_s},
        "naive": {"seconds": naive_s, "generated_tokens": naive_tokens, "tokens_per_s": naive_tokens / naive_s,
                  "questions": args.naive_questions},
        "teacher_scoring": {"seconds": teacher_s},
        "ratios": {
            "collector_vs_ceiling": ceiling_s / collector_s,
            "collector_vs_naive": (generated / collector_s) / (naive_tokens / naive_s),
            "teacher_scoring_fraction_of_rollout": teacher_s / collector_s,
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result["ratios"], indent=2))
    return result


if __name__ == "__main__":
    main()
