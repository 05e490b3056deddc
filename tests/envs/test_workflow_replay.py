"""The three workflows replayed: every observation, mask, reward and record of a fixed set of
episodes hashes to the digest committed in ``workflow_replay.json``.

The digests were written by the code before the team vocabulary (``maopd.envs.team``) replaced the
per-workflow constants, so this test holds the declarations to the environments' exact former
behaviour. A change meant to alter what an agent sees or earns updates the file deliberately:
``python tests/envs/test_workflow_replay.py --write`` (and says so in its commit and the module's
Version History).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from maopd.agents.noisy_team import NoiseConfig, NoisyTeam
from maopd.envs.records import JsonRecord
from maopd.envs.workflows import env_module

DIGESTS = Path(__file__).with_name("workflow_replay.json")
# (workflow, environment options, noise rate): the default budgets and the edges the budget rules
# treat differently (force_finish, several candidates, the least budget)
CASES = [
    (workflow, options, noise)
    for workflow in ("hierarchical", "cascade", "single")
    for options, noise in (
        ({}, 0.0),
        ({}, 0.4),
        ({"force_finish": True}, 0.4),
        ({"num_candidates": 2, "max_steps": 5}, 0.6),
    )
]
EPISODES = 6


def _plain(value):
    if isinstance(value, JsonRecord):  # the record and its parts in infos: as their JSON form
        return _plain(value.to_json())
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "__dataclass_fields__"):
        return _plain(vars(value))
    return value


def replay_digest(workflow: str, options: dict, noise: float) -> str:
    """A hash of everything the episodes showed: each step's acting agent, its observation, info
    and turn, the rewards ``last()`` gave, and each finished record less its wall-clock time."""
    env = env_module(workflow).env(split="dev", **options)
    team = NoisyTeam(NoiseConfig.uniform(noise), seed=7)
    seen = []
    for episode in range(EPISODES):
        env.reset(seed=episode)
        for agent in env.agent_iter():
            observation, reward, termination, truncation, info = env.last()
            turn = env.unwrapped.turn(agent) if not (termination or truncation) else None
            seen.append([agent, _plain(observation), reward, termination, truncation, _plain(info), _plain(turn)])
            if termination or truncation:
                env.step(None)
                continue
            (output,) = team.act([turn])
            env.step(output)
        record = env.unwrapped.record.to_json()
        record.pop("duration_s")
        seen.append([_plain(record), _plain(env.unwrapped.final_rewards), env.unwrapped.state_counters()["env_step"]])
    text = json.dumps(seen, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _case_id(case) -> str:
    workflow, options, noise = case
    return f"{workflow}-{'-'.join(f'{k}={v}' for k, v in options.items()) or 'default'}-noise{noise}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_a_workflow_replays_exactly(case):
    expected = json.loads(DIGESTS.read_text(encoding="utf-8"))
    assert replay_digest(*case) == expected[_case_id(case)]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    DIGESTS.write_text(json.dumps({_case_id(c): replay_digest(*c) for c in CASES}, indent=1) + "\n", encoding="utf-8")
