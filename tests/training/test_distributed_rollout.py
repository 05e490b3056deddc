"""Ray rollouts: two local workers give exactly the single-process records; a dead worker is replaced."""

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from maopd.agents.hf_policy import HFPolicy  # noqa: E402
from maopd.agents.sampling import SamplingConfig  # noqa: E402
from maopd.agents.tiny_model import build_tiny_lm, load_model, save_model  # noqa: E402
from maopd.envs import hierarchical_search_v1  # noqa: E402
from maopd.envs.synthwiki import load_default_world  # noqa: E402
from maopd.training.distributed_rollout import RayRolloutCollector, RayRolloutConfig, _shards  # noqa: E402
from maopd.training.rollout import TeamRolloutCollector  # noqa: E402

ENV = {"max_steps": 5, "num_searchers": 2, "split": "dev"}
SAMPLING = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=6)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    world = load_default_world()
    model, tokenizer = build_tiny_lm([q.question for q in world.splits["dev"][:50]], vocab_size=600)
    return save_model(model, tokenizer, tmp_path_factory.mktemp("model"))


def test_shards_cover_every_question_once():
    assert [list(r) for r in _shards(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [list(r) for r in _shards(1, 3)] == [[0]]


@pytest.mark.slow
def test_two_workers_match_one_process_and_survive_a_worker_death(model_dir, tmp_path):
    questions = load_default_world().splits["dev"][:3]
    model, tokenizer = load_model(model_dir)
    local = TeamRolloutCollector(lambda: hierarchical_search_v1.env(**ENV), HFPolicy(model, tokenizer, SAMPLING))
    expected = local.collect(questions, 2, seed=9)

    collector = RayRolloutCollector(
        model_dir, "hierarchical", SAMPLING, tmp_path, RayRolloutConfig(num_workers=2, env_kwargs=ENV)
    )
    try:
        got = collector.collect(questions, 2, seed=9)
        assert [s.input_ids for s in got.sequences] == [s.input_ids for s in expected.sequences]
        assert [(s.group, s.trajectory, s.call_id, s.candidate) for s in got.sequences] == [
            (s.group, s.trajectory, s.call_id, s.candidate) for s in expected.sequences
        ]
        assert [[r.candidates for r in row] for row in got.records] == [
            [r.candidates for r in row] for row in expected.records
        ]

        ray.kill(collector.workers[0])
        again = collector.collect(questions, 2, seed=9)
        assert [s.input_ids for s in again.sequences] == [s.input_ids for s in expected.sequences]
        # Ray's files live under the run directory, or in the short folder its ray_dir names
        named = tmp_path / "ray_dir"
        ray_dir = Path(named.read_text().strip()) if named.is_file() else tmp_path / "ray"
        assert any(ray_dir.glob("session_*"))
    finally:
        collector.shutdown()
        ray.shutdown()
