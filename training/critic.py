"""The Prompted Critic baseline (M-GRPO-like): a judge prompted from the shared checkpoint.

Its Searchers are rewarded with 0.3·R_EM + 0.5·R_judge + 0.2·b_S (paper, "Prompted Critic"),
where R_judge ∈ {0, 1} is the current policy's verdict on a report when it is prompted with a
critic prompt that sees the question, the delegated sub-question and the report. The paper's
Appendix C.4 template is not in our excerpts; ``CRITIC_PROMPT`` below is ours, with the same
three slots ({question}, {sub_query}, {summary}). The judge decodes greedily, so R_judge is a
deterministic function of the checkpoint and the report.

A Searcher call with a format failure keeps the total reward −1 (the paper's format rule). The
trajectory's Searcher reward R_S,i, which Eq. 1 normalizes over the group (``grpo_rs``), is the
mean over its Searcher calls, as the environment's own per-agent Searcher reward is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from agents.chat_tokens import prompt_ids
from agents.hf_policy import HFPolicy
from envs.rewards import FORMAT_PENALTY
from training.config import CriticConfig

CRITIC_PROMPT = (
    "You are a strict critic of a search assistant's report.\n"
    "Original question: {question}\n"
    "Sub-question given to the search assistant: {sub_query}\n"
    "Report: {summary}\n"
    "Does the report give specific, relevant facts that help answer the sub-question? "
    "Reply with <judge>yes</judge> or <judge>no</judge>."
)
_JUDGE = re.compile(r"<judge>\s*(yes|no)\s*</judge>", re.IGNORECASE)


def parse_judgement(text: str) -> float:
    """1.0 when the last ``<judge>`` tag says yes; anything else (no, missing, malformed) is 0."""
    verdicts = _JUDGE.findall(text)
    return float(bool(verdicts) and verdicts[-1].lower() == "yes")


def searcher_reports(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per Searcher call, in the order of ``record["rewards"]["searcher_calls"]``."""
    reports = {(r["agent"], r["wave"]): r for r in record["reports"]}
    calls = [c for c in record["calls"] if c["role"] == "searcher"]
    entries = []
    for index, call in enumerate(calls):
        report = reports.get((call["agent"], call["wave"]), {})
        entries.append({
            "sub_query": report.get("task", record["question"]),
            "summary": report.get("text", ""),
            "env_reward": record["rewards"]["searcher_calls"][index],
            "bonus": record["rewards"]["search_bonus"][index],
        })
    return entries


class PromptedCritic:
    def __init__(self, policy: HFPolicy, config: CriticConfig):
        self.policy = policy
        self.config = config
        self.last_judge_rate = 0.0  # fraction of reports judged useful in the last batch

    def judge(self, items: Sequence[tuple[str, str, str]]) -> list[float]:
        """R_judge for each (question, sub_query, summary)."""
        if not items:
            return []
        tokenizer = self.policy.tokenizer
        prompts = [
            prompt_ids(tokenizer, [{"role": "user", "content": CRITIC_PROMPT.format(
                question=question, sub_query=sub_query, summary=summary)}])
            for question, sub_query, summary in items
        ]
        results = self.policy.generate(
            prompts, 1, seeds=[0] * len(prompts), temperature=0.0,
            max_new_tokens=self.config.max_new_tokens, stop_strings=("</judge>",),
        )
        texts = [tokenizer.decode(c[0].token_ids, skip_special_tokens=True) for c in results]
        return [parse_judgement(text) for text in texts]

    def searcher_rewards(self, records: Sequence[Sequence[dict[str, Any]]]) -> torch.Tensor:
        """R_S [B, G]: per trajectory, the mean over its Searcher calls of the critic reward."""
        entries = [[searcher_reports(record) for record in row] for row in records]
        items = [(records[b][g]["question"], e["sub_query"], e["summary"])
                 for b, row in enumerate(entries) for g, calls in enumerate(row) for e in calls]
        judged = self.judge(items)
        self.last_judge_rate = sum(judged) / len(judged) if judged else 0.0
        verdicts = iter(judged)
        weights = self.config
        rewards = torch.zeros(len(records), len(records[0]))
        for b, row in enumerate(entries):
            for g, calls in enumerate(row):
                em = records[b][g]["rewards"]["em"]
                per_call = []
                for call in calls:
                    judge = next(verdicts)
                    if call["env_reward"] == FORMAT_PENALTY:
                        per_call.append(FORMAT_PENALTY)
                    else:
                        per_call.append(weights.em_weight * em + weights.judge_weight * judge
                                        + weights.bonus_weight * call["bonus"])
                rewards[b, g] = sum(per_call) / len(per_call) if per_call else 0.0
        return rewards
