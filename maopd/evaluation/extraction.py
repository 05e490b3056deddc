"""Answer extraction from the final Answerer output, and the format-failure taxonomy.

The **strict** rule (the main scoring rule) takes the text inside the last complete ``<answer>``
tag. The **flexible** extractor is the paper's diagnostic (Appendix A, Table 6): six ordered
rules that only widen the accepted *formats*; it never looks at the reference answer.

1. the strict answer, unchanged, if there is one;
2. a paired tag that differs only in case or inner whitespace (``<Answer>``, ``< answer >``),
   the last pair;
3. a single unclosed opening tag followed by 1–128 characters of single-line plain text;
4. a trailing ``Final answer:`` or ``Answer:`` line with a 1–128-character plain-text candidate;
5. the whole output, if it is 1–128 characters of single-line plain text;
6. otherwise unparsed (scores zero).

"Plain text" means no angle brackets and no Markdown code fence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from maopd.envs.actions import strict_answer

MAX_PLAIN_CHARS = 128
UNPARSED_RULE = 6

_LOOSE_PAIR = re.compile(r"<\s*answer\s*>(.*?)<\s*/\s*answer\s*>", re.IGNORECASE | re.DOTALL)
_LOOSE_OPEN = re.compile(r"<\s*answer\s*>", re.IGNORECASE)
_LOOSE_CLOSE = re.compile(r"<\s*/\s*answer\s*>", re.IGNORECASE)
_ANSWER_LINE = re.compile(r"^\s*(?:final\s+answer|answer)\s*:(.*)$", re.IGNORECASE)

# The failure taxonomy of the paper: what the saved output looks like, not why it failed.
NO_CANDIDATE = "no_candidate"
EMPTY_CANDIDATE = "empty_candidate"
NO_VALID_TAG = "no_valid_tag"
FAILURE_KINDS = (NO_CANDIDATE, EMPTY_CANDIDATE, NO_VALID_TAG)


@dataclass(frozen=True)
class Extraction:
    """The flexible extractor's answer (None when unparsed) and the number of the rule that fired."""

    answer: str | None
    rule: int


def is_plain_line(text: str) -> bool:
    """1–128 characters on one line, without angle brackets or a Markdown code fence."""
    return (
        1 <= len(text) <= MAX_PLAIN_CHARS
        and "\n" not in text
        and "\r" not in text
        and "<" not in text
        and ">" not in text
        and "```" not in text
    )


def flexible_answer(output: str | None) -> Extraction:
    """Apply the six ordered rules to the raw final output (None: there was no candidate)."""
    if output is None:
        return Extraction(None, UNPARSED_RULE)
    strict = strict_answer(output)
    if strict is not None:
        return Extraction(strict, 1)
    pairs = _LOOSE_PAIR.findall(output)
    if pairs:
        return Extraction(pairs[-1].strip(), 2)
    openings = list(_LOOSE_OPEN.finditer(output))
    if len(openings) == 1 and not _LOOSE_CLOSE.search(output):
        tail = output[openings[0].end() :].strip()
        if is_plain_line(tail):
            return Extraction(tail, 3)
    lines = [line for line in output.splitlines() if line.strip()]
    if lines:
        match = _ANSWER_LINE.match(lines[-1])
        if match and is_plain_line(match.group(1).strip()):
            return Extraction(match.group(1).strip(), 4)
    whole = output.strip()
    if is_plain_line(whole):
        return Extraction(whole, 5)
    return Extraction(None, UNPARSED_RULE)


def failure_kind(output: str | None) -> str | None:
    """Classify a final output that the strict rule cannot score; None if it has a valid tag."""
    if output is None:
        return NO_CANDIDATE
    if not output.strip():
        return EMPTY_CANDIDATE
    if strict_answer(output) is None:
        return NO_VALID_TAG
    return None
