"""The workflow record: everything one finished trajectory produced, as JSON-serialisable data.

One record per trajectory (one run of a workflow on one question). Keys:

``workflow``, ``question_id``, ``question``, ``golden_answers``
``subtasks``         [{wave, agent, task}] every assignment the Leader made (empty in the cascade)
``dropped_subtasks`` subtasks beyond the number of Searcher slots, ignored
``reports``          [{number, wave, agent, task, text, forced}] every Searcher report
``selected_reports`` report numbers handed to the Answerer
``searches``         [{wave, agent, query, passages: [{id, title, text, score}]}]
``candidates``       raw Answerer outputs, one per candidate
``extracted_answers`` text of each candidate's last <answer> tag, or None
``candidate_scores`` c_ij per candidate
``rewards``          {em, leader, answerer: [per candidate], searchers: {agent: mean}, searcher_calls: [...],
                      search_bonus: [...], assign_bonus}
``counters``         see ``Counters``
``format_errors``    [{env_step, agent, error}]
``calls``            [{call_id, agent, role, wave, messages, outputs, input_tokens, output_tokens}]
                     every model call with its final chat history: the demonstrations for SFT
``duration_s``       wall-clock seconds from reset to the end of the episode
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Counters:
    """Per-trajectory counters, as the paper's Appendix A records them.

    ``search_actions`` counts executed searches (non-empty query in a complete ``<search>`` tag);
    ``searches_with_passages`` those that returned at least one passage; ``tool_steps`` is C_tool,
    the environment steps containing at least one search action. Token counts add up what the
    policy reported per call (0 when a policy reports none).
    """

    search_actions: int = 0
    searches_with_passages: int = 0
    reports: int = 0
    forced_reports: int = 0
    task_assignments: int = 0
    delegation_rounds: int = 0
    format_failures: int = 0
    tool_steps: int = 0
    env_steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def to_dict(self) -> dict[str, int]:
        # the fields are ints: a copy of the instance's dict is ``asdict``'s result, at a fraction of its cost
        return dict(vars(self))
