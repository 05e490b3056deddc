"""SynthWiki world: determinism, split disjointness, question and corpus validity, templates."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re

import pytest

from maopd.envs.datasets import load_questions
from maopd.envs.retrieval.corpus import load_corpus
from maopd.envs.synthwiki import World, build_world, load_default_world, write_world
from maopd.envs.synthwiki.generator import SPLITS, SUBGRAPHS, generate_graph
from maopd.envs.synthwiki.grammar import Chain, Comparison, parse_facts, parse_question
from maopd.envs.synthwiki.questions import DEFAULT_HOP_MIX, QuestionWriter, quotas
from maopd.envs.synthwiki.schema import ATTRIBUTES, RELATIONS
from maopd.envs.synthwiki.world import SIZES, TEST_SPLIT_VERSION, world_graph

FILES = ("corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl", "world.json")


@pytest.fixture(scope="module")
def tiny() -> World:
    return build_world(seed=3, size="tiny")


def _digests(directory) -> dict[str, str]:
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in FILES}


def test_same_seed_gives_byte_identical_files(tmp_path):
    first = write_world(tmp_path / "a", seed=7, size="tiny")
    second = build_world(seed=7, size="tiny").write(tmp_path / "b")  # in-memory path, same bytes
    assert _digests(first) == _digests(second)


def test_different_seeds_give_different_worlds(tmp_path):
    a = _digests(write_world(tmp_path / "a", seed=1, size="tiny"))
    b = _digests(write_world(tmp_path / "b", seed=2, size="tiny"))
    assert a["corpus.jsonl"] != b["corpus.jsonl"] and a["train.jsonl"] != b["train.jsonl"]


def test_splits_share_no_entity(tiny):
    entities = {split: {e for q in qs for e in q.metadata["entities"]} for split, qs in tiny.splits.items()}
    assert entities["train"] and entities["dev"] and entities["test"]
    assert not entities["train"] & entities["dev"]
    assert not entities["train"] & entities["test"]
    assert not entities["dev"] & entities["test"]


def test_questions_have_valid_metadata_and_supported_answers(tiny):
    for questions in tiny.splits.values():
        assert len({q.id for q in questions}) == len(questions)
        for q in questions:
            meta = q.metadata
            steps = [step for wave in meta["decomposition"] for step in wave]
            assert meta["type"] in {"lookup", "composition", "comparison"}
            assert meta["hops"] == (2 if meta["type"] == "comparison" else len(meta["decomposition"]))
            assert meta["supporting_passages"] == [step["passage"] for step in steps]
            for step in steps:
                passage = tiny.corpus[step["passage"]]
                facts = {(f.predicate, f.value) for f in parse_facts(passage.text) if f.subject == passage.title}
                assert (step["predicate"], step["answer"]) in facts, (q.question, step)
                assert parse_question(step["subquestion"]) is not None
            if meta["type"] != "comparison":
                assert steps[-1]["answer"] in q.golden_answers


def test_hop_mix_sets_the_question_kinds(tiny):
    counts = {}
    for q in tiny.splits["train"]:
        kind = "comparison" if q.metadata["type"] == "comparison" else f"{q.metadata['hops']}-hop"
        counts[kind] = counts.get(kind, 0) + 1
    assert counts == quotas(len(tiny.splits["train"]), tiny.manifest["hop_mix"])
    only_lookups = build_world(seed=3, size="tiny", hop_mix={"1-hop": 1.0})
    assert {q.metadata["hops"] for q in only_lookups.splits["dev"]} == {1}
    with pytest.raises(ValueError, match="hop_mix"):
        build_world(seed=3, size="tiny", hop_mix={"4-hop": 1.0})


def test_corpus_is_search_r1_format_with_unique_pronounceable_titles(tmp_path, tiny):
    out = tiny.write(tmp_path / "w")
    for line in (out / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        assert set(row) == {"id", "contents"}
        assert row["contents"].startswith('"')
    corpus = load_corpus(out / "corpus.jsonl")
    titles = [doc.title for doc in corpus.documents]
    assert len(set(titles)) == len(titles) and 250 <= len(titles) <= 400
    assert all(re.fullmatch(r"[A-Z][a-z]+( (of )?[A-Z][a-z]+)*", t) for t in titles)
    assert all(15 <= len(doc.text.split()) <= 80 for doc in corpus.documents)  # short, for tiny models
    assert load_questions(out / "dev.jsonl") == tiny.splits["dev"]


def test_distractors_and_aliases_exist(tiny):
    titles = [doc.title for doc in tiny.corpus.documents]
    first_words = [t.split()[0] for t in titles if " " in t]
    assert len(first_words) > len(set(first_words)), "near-duplicate names share a word"
    assert any("also known as" in doc.text for doc in tiny.corpus.documents)
    assert any(len(q.golden_answers) > 1 for q in tiny.splits["train"] if q.metadata["type"] != "lookup")


def test_world_round_trips_and_default_world_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("MAOPD_CACHE", str(tmp_path))
    load_default_world.cache_clear()
    world = load_default_world(seed=5, size="tiny")
    cached = list((tmp_path / "synthwiki").iterdir())
    assert len(cached) == 1 and (cached[0] / "world.json").is_file()
    assert load_default_world(seed=5, size="tiny") is world  # in-process cache
    load_default_world.cache_clear()
    again = load_default_world(seed=5, size="tiny")  # from disk
    assert again.corpus.fingerprint == build_world(seed=5, size="tiny").corpus.fingerprint
    assert again.splits["test"] == world.splits["test"]
    load_default_world.cache_clear()


def test_unknown_size_and_missing_directory_give_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="size"):
        build_world(size="huge")
    with pytest.raises(FileNotFoundError, match="world.json"):
        World.load(tmp_path)


def test_templates_parse_back():
    assert parse_question("Where was the founder of Vellora Records born?") == Chain(
        "Vellora Records", ("founded_by", "born_in")
    )
    assert parse_question("Which country is the campus city of University of Brask in?") == Chain(
        "University of Brask", ("located_in", "in_country")
    )
    assert parse_question("Which was founded earlier, Vellora or Drum Tide?") == Comparison(
        "founded_year", "Vellora", "Drum Tide"
    )
    assert parse_question("What is the meaning of life?") is None
    for relation in RELATIONS.values():
        for template in relation.facts:
            [fact] = parse_facts(template.format(s="Dalen Marsk", o="University of Kelvar"))
            assert (fact.subject, fact.predicate, fact.value) == ("Dalen Marsk", relation.name, "University of Kelvar")
    for attribute in ATTRIBUTES.values():
        for template in attribute.facts:
            [fact] = parse_facts(template.format(s="Kelvar", v="1,250"))
            assert (fact.predicate, fact.value) == (attribute.name, "1,250")


# Digests of what the code wrote before the held-out sub-graph existed (format version 2, seed 0,
# size tiny): the train, dev and test sub-graphs' entities and the train and dev questions.
FORMER_ENTITIES = "5f520426531470bb4bccb15569876505ebb2719811d4f9da33ac91bbb10e9b74"
FORMER_QUESTIONS = {
    "train": "28e3417d1e305a930bdab80157e1ba34c85e2a057d0d5fef700d81434c5d3f36",
    "dev": "cc88ecaa3026dea5ddad12467c64f030a68688bac16326924d76fea0f200ae82",
}


def _rows_digest(rows) -> str:
    return hashlib.sha256("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode()).hexdigest()


def _entities_digest(entities) -> str:
    return _rows_digest(dataclasses.asdict(e) for e in entities)


def _questions_digest(questions) -> str:
    return _rows_digest(q.to_dict() for q in questions)


def _former_test_splits(entities, seed: int, size: str) -> dict[int, list]:
    """Test split versions 1 and 2, regenerated as they were written: version 1 after train and dev
    on the ``questions`` stream, version 2 on its own stream without version 1's questions, both
    from the ``test`` sub-graph."""
    counts, mix = SIZES[size].questions, DEFAULT_HOP_MIX
    stream = random.Random(f"{seed}:questions")
    for split in ("train", "dev"):
        QuestionWriter(entities, split, stream).write(counts[split], mix)
    first = QuestionWriter(entities, "test", stream).write(counts["test"], mix)
    second = QuestionWriter(entities, "test", random.Random(f"{seed}:test-v2")).write(
        counts["test"], mix, exclude={q.question for q in first}
    )
    return {1: first, 2: second}


def test_the_held_out_sub_graph_leaves_the_rest_of_the_world_unchanged():
    """The held-out sub-graph is generated after the others from the same stream: the train, dev and
    test sub-graphs and the train and dev questions are what they were before it existed."""
    entities = world_graph(0, "tiny")
    before = [e for e in entities if e.split != "heldout"]
    assert entities[: len(before)] == before  # the held-out entities come last
    assert _entities_digest(before) == FORMER_ENTITIES
    assert generate_graph(0, SIZES["tiny"].graph, SPLITS) == before
    world = build_world(0, "tiny")
    for split, digest in FORMER_QUESTIONS.items():
        assert _questions_digest(world.splits[split]) == digest
    with pytest.raises(ValueError, match="prefix"):
        generate_graph(0, SIZES["tiny"].graph, ("train", "heldout"))


def test_the_test_split_shares_no_entity_with_any_other_or_former_split():
    """Test split version 3 is drawn from the held-out sub-graph alone: none of its entities (answers
    included) occurs in a train, dev or former test question, nor in their sub-graphs."""
    world = build_world(0, "tiny")
    assert world.manifest["test_split_version"] == TEST_SPLIT_VERSION == 3
    entities = world_graph(0, "tiny")
    touched = {split: {e for q in qs for e in q.metadata["entities"]} for split, qs in world.splits.items()}
    assert {entities[int(i)].split for i in touched["test"]} == {"heldout"}
    former = _former_test_splits(entities, 0, "tiny")
    for version, questions in former.items():
        earlier = {e for q in questions for e in q.metadata["entities"]}
        assert earlier and not earlier & touched["test"], version
        assert not {q.question for q in questions} & {q.question for q in world.splits["test"]}
    assert not touched["test"] & (touched["train"] | touched["dev"])
    assert [q.id for q in world.splits["test"]] == [f"test-{n}" for n in range(len(world.splits["test"]))]
    assert world.manifest["entities"] == {s: sum(e.split == s for e in entities) for s in SUBGRAPHS}


def test_world_graph_is_the_graph_the_corpus_was_built_from(tiny):
    entities = world_graph(3, "tiny")
    assert world_graph(3, "tiny") is entities  # cached
    assert [doc.id for doc in tiny.corpus.documents] == [e.id for e in entities]
    assert [doc.title for doc in tiny.corpus.documents] == [e.name for e in entities]
    assert {e.split for e in entities} == set(SUBGRAPHS)
    for question in tiny.splits["dev"]:
        for step in (step for wave in question.metadata["decomposition"] for step in wave):
            assert entities[int(step["passage"])].split == "dev"


def test_an_unknown_world_size_is_one_user_error():
    from maopd.base.config import ConfigError

    with pytest.raises(ConfigError, match=r"^world size: unknown preset 'bogus'; expected one of \['large'"):
        load_default_world(0, "bogus")
