"""Each role's learning signal in config: the per-role map ``advantage.<role>_signal`` over one
registry of estimators that declare what they need, and a trainer that serves exactly that.

The plug-ins here are defined outside the package, as a user's would be: registered from this file,
they are served by what they declare (the Teacher's log-probs), never by their names; and a copy of
the registry in which ``opd`` has another name trains the same run.
"""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from maopd.base.config import ConfigError, dump_yaml, from_dict, to_dict, to_record
from maopd.envs import team
from maopd.envs.actions import LEADER, ROLES, SEARCHER
from maopd.training.advantages import (
    ADVANTAGE_ESTIMATORS,
    DEFAULT_SIGNALS,
    OUTCOMES,
    AdvantageConfig,
    EstimatorInputs,
    register_advantage_estimator,
    team_token_advantages,
)
from maopd.training.config import STAGE_SETTINGS, VARIANT_SETTINGS, TrainConfig, build_config, load_config
from maopd.training.marl.credit import CREDIT_METHODS, credit_method_needs, register
from maopd.training.marl.policy import MenuPolicy
from maopd.training.marl.trainer import MarlConfig, train
from maopd.training.model_loading import frozen_sources
from maopd.training.signals import Declared, Needs
from maopd.training.teacher import FrozenModels
from maopd.training.token_scoring import TokenBatch
from tests.training.test_advantages import _team_batch
from tests.training.test_teacher import _RecordingTeacher
from tests.training.test_trainer import _advantages, _role_tokens, scripted_batch  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def teacher_gap():
    """A plug-in that reads the Teacher: the Teacher's log-prob minus π_old's, times 2, on its role's
    tokens; each call's inputs are kept in ``calls``."""
    calls: list[EstimatorInputs] = []

    @register_advantage_estimator("teacher_gap_for_test", Needs(teacher=True))
    def gap(inputs: EstimatorInputs) -> torch.Tensor:
        calls.append(inputs)
        return 2.0 * (inputs.teacher_logprobs - inputs.old_logprobs)

    yield calls
    del ADVANTAGE_ESTIMATORS["teacher_gap_for_test"]


@pytest.fixture
def blind_constant():
    """A plug-in that declares nothing: it must not be handed the Teacher's log-probs."""
    calls: list[EstimatorInputs] = []

    @register_advantage_estimator("blind_for_test")
    def constant(inputs: EstimatorInputs) -> torch.Tensor:
        calls.append(inputs)
        return torch.full(inputs.response_mask.shape, 0.5)

    yield calls
    del ADVANTAGE_ESTIMATORS["blind_for_test"]


def test_every_registered_signal_declares_its_needs():
    for name, estimator in ADVANTAGE_ESTIMATORS.items():
        assert isinstance(estimator, Declared) and isinstance(estimator.needs, Needs), name
        assert estimator.needs.outcome in (None, *OUTCOMES), name
        assert estimator.fn.__doc__, name  # each says which equation it is
    assert ADVANTAGE_ESTIMATORS["opd"].needs == Needs(teacher=True)
    assert ADVANTAGE_ESTIMATORS["grpo"].needs == Needs(outcome="own")
    for name, method in CREDIT_METHODS.items():
        assert isinstance(method, Declared) and isinstance(method.needs, Needs), name
    # the option mode's opd is the same vocabulary: it declares the Teacher, and only it does
    assert [name for name in CREDIT_METHODS if credit_method_needs(name).teacher] == ["opd"]


def test_every_role_has_an_entry_in_the_map_with_a_registered_default():
    config = AdvantageConfig()
    built_in = {role: config.roles[role] for role in ROLES}
    assert list(config.roles)[: len(ROLES)] == list(ROLES)
    assert built_in == DEFAULT_SIGNALS and set(DEFAULT_SIGNALS.values()) <= set(ADVANTAGE_ESTIMATORS)
    # a role a workflow registered (the orchestra's Verifier) learns by grpo unless role_signals names it
    assert all(config.roles[role] == "grpo" for role in team.role_names() if role not in ROLES)
    with pytest.raises(ConfigError, match="leader_signal: 'judge' is not one of"):
        from_dict(AdvantageConfig, {"leader_signal": "judge"})


