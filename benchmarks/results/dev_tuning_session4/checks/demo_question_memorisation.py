import torch, numpy as np, sys
from agents.tiny_model import load_model
from agents.hf_policy import HFPolicy
from agents.sampling import SamplingConfig
from envs import cascade_search_v0
from envs.synthwiki import load_default_world
from training.rollout import TeamRolloutCollector
torch.set_num_threads(1)
model, tok = load_model("models/base-918471c982c40eb3")
model.eval()
pol = HFPolicy(model, tok, SamplingConfig(temperature=1.0, max_new_tokens=64), seed=0, max_batch_size=64)
w = load_default_world()
col = TeamRolloutCollector(lambda: cascade_search_v0.env(num_candidates=1), pol)
for name, qs in [("demo (train[:500])", w.splits["train"][:500]), ("unseen (train[500:])", w.splits["train"][500:]), ("dev", w.splits["dev"])]:
    for kind in ("lookup", "composition", "comparison"):
        sel = [q for q in qs if q.metadata.get("type") == kind][:40]
        b = col.collect(sel, 2, seed=1)
        em = np.mean([r["rewards"]["em"] for row in b.records for r in row])
        print(name, kind, len(sel), round(float(em), 3), flush=True)
