"""The Prompted Critic baseline (M-GRPO-like): a judge prompted from the shared checkpoint.

Its Searchers are rewarded with 0.3·R_EM + 0.5·R_judge + 0.2·b_S (paper, "Prompted Critic"),
where R_judge ∈ {0, 1} is the current policy's verdict on a report when it is prompted with a
critic prompt that sees the question, the delegated sub-question and the report
(``maopd.envs.prompts.CRITIC_PROMPT``: ours, since the paper's Appendix C.4 template is not in our
excerpts, with the same three slots). The judge decodes greedily, so R_judge is a
deterministic function of the checkpoint and the report.

A Searcher call with a format failure keeps the total reward −1 (the paper's format rule). The
trajectory's Searcher reward R_S,i, which Eq. 1 normalizes over the group (``grpo_rs``), is the
mean over its Searcher calls, as the environment's own per-agent Searcher reward is. A call that
ended without a report (``env.force_finish`` off) is not judged: its R_judge is 0.

The judge's figures, per batch (``last_metrics``, logged by the trainer each step):

* ``critic/format_rate``: the share of judge calls whose output holds a parseable verdict (a
  complete ``<judge>yes</judge>`` or ``<judge>no</judge>``, as ``parse_judgement`` reads it);
* ``critic/gold_rate``: the share of judged reports that are *gold-correct*. With a
  ``report_gold`` function (the trainer passes one on the SynthWiki world:
  ``maopd.envs.synthwiki.knowledge.report_states_answer``), a report is gold-correct when it states the
  answer of its own sub-question, so a useful first-hop report (it holds the bridge entity) counts;
  without one, when it contains one of the question's golden answers (``report_has_gold``), the
  only gold signal a report of an unknown corpus has;
* ``critic/agreement``: among judge calls with a parseable verdict, the share whose verdict (yes
  = 1) equals gold-correctness; absent when no verdict parsed;
* ``critic/judge_rate``: the share of judged reports judged useful (0 when none was judged), and
  ``critic/judged``: how many were judged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from maopd.agents.chat_tokens import encode_text, prompt_ids, render_text
from maopd.agents.hf_policy import HFPolicy
from maopd.envs.prompts import critic_message, has_verdict, judgement_text, parse_judgement
from maopd.envs.records import WorkflowRecord
from maopd.envs.rewards import FORMAT_PENALTY, report_has_gold
from maopd.training.config import CriticConfig


@dataclass(frozen=True)
class SearcherReport:
    """A Searcher call as the critic sees it: its sub-question, its report (``summary``, empty
    when ``reported`` is False), its environment reward and its search bonus b_S."""

    sub_query: str
    summary: str
    env_reward: float
    bonus: float
    reported: bool


def searcher_reports(record: WorkflowRecord) -> list[SearcherReport]:
    """One entry per Searcher call, in the order of ``record.rewards.searcher_calls``."""
    reports = {(r.agent, r.wave): r for r in record.reports}
    entries = []
    for index, call in enumerate(record.searcher_calls()):
        report = reports.get((call.agent, call.wave))
        entries.append(
            SearcherReport(
                sub_query=report.task if report else record.question,
                summary=report.text if report else "",
                env_reward=record.rewards.searcher_calls[index],
                bonus=record.rewards.search_bonus[index],
                reported=report is not None,
            )
        )
    return entries


def verdict_ids(tokenizer, useful: bool) -> list[int]:
    """The ids of the judge's answer ``judgement_text(useful)`` as the chat template renders it
    after the critic prompt's generation prompt."""
    messages = [critic_message("q", "s", "r")]
    prompt = prompt_ids(tokenizer, messages)
    full = encode_text(
        tokenizer,
        render_text(
            tokenizer,
            [*messages, {"role": "assistant", "content": judgement_text(useful)}],
            add_generation_prompt=False,
        ),
    )
    if full[: len(prompt)] != prompt:
        raise ValueError("the chat template renders the judge's answer without its generation prompt as a prefix")
    return full[len(prompt) :]


