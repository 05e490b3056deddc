"""Search-R1's retrieval wire format, shared by our server and our HTTP client.

Request:  ``POST /retrieve`` with ``{"queries": [str, ...], "topk": int | null, "return_scores": bool}``.
Response: ``{"result": [per-query list]}`` where each item is
``{"document": {"id", "contents"}, "score": float}`` when ``return_scores`` is true, else the bare
document ``{"id", "contents"}``. ``contents`` is ``"Title"\\ntext`` as in the corpus files.
(Checked against PeterGriffinJin/Search-R1 search_r1/search/retrieval_server.py.)
"""

from __future__ import annotations

from envs.retrieval.base import Passage
from envs.retrieval.corpus import Document, split_contents


def passage_to_document(passage: Passage) -> dict:
    return Document(passage.id, passage.title, passage.text).to_json()


def encode_results(results: list[list[Passage]], return_scores: bool) -> dict:
    if return_scores:
        return {"result": [[{"document": passage_to_document(p), "score": p.score} for p in row] for row in results]}
    return {"result": [[passage_to_document(p) for p in row] for row in results]}


class ProtocolError(ValueError):
    """A retrieval server answered with JSON that is not Search-R1's response format."""


def decode_results(payload: object, expected_rows: int) -> list[list[Passage]]:
    """Parse a ``/retrieve`` response, with or without scores (missing scores become rank-based)."""
    rows = payload.get("result") if isinstance(payload, dict) else payload
    if not isinstance(rows, list) or len(rows) != expected_rows:
        raise ProtocolError(f"expected 'result' with {expected_rows} lists, got {str(payload)[:200]!r}")
    return [[_decode_item(item, rank) for rank, item in enumerate(row)] for row in rows]


def _decode_item(item: object, rank: int) -> Passage:
    if not isinstance(item, dict):
        raise ProtocolError(f"expected a document object, got {str(item)[:200]!r}")
    document, score = (item["document"], float(item.get("score", -rank))) if "document" in item else (item, -rank)
    if "contents" in document:
        title, text = split_contents(str(document["contents"]))
    else:
        title, text = str(document.get("title", "")), str(document.get("text", ""))
    return Passage(str(document.get("id", "")), title, text, float(score))
