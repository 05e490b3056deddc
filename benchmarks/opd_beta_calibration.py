"""Choose the OPD coefficient β on dev: the Searcher's OPD gradient against the Leader's and Answerer's GRPO gradient.

Stage II gives Searcher tokens the advantage β·log(π_T/π_old) (Eq. 5) and Leader/Answerer tokens
role-normalised GRPO advantages (Eq. 1). β sets how hard the Searchers are pulled relative to the
other roles. The paper's β = 0.01 was chosen for a 7B model whose Teacher–student log-ratios are
its own; on another model and Teacher the same β can make the Searcher term vanish or dominate.

At the start of an update the policy is π_old, so every PPO ratio is 1, no clipping is active and
the surrogate's gradient is Σ_t A_t ∇log π(a_t) / D: **linear in the advantages**. The Searcher
part is therefore β times its gradient at β = 1. For each of ``--batches`` Stage II batches on
dev questions (the default preset's Stage II config, from π_0 with the run's Teacher), this script
computes, on the same rows and denominator,

* g_S: the norm of the surrogate's gradient with only Searcher advantages, at β = 1;
* g_LA: the norm with only Leader and Answerer advantages (entropy bonus and extras off);

and reports β* = median(g_LA / g_S), the β at which the two norms are equal, with the range
[0.3, 3]·β* in which they stay within 0.3–3× of each other. A batch whose GRPO groups all share
one outcome has g_LA = 0 and is counted but left out of the median.

    python benchmarks/opd_beta_calibration.py --run-dir runs/main --batches 6 \\
        --out benchmarks/results/opd_beta/calibration.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.provenance import git_commit
from maopd.config import ConfigError
from maopd.pipeline import load_preset, stage_config, stage_dir
from training.base_model import load_or_build_base_model
from training.losses import ANSWERER, LEADER, SEARCHER
from training.trainer import Trainer


def role_gradient_norms(trainer: Trainer, batch) -> dict[str, float]:
    """Gradient norms of the surrogate with the advantages of one role group kept, the rest zeroed."""
    advantages = batch.advantages.token_advantages
    groups = {"searcher": batch.role_ids == SEARCHER,
              "leader_answerer": (batch.role_ids == LEADER) | (batch.role_ids == ANSWERER)}
    rows = torch.arange(batch.num_sequences)
    norms = {}
    trainer.model.train()
    for name, keep in groups.items():
        batch.advantages.token_advantages = advantages * keep[:, None]
        trainer.model.zero_grad(set_to_none=True)
        terms, _ = trainer._micro_loss(batch, rows, with_grad=True)
        terms.loss.backward()
        grads = [p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]
        norms[name] = float(torch.cat(grads).norm()) if grads else 0.0
    batch.advantages.token_advantages = advantages
    trainer.model.zero_grad(set_to_none=True)
    trainer.model.eval()
    return norms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", required=True, help="a main-job run directory whose Stage I is done (its Teacher)")
    parser.add_argument("--preset", default="default")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the figures here (JSON)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="pipeline overrides, e.g. stage2.rollout.batch_size=8")
    args = parser.parse_args(argv)
    try:
        pipeline = load_preset(args.preset, [f"run_dir={args.run_dir}", *args.overrides])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    teacher = stage_dir(pipeline, "stage1", "full")
    if not (teacher / "config.yaml").is_file():
        print(f"error: {teacher} holds no Stage I run; run `maopd train` first (its Teacher is needed)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    base_model = load_or_build_base_model(pipeline.base_model)
    with tempfile.TemporaryDirectory() as scratch:
        config = stage_config(pipeline, "stage2", "full", base_model, teacher)
        # β = 1 (the Searcher gradient is linear in β), dev questions, the surrogate alone
        config = replace(config, seed=args.seed, run_dir=scratch)
        config.advantage.opd_beta = 1.0
        config.ppo.entropy_coef = 0.0
        config.ptx.coef = 0.0
        config.env.split = "dev"
        config.rollout.first_question = 0
        config.logging.tensorboard = False
        config.logging.progress = False
        config.validate()
        trainer = Trainer(config)
        rows = []
        for index in range(args.batches):
            batch, _ = trainer.collect()
            ppo_batch, metrics = trainer.prepare(batch)
            norms = role_gradient_norms(trainer, ppo_batch)
            ratio = norms["leader_answerer"] / norms["searcher"] if norms["searcher"] > 0 else None
            rows.append({"batch": index, **norms, "beta_equal_norms": ratio,
                         "searcher_kl_k1": metrics.get("teacher/searcher_kl_k1")})
            print(json.dumps(rows[-1]), flush=True)
    usable = [r["beta_equal_norms"] for r in rows if r["beta_equal_norms"] and r["leader_answerer"] > 0]
    beta = statistics.median(usable) if usable else None
    result = {
        "command": " ".join(["python benchmarks/opd_beta_calibration.py", *(argv if argv is not None else sys.argv[1:])]),
        "commit": git_commit(short=True),
        "seed": args.seed, "batches": rows, "usable_batches": len(usable),
        "beta_equal_norms": beta,
        "beta_range_0.3_to_3x": [0.3 * beta, 3 * beta] if beta else None,
        "paper_beta": 0.01,
        "paper_beta_norm_ratio": (0.01 / beta) if beta else None,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "batches"}, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
