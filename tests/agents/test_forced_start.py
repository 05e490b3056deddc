"""``ForcedStart``: only the first output of the role's calls begins with the forced text."""

from __future__ import annotations

from maopd.agents.forced_start import ForcedStart
from maopd.agents.hf_policy import HFPolicy
from maopd.agents.sampling import SamplingConfig
from maopd.envs.policy import AgentTurn
from maopd.envs.prompts import system_message, task_message


def test_only_the_first_output_of_the_role_is_forced(lm):
    model, tokenizer = lm
    policy = HFPolicy(model, tokenizer, SamplingConfig(temperature=0.0, max_new_tokens=4))
    first = (system_message("searcher"), task_message("Who wrote Hamlet?"))
    later = (*first, {"role": "assistant", "content": "<search>Hamlet</search>"}, {"role": "user", "content": "x"})
    turns = [
        AgentTurn("searcher_0", "searcher", first, ("search", "report")),
        AgentTurn("searcher_0", "searcher", later, ("search", "report")),
        AgentTurn("answerer", "answerer", (system_message("answerer"), task_message("Q")), ("answer",)),
    ]
    outputs = ForcedStart(policy, "searcher", "<report>").act(turns)
    assert outputs[0].text.startswith("<report>") and 1 <= outputs[0].output_tokens <= 4
    unforced = policy.act(turns[1:])
    assert [o.text for o in outputs[1:]] == [o.text for o in unforced]  # greedy: the wrapped policy's own
