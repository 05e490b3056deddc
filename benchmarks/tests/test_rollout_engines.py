"""benchmarks/rollout_engines.py on the tiny Stage I: both engines, one repeat, a JSON and a README."""

import json

import pytest

from benchmarks.rollout_engines import main
from tests.vllm_support import require_vllm_python


@pytest.mark.slow
def test_times_each_engine_and_writes_json_and_readme(tmp_path):
    require_vllm_python()
    argv = ["--config", "configs/tiny_cpu_stage1.yaml", "--steps", "2", "--repeats", "1", "--out", str(tmp_path)]
    main([*argv, "model.tiny.head_dim=32", "rollout.max_new_tokens=4", "env.max_steps=3"])
    result = json.loads((tmp_path / "rollout_engines.json").read_text())
    assert [run["engine"] for run in result["runs"]] == ["continuous", "vllm"]
    assert all(len(run["steps"]) == 2 for run in result["runs"])
    assert "time/weight_sync_s" in result["runs"][1]["steps"][0]
    assert result["summary"]["vllm"]["median_step_time_ratio_to_continuous"] > 0
    assert result["command"] in (tmp_path / "README.md").read_text()
