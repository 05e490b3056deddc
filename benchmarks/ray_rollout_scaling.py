"""Rollout tokens per second with 2 Ray workers against 1, on the same model, questions and seed.

Both collections produce the identical ``TeamBatch`` (tested in tests/training/test_distributed_rollout.py),
so the ratio compares the same work. Each worker runs one torch thread; the single-worker run is
the baseline of the same run.

    python benchmarks/ray_rollout_scaling.py --out runs/benchmarks/ray_rollout_scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from maopd.agents.sampling import SamplingConfig
from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model, save_model
from maopd.agents.tokenizer import train_tokenizer
from maopd.base.arguments import positive_int
from maopd.base.json_files import write_json
from maopd.envs.synthwiki import load_default_world
from maopd.training.distributed_rollout import RayRolloutCollector, RayRolloutConfig


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="saved model dir (default: a random tiny Qwen3)")
    parser.add_argument("--questions", type=positive_int, default=8)
    parser.add_argument("--group-size", type=positive_int, default=5)
    parser.add_argument("--max-new-tokens", type=positive_int, default=32)
    parser.add_argument("--out", default="runs/benchmarks/ray_rollout_scaling.json")
    args = parser.parse_args(argv)

    import ray

    world = load_default_world()
    questions = world.splits["dev"][: args.questions]
    work = Path(tempfile.mkdtemp(prefix="ray-bench-"))
    model_dir = args.model
    if not model_dir:
        tokenizer = train_tokenizer([d.contents for d in world.corpus.documents], vocab_size=2048)
        model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=128, num_layers=2, intermediate_size=256))
        model_dir = str(save_model(model, tokenizer, work / "model"))
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens)
    env = {"split": "dev", "num_candidates": 5}

    runs = {}
    for workers in (1, 2):
        collector = RayRolloutCollector(
            model_dir, "hierarchical", sampling, work, RayRolloutConfig(num_workers=workers, env_kwargs=env)
        )
        start = time.perf_counter()
        batch = collector.collect(questions, args.group_size, seed=0)
        seconds = time.perf_counter() - start
        tokens = sum(s.num_generated for s in batch.sequences)
        runs[workers] = {"seconds": seconds, "generated_tokens": tokens, "tokens_per_s": tokens / seconds}
        collector.shutdown()
        ray.shutdown()

    result = {
        "command": "python benchmarks/ray_rollout_scaling.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "setting": {
            "workflow": "hierarchical",
            "B": args.questions,
            "G": args.group_size,
            "max_new_tokens": args.max_new_tokens,
            "model": args.model or "random tiny Qwen3 (hidden 128, 2 layers)",
        },
        "workers": runs,
        "ratio_2_workers_vs_1": runs[2]["tokens_per_s"] / runs[1]["tokens_per_s"],
        "same_tokens": runs[1]["generated_tokens"] == runs[2]["generated_tokens"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(args.out), result, indent=2)
    print(json.dumps({"ratio_2_workers_vs_1": result["ratio_2_workers_vs_1"], "same_tokens": result["same_tokens"]}))
    return result


if __name__ == "__main__":
    main()
