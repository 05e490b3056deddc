"""RLlib's EnvRunner samples the option-mode environments through both registration helpers;
``train_ppo`` runs through Tune and its checkpoints restore, resume and give back the policy."""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("ray.rllib")

from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule

from maopd.training.rllib import train_ppo
from maopd.training.rllib.envs import (
    ENV_NAMES,
    SHARED_POLICY,
    make_multi_agent_env,
    register_envs,
    shared_policy_mapping,
)


@pytest.mark.parametrize("api", ["aec", "parallel"])
@pytest.mark.parametrize("workflow", ["cascade", "hierarchical"])
def test_env_runner_samples_complete_episodes(api, workflow):
    register_envs()
    module = RLModuleSpec(module_class=ActionMaskingTorchRLModule, model_config={"head_fcnet_hiddens": (16,)})
    config = (
        PPOConfig()
        # forced finish: a random policy never reports in time, and the Answerer should act too
        .environment(ENV_NAMES[api], env_config={"workflow": workflow, "split": "test", "force_finish": True})
        .multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={SHARED_POLICY: module}))
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=config)
    episodes = runner.sample(num_episodes=3)
    runner.stop()
    assert len(episodes) == 3 and all(e.is_done for e in episodes)
    first = "leader" if workflow == "hierarchical" else "searcher_0"
    for episode in episodes:
        assert {first, "answerer"} <= set(episode.agent_ids)
        # Rewards are the environment's role rewards: each lies in [-1, 1].
        for agent_episode in episode.agent_episodes.values():
            assert all(-1.0 <= r <= 1.0 for r in agent_episode.get_rewards())


def test_parallel_adapter_only_asks_scheduled_agents():
    env = make_multi_agent_env({"workflow": "hierarchical", "api": "parallel", "split": "test"})
    observations, _ = env.reset(seed=0)
    assert list(observations) == ["leader"]
    observations, *_ = env.step({"leader": 0})
    assert observations and all(obs["action_mask"].sum() > 0 for obs in observations.values())


def test_unknown_api_is_named():
    with pytest.raises(ValueError, match="api="):
        make_multi_agent_env({"api": "vector"})


# ---- training/rllib/train_ppo.py through Tune: outputs, restore, resume, reuse ----

TINY_RUN = ["--batch", "64", "--eval-questions", "3"]


def _strict_json(text: str):
    """``json.loads`` that refuses ``NaN``/``Infinity`` (Python's parser accepts them)."""

    def refuse(name: str):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def ppo_run():
    """One 2-iteration run (Ray, started once, serves every test of this group). Its directory is
    short: pytest's temporary paths are too long for the Unix sockets Ray keeps under ``--out``."""
    import ray

    out = Path(tempfile.mkdtemp(prefix="ppo"))
    summary = train_ppo.main([*TINY_RUN, "--iterations", "2", "--out", str(out)])
    yield out, summary
    ray.shutdown()
    shutil.rmtree(out)


@pytest.mark.slow
def test_tuner_run_writes_results_checkpoints_and_strict_curve(ppo_run):
    out, summary = ppo_run
    trial = out / train_ppo.EXPERIMENT / train_ppo.TRIAL_DIR
    assert Path(summary["trial_dir"]) == trial and summary["finished"]
    assert (trial / "progress.csv").is_file() and list(trial.glob("events.out.tfevents.*"))
    assert len((trial / "result.json").read_text().splitlines()) == 2
    assert sorted(p.name for p in trial.glob("checkpoint_*")) == ["checkpoint_000000", "checkpoint_000001"]
    header = (trial / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"dev/em", "dev/searches", "dev_before_training/em"} <= set(header)
    curve = _strict_json((out / "curve.json").read_text())["curve"]
    assert [row["iteration"] for row in curve] == [0, 1, 2]
    assert curve[0]["train_return_mean"] is None
    assert (out / "curve.png").is_file()


# Tune's and RLlib's wall-clock, throughput and host columns: the rest of progress.csv must repeat
HOST_COLUMNS = {"date", "timestamp", "pid", "hostname", "node_ip", "trial_id"}
HOST_COLUMNS |= {"time_this_iter_s", "time_total_s", "time_since_restore"}
TIMED_COLUMNS = {"env_runners/sample", "env_runners/episode_duration_sec_mean"}


