"""Search-R1's retrieval wire format, shared by our server and our HTTP client.

Request:  ``POST /retrieve`` with ``{"queries": [str, ...], "topk": int | null, "return_scores": bool}``.
Response: ``{"result": [per-query list]}`` where each item is
``{"document": {"id", "contents"}, "score": float}`` when ``return_scores`` is true, else the bare
document ``{"id", "contents"}``. ``contents`` is ``"Title"\\ntext`` as in the corpus files.
(Checked against PeterGriffinJin/Search-R1 search_r1/search/retrieval_server.py.)
"""

from __future__ import annotations

import math

from maopd.envs.retrieval.base import Passage
from maopd.envs.retrieval.corpus import Document, split_contents


def passage_to_document(passage: Passage) -> dict:
    return Document(passage.id, passage.title, passage.text).to_json()


def encode_results(results: list[list[Passage]], return_scores: bool) -> dict:
    if return_scores:
        return {"result": [[{"document": passage_to_document(p), "score": p.score} for p in row] for row in results]}
    return {"result": [[passage_to_document(p) for p in row] for row in results]}


class ProtocolError(ValueError):
    """A retrieval server answered with JSON that is not Search-R1's response format."""


def decode_results(payload: object, expected_rows: int) -> list[list[Passage]]:
    """Parse a ``/retrieve`` response, with or without scores (missing scores become rank-based).

    Anything else is a ``ProtocolError`` saying what is wrong: a row that is not a list, an item
    that is not a document, a field of the wrong type, or a score that is not a finite number
    (a NaN score would reach the records and every sum over them)."""
    rows = payload.get("result") if isinstance(payload, dict) else payload
    if not isinstance(rows, list) or len(rows) != expected_rows:
        raise ProtocolError(f"expected 'result' with {expected_rows} lists, got {_preview(payload)}")
    for row in rows:
        if not isinstance(row, list):
            raise ProtocolError(f"expected a list of documents per query, got {_preview(row)}")
    return [[_decode_item(item, rank) for rank, item in enumerate(row)] for row in rows]


def _preview(value: object) -> str:
    return repr(str(value)[:200])


def _decode_item(item: object, rank: int) -> Passage:
    if not isinstance(item, dict):
        raise ProtocolError(f"expected a document object, got {_preview(item)}")
    document, score = (item["document"], item.get("score", -rank)) if "document" in item else (item, -rank)
    if not isinstance(document, dict):
        raise ProtocolError(f"expected a document object, got {_preview(document)}")
    if not math.isfinite(_number(score)):
        raise ProtocolError(f"a score must be a finite number, got {_preview(score)}")
    doc_id = document.get("id", "")
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
        raise ProtocolError(f"a document id must be text or an integer, got {_preview(doc_id)}")
    fields = ("contents",) if "contents" in document else ("title", "text")
    for name in fields:
        if not isinstance(document.get(name, ""), str):
            raise ProtocolError(f"a document's {name!r} must be text, got {_preview(document.get(name))}")
    if "contents" in document:
        title, text = split_contents(document["contents"])
    else:
        title, text = document.get("title", ""), document.get("text", "")
    return Passage(str(doc_id), title, text, _number(score))


def _number(value: object) -> float:
    """``value`` as a float; NaN for what is not a number, inf for an integer too large for one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf
