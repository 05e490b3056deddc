"""Your own policy, named as ``package.module:Name`` or ``path/to/file.py:Name``: loaded, and held to
the return-length contract where its outputs enter an environment, in one line naming it."""

from __future__ import annotations

import pytest

from maopd.agents.scripted import ScriptedAnswerer, ScriptedLeader, ScriptedSearcher, scripted_team
from maopd.envs import cascade_search_v1, hierarchical_search_v1
from maopd.envs.episode import run_episode
from maopd.envs.policy import PolicyOutputError, RoleRouter
from maopd.envs.policy_loading import PolicySpecError, is_policy_spec, load_policy
from maopd.envs.workflows import workflow_roles

TEAM = """
from maopd.agents.scripted import scripted_team
from maopd.envs.policy import AgentOutput


class Team:
    def __init__(self):
        self.team = scripted_team()

    def act(self, turns):
        return self.team.act(turns)


class TooFew:
    def act(self, turns):
        return [AgentOutput(["<report>x</report>"]) for _ in turns[1:]]


class TwoTexts:
    def act(self, turns):
        return [AgentOutput(["<report>x</report>", "<report>y</report>"]) for _ in turns]


class Strings:
    def act(self, turns):
        return ["<report>x</report>" for _ in turns]


class NeedsArguments:
    def __init__(self, model):
        self.model = model

    def act(self, turns):
        return []


READY = Team()
NOT_A_POLICY = 42
"""


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package outside this project, ``<name>.policies``, importable from the current folder."""
    name = f"outside_{tmp_path.name.replace('-', '_')}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "policies.py").write_text(TEAM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_spec_names_a_class_or_a_ready_object_in_a_module_or_a_file(package, tmp_path):
    record_of = {}
    for spec in (f"{package}.policies:Team", f"{package}.policies:READY", f"{package}/policies.py:Team"):
        policy = load_policy(spec)
        assert policy.spec == spec and policy.source.name == "policies.py" and len(policy.source_sha256()) == 64
        record_of[spec] = run_episode(hierarchical_search_v1.env(), policy, seed=0)
    expected = run_episode(hierarchical_search_v1.env(), scripted_team(), seed=0)
    for record in record_of.values():
        assert record.candidates == expected.candidates and record.rewards == expected.rewards
    assert is_policy_spec("a.b:C") and is_policy_spec("dir/f.py:C")
    assert not is_policy_spec("scripted") and not is_policy_spec(":C") and not is_policy_spec("a.b:")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{package}.policies:Tema", r"defines no 'Tema'; did you mean 'Team'"),
        ("nowhere_at_all.mod:Team", r"no module 'nowhere_at_all' on the path \(the current folder included\)"),
        ("{package}/missing.py:Team", r"missing.py does not exist; give the Python file"),
        ("{package}.policies:NeedsArguments", r"NeedsArguments\(\) failed: TypeError: .*built with no arguments"),
        ("{package}.policies:NOT_A_POLICY", r"NOT_A_POLICY is a int, not a policy; give a class"),
        ("{package}.broken:Team", r"importing {package}.broken failed at line 2: ZeroDivisionError"),
        ("{package}/broken.py:Team", r"broken.py failed at line 2: ZeroDivisionError"),
    ],
)
def test_a_spec_that_cannot_be_loaded_is_one_line_naming_it(package, tmp_path, spec, message):
    (tmp_path / package / "broken.py").write_text("x = 1\ny = 1 / 0\n")
    spec, message = spec.format(package=package), message.format(package=package)
    with pytest.raises(PolicySpecError, match=message) as info:
        load_policy(spec)
    assert str(info.value).startswith(f"policy {spec}: ") and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("TooFew", "returned 0 output(s) for 1 turn(s)"),
        ("TwoTexts", "returned for turn 0 (searcher_0) 2 texts for 1 candidate(s)"),
        ("Strings", "returned for turn 0 (searcher_0) a str"),
    ],
)
def test_a_loaded_policys_every_output_is_checked(package, name, problem):
    spec = f"{package}.policies:{name}"
    router = RoleRouter({"searcher": load_policy(spec), "answerer": ScriptedAnswerer()}, workflow_roles("cascade"))
    with pytest.raises(PolicyOutputError) as info:
        run_episode(cascade_search_v1.env(), router, seed=0)
    assert str(info.value).startswith(f"policy {spec} {problem}; act(turns) returns one AgentOutput per turn")


class _Silent:
    """Returns nothing: under RoleRouter this was a silent format failure, in run_episode a zip error."""

    def act(self, turns):
        return []


def test_a_policy_returning_too_few_outputs_is_named_under_role_router_and_run_episode():
    team = RoleRouter({"leader": ScriptedLeader(), "searcher": _Silent(), "answerer": ScriptedAnswerer()})
    with pytest.raises(PolicyOutputError, match=r"^policy _Silent \(RoleRouter's searcher\) returned 0 output"):
        run_episode(hierarchical_search_v1.env(), team, seed=0)
    with pytest.raises(PolicyOutputError, match=r"^policy _Silent returned 0 output\(s\) for 1 turn\(s\)"):
        run_episode(cascade_search_v1.env(), _Silent(), seed=0)
    team = RoleRouter({"leader": ScriptedLeader(), "searcher": ScriptedSearcher(), "answerer": ScriptedAnswerer()})
    assert run_episode(hierarchical_search_v1.env(), team, seed=0).candidates  # a whole team is untouched


def test_the_single_role_env_checks_the_other_roles_policy():
    from maopd.envs.option.single_role import SingleRoleEnv

    env = SingleRoleEnv("answerer", "cascade", others=_Silent(), split="test")
    with pytest.raises(PolicyOutputError, match="policy _Silent returned 0 output"):
        env.reset(seed=0)
