"""Do a rollout's sampling log-probs (π_old) equal a fresh re-score of the same token ids? Ad hoc.

    python benchmarks/results/dev_tuning_session3/checks/logprob_check.py STAGE_CONFIG.yaml

Collects one Stage batch (4 questions) with the config's policy and prints, per role id
(1 Searcher, 2 Answerer), the mean and max absolute difference over generated tokens.
"""

import sys

import torch

from training.config import load_config
from training.token_scoring import score_tokens
from training.trainer import Trainer

config = load_config(sys.argv[1], ["rollout.batch_size=4", "run_dir=/tmp/logprob_check"])
trainer = Trainer(config)
batch, _ = trainer.collect()
tokens = batch.token_batch(trainer.tokenizer.pad_token_id)
roles = batch.role_ids()
with torch.no_grad():
    rescored = score_tokens(trainer.model, tokens, config.rollout.temperature).logprobs
difference = (rescored - batch.old_logprobs()).abs()
for role in roles.unique():
    mask = tokens.response_mask.bool() & (roles == role)[:, None]
    print(f"role {int(role)}: {int(mask.sum())} tokens, mean |diff| {float(difference[mask].mean()):.3g}, "
          f"max {float(difference[mask].max()):.3g}")
