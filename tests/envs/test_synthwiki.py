"""SynthWiki world: determinism, split disjointness, question and corpus validity, templates."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from envs.datasets import load_questions
from envs.retrieval.corpus import load_corpus
from envs.synthwiki import World, build_world, load_default_world, write_world
from envs.synthwiki.grammar import Chain, Comparison, parse_facts, parse_question
from envs.synthwiki.questions import quotas
from envs.synthwiki.schema import ATTRIBUTES, RELATIONS

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


def test_the_test_split_is_fresh_and_train_dev_are_unchanged():
    """The current test split (TEST_SPLIT_VERSION) shares no question with the version-1 test split;
    the corpus, train and dev splits do not depend on the version."""
    import random

    from envs.synthwiki.generator import SPLITS, generate_graph
    from envs.synthwiki.questions import DEFAULT_HOP_MIX, QuestionWriter
    from envs.synthwiki.world import SIZES

    world = build_world(0, "tiny")
    entities = generate_graph(0, SIZES["tiny"].graph)
    rng = random.Random("0:questions")
    first = {
        split: QuestionWriter(entities, split, rng).write(SIZES["tiny"].questions[split], DEFAULT_HOP_MIX)
        for split in SPLITS
    }
    for split in ("train", "dev"):
        assert [q.to_dict() for q in world.splits[split]] == [q.to_dict() for q in first[split]]
    assert not {q.question for q in world.splits["test"]} & {q.question for q in first["test"]}
    assert len(world.splits["test"]) == len(first["test"]) and world.manifest["test_split_version"] == 2
