"""The non-finite dump holds plain data only: it loads with ``weights_only=True``, so inspecting a
run directory never runs code from it."""

from __future__ import annotations

import math

import numpy as np
import torch

from maopd.training.nonfinite import save_nonfinite_step


def test_the_dump_loads_with_weights_only(tmp_path):
    tensors = {"rewards/searcher": torch.tensor([1.0, float("nan")])}
    records = [[{"reward": np.float64("nan"), "pair": (1, 2), "count": np.int64(3), "text": "x"}]]
    path = save_nonfinite_step(tmp_path, 2, ValueError("boom"), tensors, records, ["q"])
    saved = torch.load(path, weights_only=True)
    record = saved["records"][0][0]
    assert math.isnan(record["reward"]) and record["pair"] == [1, 2] and record["count"] == 3
    assert torch.isnan(saved["tensors"]["rewards/searcher"][1]) and saved["error"] == "boom"
