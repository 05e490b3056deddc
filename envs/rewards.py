"""The paper's rewards as small pure functions.

Notation follows the paper: c_ij is the normalized exact match of candidate j in trajectory i
(``exact_match`` of the text in its last ``<answer>`` tag, as ``SearchEnv`` scores it),
R_EM,i = max_j c_ij is the team outcome, and each role r has its own reward R_r,i.

* Answerer, per candidate:           R_A,i,j = c_ij
* Searcher (cascade, Stage I):       R_S,i   = 0.9·R_EM,i + 0.1·b_S,i
  with b_S,i = 0.5 after exactly one search step, 1 after two or more, 0 otherwise.
* Leader (Eq. 6):                    R_L,i   = 0.9·R_EM,i + 0.1·min(C_tool,i, 6)/6
  where C_tool,i counts environment steps with at least one Searcher search action.
* Solver (the single-agent baseline, Search-R1-style outcome reward):
                                     R_solver,i = c_i, the exact match of its answer
* Any role whose output had an invalid action format gets a **total** reward of ``FORMAT_PENALTY``
  (-1) instead of the formula: for the Answerer per candidate, for the Leader and each Searcher
  per trajectory. The team outcome R_EM is unaffected (a missing answer span simply scores 0).
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterable, Sequence

FORMAT_PENALTY = -1.0
TOOL_STEP_CAP = 6

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def report_has_gold(report: str, golden_answers: Sequence[str]) -> bool:
    """Gold-correctness of a report: a normalized golden answer occurs in it as whole words."""
    text = f" {normalize_answer(report)} "
    return any(gold and f" {gold} " in text for gold in (normalize_answer(g) for g in golden_answers))


def normalize_answer(text: str) -> str:
    """SQuAD/FlashRAG normalization: lowercase, drop punctuation and articles, collapse spaces.

    Unicode punctuation (category P*) is removed as well as ASCII punctuation, so that curly
    quotes and dashes do not break a match.
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION and not unicodedata.category(ch).startswith("P"))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _matches(prediction: str, normalized: str, reference: str) -> bool:
    gold = normalize_answer(reference)
    if gold:
        return normalized == gold
    # a gold answer that normalizes to nothing ("The", "!!!") is matched on its raw stripped form
    return bool(reference.strip()) and prediction.strip() == reference.strip()


def exact_match(prediction: str | None, references: Iterable[str]) -> float:
    """1.0 if the normalized prediction equals any normalized reference; a missing span is 0.

    An empty normalized prediction ("", "the", "!!!") never matches a normalized reference; a
    reference that normalizes to the empty string is compared on its raw stripped text instead.
    """
    if prediction is None:
        return 0.0
    normalized = normalize_answer(prediction)
    return float(any(_matches(prediction, normalized, ref) for ref in references))


def team_outcome(candidate_scores: Iterable[float]) -> float:
    """R_EM,i = max_j c_ij (0 when there is no candidate)."""
    return max(candidate_scores, default=0.0)


def search_bonus(num_search_steps: int, reported: bool) -> float:
    """b_S,i: 0.5 if the Searcher reports after one search step, 1 after two or more, else 0."""
    if not reported or num_search_steps <= 0:
        return 0.0
    return 0.5 if num_search_steps == 1 else 1.0


def searcher_reward(r_em: float, bonus: float, format_failed: bool) -> float:
    """R_S,i = 0.9·R_EM,i + 0.1·b_S,i, or the format penalty."""
    return FORMAT_PENALTY if format_failed else 0.9 * r_em + 0.1 * bonus


def assign_bonus(tool_steps: int) -> float:
    """R_assign,i = min(C_tool,i, 6)/6."""
    return min(tool_steps, TOOL_STEP_CAP) / TOOL_STEP_CAP


def leader_reward(r_em: float, tool_steps: int, format_failed: bool) -> float:
    """R_L,i = 0.9·R_EM,i + 0.1·R_assign,i (Eq. 6), or the format penalty."""
    return FORMAT_PENALTY if format_failed else 0.9 * r_em + 0.1 * assign_bonus(tool_steps)


def answerer_reward(c_ij: float, format_failed: bool) -> float:
    """R_A,i,j = c_ij, or the format penalty for a candidate without a valid ``<answer>`` tag."""
    return FORMAT_PENALTY if format_failed else c_ij


def solver_reward(c_i: float, format_failed: bool) -> float:
    """R_solver,i = c_i (the exact match of the single agent's answer; 0 without an answer), or
    the format penalty after any format failure in its call.

    Search-R1 trains its single agent on the outcome alone; the -1 keeps the team roles'
    format convention so that the baseline and the teams are rewarded alike.
    """
    return FORMAT_PENALTY if format_failed else c_i
