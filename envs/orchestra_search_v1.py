"""Dr. MAS's search orchestra (Feng et al., 2026): a Verifier decides, round by round, whether the
team searches again or answers.

=====================  ==================================================================
Import                 ``from maopd.envs import orchestra_search_v1``
Actions                Text (Answerer: Tuple of ``num_candidates`` Texts when > 1)
Parallel API           Yes (``parallel_env``)
Agents                 ``agents = ["verifier", "searcher_0", "answerer"]``
Observation            Dict(role: Text, messages: Sequence(Dict(role, content)), action_mask: MultiBinary(6))
State                  ``state()`` in ``state_space``: question, histories, acting, step and round counters
Budget                 16 environment steps (``max_steps``): at most 3 rounds
=====================  ==================================================================

A round: ``searcher_0`` starts a new call on the question, as the cascade's Searcher does (ReAct
``<search>`` steps, then ``<report>``), for at most ``CALL_STEPS`` environment steps. The Verifier
then judges the round's report. It is asked exactly as π_0's judge is asked, with the Prompted
Critic's prompt (``maopd.envs.prompts.CRITIC_PROMPT``, the question as its sub-question) and no
system message, and writes ``<judge>yes</judge>`` or ``<judge>no</judge>``.
- **yes**: the reports suffice, and the Answerer answers from all of them.
- **no**: another round starts, while the budget allows one (at most ``MAX_ROUNDS``, and 3 steps
  left for a report, a verdict and an answer).

The action mask orders ``("search", "report", "delegate", "select", "answer", "judge")``.

What follows Dr. MAS (``langfengQ/DrMAS`` at 19c632b,
``agent_system/agent/orchestra/search/search_orchestra.py``)
- **Roles and routing.** The three roles, and the Verifier's binary routing between searching
  again and answering.
- **A malformed verdict.** It goes to the Answerer (``verifier_agent.py``), and counts as a format
  failure.
- **Three rounds.** At most three rounds of search, which is Dr. MAS's ``max_turn = 4`` with the
  search skipped at the last turn.
- **Retrieval.** Three passages per search.
- **No answer.** The workflow ends without one when the Verifier still says no at the budget.
- **One outcome for every role.** The Verifier is rewarded with the team's R_EM.

What changes, for this world and for a fair start from π_0
- **The Search agent.** Dr. MAS's writes one query per step into a history the environment keeps.
  Here the Searcher is the team's Searcher: a ReAct call that ends in a report, in the chat format
  π_0 was demonstrated.
- **The Verifier's input.** It judges the round's report with π_0's judge prompt, and acts once a
  report exists. Dr. MAS's Verifier reads the raw history, also at step 1, with a prompt of its own.
- **Format failures.** They cost a role −1, as everywhere in this project (Dr. MAS: −0.01).
- **The other roles' rewards.** The Searcher and the Answerer keep their rewards of the cascade:
  R_S and c_ij. Dr. MAS gives every agent the outcome; its trainer preset learns the Searcher from
  R_EM (``grpo_final_em``).

Budget rule. A Searcher call may act for ``CALL_STEPS`` steps, and at the latest in step
``max_steps`` − 2. Under ``force_finish=False`` (the default), a call that has not reported by
then ends without a report, and a round without a report gets no verdict. With ``force_finish``,
its last step allows only ``<report>``, and a Verifier whose last verdict is no hands the
reports to the Answerer anyway.

Rewards (at the end; parts in ``infos[agent]["reward_parts"]``):
- the Verifier: R_V = R_EM, or −1 after a format failure in any of its verdicts;
- the Searcher: R_S per call, as in the cascade;
- the Answerer: the mean over its candidates of c_j.

The finished workflow record is ``env.unwrapped.record``. Its calls include one per verdict
(``verifier@r<k>``).

Version History
---------------
* v1: initial release.
"""

from __future__ import annotations

from typing import Any

from maopd.envs import prompts
from maopd.envs import rewards as R
from maopd.envs.option.menus import MenuContext, Option
from maopd.envs.policy import AgentTurn
from maopd.envs.roles import ANSWERER_ROLE, SEARCHER_ROLE
from maopd.envs.search_env import SearchEnv, Turn, short_text
from maopd.envs.team import Role, Workflow, register_role
from maopd.envs.workflows import pettingzoo_api

MAX_ROUNDS = 3
# A Searcher call: the cascade's Searcher budget (up to three searches, then its report), so that
# π_0 plays a round as it plays the cascade.
CALL_STEPS = 4

# The Prompted Critic's prompt ends with the report and its question; a rule reads the report back.
_REPORT_START, _REPORT_END = prompts.CRITIC_PROMPT.split("{summary}")


def verify_by_rule(turn: AgentTurn) -> str:
    """The scripted Verifier: the report suffices when it holds facts (not ``NO_FACTS``)."""
    content = turn.messages[-1]["content"] if turn.messages else ""
    report = content.rpartition(_REPORT_START.rsplit("\n", 1)[-1])[2].removesuffix(_REPORT_END).strip()
    return prompts.judgement_text(bool(report) and report != prompts.NO_FACTS)


def verifier_menu(turn: AgentTurn, context: MenuContext) -> list[Option]:
    """The option mode's two verdicts; the hinted one is the scripted Verifier's."""
    expert = verify_by_rule(turn)
    return [
        Option("judge", text, verdict, hint=text == expert)
        for verdict, text in (("yes", prompts.judgement_text(True)), ("no", prompts.judgement_text(False)))
    ]


VERIFIER_ROLE = register_role(
    Role(
        name="verifier",
        prompt=None,
        actions=("judge",),
        rule=verify_by_rule,
        menu="maopd.envs.orchestra_search_v1:verifier_menu",
    )
)
WORKFLOW = Workflow(
    name="orchestra",
    env_name="orchestra_search_v1",
    roles=(VERIFIER_ROLE, SEARCHER_ROLE, ANSWERER_ROLE),
    max_steps=MAX_ROUNDS * (CALL_STEPS + 1) + 1,
    min_steps=3,  # a report, a verdict, an answer
    description="Dr. MAS's search orchestra: a Verifier routes between another Searcher call and the Answerer.",
    system="Dr. MAS",
)


class raw_env(SearchEnv):
    declaration = WORKFLOW

    def _agent_names(self) -> list[str]:
        return ["verifier", "searcher_0", "answerer"]

    def _start_episode(self) -> None:
        self.rounds = 0
        self.verdicts: list[Turn] = []
        self.no_answer = False  # the Verifier's last verdict was no, with no round left
        self._start_round()

    def _start_round(self) -> None:
        self.rounds += 1
        self.call_last_step = min(self.env_step + CALL_STEPS, self.max_steps - 2)
        self._assign("searcher_0", self.rounds, self.question.question)

    def _round_possible(self) -> bool:
        """Whether another round fits: fewer than ``MAX_ROUNDS`` so far, and a report, a verdict
        and an answer still fit in the budget."""
        return self.rounds < MAX_ROUNDS and self.env_step + 3 <= self.max_steps

    def _searcher_last_step(self) -> int:
        return self.call_last_step

    def _judging(self) -> Turn | None:
        """The verdict asked for now: the last one, while it has no output."""
        return self.verdicts[-1] if self.verdicts and not self.verdicts[-1].outputs else None

    def _schedule(self) -> list[str]:
        if self.answered or self.no_answer:
            return []
        if self.active:
            return ["searcher_0"]
        if self.answer_turn is not None:
            return ["answerer"]
        if self._judging() is not None:
            return ["verifier"]
        call = self.searcher_calls[-1]
        if call.done:
            question, asked = self.question.question, len(self.verdicts) + 1
            messages = [prompts.critic_message(question, question, call.report)]
            self.verdicts.append(Turn("verifier", "verifier", messages, call_id=f"verifier@r{asked}", wave=asked))
            return ["verifier"]
        # the call ended unreported (force_finish off): no verdict this round
        if self._round_possible():
            self._start_round()
            return ["searcher_0"]
        return []

    def _allowed(self, agent: str) -> tuple[str, ...]:
        if agent == "verifier":
            return ("judge",)
        if agent == "answerer":
            return ("answer",)
        return self._searcher_allowed(self.env_step + 1)

    def _messages(self, agent: str) -> list[dict[str, str]]:
        if agent == "verifier":
            return list(self.verdicts[-1].messages) if self.verdicts else []
        if agent == "answerer":
            return self._answerer_messages()
        return self._searcher_messages(agent)

    def _call_id(self, agent: str) -> str:
        if agent == "verifier" and self.verdicts:
            return self.verdicts[-1].call_id
        return super()._call_id(agent)

    def _resolve(self, actions: dict[str, Any]) -> None:
        if "answerer" in actions:
            self._resolve_answer(actions["answerer"])
        elif "verifier" in actions:
            self._resolve_verdict(actions["verifier"])
        else:
            self._resolve_searchers(actions)

    def _resolve_verdict(self, action: Any) -> None:
        verdict = self._judging()
        text, parsed = self._take_turn("verifier", verdict, action, ("judge",))
        self._log(f"[step {self.env_step}] verifier: {short_text(text)}")
        verdict.format_failed = not parsed.valid
        everything = [report["number"] for report in self.reports]
        if not parsed.valid or parsed.content == "yes":  # Dr. MAS: a malformed verdict goes to the Answerer
            self._start_answer(everything)
        elif self._round_possible():
            self._start_round()
            self._log(f"  round {self.rounds}")
        elif self.config.force_finish:
            self._start_answer(everything)
            self._log("  forced finish: every report goes to the Answerer")
        else:
            self.no_answer = True
            self._log("  no round left after a no: the workflow ends without an answer")

    def _workflow_rewards(self, candidate_scores: list[float]) -> dict[str, float]:
        failed = any(verdict.format_failed for verdict in self.verdicts)
        return {"verifier": R.FORMAT_PENALTY if failed else R.team_outcome(candidate_scores)}

    def _turns(self) -> list[Turn]:
        return [*self.verdicts, *super()._turns()]


env, parallel_env = pettingzoo_api(raw_env)