def test_an_outcome_outside_the_vocabulary_is_refused_at_registration():
    with pytest.raises(ValueError, match="outcome must be None or one of"):
        register_advantage_estimator("typo_for_test", Needs(outcome="final_EM"))
    assert "typo_for_test" not in ADVANTAGE_ESTIMATORS
    with pytest.raises(TypeError, match="needs must be a maopd.training.signals.Needs"):
        register_advantage_estimator("dict_for_test", {"teacher": True})


PAPER_MAPS = {  # the Searcher's entry of each stage run's map; the Leader and the Answerer keep grpo
    ("stage1", "full"): "grpo_rs",
    ("stage2", "full"): "opd",
    ("stage2", "outcome_searcher_rl"): "grpo_final_em",
    ("stage2", "base_model_teacher"): "opd",
    ("stage2", "no_searcher_supervision"): "none",
    ("stage2", "prompted_critic"): "grpo_rs",
}


def test_the_paper_variants_are_presets_over_the_map():
    assert {variant for stage, variant in PAPER_MAPS if stage == "stage2"} == set(VARIANT_SETTINGS)
    for (stage, variant), searcher in PAPER_MAPS.items():
        config = build_config({"stage": stage, "variant": variant, "teacher": {"path": "stage1"}})
        assert {role: config.advantage.roles[role] for role in ROLES} == {**DEFAULT_SIGNALS, "searcher": searcher}
    # the settings tables choose estimators only through entries of the map
    entries = {f"advantage.{role}_signal" for role in ROLES}
    for table in (*STAGE_SETTINGS.values(), *VARIANT_SETTINGS.values()):
        assert all(table[key] in ADVANTAGE_ESTIMATORS for key in entries & set(table))
        assert {key for key in table if key.startswith("advantage.") and key.endswith("_signal")} <= entries


def test_a_record_leaves_the_new_entries_out_at_their_default_and_keeps_them_otherwise():
    default = build_config({"stage": "stage1"})
    assert "leader_signal" not in to_record(default)["advantage"]
    assert list(to_record(default)["advantage"])[0] == "searcher_signal"  # where records have it
    assert "leader_signal" in to_dict(default)["advantage"]  # `maopd config show` lists the whole map
    changed = build_config({"stage": "stage1"}, ["advantage.answerer_signal=grpo_final_em"])
    record = to_record(changed)["advantage"]
    assert record["answerer_signal"] == "grpo_final_em" and "leader_signal" not in record
    assert from_dict(TrainConfig, to_record(changed)) == changed


