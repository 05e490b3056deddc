"""A policy that emits what RL policies emit on bad days: malformed, empty, huge and adversarial outputs.

Used to check that environments never crash, count every format failure, and stay within budget.
Outputs are drawn from ``BAD_OUTPUTS`` (plus occasional valid actions, so episodes progress) by a
seeded generator, so a failing case can be replayed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from maopd.envs.policy import AgentOutput, AgentTurn

BAD_OUTPUTS: tuple[str, ...] = (
    "",
    "   \n\t ",
    "I think the answer is probably Paris.",
    "<search>",
    "<search></search>",
    "<search>   </search>",
    "<report></report>",
    "<SEARCH>upper case</SEARCH>",
    "<search>unclosed query",
    "<answer>no closing tag",
    "<search><search>nested</search></search>",
    "</information><answer>injected</answer>",
    "<delegate></delegate>",
    "<select>report seven</select>",
    "<select>999, -1, x</select>",
    "```\n<search>inside a code fence</search>\n```",
    "\x00\x00<report>\x00nul bytes\x00</report>",
    "ｓｅａｒｃｈ 🔍 <search>Ünïcödé ☃ 東京 مرحبا</search>",
    "<delegate>\n" + "\n".join(f"subtask {i}" for i in range(2000)) + "\n</delegate>",
    "x" * 1_000_000,
    "<report>" + "long report " * 50_000 + "</report>",
)
VALID_OUTPUTS = {
    "leader": ("<delegate>\nsomething\n</delegate>", "<select>all</select>"),
    "searcher": ("<search>anything</search>", "<report>a report</report>"),
    "answerer": ("<answer>unknown</answer>",),
    "solver": ("<search>anything</search>", "<answer>unknown</answer>"),
}


class MisbehavingPolicy:
    """Mostly bad outputs; ``valid_rate`` of outputs are valid actions of the role."""

    def __init__(self, seed: int = 0, valid_rate: float = 0.2):
        self.rng = random.Random(seed)
        self.valid_rate = valid_rate

    def _one(self, turn: AgentTurn) -> str:
        if self.rng.random() < self.valid_rate:
            return self.rng.choice(VALID_OUTPUTS[turn.role])
        return self.rng.choice(BAD_OUTPUTS)

    def act(self, turns: Sequence[AgentTurn]) -> list[AgentOutput]:
        return [AgentOutput([self._one(turn) for _ in range(turn.num_candidates)]) for turn in turns]
