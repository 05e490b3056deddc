"""Closed-book recall of a world's facts, two ways, and its figures by popularity band.

* **As a language model** (``greedy_answers``): the fact's one-hop question
  (``grammar.subquestion``) after ``<|endoftext|>``, decoded greedily up to the first "."; right
  when the answer is one of the fact's accepted surface forms. What pretraining stored.
* **As the Searcher reporting without a search** (``searcher_reports``): the Searcher's first turn
  exactly as the environments build it (role prompt, then the question as its task), its output
  forced to begin with ``<report>`` (``maopd.agents.forced_start``), greedy up to ``</report>`` or a token
  budget; right when the report states an accepted answer (``maopd.envs.rewards.report_has_gold``).
  What a fine-tuned model can answer from memory when it skips search.

``recall_report`` gives recall per popularity band, per exposure bin and per predicate, each next to
the chance rate of guessing the relation's most common value (``maopd.envs.synthwiki.facts.chance_rates``).
The knowledge probe (``benchmarks/knowledge_probe.py``) and the gates (``maopd tune gates``) read
recall from here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from maopd.envs.synthwiki.facts import Fact, chance_rates

EXPOSURE_BINS = ((1, 3), (4, 10), (11, 30), (31, 100), (101, 1000))
REPORT_TOKENS = 64  # a report of one fact is a sentence: name pieces, a relation and a value


def greedy_answers(model, tokenizer, questions: list[str], max_new_tokens: int = 16, batch: int = 64) -> list[str]:
    """The greedy continuation of each question (after ``<|endoftext|>``) up to its first "."."""
    period = tokenizer.convert_tokens_to_ids(".")
    prompts = [[tokenizer.pad_token_id, *tokenizer.encode(q)] for q in questions]
    outputs: list[str] = [""] * len(prompts)
    by_length: dict[int, list[int]] = {}
    for index, prompt in enumerate(prompts):
        by_length.setdefault(len(prompt), []).append(index)  # equal lengths: no padding needed
    with torch.no_grad():
        for indices in by_length.values():
            for start in range(0, len(indices), batch):
                chunk = indices[start : start + batch]
                ids = torch.tensor([prompts[i] for i in chunk])
                out = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    eos_token_id=[period, tokenizer.eos_token_id, tokenizer.pad_token_id],
                    pad_token_id=tokenizer.pad_token_id,
                )
                for row, i in zip(out[:, ids.shape[1] :].tolist(), chunk):
                    outputs[i] = tokenizer.decode(row, skip_special_tokens=True).split(".")[0].strip()
    return outputs


def searcher_reports(policy, questions: Sequence[str], max_new_tokens: int = REPORT_TOKENS) -> list[str]:
    """The greedy report of the Searcher (``policy``, a ``TokenPolicy``) given each question as its
    task and made to report at once: the text between ``<report>`` and ``</report>`` (or the end of
    the budget, so a report cut short is still read)."""
    from maopd.agents.forced_start import ForcedStart
    from maopd.envs.policy import AgentTurn
    from maopd.envs.prompts import system_message, task_message

    searcher = ForcedStart(policy, "searcher", "<report>")
    turns = [
        AgentTurn("searcher_0", "searcher", (system_message("searcher"), task_message(q)), ("search", "report"))
        for q in questions
    ]
    outputs = []
    for start in range(0, len(turns), policy.max_batch_size):
        chunk = turns[start : start + policy.max_batch_size]
        outputs += [o.text for o in searcher.act(chunk)]
    return [text.removeprefix("<report>").split("</report>")[0].strip() for text in outputs]


def summarise(facts: list[Fact], correct: list[bool], chance: dict[str, float]) -> dict:
    return {
        "facts": len(facts),
        "recall": round(sum(correct) / len(facts), 4) if facts else None,
        "chance": round(sum(chance[f.predicate] for f in facts) / len(facts), 4) if facts else None,
        "exposures_min": min((f.exposures for f in facts), default=None),
        "exposures_max": max((f.exposures for f in facts), default=None),
        "exposures_mean": round(sum(f.exposures for f in facts) / len(facts), 1) if facts else None,
    }


def recall_report(
    facts: list[Fact],
    answers: list[str],
    epochs: int = 1,
    correct: list[bool] | None = None,
    chance: dict[str, float] | None = None,
) -> dict:
    """Recall per band, per exposure bin (statements read, all epochs) and per predicate, with chance.

    ``correct``: whether each answer is right (default: it is one of the fact's accepted forms);
    ``chance``: per predicate (default: ``chance_rates`` of ``facts``)."""
    from maopd.envs.synthwiki.grammar import subquestion
    from maopd.envs.synthwiki.popularity import BANDS

    if correct is None:
        correct = [answer in fact.answers for fact, answer in zip(facts, answers)]
    if chance is None:
        chance = chance_rates(facts)

    def group(keep) -> dict:
        chosen = [i for i, f in enumerate(facts) if keep(f)]
        return summarise([facts[i] for i in chosen], [correct[i] for i in chosen], chance)

    bins = {f"{low}-{high}": (low, high) for low, high in EXPOSURE_BINS}
    return {
        "overall": summarise(facts, correct, chance),
        "bands": {b: group(lambda f, b=b: f.band == b) for b in BANDS},
        "by_exposures": {
            name: group(lambda f, lo=lo, hi=hi: lo <= f.exposures * epochs <= hi) for name, (lo, hi) in bins.items()
        },
        "by_predicate": {p: group(lambda f, p=p: f.predicate == p) for p in sorted({f.predicate for f in facts})},
        "examples": [
            {"question": subquestion(f.predicate, f.subject), "gold": f.value, "answer": a}
            for f, a in list(zip(facts, answers))[:8]
        ],
    }
