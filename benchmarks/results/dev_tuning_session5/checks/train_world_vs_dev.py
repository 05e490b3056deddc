"""Does Stage I learn a skill or the training entities? π_0 and a Stage I checkpoint in the
cascade (temperature 0.6, top-p 0.95, as in evaluation) on training questions RL never drew
(train[1500:], whose entities RL saw in other questions) and on dev questions (unseen entities).

    python benchmarks/results/dev_tuning_session5/checks/train_world_vs_dev.py STAGE1_MODEL_DIR
"""
import sys

import numpy as np
import torch

from agents.hf_policy import HFPolicy
from agents.sampling import SamplingConfig
from agents.tiny_model import load_model
from envs import cascade_search_v0
from envs.synthwiki import load_default_world
from training.rollout import TeamRolloutCollector

torch.set_num_threads(1)
world = load_default_world()
pools = {"train[1500:] (RL never drew them)": world.splits["train"][1500:], "dev": world.splits["dev"]}
for label, model_dir in [("pi0", "models/base-918471c982c40eb3"), ("stage1", sys.argv[1])]:
    model, tokenizer = load_model(model_dir)
    model.eval()
    policy = HFPolicy(model, tokenizer, SamplingConfig(temperature=0.6, top_p=0.95, max_new_tokens=64),
                      seed=0, max_batch_size=64)
    collector = TeamRolloutCollector(lambda: cascade_search_v0.env(num_candidates=1), policy)
    for name, questions in pools.items():
        ems = []
        for kind in ("lookup", "composition", "comparison"):
            chosen = [q for q in questions if q.metadata.get("type") == kind][:40]
            batch = collector.collect(chosen, 4, seed=1)
            ems.append(float(np.mean([r["rewards"]["em"] for row in batch.records for r in row])))
        print(label, name, "lookup / composition / comparison EM:", [round(e, 3) for e in ems],
              "mean", round(float(np.mean(ems)), 3), flush=True)