def _is_time_or_host_column(name: str) -> bool:
    parts = name.split("/")
    return (
        name in HOST_COLUMNS | TIMED_COLUMNS
        or parts[0] == "perf"
        or "timers" in parts
        or parts[-1].endswith("timer")
        or any("throughput" in part for part in parts)
    )


def _metric_rows(out: Path) -> list[dict[str, str]]:
    with (out / train_ppo.EXPERIMENT / train_ppo.TRIAL_DIR / "progress.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [{name: value for name, value in row.items() if not _is_time_or_host_column(name)} for row in rows]


@pytest.mark.slow
def test_a_second_run_of_the_seed_writes_the_same_metrics_and_keeps_the_newest_checkpoints(ppo_run):
    """Before every Ray worker got one PYTHONHASHSEED, the first PPO update already differed."""
    first, _ = ppo_run
    again = Path(tempfile.mkdtemp(prefix="ppo"))
    try:
        train_ppo.main([*TINY_RUN, "--iterations", "2", "--keep-checkpoints", "1", "--out", str(again)])
        expected, got = _metric_rows(first), _metric_rows(again)
        assert len(expected) == 2 and len(expected[0]) > 50  # RLlib's losses, returns, counters, dev/em
        assert {"learners/shared/policy_loss", "env_runners/episode_return_mean", "dev/em"} <= set(expected[0])
        assert got == expected
        trial = again / train_ppo.EXPERIMENT / train_ppo.TRIAL_DIR
        assert sorted(p.name for p in trial.glob("checkpoint_*")) == ["checkpoint_000001"]
    finally:
        shutil.rmtree(again)


@pytest.mark.slow
def test_checkpoint_gives_back_the_trained_policy(ppo_run):
    from ray.rllib.algorithms.algorithm import Algorithm

    out, summary = ppo_run
    algo = Algorithm.from_checkpoint(summary["checkpoint"])
    module = algo.get_module(SHARED_POLICY)
    last = summary["curve"][-1]
    assert train_ppo.greedy_accuracy(module, "hierarchical", 3) == {
        "em": last["dev_em"],
        "searches": last["dev_searches"],
    }
    algo.stop()


@pytest.mark.slow
def test_restore_starts_from_the_checkpoint_weights(ppo_run, tmp_path):
    _, first = ppo_run
    summary = train_ppo.main([*TINY_RUN, "--iterations", "1", "--restore", first["checkpoint"], "--out", str(tmp_path)])
    # The greedy evaluation is deterministic: before training, the restored policy plays as the
    # first run's last policy did, not as a fresh one.
    before, trained, fresh = summary["curve"][0], first["curve"][-1], first["curve"][0]
    assert (before["dev_em"], before["dev_searches"]) == (trained["dev_em"], trained["dev_searches"])
    assert (before["dev_em"], before["dev_searches"]) != (fresh["dev_em"], fresh["dev_searches"])
    assert [row["iteration"] for row in summary["curve"]] == [0, 1]


@pytest.mark.slow
def test_resume_of_a_finished_run_trains_no_more(ppo_run):
    out, first = ppo_run
    summary = train_ppo.main(["--resume", "--out", str(out)])
    assert summary["curve"] == first["curve"]
    assert len((out / train_ppo.EXPERIMENT / train_ppo.TRIAL_DIR / "result.json").read_text().splitlines()) == 2


@pytest.mark.parametrize(
    "options, message",
    [
        (["--restore", "."], "is not an RLlib checkpoint"),
        (["--resume"], "holds no Tune experiment"),
        (["--resume", "--iterations", "5"], "drop --iterations"),
        (["--resume", "--keep-checkpoints", "2"], "drop --keep-checkpoints"),
    ],
)
def test_bad_start_options_are_one_line(tmp_path, capsys, options, message):
    with pytest.raises(SystemExit) as exited:
        train_ppo.main([*options, "--out", str(tmp_path)])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