class PromptedCritic:
    def __init__(self, policy: HFPolicy, config: CriticConfig, report_gold: Callable[[str, str], bool] | None = None):
        self.policy = policy
        self.config = config
        self.report_gold = report_gold  # (sub_query, report) -> gold-correct; see the module doc
        self.last_metrics: dict[str, float] = {}  # the judge's figures of the last batch (module doc)
        self._last_texts: list[str] | None = None  # the judge outputs of the last judge() call

    def judge(self, items: Sequence[tuple[str, str, str]]) -> list[float]:
        """R_judge for each (question, sub_query, summary)."""
        if not items:
            self._last_texts = []
            return []
        tokenizer = self.policy.tokenizer
        prompts = [
            prompt_ids(tokenizer, [critic_message(question, sub_query, summary)])
            for question, sub_query, summary in items
        ]
        results = self.policy.generate(
            prompts,
            1,
            seeds=[0] * len(prompts),
            temperature=0.0,
            max_new_tokens=self.config.max_new_tokens,
            stop_strings=("</judge>",),
        )
        texts = [tokenizer.decode(c[0].token_ids, skip_special_tokens=True) for c in results]
        self._last_texts = texts
        return [parse_judgement(text) for text in texts]

    def yes_probabilities(self, items: Sequence[tuple[str, str, str]]) -> list[float]:
        """P(yes) for each (question, sub_query, summary): the model's probability of the verdict
        yes rather than no at the first token where the two verdicts' texts differ, after the prompt
        and the tokens they share (``<judge>``). When greedy decoding writes ``<judge>`` and then one
        of the two verdicts, it writes yes exactly when P(yes) > 1/2."""
        tokenizer = self.policy.tokenizer
        model = self.policy.model
        yes, no = (verdict_ids(tokenizer, useful) for useful in (True, False))
        shared = next(i for i, (a, b) in enumerate(zip(yes, no)) if a != b)
        device = next(model.parameters()).device
        probabilities = []
        with torch.no_grad():
            for question, sub_query, summary in items:
                ids = prompt_ids(tokenizer, [critic_message(question, sub_query, summary)]) + yes[:shared]
                logits = model(torch.tensor([ids], device=device)).logits[0, -1].float()
                pair = logits[[yes[shared], no[shared]]]
                probabilities.append(float(torch.softmax(pair, dim=0)[0]))
        return probabilities

    def searcher_rewards(self, records: Sequence[Sequence[WorkflowRecord]]) -> torch.Tensor:
        """R_S [B, G]: per trajectory, the mean over its Searcher calls of the critic reward."""
        entries = [[searcher_reports(record) for record in row] for row in records]
        judged_entries = [
            (records[b][g], e)
            for b, row in enumerate(entries)
            for g, calls in enumerate(row)
            for e in calls
            if e.reported
        ]
        items = [(record.question, e.sub_query, e.summary) for record, e in judged_entries]
        self._last_texts = None
        judged = self.judge(items)
        self.last_metrics = {
            **self._judge_metrics(judged_entries, judged, self._last_texts),
            "critic/judge_rate": sum(judged) / len(judged) if judged else 0.0,
        }
        verdicts = iter(judged)
        weights = self.config
        rewards = torch.zeros(len(records), len(records[0]))
        for b, row in enumerate(entries):
            for g, calls in enumerate(row):
                em = records[b][g].rewards.em
                per_call = []
                for call in calls:
                    judge = next(verdicts) if call.reported else 0.0
                    if call.env_reward == FORMAT_PENALTY:
                        per_call.append(FORMAT_PENALTY)
                    else:
                        per_call.append(
                            weights.em_weight * em + weights.judge_weight * judge + weights.bonus_weight * call.bonus
                        )
                rewards[b, g] = sum(per_call) / len(per_call) if per_call else 0.0
        return rewards

    def _judge_metrics(
        self,
        entries: Sequence[tuple[WorkflowRecord, SearcherReport]],
        verdicts: Sequence[float],
        texts: Sequence[str] | None,
    ) -> dict[str, float]:
        """``critic/format_rate``, ``critic/gold_rate``, ``critic/agreement`` (module doc); the
        first and last need the judge's texts (None when ``judge`` was replaced)."""
        if not entries:
            return {}
        if self.report_gold is not None:
            gold = [self.report_gold(e.sub_query, e.summary) for _, e in entries]
        else:
            gold = [report_has_gold(e.summary, record.golden_answers) for record, e in entries]
        metrics = {"critic/judged": float(len(entries)), "critic/gold_rate": sum(gold) / len(gold)}
        if texts is None or len(texts) != len(entries):
            return metrics
        parsed = [has_verdict(text) for text in texts]
        metrics["critic/format_rate"] = sum(parsed) / len(parsed)
        agree = [(verdict == 1.0) == g for verdict, g, ok in zip(verdicts, gold, parsed) if ok]
        if agree:
            metrics["critic/agreement"] = sum(agree) / len(agree)
        return metrics
