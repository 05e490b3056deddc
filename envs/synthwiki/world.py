"""A SynthWiki world: corpus plus train/dev/test questions, built from a seed and a size preset.

``build_world(seed, size)`` builds one in memory; ``write_world`` streams one to a directory
(the way to build the 100k-passage ``large`` preset); ``World.load(dir)`` reads one back;
``load_default_world()`` returns the default world, cached on disk under ``$MAOPD_CACHE``
(default ``~/.cache/maopd``) and in-process; ``world_graph(seed, size)`` returns the knowledge
graph the world is built from (one passage per entity, its id the entity's id).

Files in a world directory: ``corpus.jsonl`` (Search-R1 format), ``train.jsonl``, ``dev.jsonl``,
``test.jsonl`` (FlashRAG format) and ``world.json`` (seed, size, counts, format version).
The same seed and size give byte-identical files.
"""

from __future__ import annotations

import functools
import json
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from maopd.base.atomic import build_directory_atomically, open_atomically
from maopd.base.config import ConfigError
from maopd.base.json_files import write_json
from maopd.envs.datasets import Question, load_questions
from maopd.envs.retrieval.corpus import Corpus, load_corpus
from maopd.envs.synthwiki.corpus import iter_documents
from maopd.envs.synthwiki.generator import SPLITS, SUBGRAPHS, Entity, GraphSize, generate_graph
from maopd.envs.synthwiki.questions import DEFAULT_HOP_MIX, QuestionWriter

# Bump when generated content changes, so that stale caches are rebuilt.
FORMAT_VERSION = 3
# Once figures on a test split have been seen and the testbed changes, a new version of the test
# split gives figures on questions no reported figure came from. Versions 1 and 2 were drawn from
# the "test" sub-graph (so they shared entities); version 3 is drawn from the "heldout" sub-graph,
# whose entities no question of train, dev or an earlier test version touches. Train and dev do
# not depend on the version.
TEST_SPLIT_VERSION = 3
# The sub-graph each question split draws from (``maopd.envs.synthwiki.generator.SUBGRAPHS``).
QUESTION_SUBGRAPHS = {"train": "train", "dev": "dev", "test": "heldout"}
DEFAULT_SEED = 0
DEFAULT_SIZE = "small"


@dataclass(frozen=True)
class SizePreset:
    graph: GraphSize
    questions: dict[str, int]


def _counts(scale: float) -> dict[str, int]:
    base = {"country": 6, "city": 45, "university": 20, "band": 25, "person": 110, "company": 45, "river": 15}
    return {kind: round(count * scale) for kind, count in base.items()}


SIZES = {
    "tiny": SizePreset(GraphSize(_counts(1)), {"train": 200, "dev": 50, "test": 50}),
    "small": SizePreset(GraphSize(_counts(8)), {"train": 2000, "dev": 300, "test": 300}),
    "large": SizePreset(GraphSize(_counts(360)), {"train": 20000, "dev": 2000, "test": 2000}),
}


def _preset(size: str) -> SizePreset:
    if size not in SIZES:
        raise ConfigError(f"world size: unknown preset {size!r}; expected one of {sorted(SIZES)}")
    return SIZES[size]


@dataclass
class World:
    corpus: Corpus
    splits: dict[str, list[Question]]
    manifest: dict[str, Any]

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.corpus.write_jsonl(out / "corpus.jsonl")
        for split, questions in self.splits.items():
            _write_questions(questions, out / f"{split}.jsonl")
        write_json(out / "world.json", self.manifest, sort_keys=True, ensure_ascii=False, indent=1)
        return out

    @classmethod
    def load(cls, directory: str | Path) -> World:
        directory = Path(directory)
        manifest_path = directory / "world.json"
        if not manifest_path.is_file():
            raise FileNotFoundError(f"{manifest_path} does not exist: not a SynthWiki world directory")
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        corpus = load_corpus(directory / "corpus.jsonl")
        splits = {split: load_questions(directory / f"{split}.jsonl") for split in SPLITS}
        return cls(corpus, splits, manifest)


def _write_questions(questions: list[Question], path: Path) -> None:
    with open_atomically(path) as handle:
        for question in questions:
            handle.write(json.dumps(question.to_dict(), sort_keys=True, ensure_ascii=False) + "\n")


@functools.lru_cache(maxsize=4)
def world_graph(seed: int = DEFAULT_SEED, size: str = DEFAULT_SIZE) -> list[Entity]:
    """The knowledge graph of the world of ``seed`` and ``size``, every sub-graph included: the
    entities its corpus (one passage per entity, id for id) and its questions are built from.
    Cached and shared by every caller: read it, do not modify it."""
    return generate_graph(seed, _preset(size).graph)


def _generate(seed: int, size: str, hop_mix: Mapping[str, float] | None):
    preset = _preset(size)
    entities = world_graph(seed, size)
    mix = hop_mix or DEFAULT_HOP_MIX
    # Train and dev come first from one stream, as every version has written them; the test split
    # has a stream of its own per version.
    streams = {"train": random.Random(f"{seed}:questions")}
    streams["dev"] = streams["train"]
    streams["test"] = random.Random(f"{seed}:test-v{TEST_SPLIT_VERSION}")
    splits = {
        split: QuestionWriter(entities, split, streams[split], QUESTION_SUBGRAPHS[split]).write(
            preset.questions[split], mix
        )
        for split in SPLITS
    }
    manifest = {
        "generator": "synthwiki",
        "format_version": FORMAT_VERSION,
        "test_split_version": TEST_SPLIT_VERSION,
        "seed": seed,
        "size": size,
        "hop_mix": dict(hop_mix or DEFAULT_HOP_MIX),
        "passages": len(entities),
        "entities": {subgraph: sum(e.split == subgraph for e in entities) for subgraph in SUBGRAPHS},
        "question_subgraphs": dict(QUESTION_SUBGRAPHS),
        "questions": {split: len(questions) for split, questions in splits.items()},
    }
    return entities, splits, manifest


def build_world(
    seed: int = DEFAULT_SEED, size: str = DEFAULT_SIZE, hop_mix: Mapping[str, float] | None = None
) -> World:
    """Build a world in memory. ``hop_mix`` weights the kinds ``1-hop``, ``2-hop``, ``3-hop``, ``comparison``."""
    entities, splits, manifest = _generate(seed, size, hop_mix)
    return World(Corpus(iter_documents(entities, seed)), splits, manifest)


def write_world(
    out_dir: str | Path,
    seed: int = DEFAULT_SEED,
    size: str = DEFAULT_SIZE,
    hop_mix: Mapping[str, float] | None = None,
    progress: bool = False,
) -> Path:
    """Build a world straight to ``out_dir``, streaming passages (memory stays flat in corpus size)."""
    entities, splits, manifest = _generate(seed, size, hop_mix)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    documents = iter_documents(entities, seed)
    if progress:
        from tqdm import tqdm

        documents = tqdm(documents, total=len(entities), desc="passages", unit="doc")
    with open_atomically(out / "corpus.jsonl") as handle:
        for document in documents:
            handle.write(json.dumps(document.to_json(), ensure_ascii=False) + "\n")
    for split, questions in splits.items():
        _write_questions(questions, out / f"{split}.jsonl")
    write_json(out / "world.json", manifest, sort_keys=True, ensure_ascii=False, indent=1)
    return out


def cache_dir() -> Path:
    return Path(os.environ.get("MAOPD_CACHE") or Path.home() / ".cache" / "maopd")


@functools.lru_cache(maxsize=4)
def load_default_world(seed: int = DEFAULT_SEED, size: str = DEFAULT_SIZE) -> World:
    """The world for ``seed`` and ``size``, from the disk cache (built and cached on first use)."""
    directory = cache_dir() / "synthwiki" / f"v{FORMAT_VERSION}-{size}-seed{seed}"
    return World.load(build_directory_atomically(directory, lambda out: write_world(out, seed, size), "world.json"))
