"""The OpenEnv server of the search environments: in process, reset/step/state and the MCP tools
follow OpenEnv's ``Environment`` interface; served on loopback, OpenEnv's own clients
(``MCPToolClient``, which ``SearchEnvClient`` types, and ``GenericEnvClient``) play whole episodes
over WebSocket and MCP, team and single role."""

from __future__ import annotations

import pytest

from tests.integration_support import require

require("openenv")

from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

from maopd.agents.integrations.openenv_server import (  # noqa: E402
    DEFAULT_HOST,
    EPISODE_OVER,
    SearchAction,
    SearchEnvClient,
    SearchEnvironment,
    create_search_app,
)
from maopd.agents.integrations.role_session import CALL_OVER, TOOL_PROMPTS, call_reward  # noqa: E402
from maopd.base.config import ConfigError  # noqa: E402
from maopd.envs.retrieval.server import BackgroundServer  # noqa: E402

REPORT = "<report>Koduth Bloom was formed in Lilunirn.</report>"


def test_team_mode_steps_every_agent_and_rewards_the_team():
    env = SearchEnvironment("cascade", split="test")
    observation = env.reset(question={"question": "Where was Koduth Bloom formed?", "golden_answers": ["Lilunirn"]})
    assert (observation.agent, observation.allowed, observation.done) == ("searcher_0", ["search", "report"], False)
    assert observation.messages[0]["role"] == "system" and observation.text.startswith(TOOL_PROMPTS["searcher"])
    assert sorted(tool.name for tool in env.step(ListToolsAction()).tools) == ["answer", "report", "search"]
    searched = env.step(CallToolAction(tool_name="search", arguments={"query": "Koduth Bloom"}))
    assert searched.error is None and (searched.done, searched.reward) == (False, 0.0)
    assert "Next: searcher_0 (searcher)" in searched.result.data and "<information>" in searched.result.data
    observation = env.step(SearchAction(text=REPORT))
    assert observation.agent == "answerer" and "[Report 1]" in observation.text
    observation = env.step(SearchAction(text="<answer>Lilunirn</answer>"))
    assert observation.done and observation.reward == 1.0 and observation.text == EPISODE_OVER
    assert observation.rewards == pytest.approx({"searcher_0": 0.95, "answerer": 1.0})
    state = env.state
    assert (state.done, state.em, state.step_count, state.agent) == (True, 1.0, 3, "")
    with pytest.raises(RuntimeError, match=EPISODE_OVER):
        env.step(SearchAction(text="<answer>again</answer>"))


def test_single_role_mode_plays_one_call_and_rewards_it():
    env = SearchEnvironment("hierarchical", role="searcher", split="test")
    observation = env.reset(question_index=0)
    assert observation.agent == "searcher_0" and observation.role == "searcher"
    assert sorted(tool.name for tool in env.step(ListToolsAction()).tools) == ["report", "search"]
    result = env.step(CallToolAction(tool_name="report", arguments={"text": "Koduth Bloom was formed in Lilunirn."}))
    assert result.done and result.result.data == CALL_OVER
    session = env.session
    assert result.reward == session.reward == call_reward(session.record, "searcher", "searcher_0@w1")
    assert env.state.rewards == {"searcher_0": session.reward}


def test_the_leaders_tools_take_subtasks_and_report_numbers():
    env = SearchEnvironment("hierarchical", role="leader", split="test")
    env.reset(question_index=0)
    result = env.step(CallToolAction(tool_name="delegate", arguments={"subtasks": ["Where was Koduth Bloom formed?"]}))
    assert result.result.data.startswith("Reports:\n[Report 1]")
    result = env.step(CallToolAction(tool_name="select", arguments={"reports": "all"}))
    assert result.done and result.reward == env.session.reward > 0


def test_the_app_checks_the_environments_options_and_serve_binds_loopback_by_default(monkeypatch):
    import uvicorn

    from maopd.agents.integrations.openenv_server import serve

    with pytest.raises(ValueError, match="does not play"):
        create_search_app("cascade", role="leader")
    with pytest.raises(TypeError, match="did you mean 'max_steps'"):
        create_search_app("cascade", max_step=3)
    with pytest.raises(ConfigError, match="max_steps"):
        create_search_app("cascade", max_steps=0)
    runs = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: runs.append(options))
    serve("cascade", role="answerer", port=8123)
    serve("cascade", host="0.0.0.0")
    assert DEFAULT_HOST == "127.0.0.1" and [(r["host"], r["port"]) for r in runs] == [
        (DEFAULT_HOST, 8123),
        ("0.0.0.0", 8000),
    ]


@pytest.mark.slow
def test_openenvs_clients_play_episodes_over_websocket_and_mcp():
    with BackgroundServer(create_search_app("cascade", split="test")) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with SearchEnvClient(base_url=server.url).sync() as client:
            result = client.reset(question_index=0)
            assert result.observation.agent == "searcher_0" and not result.done
            assert sorted(tool.name for tool in client.list_tools()) == ["answer", "report", "search"]
            passages = client.call_tool("search", query="Koduth Bloom")
            assert "Koduth Bloom" in passages and "<information>" in passages
            assert client.state().env_step == 1  # the tool call stepped the session's environment
            result = client.step(SearchAction(text=REPORT))
            assert result.observation.agent == "answerer" and not result.done
            result = client.step(SearchAction(text="<answer>Lilunirn</answer>"))
            state = client.state()
            assert result.done and state.done and state.rewards == result.observation.rewards
            assert result.reward == state.em and state.rewards["searcher_0"] > 0
        with GenericEnvClient(base_url=server.url).sync() as client:
            result = client.reset(question_index=0)
            assert result.observation["agent"] == "searcher_0"
            result = client.step({"text": "<search>Koduth Bloom</search>"})
            assert "<information>" in result.observation["messages"][-1]["content"]
            assert client.state()["step_count"] == 1


@pytest.mark.slow
def test_a_single_role_server_plays_the_learners_call_through_its_tools():
    with BackgroundServer(create_search_app("single", role="solver", split="test")) as server:
        with SearchEnvClient(base_url=server.url).sync() as client:
            client.reset(question={"question": "Where was Koduth Bloom formed?", "golden_answers": ["Lilunirn"]})
            assert sorted(tool.name for tool in client.list_tools()) == ["answer", "search"]
            assert "Lilunirn" in client.call_tool("search", query="Koduth Bloom")
            assert client.call_tool("answer", text="Lilunirn") == CALL_OVER
            state = client.state()
            assert state.done and state.rewards == {"solver": 1.0} and state.em == 1.0