@pytest.mark.parametrize(
    "path", sorted((ROOT / "benchmarks" / "results").rglob("config*.yaml")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_committed_run_records_load_and_record_their_searcher_entry_as_before(path):
    text = path.read_text(encoding="utf-8")
    config = load_config(path)
    saved = f"searcher_signal: {config.advantage.searcher_signal}\n"
    assert saved in text and saved in dump_yaml(to_record(config))
    assert "leader_signal" not in text and config.advantage.leader_signal == "grpo"


def test_a_plugin_that_declares_the_teacher_receives_its_log_probs(teacher_gap, blind_constant):
    batch = _team_batch()
    rewards = {
        "leader_rewards": torch.tensor([[0.9, 0.1]]),
        "answerer_rewards": torch.tensor([[[1.0, 0.0], [1.0, 1.0]]]),
    }
    config = AdvantageConfig(searcher_signal="teacher_gap_for_test", kl_in_reward_coef=0.0)
    result = team_token_advantages(**batch, **rewards, config=config)
    (inputs,) = teacher_gap
    assert inputs.role == "searcher" and inputs.teacher_logprobs is batch["teacher_logprobs"]
    searcher = _tokens(batch, SEARCHER)
    expected = 2.0 * (batch["teacher_logprobs"] - batch["old_logprobs"])
    assert torch.equal(result.token_advantages[searcher], expected[searcher])
    assert result.token_advantages[searcher].abs().max() > 0
    # one that declares nothing is not handed them, though the batch holds them
    team_token_advantages(**batch, **rewards, config=AdvantageConfig(leader_signal="blind_for_test"))
    (inputs,) = blind_constant
    assert inputs.role == "leader" and inputs.teacher_logprobs is None


def test_the_docs_plugin_example_runs_as_written():
    docs = (ROOT / "docs" / "algorithms.md").read_text(encoding="utf-8")
    section = docs[docs.index("### A plug-in estimator") :]
    block = re.search(r"```python\n(# my_estimators.py\n.*?)```", section, re.DOTALL).group(1)
    try:
        exec(compile(block, "my_estimators.py", "exec"), {})
        batch = _team_batch()
        config = AdvantageConfig(searcher_signal="opd_clipped_positive", kl_in_reward_coef=0.0)
        rewards = {"leader_rewards": torch.zeros(1, 2), "answerer_rewards": torch.zeros(1, 2, 2)}
        result = team_token_advantages(**batch, **rewards, config=config)
    finally:
        ADVANTAGE_ESTIMATORS.pop("opd_clipped_positive", None)
    searcher = _tokens(batch, SEARCHER)
    gain = (batch["teacher_logprobs"] - batch["old_logprobs"]).clamp(min=0)
    assert torch.equal(result.token_advantages[searcher], (0.01 * gain)[searcher])
    assert result.token_advantages[searcher].max() > 0


def _tokens(batch: dict, role: int) -> torch.Tensor:
    return batch["response_mask"].bool() & (batch["role_ids"] == role)[:, None]


def test_the_teacher_is_loaded_for_and_scores_the_roles_whose_estimator_declares_it(teacher_gap, blind_constant):
    """Not for a name: a plug-in reading it on the Leader gets the Leader's rows scored; a Searcher
    signal that does not declare it loads no Teacher, even with teacher.source set."""
    no_kl = {"advantage": {"kl_in_reward_coef": 0.0}, "teacher": {"path": "stage1"}}
    leader = build_config(copy.deepcopy(no_kl), ["advantage.leader_signal=teacher_gap_for_test"])
    assert leader.teacher_roles == ("leader", "searcher") and frozen_sources(leader) == ("checkpoint", None)
    blind = build_config(copy.deepcopy(no_kl), ["advantage.searcher_signal=blind_for_test"])
    assert blind.teacher_roles == () and frozen_sources(blind) == (None, None)
    # a role the workflow lacks reads nothing: Stage I has no Leader
    stage1 = build_config({"stage": "stage1"}, ["advantage.leader_signal=teacher_gap_for_test"])
    assert stage1.teacher_roles == () and frozen_sources(stage1) == (None, None)
    with pytest.raises(ConfigError, match="teacher.source: advantage.solver_signal 'teacher_gap_for_test' needs a"):
        build_config({"stage": "single"}, ["advantage.solver_signal=teacher_gap_for_test"])

    roles = torch.tensor([LEADER, SEARCHER, LEADER])
    batch = TokenBatch(torch.ones(3, 2, dtype=torch.long), torch.ones(3, 2), torch.ones(3, 2))
    teacher = _RecordingTeacher(-1.0)
    scores = FrozenModels(teacher, None).score(
        batch, roles, ("leader",), kl_in_reward=False, kl_loss=False, share_keys=[0, 0, 0]
    )
    assert teacher.calls == [[True, False, True]] and scores.teacher_rows.tolist() == [True, False, True]


def test_the_critic_needs_an_estimator_that_reads_r_s():
    with pytest.raises(
        ConfigError, match=r"searcher_reward 'critic' replaces R_S.*\['grpo', 'grpo_agentwise', 'grpo_rs'\]"
    ):
        build_config({"variant": "prompted_critic", "teacher": {"path": "stage1"}}, ["advantage.searcher_signal=opd"])
    build_config({"variant": "prompted_critic", "teacher": {"path": "stage1"}}, ["advantage.searcher_signal=grpo"])


@pytest.mark.slow
def test_the_trainer_hands_a_teacher_reading_plugin_the_teachers_log_probs(
    models,
    tmp_path,
    scripted_batch,  # noqa: F811  (the imported fixture)
    teacher_gap,
):
    """Through the trainer: the Teacher is loaded because the plug-in declares it (no KL term reads
    it here), scores the Searcher rows, and the plug-in's advantages land on the Searcher tokens."""
    settings = {"advantage.searcher_signal": "teacher_gap_for_test", "advantage.kl_in_reward_coef": 0.0}
    trainer, batch = _advantages(models, tmp_path, scripted_batch, **settings)
    assert trainer.frozen.teacher is not None and trainer.frozen.reference is None
    (inputs,) = teacher_gap
    assert inputs.teacher_logprobs is batch.teacher_logprobs is not None
    searcher = _role_tokens(batch, SEARCHER)
    assert torch.all(inputs.teacher_logprobs[searcher] < 0)  # scored there by the Teacher
    expected = 2.0 * (batch.teacher_logprobs - batch.old_logprobs)
    assert torch.equal(batch.advantages.token_advantages[searcher], expected[searcher])
    # on the Leader too, beside the Searchers' opd: the Teacher scores both roles' rows
    teacher_gap.clear()
    settings = {"advantage.leader_signal": "teacher_gap_for_test", "advantage.kl_in_reward_coef": 0.0}
    _, batch = _advantages(models, tmp_path, scripted_batch, **settings)
    assert [inputs.role for inputs in teacher_gap] == ["leader"]
    leader = _role_tokens(batch, LEADER)
    assert torch.all(batch.teacher_logprobs[leader | searcher] < 0)
    expected = 2.0 * (batch.teacher_logprobs - batch.old_logprobs)
    assert torch.equal(batch.advantages.token_advantages[leader], expected[leader])


def test_the_option_mode_trains_a_teacher_for_a_credit_method_that_declares_it():
    """The same vocabulary in the option mode: a plug-in credit method declaring the Teacher is
    handed one, trained first on the cascade, though its name is not opd."""
    teachers = []

    @register("teacher_reader_for_test", Needs(teacher=True))
    def teacher_reader(episodes, context):
        teachers.append(context.teacher)
        return [np.zeros(len(episode.decisions)) for episode in episodes]

    small = {"iterations": 1, "teacher_iterations": 1, "episodes_per_iteration": 4, "eval_questions": 4}
    try:
        train(MarlConfig(method="teacher_reader_for_test", num_envs=4, **small), progress=False)
    finally:
        del CREDIT_METHODS["teacher_reader_for_test"]
    assert len(teachers) == 1 and isinstance(teachers[0], MenuPolicy)
    assert not any(p.requires_grad for p in teachers[0].parameters())  # frozen


spec = importlib.util.spec_from_file_location("compare_runs", ROOT / "scripts" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_runs)


def _stage2_run(models: Path, run_dir: Path) -> Path:
    from maopd.training.trainer import train_stage

    data = {
        "stage": "stage2",
        "steps": 2,
        "run_dir": str(run_dir),
        "model": {"path": str(models / "pi0")},
        "teacher": {"path": str(models / "teacher")},
        "env": {"force_finish": True, "max_steps": 6, "num_searchers": 2, "num_candidates": 2},
        "rollout": {"batch_size": 2, "group_size": 2, "max_new_tokens": 8, "max_questions": 8},
        "optim": {"minibatches": 1, "lr": 1e-4},
        "checkpoint": {"every": 1},
        "logging": {"tensorboard": False, "progress": False, "sample_every": 1},
    }
    return train_stage(build_config(data))


@pytest.mark.slow
def test_renaming_opd_in_a_copy_of_the_registry_trains_the_same_run(models, tmp_path, monkeypatch):
    """No name is special-cased: with ``opd`` registered as ``opd_renamed`` (and the tables that
    name it, the map's defaults and the stage settings, saying so), a Stage II run's outputs compare
    equal with scripts/compare_runs.py, but for the name in its config record."""
    original = _stage2_run(models, tmp_path / "original")
    monkeypatch.setitem(ADVANTAGE_ESTIMATORS, "opd_renamed", ADVANTAGE_ESTIMATORS["opd"])
    monkeypatch.delitem(ADVANTAGE_ESTIMATORS, "opd")
    monkeypatch.setitem(DEFAULT_SIGNALS, "searcher", "opd_renamed")
    monkeypatch.setitem(STAGE_SETTINGS["stage2"], "advantage.searcher_signal", "opd_renamed")
    renamed = _stage2_run(models, tmp_path / "renamed")
    # the run's config and each checkpoint's copy of it: the same text but for the name
    records = ["config.yaml", "checkpoints/step_1/config.yaml", "checkpoints/step_2/config.yaml"]
    assert compare_runs.differences(original, renamed) == [f"differs: {name}" for name in sorted(records)]
    for name in records:
        text = (renamed / name).read_text().replace("opd_renamed", "opd").replace(str(renamed), "<run_dir>")
        assert compare_runs.comparable(original / name, original) == text
    metrics = (renamed / "metrics.jsonl").read_text()
    assert '"teacher/' in metrics  # the run read the Teacher: the renamed estimator declared it
    assert load_config(renamed / "config.yaml").advantage.searcher_signal == "opd_renamed"
