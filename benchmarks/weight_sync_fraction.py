"""Weight-sync time as a fraction of a training step, measured in one run.

One Stage I step of the trainer (rollout + PPO update, HF backend) on the given model, then the
vLLM engine's weight sync after that update (``VLLMPolicy.sync_weights``: save the weights, reload
them in the engine), repeated ``--syncs`` times. Needs the vLLM venv (scripts/setup_vllm.sh).

    python benchmarks/weight_sync_fraction.py --model DIR --out runs/benchmarks/weight_sync_fraction.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from maopd.agents.vllm_policy import VLLMPolicy
from maopd.base.arguments import positive_int
from maopd.base.atomic import copy_directory
from maopd.base.json_files import write_json
from maopd.base.machine import machine
from maopd.training.config import build_config
from maopd.training.trainer import Trainer


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="saved model dir (e.g. the cached π_0)")
    parser.add_argument("--syncs", type=positive_int, default=5)
    parser.add_argument("--out", default="runs/benchmarks/weight_sync_fraction.json")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="sync-bench-"))
    config = build_config(
        {
            "stage": "stage1",
            "steps": 1,
            "run_dir": str(work / "run"),
            "model": {"path": args.model},
            "rollout": {"batch_size": 8, "group_size": 4, "max_new_tokens": 48},
        }
    )
    trainer = Trainer(config)
    start = time.perf_counter()
    trainer.train_step()
    step_s = time.perf_counter() - start

    engine_dir = work / "engine"
    copy_directory(args.model, engine_dir)
    engine = VLLMPolicy(engine_dir)
    try:
        syncs = []
        for _ in range(args.syncs):
            start = time.perf_counter()
            engine.sync_weights(trainer.model)
            syncs.append(time.perf_counter() - start)
    finally:
        engine.close()

    result = {
        "command": "python benchmarks/weight_sync_fraction.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {**machine(), "load_average_at_end": os.getloadavg()},
        "setting": {"stage": "stage1", "B": 8, "G": 4, "max_new_tokens": 48, "model": args.model},
        "train_step_s": step_s,
        "sync_s": syncs,
        "sync_fraction_of_step_median": statistics.median(syncs) / step_s,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(args.out), result, indent=2)
    print(
        json.dumps(
            {
                "train_step_s": step_s,
                "sync_s_median": statistics.median(syncs),
                "fraction": result["sync_fraction_of_step_median"],
            }
        )
    )
    return result


if __name__ == "__main__":
    main()
