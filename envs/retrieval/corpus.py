"""Corpora in the Search-R1 / FlashRAG JSONL format: ``{"id": ..., "contents": "\\"Title\\"\\ntext"}``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maopd.base.atomic import open_atomically
from maopd.base.errors import UserError
from maopd.base.json_files import iter_json_lines


class CorpusError(UserError, ValueError):
    """A corpus file or line is malformed. The message names the file and line."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f'"{self.title}"\n{self.text}'

    def to_json(self) -> dict:
        return {"id": self.id, "contents": self.contents}


def split_contents(contents: str) -> tuple[str, str]:
    """Split Search-R1's ``"Title"\\ntext`` into (title, text); a missing title gives ''."""
    first, sep, rest = contents.partition("\n")
    if sep and len(first) >= 2 and first.startswith('"') and first.endswith('"'):
        return first[1:-1], rest
    return "", contents


def document_from_row(row: Any, where: str) -> Document:
    """The document a corpus line's JSON holds; ``CorpusError`` names ``where`` and the field."""
    if not isinstance(row, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if "id" not in row:
        raise CorpusError(f"{where}: missing field 'id'")
    if "contents" in row:
        if not isinstance(row["contents"], str):
            raise CorpusError(f"{where}: field 'contents' must be a string")
        title, text = split_contents(row["contents"])
    elif "text" in row:
        title, text = str(row.get("title", "")), row["text"]
        if not isinstance(text, str):
            raise CorpusError(f"{where}: field 'text' must be a string")
    else:
        raise CorpusError(f"{where}: missing field 'contents' (or 'title'/'text')")
    return Document(str(row["id"]), title, text)


def iter_corpus(path: str | Path) -> Iterator[Document]:
    """Stream documents; raises ``CorpusError`` naming ``path:line`` on the first bad line."""
    for where, row in iter_json_lines(path, CorpusError, "corpus file"):
        yield document_from_row(row, where)


class Corpus:
    """An in-memory corpus with id lookup and a content fingerprint (for caches and indexes)."""

    def __init__(self, documents: Iterable[Document]):
        self.documents = list(documents)
        self._by_id = {}
        for doc in self.documents:
            if doc.id in self._by_id:
                raise CorpusError(f"duplicate document id {doc.id!r}")
            self._by_id[doc.id] = doc
        digest = hashlib.sha256()
        for doc in self.documents:
            digest.update(json.dumps(doc.to_json(), ensure_ascii=False).encode())
            digest.update(b"\n")
        self.fingerprint = digest.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, doc_id: str) -> Document:
        return self._by_id[doc_id]

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._by_id

    def write_jsonl(self, path: str | Path) -> None:
        with open_atomically(path) as handle:
            handle.writelines(json.dumps(doc.to_json(), ensure_ascii=False) + "\n" for doc in self.documents)


def load_corpus(path: str | Path) -> Corpus:
    """The corpus in a JSONL file; ``CorpusError`` names the file if it is missing, malformed or empty."""
    corpus = Corpus(iter_corpus(path))
    if len(corpus) == 0:
        raise CorpusError(f'corpus file {path} holds no documents; write one {{"id", "contents"}} JSON object per line')
    return corpus
