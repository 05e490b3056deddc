"""An OpenEnv server of the search environments: reset/step/state over HTTP and WebSocket, the
action kinds as MCP tools.

OpenEnv (``openenv`` 0.10) serves an ``Environment`` (``reset``, ``step``, ``state``) with FastAPI;
a WebSocket session (``/ws``) holds one environment instance for a whole episode (OpenEnv's HTTP
``/reset`` and ``/step`` build a fresh one per request), and an ``MCPEnvironment`` also answers
MCP's ``tools/list`` and ``tools/call`` (``/mcp``, sharing the session), which is how OpenEnv
exposes tools. ``SearchEnvironment`` is one, in two modes:

* **team** (``role=None``): the client plays every agent of the workflow, one output per step, in
  the AEC order (``observation.agent`` acts next); the episode's reward is the team outcome R_EM
  and ``observation.rewards`` holds every agent's reward.
* **single role** (``role="searcher"``, ``"answerer"``, ``"leader"`` or ``"solver"``): the client
  plays one call of the role, the others played by ``others`` (default: the SynthWiki expert
  team); the reward is the call's (``maopd.agents.integrations.role_session``).

A step's action is ``SearchAction(text=…)``: the acting agent's output, action tags and all
(``texts`` for an Answerer with ``num_candidates`` > 1). The tools are the action kinds of the
roles the client plays (``search(query)``, ``report(text)``, ``delegate(subtasks)``,
``select(reports)``, ``answer(text)``): a call is the acting agent's action of that kind, and
answers with what the environment added in return (the passages of a search; in team mode
preceded by the agent that acts next); ``state`` tells whether the episode is over and its
rewards. ``observation.messages`` is exactly the chat the acting agent's model reads;
``observation.text`` what a tool-calling model reads next (the tool prompt and task at the start
of a call, then what the environment added since its last output).

``create_search_app`` builds the FastAPI app, ``serve`` runs it, on 127.0.0.1 unless told
otherwise; ``SearchEnvClient`` is OpenEnv's ``MCPToolClient`` typed for these models.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

try:
    from fastmcp import FastMCP
    from openenv.core.client_types import StepResult
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.mcp_environment import MCPEnvironment
    from openenv.core.env_server.mcp_types import CallToolObservation
    from openenv.core.env_server.types import Action, Observation, State
    from openenv.core.mcp_client import MCPToolClient
    from pydantic import Field
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"maopd.agents.integrations.openenv_server needs OpenEnv ({exc}); install it with: "
        "pip install -e '.[openenv]'   (or `bash scripts/setup.sh --dev`)",
        name="openenv",
    ) from None

from maopd.agents.integrations.role_session import CALL_OVER, RoleSession, since_last_output, tool_action, tool_view
from maopd.envs import team
from maopd.envs.policy import AgentTurn
from maopd.envs.search_env import SearchEnv
from maopd.envs.workflows import check_workflow, env_module, workflow_roles

DEFAULT_HOST = "127.0.0.1"
EPISODE_OVER = "The episode is over."


class SearchAction(Action):
    """The acting agent's output: its text, action tag included."""

    text: str = Field(default="", description="The output, e.g. '<search>Zoroth River</search>'.")
    texts: list[str] | None = Field(
        default=None, description="The Answerer's candidates when num_candidates > 1 (then text is ignored)."
    )


class SearchObservation(Observation):
    """Who acts next and what it reads; ``reward`` and ``rewards`` are set once ``done``."""

    agent: str = Field(default="", description="The agent that acts next ('' once done).")
    role: str = Field(default="", description="Its role.")
    messages: list[dict[str, str]] = Field(default_factory=list, description="Exactly the chat its model reads.")
    allowed: list[str] = Field(default_factory=list, description="The action kinds it may use now.")
    text: str = Field(default="", description="What a tool-calling model reads next.")
    rewards: dict[str, float] = Field(default_factory=dict, description="Every played agent's reward, once done.")


class SearchState(State):
    """The episode: workflow, question, who acts, budget, and the rewards once done."""

    workflow: str = ""
    role: str | None = Field(default=None, description="The role the client plays; None: every agent (team).")
    question: str = ""
    agent: str = Field(default="", description="The agent that acts next ('' once done).")
    env_step: int = 0
    steps_left: int = 0
    done: bool = False
    em: float | None = Field(default=None, description="The team outcome R_EM, once done.")
    rewards: dict[str, float] = Field(default_factory=dict)


def _new_text(turn: AgentTurn) -> str:
    """What a tool-calling model reads next in ``turn``'s call: the tool prompt and the first message
    at the start of the call, then the messages since its last output."""
    if not any(message["role"] == "assistant" for message in turn.messages):
        return tool_view(turn)
    return "\n\n".join(message["content"] for message in since_last_output(turn.messages))


class SearchEnvironment(MCPEnvironment):
    """A search workflow as an OpenEnv environment: the whole team (``role=None``) or one role's
    call; keyword options are ``others``, ``seed`` and the environment's (``SearchEnvConfig``)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session builds its own environment

    def __init__(
        self,
        workflow: str = "hierarchical",
        role: str | None = None,
        *,
        others: Any = None,
        seed: int | None = None,
        **env_options: Any,
    ):
        self.workflow = check_workflow(workflow)
        self.role = role
        self.session: RoleSession | None = None
        if role is None:
            self.env: SearchEnv = env_module(workflow).raw_env(**env_options)
            kinds = {kind for r in workflow_roles(workflow) for kind in team.role(r).actions}
        else:
            self.session = RoleSession(role, workflow, others=others, seed=seed, **env_options)
            self.env = self.session.env
            kinds = set(team.role(role).actions)
        super().__init__(FastMCP("maopd-search"))
        for kind in sorted(kinds):
            self.tool()(self._make_tool(kind))
        self._state = SearchState(workflow=workflow, role=role)
        self._started = False

    def _make_tool(self, kind: str):
        """The tool of action ``kind``: one argument, typed and documented for the tool schema."""
        act = self._call_tool
        if kind == "search":

            def search(query: str) -> str:
                """Search the corpus for passages (the acting Searcher's or solver's action).

                Args:
                    query: What to search for.
                """
                return act("search", query)

            return search
        if kind == "report":

            def report(text: str) -> str:
                """Finish the acting Searcher's task with a short report of the facts found.

                Args:
                    text: The report.
                """
                return act("report", text)

            return report
        if kind == "answer":

            def answer(text: str) -> str:
                """Give the final answer (the Answerer's or solver's action).

                Args:
                    text: Only the answer, as a short phrase.
                """
                return act("answer", text)

            return answer
        if kind == "delegate":

            def delegate(subtasks: list[str]) -> str:
                """Delegate subtasks to the Searchers, one per Searcher (the Leader's action).

                Args:
                    subtasks: The subtasks, each a simple question.
                """
                return act("delegate", subtasks)

            return delegate

        def select(reports: str) -> str:
            """Hand reports to the Answerer (the Leader's action).

            Args:
                reports: The report numbers, such as "1, 3", or the word all.
            """
            return act("select", reports)

        return select

    # ----- OpenEnv's interface ------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        question_index: int | None = None,
        question: dict | None = None,
        **_: Any,
    ) -> SearchObservation:
        """Start an episode: ``question_index`` or ``question`` ({question, golden_answers}) picks the
        question, else ``seed`` draws one."""
        if self.session is not None:
            self.session.reset(question=question, question_index=question_index, seed=seed)
        else:
            options = {"question": question} if question is not None else {}
            if question_index is not None:
                options = {"question_index": question_index}
            self.env.reset(seed=seed, options=options or None)
        self._started = True
        self._state = SearchState(
            episode_id=episode_id or str(uuid.uuid4()), step_count=0, workflow=self.workflow, role=self.role
        )
        return self._observation()

    def _step_impl(self, action: Action, timeout_s: float | None = None, **_: Any) -> SearchObservation:
        if not isinstance(action, SearchAction):
            raise TypeError(f"expected a SearchAction, got {type(action).__name__}")
        self._act(action.texts if action.texts is not None else action.text)
        return self._observation()

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._with_outcome(super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._with_outcome(await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _with_outcome(self, observation: Observation) -> Observation:
        """A tool call's observation carries the episode's end and reward, as a text step's does."""
        if isinstance(observation, CallToolObservation) and self._started:
            observation.done, observation.reward = self._done, self._reward
        return observation

    @property
    def state(self) -> SearchState:
        if self._started:
            counters = self.env.state_counters()
            self._state.question = self.env.question.question
            self._state.agent = self._agent
            self._state.env_step = counters["env_step"]
            self._state.steps_left = counters["steps_left"]
            self._state.done = self._done
            self._state.em = float(self.env.record.rewards.em) if self._done else None
            self._state.rewards = self._rewards
        return self._state

    # ----- acting ---------------------------------------------------------------------------------
    @property
    def _done(self) -> bool:
        return self.session.done if self.session is not None else self.env.record is not None

    @property
    def _agent(self) -> str:
        if self.session is not None:
            return self.session.agent if self.session.call_open else ""
        return self.env.agent_selection if not self._done else ""

    @property
    def _rewards(self) -> dict[str, float]:
        if not self._done:
            return {}
        if self.session is not None:
            return {self.session.agent: self.session.reward}
        return {agent: float(reward) for agent, reward in self.env.rewards.items()}

    @property
    def _reward(self) -> float:
        if not self._done:
            return 0.0
        if self.session is not None:
            return self.session.reward
        return float(self.env.record.rewards.em)

    def _act(self, output: Any) -> str:
        """Step the acting agent; return what the environment added in answer (see ``_call_tool``)."""
        if not self._started:
            raise RuntimeError("step before reset: call reset() first")
        if self._done or (self.session is not None and not self.session.call_open):
            raise RuntimeError(f"{EPISODE_OVER} Call reset() to start another.")
        self._state.step_count += 1
        if self.session is not None:
            answer = self.session.act(output)
            return answer if self.session.call_open else "\n\n".join(filter(None, [answer, CALL_OVER]))
        self.env.step(output)
        if self._done:
            return EPISODE_OVER
        turn = self.env.turn(self.env.agent_selection)
        return f"Next: {turn.agent} ({turn.role}), allowed: {', '.join(turn.allowed)}\n\n{_new_text(turn)}"

    def _call_tool(self, kind: str, content: Any) -> str:
        return self._act(tool_action(kind, content))

    def _observation(self) -> SearchObservation:
        done = self._done
        turn = None if done else self.env.turn(self._agent)
        return SearchObservation(
            done=done,
            reward=self._reward,
            agent=turn.agent if turn else "",
            role=turn.role if turn else "",
            messages=[dict(message) for message in turn.messages] if turn else [],
            allowed=list(turn.allowed) if turn else [],
            text=_new_text(turn) if turn else EPISODE_OVER,
            rewards=self._rewards,
            metadata={"em": float(self.env.record.rewards.em)} if done else {},
        )


def search_environment_factory(workflow: str = "hierarchical", role: str | None = None, **options: Any):
    """A zero-argument factory of ``SearchEnvironment`` (OpenEnv builds one per session); the
    options are checked here, once, by building one."""
    SearchEnvironment(workflow, role, **options).close()
    return functools.partial(SearchEnvironment, workflow, role, **options)


def create_search_app(
    workflow: str = "hierarchical", role: str | None = None, *, max_concurrent_envs: int = 1, **options: Any
):
    """The FastAPI app: OpenEnv's routes (``/reset``, ``/step``, ``/state``, ``/ws``, ``/mcp``,
    ``/schema``, ``/health``) over ``SearchEnvironment(workflow, role, **options)``; one
    environment per WebSocket session, at most ``max_concurrent_envs`` at once."""
    name = f"maopd-{workflow}" + (f"-{role}" if role else "")
    return create_app(
        search_environment_factory(workflow, role, **options),
        SearchAction,
        SearchObservation,
        env_name=name,
        max_concurrent_envs=max_concurrent_envs,
        state_cls=SearchState,
    )


def serve(
    workflow: str = "hierarchical",
    role: str | None = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = 8000,
    **options: Any,
) -> None:
    """Run the server until interrupted, on ``host`` (loopback unless told otherwise) and ``port``."""
    import uvicorn

    uvicorn.run(create_search_app(workflow, role, **options), host=host, port=port, log_level="warning")


class SearchEnvClient(MCPToolClient):
    """OpenEnv's MCP tool client, typed for ``SearchAction``/``SearchObservation``/``SearchState``:
    ``reset``/``step``/``state`` over the session's WebSocket, ``list_tools``/``call_tool`` over MCP."""

    def _step_payload(self, action: Any) -> dict[str, Any]:
        if isinstance(action, SearchAction):
            return action.model_dump(exclude={"metadata"})
        return super()._step_payload(action)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult:
        data = payload.get("observation", {})
        if "tools" in data or "tool_name" in data:
            return super()._parse_result(payload)
        observation = SearchObservation(
            **{key: value for key, value in data.items() if key not in ("done", "reward", "metadata")},
            done=payload.get("done", False),
            reward=payload.get("reward"),
            metadata=payload.get("metadata") or data.get("metadata") or {},
        )
        return StepResult(observation=observation, reward=observation.reward, done=observation.done)

    def _parse_state(self, payload: dict[str, Any]) -> SearchState:
        return SearchState(**payload)
