"""Rollout throughput: the team collector against HF ``generate`` ceilings, the chunked engine and a naive loop.

Everything is measured in one run, on one model and the same prompts (these machines are noisy;
compare figures within a run). Every path is timed warm: the collector after one untimed collection
of the same questions, then ``release_cache()``, so each timed collection starts with an empty KV
cache and prefix store; the ``generate`` ceilings after an untimed first batch. ``--repeats`` times
the collector, the Teacher and the dynamic-cache ceiling that many times, alternating, and reports
each repeat and the median ratios (one repeat's slow moment does not decide a target):

* **collector (continuous)**: ``TeamRolloutCollector`` with ``HFPolicy(engine="continuous")``, the
  default: every round's rows go through one decode loop over ``--max-batch-size`` KV-cache slots,
  refilled as rows finish (``maopd.agents.decode_engine``; ``--compile`` puts its decode step under
  ``torch.compile``, e.g. ``reduce-overhead`` on GPU). Its engine reports the mean number of live
  rows per decode step.
* **collector (chunked)**: the same collection with ``HFPolicy(engine="chunked")`` (fixed chunks of
  ``--max-batch-size`` rows that shrink as rows finish), same seeds.
* **ceilings**: HF ``model.generate`` on the collector's own rows (every prompt of every round, once
  per candidate), in batches of the collector's mean live rows, each row sampling exactly the
  collector's mean tokens per row (``min_new_tokens = max_new_tokens``): with the dynamic cache, and
  with ``cache_implementation="static"`` (on CUDA every batch is left-padded to one width, so the
  static shapes repeat and HF's own compiled decode step is compiled once; the first batch is a
  warm-up and is not timed). These are the best decode this library stack does on the machine.
* **teacher scoring**: ``Teacher.score`` over the collector's ``TeamBatch`` as the trainer calls it
  (the rows a default Stage II step's losses read, which with the default KL-in-reward are all of
  them; each distinct prefix scored once, in token trees), as a fraction of the continuous
  collector's time; and, for reference, every row scored by whole-row forwards with no prefix
  shared, in batches of 16,384 tokens and at the Teacher's default batch size, and the Searcher
  rows only (OPD without KL-in-reward).
* **naive**: PettingZoo's ``agent_iter`` with one ``policy.act`` call per agent turn, on
  ``--naive-questions`` questions (it is slow; tokens/s is comparable across sizes).

The default setting is the paper's (B = 32, G = 5, hierarchy with 3 Searchers, 5 answer candidates,
512 new tokens, up to 512 rows per decode batch); ``--small`` is the CPU setting (B = 8, G = 5, 48 new
tokens, 64 rows). Targets: on CPU, collector ≥ 1.0× dynamic-cache ``generate`` and Teacher scoring
≤ 0.25 of rollout time; on GPU, collector ≥ 0.6× static-cache ``generate`` and ≥ 15× the chunked engine.

    python benchmarks/rollout_throughput.py --small --model models/base-<hash> \\
        --out runs/benchmarks/rollout_throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from maopd.agents.hf_policy import HFPolicy
from maopd.agents.sampling import SamplingConfig
from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model, load_model
from maopd.agents.tokenizer import train_tokenizer
from maopd.base.arguments import positive_int
from maopd.base.json_files import write_json
from maopd.envs import hierarchical_search_v1
from maopd.envs.synthwiki import load_default_world
from maopd.evaluation.provenance import git_commit
from maopd.training.rollout import TeamRolloutCollector
from maopd.training.teacher import Teacher, teacher_rows

PAPER = {
    "questions": 32,
    "group_size": 5,
    "max_new_tokens": 512,
    "max_batch_size": 512,
    "naive_questions": 1,
    "repeats": 1,
}
SMALL = {
    "questions": 8,
    "group_size": 5,
    "max_new_tokens": 48,
    "max_batch_size": 64,
    "naive_questions": 2,
    "repeats": 3,
}


class GenerateRecorder:
    """Stands in for the policy inside the collector: forwards ``generate`` and keeps every round."""

    def __init__(self, policy: HFPolicy):
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.rounds: list[tuple[list[list[int]], list[int], list[int]]] = []

    def generate(self, prompts, counts, seeds):
        self.rounds.append(([list(p) for p in prompts], list(counts), list(seeds)))
        return self.policy.generate(prompts, counts, seeds)


def load(args, world):
    if args.model:
        dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
        return load_model(args.model, dtype=getattr(torch, dtype), device=args.device)
    texts = [d.contents for d in world.corpus.documents] + [q.question for q in world.splits["train"]]
    tokenizer = train_tokenizer(texts, vocab_size=2048)
    model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=128, num_layers=2, intermediate_size=256, seed=0))
    return model.to(args.device), tokenizer


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


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


def collect(policy, make_env, questions, group_size, device):
    recorder = GenerateRecorder(policy)
    synchronize(device)
    start = time.perf_counter()
    batch = TeamRolloutCollector(make_env, recorder).collect(questions, group_size, seed=0)
    synchronize(device)
    return batch, recorder.rounds, time.perf_counter() - start


@torch.inference_mode()
def generate_ceiling(
    model, rows: list[list[int]], batch_size: int, new_tokens: int, pad_id: int, device: str, static: bool
) -> dict:
    """HF ``generate`` over ``rows`` (sorted by length) in full batches of ``batch_size``, each row
    sampling exactly ``new_tokens`` tokens; the first batch warms up and is not timed."""
    rows = sorted(rows, key=len)
    batches = [rows[i : i + batch_size] for i in range(0, len(rows) - batch_size + 1, batch_size)]
    if len(batches) < 2:
        batches = [rows[:batch_size]] * 2  # too few rows: time a repeat of the only batch
    # On CUDA, where HF compiles the static-cache step, one width for all batches (one compiled
    # shape); on CPU nothing is compiled, so each batch keeps its own width.
    common = max(len(r) for r in rows) if device.startswith("cuda") else None
    options = {
        "do_sample": True,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "max_new_tokens": new_tokens,
        "min_new_tokens": new_tokens,
        "pad_token_id": pad_id,
    }
    if static:
        options["cache_implementation"] = "static"
    seconds, tokens = 0.0, 0
    for index, chunk in enumerate(batches):
        width = common if static and common else max(len(r) for r in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(chunk):
            ids[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
        synchronize(device)
        start = time.perf_counter()
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **options)
        synchronize(device)
        if index:
            seconds += time.perf_counter() - start
            tokens += len(chunk) * (out.shape[1] - width)
    return {
        "batch_size": batch_size,
        "new_tokens_per_row": new_tokens,
        "timed_batches": len(batches) - 1,
        "prompt_width": "one width for all batches" if static and common else "per batch",
        "seconds": seconds,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / seconds,
    }


def time_teacher(teacher: Teacher, tokens, rows=None, keys=None) -> float:
    start = time.perf_counter()
    teacher.score(tokens, rows=rows, share_keys=keys)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help=f"the CPU setting {SMALL} instead of the paper's {PAPER}")
    parser.add_argument("--model", default="", help="saved model dir (default: a random tiny Qwen3)")
    parser.add_argument("--questions", type=positive_int, help="B")
    parser.add_argument("--group-size", type=positive_int, help="G")
    parser.add_argument("--naive-questions", type=positive_int)
    parser.add_argument("--max-new-tokens", type=positive_int)
    parser.add_argument("--max-batch-size", type=positive_int, help="decode slots / chunk rows of the collector")
    parser.add_argument("--repeats", type=positive_int, help="timed collector / Teacher / dynamic-ceiling repeats")
    parser.add_argument("--compile", default=None, help="torch.compile mode of the continuous engine's decode step")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: chunked, static, naive")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--device", default="cpu", help="torch device of the model, e.g. cuda")
    parser.add_argument("--dtype", default=None, help="model dtype (default: bfloat16 on CUDA, float32 on CPU)")
    parser.add_argument("--out", default="runs/benchmarks/rollout_throughput.json")
    args = parser.parse_args(argv)
    for name, value in (SMALL if args.small else PAPER).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(args.threads)

    world = load_default_world()
    questions = world.splits["dev"][: args.questions]
    model, tokenizer = load(args, world)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens)

    def policy(engine, compile=None):
        return HFPolicy(
            model, tokenizer, sampling, seed=0, max_batch_size=args.max_batch_size, engine=engine, compile=compile
        )

    def make_env():
        return hierarchical_search_v1.env(split="dev", num_candidates=5, num_searchers=3)

    load_at_start = os.getloadavg()
    continuous = policy("continuous", args.compile)
    # The warm-up (and, compiled, the compilation): the same collection once, untimed; its KV cache
    # and prefix store are then emptied, so that no timed collection continues the warm-up's rows.
    collect(continuous, make_env, questions, args.group_size, args.device)
    continuous.release_cache()
    teacher = Teacher(model, temperature=1.0)
    repeats = []
    for _ in range(args.repeats):
        continuous.decoder.stats = dict.fromkeys(continuous.decoder.stats, 0)
        batch, rounds, collector_s = collect(continuous, make_env, questions, args.group_size, args.device)
        stats = dict(continuous.decoder.stats)
        continuous.release_cache()  # a compiled engine keeps its KV cache; the other parts need the memory
        generated = sum(s.num_generated for s in batch.sequences)
        rows = [prompt for prompts, counts, _ in rounds for prompt, n in zip(prompts, counts) for _ in range(n)]
        live = stats["live_row_steps"] / max(stats["decode_steps"], 1)
        tokens, roles = batch.token_batch(continuous.pad_id), batch.role_ids()
        trainer_rows = teacher_rows(roles, ("searcher",), kl_in_reward=True, kl_loss=False)  # the Stage II default
        keys = [s.group for s in batch.sequences]  # as the trainer passes them
        teacher_s = time_teacher(teacher, tokens, trainer_rows, keys)
        per_row = max(1, round(generated / len(rows)))
        ceiling_batch = max(1, min(round(live), len(rows)))
        dynamic = generate_ceiling(model, rows, ceiling_batch, per_row, continuous.pad_id, args.device, static=False)
        repeats.append(
            {
                "collector_s": collector_s,
                "generated_tokens": generated,
                "teacher_s": teacher_s,
                "generate_dynamic": dynamic,
                "engine_stats": stats,
                "mean_live_rows": live,
            }
        )
        print(
            json.dumps(
                {
                    "collector_tokens_per_s": generated / collector_s,
                    "generate_dynamic_tokens_per_s": dynamic["tokens_per_s"],
                    "teacher_fraction": teacher_s / collector_s,
                }
            ),
            flush=True,
        )
    collector_s = statistics.median(r["collector_s"] for r in repeats)
    result = {
        "command": "python benchmarks/rollout_throughput.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": git_commit(short=True),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch_threads": args.threads,
            "device": str(next(model.parameters()).device),
            "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
            "torch": torch.__version__,
            "load_average_at_start": load_at_start,
        },
        "setting": {
            "workflow": "hierarchical",
            "B": args.questions,
            "G": args.group_size,
            "searchers": 3,
            "answer_candidates": 5,
            "max_new_tokens": args.max_new_tokens,
            "max_batch_size": args.max_batch_size,
            "compile": args.compile,
            "repeats": args.repeats,
            "dtype": str(next(model.parameters()).dtype),
            "model": args.model or "random tiny Qwen3 (hidden 128, 2 layers)",
        },
        # Every repeat generates the same rows (same seeds); times are medians over the repeats.
        "collector_continuous": {
            "seconds": collector_s,
            "seconds_per_repeat": [r["collector_s"] for r in repeats],
            "generated_tokens": generated,
            "tokens_per_s": generated / collector_s,
            "rounds": len(rounds),
            "rows": len(rows),
            "sequences": len(batch.sequences),
            "mean_live_rows": live,
            "engine_stats": stats,
        },
        "generate_dynamic": {
            **dynamic,
            "seconds": statistics.median(r["generate_dynamic"]["seconds"] for r in repeats),
            "seconds_per_repeat": [r["generate_dynamic"]["seconds"] for r in repeats],
        },
    }
    result["generate_dynamic"]["tokens_per_s"] = dynamic["generated_tokens"] / result["generate_dynamic"]["seconds"]

    if "chunked" not in skip:
        _, _, chunked_s = collect(policy("chunked"), make_env, questions, args.group_size, args.device)
        result["collector_chunked"] = {"seconds": chunked_s, "tokens_per_s": generated / chunked_s}

    result["teacher_scoring"] = {
        "seconds": statistics.median(r["teacher_s"] for r in repeats),
        "seconds_per_repeat": [r["teacher_s"] for r in repeats],
        "rows": int(trainer_rows.sum()),
        "all_rows_no_sharing_16384_tokens_s": time_teacher(
            Teacher(model, temperature=1.0, max_batch_tokens=16384, share_prefixes=False), tokens
        ),
        "all_rows_no_sharing_s": time_teacher(Teacher(model, temperature=1.0, share_prefixes=False), tokens),
        "searcher_rows_only_s": time_teacher(teacher, tokens, teacher_rows(roles, ("searcher",), False, False), keys),
        "max_batch_tokens": teacher.max_batch_tokens,
    }

    if "static" not in skip:
        result["generate_static"] = generate_ceiling(
            model, rows, ceiling_batch, per_row, continuous.pad_id, args.device, static=True
        )

    if "naive" not in skip:
        naive_tokens, naive_s = naive_loop(
            policy("continuous"), questions[: args.naive_questions], args.group_size, make_env
        )
        result["naive"] = {
            "seconds": naive_s,
            "generated_tokens": naive_tokens,
            "tokens_per_s": naive_tokens / naive_s,
            "questions": args.naive_questions,
        }

    rate = generated / collector_s
    per_repeat = [r["generated_tokens"] / r["collector_s"] / r["generate_dynamic"]["tokens_per_s"] for r in repeats]
    teacher_per_repeat = [r["teacher_s"] / r["collector_s"] for r in repeats]
    ratios = {
        "collector_vs_generate_dynamic": statistics.median(per_repeat),
        "collector_vs_generate_dynamic_per_repeat": per_repeat,
    }
    if "generate_static" in result:
        ratios["collector_vs_generate_static"] = rate / result["generate_static"]["tokens_per_s"]
    if "collector_chunked" in result:
        ratios["collector_vs_chunked_collector"] = result["collector_chunked"]["seconds"] / collector_s
    ratios["teacher_scoring_fraction_of_rollout"] = statistics.median(teacher_per_repeat)
    ratios["teacher_scoring_fraction_of_rollout_per_repeat"] = teacher_per_repeat
    ratios["teacher_scoring_fraction_searcher_rows_only"] = (
        result["teacher_scoring"]["searcher_rows_only_s"] / collector_s
    )
    ratios["teacher_scoring_fraction_all_rows_no_sharing_16384_tokens"] = (
        result["teacher_scoring"]["all_rows_no_sharing_16384_tokens_s"] / collector_s
    )
    if "naive" in result:
        ratios["collector_vs_naive"] = rate / result["naive"]["tokens_per_s"]
    result["ratios"] = ratios
    result["machine"]["load_average_at_end"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(args.out), result, indent=2)
    print(json.dumps(ratios, indent=2))
    return result


if __name__ == "__main__":
    main()
