"""The non-finite dump holds plain data only: it loads with ``weights_only=True``, so inspecting a
run directory never runs code from it."""

from __future__ import annotations

import math

import numpy as np
import torch

from maopd.envs.records import RewardParts, WorkflowRecord
from maopd.training.nonfinite import save_nonfinite_step


def test_the_dump_loads_with_weights_only(tmp_path):
    tensors = {"rewards/searcher": torch.tensor([1.0, float("nan")])}
    rewards = RewardParts(em=np.float64("nan"), searchers={"searcher_0": np.float32(0.5)})
    records = [[WorkflowRecord(question="x", rewards=rewards, selected_reports=(1, 2), duration_s=np.int64(3))]]
    path = save_nonfinite_step(tmp_path, 2, ValueError("boom"), tensors, records, ["q"])
    saved = torch.load(path, weights_only=True)
    record = saved["records"][0][0]
    assert math.isnan(record["rewards"]["em"]) and record["rewards"]["searchers"]["searcher_0"] == 0.5
    assert record["selected_reports"] == [1, 2] and record["duration_s"] == 3 and record["question"] == "x"
    assert torch.isnan(saved["tensors"]["rewards/searcher"][1]) and saved["error"] == "boom"
