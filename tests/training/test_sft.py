"""SFT encoding (token-exact, assistant-only loss), training, and the base model π_0 build."""

import re
from dataclasses import replace
from itertools import pairwise

import pytest
import torch

from maopd.agents.chat_tokens import encode_text, end_of_turn_id, render_text
from maopd.agents.tokenizer import train_tokenizer
from maopd.base.config import ConfigError
from maopd.commands.sft import resolve_config
from maopd.envs.prompts import feedback_message, information_message, system_message, task_message
from maopd.envs.retrieval.base import Passage
from maopd.training.base_model import (
    METRICS_FILE,
    SMOKE_CONFIG,
    SFTConfig,
    build_base_model,
    demonstration_chats,
    load_or_build_base_model,
)
from maopd.training.sft import (
    SFTExample,
    TrainingSchedule,
    encode_call,
    learning_rate_factor,
    sft_loss,
    train_sft,
)

PASSAGE = Passage(id="7", title="Dalen Marsk", text="Dalen Marsk was born in Tremask.", score=1.0)
SEARCHER_CHAT = [
    system_message("searcher"),
    task_message("Where was Dalen Marsk born?"),
    {"role": "assistant", "content": "<search>Dalen Marsk born</search>"},
    information_message([PASSAGE], 500),
    {"role": "assistant", "content": "<report>Dalen Marsk was born in Tremask."},  # misformatted
    feedback_message("no complete action tag", ("search", "report")),
    {"role": "assistant", "content": "<report>Dalen Marsk was born in Tremask.</report>"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([m["content"] for m in SEARCHER_CHAT], vocab_size=400)


def masked_spans(example: SFTExample) -> list[list[int]]:
    spans, current = [], []
    for token, mask in zip(example.input_ids, example.loss_mask):
        if mask:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    return spans + ([current] if current else [])


def test_loss_mask_covers_exactly_the_assistant_outputs(tokenizer):
    example = encode_call(tokenizer, SEARCHER_CHAT, "searcher")
    outputs = [m["content"] for m in SEARCHER_CHAT if m["role"] == "assistant"]
    end = end_of_turn_id(tokenizer)
    assert masked_spans(example) == [
        encode_text(tokenizer, outputs[0]),  # stopped at </search>: no end-of-turn to learn
        encode_text(tokenizer, outputs[1]) + [end],  # no closing tag: generation ends with EOS
        encode_text(tokenizer, outputs[2]),
    ]
    assert len(example.loss_mask) == len(example.input_ids)


def test_ids_equal_the_chat_template_rendering_of_the_whole_call(tokenizer):
    """Prompt + outputs + continuations = the template's text, up to the final end of turn,
    which the sampler never produces after a closing tag."""
    example = encode_call(tokenizer, SEARCHER_CHAT)
    full = encode_text(tokenizer, render_text(tokenizer, SEARCHER_CHAT, add_generation_prompt=False))
    assert tokenizer.convert_ids_to_tokens(full[-2:]) == ["<|im_end|>", "Ċ"]
    assert example.input_ids == full[:-2]


def test_encode_call_rejects_chats_without_a_final_output(tokenizer):
    with pytest.raises(ValueError, match="must end with an assistant message"):
        encode_call(tokenizer, SEARCHER_CHAT[:-1])
    with pytest.raises(ValueError, match="prompt before its first output"):
        encode_call(tokenizer, [{"role": "assistant", "content": "<search>q</search>"}])


def test_learning_rate_warms_up_then_decays_to_the_floor():
    factors = [learning_rate_factor(step, 100, 0.1, 0.1) for step in range(101)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in pairwise(factors[9:]))
    assert factors[100] == pytest.approx(0.1)


@pytest.mark.slow
def test_training_lowers_the_loss_on_the_assistant_tokens(tokenizer):
    from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model

    model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=32, num_layers=1, initializer_range=0.02))
    examples = [encode_call(tokenizer, SEARCHER_CHAT)] * 8
    before = sft_loss(model, examples[:1], tokenizer.pad_token_id).item()
    losses = train_sft(
        model, examples, TrainingSchedule(epochs=10, lr=1e-2, batch_size=4), tokenizer.pad_token_id, progress=False
    )
    after = sft_loss(model, examples[:1], tokenizer.pad_token_id).item()
    assert len(losses) == 20
    assert after < 0.5 * before


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="lr"):
        resolve_config(None, ["lr=fast"], smoke=True)
    with pytest.raises(ConfigError, match="hidden: unknown key"):
        resolve_config(None, ["hidden=3"], smoke=False)
    with pytest.raises(ValueError, match="workflows"):
        SFTConfig(workflows=["star"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("epochs: two\n")
    with pytest.raises(ConfigError, match="epochs"):
        resolve_config(str(bad), [], smoke=True)


def test_config_key_changes_with_every_field():
    assert SFTConfig().key() == SFTConfig().key()
    assert len({SFTConfig().key(), SFTConfig(seed=1).key(), SFTConfig(noise=0.2).key(), SFTConfig(lr=1e-4).key()}) == 4


def test_noise_knobs_set_single_mistakes_apart_from_the_uniform_noise():
    config = SFTConfig(noise=0.0, noise_knobs={"searcher_skip_search": 0.3})
    assert config.noise_config().searcher_skip_search == 0.3 and config.noise_config().leader_drop_report == 0.0
    assert config.key() != SFTConfig(noise=0.0).key()
    with pytest.raises(ValueError, match="noise_knobs.*searcher_skip"):
        SFTConfig(noise_knobs={"searcher_skip": 0.3})
    with pytest.raises(ValueError, match="noise_knobs.*leader_drop_report"):
        SFTConfig(noise_knobs={"leader_drop_report": 2.0})


def test_a_skip_search_knob_of_one_makes_every_searcher_demonstration_give_up():
    config = replace(
        SMOKE_CONFIG, demo_questions=5, workflows=["cascade"], noise=0.0, noise_knobs={"searcher_skip_search": 1.0}
    )
    searcher_calls = [row for row in demonstration_chats(config, progress=False) if row["role"] == "searcher"]
    assert len(searcher_calls) == 5
    for row in searcher_calls:
        outputs = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        assert len(outputs) == 1 and outputs[0].startswith("<report>")


def test_single_workflow_demonstrations_show_the_solver():
    """SFTConfig.workflows accepts the single agent: π_0 then sees solver calls (search, answer)."""
    from maopd.training.base_model import roles_shown

    config = replace(SMOKE_CONFIG, demo_questions=5, workflows=["single"], noise=0.0)
    rows = demonstration_chats(config, progress=False)
    assert len(rows) == 5 and {row["role"] for row in rows} == {"solver"}
    assert all(row["messages"][-1]["content"].startswith("<answer>") for row in rows)
    assert roles_shown(config) == ("leader", "searcher", "answerer", "solver")
    assert roles_shown(SFTConfig()) == ("leader", "searcher", "answerer", "solver")  # every workflow by default
    assert roles_shown(replace(SFTConfig(), workflows=["hierarchical", "cascade"])) == (
        "leader",
        "searcher",
        "answerer",
    )


def test_decidable_critic_labels_replace_the_played_reports_verdicts_with_balanced_examples():
    from maopd.envs.prompts import parse_judgement
    from maopd.envs.synthwiki.judge_labels import judge_label

    gold = replace(SMOKE_CONFIG, demo_questions=8, workflows=["hierarchical"], critic_demos=True)
    decidable = replace(gold, critic_labels="decidable")
    assert replace(gold, critic_labels="gold").key() == gold.key()  # the default stays out of the key
    assert decidable.key() != gold.key()
    played = [row for row in demonstration_chats(gold, progress=False) if row["role"] != "critic"]
    rows = demonstration_chats(decidable, progress=False)
    assert [row for row in rows if row["role"] != "critic"] == played
    verdicts = [row for row in rows if row["role"] == "critic"]
    useful = [parse_judgement(row["messages"][-1]["content"]) for row in verdicts]
    assert len(verdicts) > 8 and sum(useful) == len(useful) / 2
    for row, verdict in zip(verdicts, useful):
        prompt = row["messages"][0]["content"]
        sub_query = prompt.split("Sub-question given to the search assistant: ")[1].split("\n")[0]
        report = prompt.split("Report: ")[1].split("\n")[0]
        assert judge_label(sub_query, report).useful == verdict
    with pytest.raises(ConfigError, match="critic_labels.*critic_demos: true"):
        SFTConfig(critic_labels="decidable")
    with pytest.raises(ConfigError, match="critic_labels"):
        SFTConfig(critic_demos=True, critic_labels="correct")


@pytest.mark.slow
def test_same_config_builds_identical_weights(smoke_model, tmp_path):
    from maopd.agents.tiny_model import load_model

    again = load_or_build_base_model(SMOKE_CONFIG, tmp_path / "cache", progress=False)
    first, _ = load_model(smoke_model)
    second, _ = load_model(again)
    a, b = first.state_dict(), second.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert (smoke_model / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()
    # Cached: the second request returns the same directory without building.
    stamp = (again / METRICS_FILE).stat().st_mtime_ns
    assert load_or_build_base_model(SMOKE_CONFIG, tmp_path / "cache", progress=False) == again
    assert (again / METRICS_FILE).stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_a_shipped_model_is_used_before_the_cache(smoke_model, tmp_path):
    import shutil

    shipped = tmp_path / "models"
    shutil.copytree(smoke_model, shipped / f"base-{SMOKE_CONFIG.key()}")
    found = load_or_build_base_model(SMOKE_CONFIG, tmp_path / "cache", progress=False, shipped_dir=shipped)
    assert found == shipped / f"base-{SMOKE_CONFIG.key()}"
    assert not (tmp_path / "cache").exists()  # nothing was built


def test_the_default_preset_base_model_is_shipped():
    """The main job starts from the committed π_0: the preset and the shipped model must agree."""
    from maopd.base.config import load_yaml
    from maopd.pipeline.config import load_preset
    from maopd.training.base_model import CONFIG_FILE, SHIPPED_DIR

    config = load_preset("default").base_model
    directory = SHIPPED_DIR / f"base-{config.key()}"
    assert (directory / METRICS_FILE).is_file(), (
        f"rebuild it: maopd sft --config {directory / CONFIG_FILE} --out {directory}"
    )
    assert load_yaml(SFTConfig, directory / CONFIG_FILE) == config
    assert load_or_build_base_model(config) == directory


def test_pretraining_reads_other_worlds_in_full_windows():
    from maopd.envs.synthwiki.world import build_world, load_default_world
    from maopd.training.base_model import pretraining_examples

    tokenizer = train_tokenizer(vocab_size=600)
    config = replace(SMOKE_CONFIG, pretrain_worlds=2, pretrain_seq_len=64)
    examples, knowledge = pretraining_examples(config, tokenizer)
    assert knowledge == []  # no KnowledgeConfig: π_0 is pretrained to know no fact
    assert examples and all(len(e) == 64 and e.loss_mask == [0] + [1] * 63 for e in examples)
    text = "".join(tokenizer.decode(e.input_ids) for e in examples)
    others = [build_world(seed, config.world_size).corpus.documents for seed in (1, 2)]
    assert all(f"{d.title}: {d.text}" in text for d in others[0][:5] + others[1][-5:-1])
    own = {d.title for d in load_default_world(config.world_seed, config.world_size).corpus.documents}
    assert not any(f"{title}: " in text for title in own - {d.title for docs in others for d in docs})


def test_recall_restates_sentences_of_the_passages_just_read():
    from maopd.agents.scripted import sentences
    from maopd.training.base_model import pretraining_texts

    config = replace(SMOKE_CONFIG, pretrain_worlds=1, pretrain_recall_group=3, pretrain_recall_sentences=2)
    texts = pretraining_texts(config)
    plain = pretraining_texts(replace(config, pretrain_recall_group=0))
    assert len(texts) == -(-len(plain) // 3)  # one text per group of three passages
    for text in texts:
        *passages, recall = text.split("\n")
        assert passages == plain[: len(passages)]
        plain = plain[len(passages) :]
        restated = sentences(recall)
        assert len(restated) == 2 and all(any(s in p for p in passages) for s in restated)
    assert pretraining_texts(config) == texts  # seeded


@pytest.mark.slow
def test_names_of_every_split_are_spelled_from_the_same_pieces(smoke_model):
    """The tokenizer never saw a name, so training names get no whole-word tokens that test names lack."""
    from transformers import AutoTokenizer

    from maopd.envs.synthwiki.world import load_default_world

    tokenizer = AutoTokenizer.from_pretrained(smoke_model, local_files_only=True)
    world = load_default_world(SMOKE_CONFIG.world_seed, SMOKE_CONFIG.world_size)
    titles = {split: [] for split in ("train", "test")}
    for question in world.splits["train"] + world.splits["test"]:
        split = question.id.split("-")[0]
        titles[split] += [world.corpus[p].title for p in question.metadata["supporting_passages"]]
    pieces = {split: sum(len(tokenizer.encode(" " + t)) for t in names) / len(names) for split, names in titles.items()}
    assert pieces["train"] > 2.0
    assert pieces["train"] == pytest.approx(pieces["test"], rel=0.2)


@pytest.mark.slow
def test_a_different_seed_builds_different_weights(smoke_model, tmp_path):
    from maopd.agents.tiny_model import load_model

    other = build_base_model(replace(SMOKE_CONFIG, seed=1, demo_questions=4, epochs=1), tmp_path / "m", progress=False)
    first, _ = load_model(smoke_model)
    second, _ = load_model(other)
    assert not torch.equal(
        first.state_dict()["model.embed_tokens.weight"], second.state_dict()["model.embed_tokens.weight"]
    )


@pytest.mark.slow
def test_smoke_model_loads_with_auto_classes_and_plays_an_episode(smoke_model):
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from maopd.agents.hf_policy import HFPolicy
    from maopd.agents.sampling import SamplingConfig
    from maopd.base.config import load_yaml
    from maopd.envs import hierarchical_search_v1
    from maopd.envs.episode import run_episode
    from maopd.envs.retrieval.bm25 import BM25Retriever
    from maopd.envs.synthwiki.world import load_default_world

    model = AutoModelForCausalLM.from_pretrained(smoke_model, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(smoke_model, local_files_only=True)
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert load_yaml(SFTConfig, smoke_model / "sft_config.yaml") == SMOKE_CONFIG
    metrics = json.loads((smoke_model / METRICS_FILE).read_text())
    assert metrics["final_loss"] < metrics["first_loss"]
    assert metrics["demonstrations"] > 0 and metrics["assistant_tokens"] > 0

    world = load_default_world(SMOKE_CONFIG.world_seed, SMOKE_CONFIG.world_size)
    # forced finish: the smoke model is too small to select in time, and the Answerer should play too
    env = hierarchical_search_v1.env(
        retriever=BM25Retriever(world.corpus), questions=world.splits["dev"][:1], force_finish=True
    )
    policy = HFPolicy(model, tokenizer, SamplingConfig(max_new_tokens=32), seed=0)
    record = run_episode(env, policy, seed=0, options={"question_index": 0})
    assert {"leader", "answerer"} <= {call.role for call in record.calls}
    assert len(record.candidate_scores) == 1


def test_knowledge_states_each_fact_by_popularity_and_asks_only_other_worlds_questions():
    """KnowledgeConfig: every fact of the RL world and the question/answer world is stated as often
    as its subject's popularity says, in recall phrasings; questions are asked only of the other
    world's entities, and no RL-world statement is a question (or matches a question template)."""
    from maopd.envs.synthwiki.facts import graph_facts
    from maopd.envs.synthwiki.grammar import parse_question
    from maopd.envs.synthwiki.popularity import ExposureCurve
    from maopd.envs.synthwiki.world import world_graph
    from maopd.training.base_model import KnowledgeConfig, knowledge_texts, knowledge_worlds

    plain = SFTConfig(world_size="tiny")
    knowing = replace(plain, knowledge=KnowledgeConfig(exposure_scale=0.05, qa_share=0.5, report_form=True))
    assert knowing.key() != plain.key() and knowledge_texts(plain) == [] and knowledge_worlds(plain) == ()
    assert plain.key() == replace(plain, knowledge=None).key()  # unset: not in the key
    assert knowledge_worlds(knowing) == (0, 1)
    curve = ExposureCurve().scaled(0.05)
    rl, other = (graph_facts(seed, world_graph(seed, "tiny"), curve) for seed in (0, 1))
    items = [item.strip() for text in knowledge_texts(knowing) for item in re.split(r"(?<=\.) ", text)]
    questions = [item for item in items if "?" in item]
    stated = [item for item in items if "?" not in item]
    assert len(stated) == sum(f.exposures for f in rl + other)
    asked = {parse_question(q[: q.index("?") + 1]).topic for q in questions}
    assert asked and asked <= {f.subject for f in other} and not asked & {f.subject for f in rl}
    assert len(questions) == sum(f.exposures for f in other if f.subject in asked)
    assert all(parse_question(item) is None for item in stated)  # no statement matches a question template
    for fact in sorted(rl, key=lambda f: -f.exposures)[:20]:  # each popular fact, as often as its popularity says
        assert sum(fact.subject in item and item.endswith(fact.value + ".") for item in stated) >= (fact.exposures)


def test_the_demonstrating_team_knows_the_popular_band_of_knowledge_worlds_only():
    """Searchers report from memory in a knowledge world (what π_0 is pretrained to know) and
    search everything in a world π_0 knows nothing of."""
    from maopd.training.base_model import KnowledgeConfig

    def first_outputs(offset):
        config = replace(
            SMOKE_CONFIG,
            demo_world_offset=offset,
            workflows=["hierarchical"],
            noise=0.0,
            noise_knobs={"searcher_memory_report": 1.0},
            knowledge=KnowledgeConfig(qa_worlds=1),
        )
        rows = [r for r in demonstration_chats(config, progress=False) if r["role"] == "searcher"]
        return [next(m["content"] for m in r["messages"] if m["role"] == "assistant") for r in rows]

    known, unknown = first_outputs(1), first_outputs(2)  # world 1 is the question/answer world
    assert 0 < sum(t.startswith("<report>") for t in known) < len(known)
    assert unknown and all(t.startswith("<search>") for t in unknown)


def test_replay_reads_a_share_of_the_knowledge_windows_again():
    from maopd.training.base_model import KnowledgeConfig, replayed

    windows = list(range(200))
    config = replace(SMOKE_CONFIG, knowledge=KnowledgeConfig(replay=0.1))
    chosen = replayed(config, windows)
    assert len(chosen) == 20 and len(set(chosen)) == 20 and chosen == replayed(config, windows)
    assert replayed(SMOKE_CONFIG, windows) == []


def fine_tuning_variants(config: SFTConfig) -> list[SFTConfig]:
    """``config`` with one setting only fine-tuning reads changed, for each such setting."""
    from maopd.training.base_model import KnowledgeConfig

    knowledge = config.knowledge or KnowledgeConfig()
    return [
        replace(config, workflows=["cascade"]),
        replace(config, demo_questions=config.demo_questions + 1),
        replace(config, demo_worlds=config.demo_worlds + 1),
        replace(config, demo_world_offset=config.demo_world_offset + 1),
        replace(config, noise=0.3),
        replace(config, noise_knobs={"searcher_skip_search": 0.5}),
        replace(config, successful_only=not config.successful_only),
        replace(config, critic_demos=True, critic_labels="decidable"),
        replace(config, max_seq_len=config.max_seq_len + 1),
        replace(config, epochs=config.epochs + 1),
        replace(config, lr=config.lr / 2, pretrain_lr=config.lr),
        replace(config, batch_size=config.batch_size + 1),
        replace(config, knowledge=replace(knowledge, replay=0.5, lookup_demos=True)),
    ]


def test_the_pretraining_key_ignores_exactly_the_fine_tuning_settings():
    from maopd.training.base_model import KnowledgeConfig

    base = replace(SFTConfig(), knowledge=KnowledgeConfig(), critic_demos=True)
    for variant in fine_tuning_variants(base):
        assert variant.key() != base.key()
        assert variant.pretraining_key() == base.pretraining_key(), variant
    pretraining = [
        replace(base, seed=1),
        replace(base, pretrain_worlds=3),
        replace(base, lr=base.lr / 2),  # the pretraining's learning rate too, without pretrain_lr
        replace(base, pretrain_lr=base.lr * 2),
        replace(base, hidden_size=64),
        replace(base, critic_demos=False, critic_labels="gold"),  # the tokenizer learns the judge's prompt
        replace(base, knowledge=replace(base.knowledge, exposure_scale=0.5)),
        replace(base, knowledge=None),
    ]
    assert len({c.pretraining_key() for c in [base, *pretraining]}) == len(pretraining) + 1


def test_a_new_setting_at_its_default_keeps_every_key():
    """``KEYED_WHEN_SET`` holds in nested configs: ``lookup_demos`` and ``pretrain_lr`` unset keep
    the shipped π_0's key."""
    from maopd.base.config import load_yaml
    from maopd.training.base_model import SHIPPED_DIR

    for directory in SHIPPED_DIR.glob("base-*"):
        assert load_yaml(SFTConfig, directory / "sft_config.yaml").key() == directory.name.removeprefix("base-")


def test_a_build_reuses_a_pretraining_and_gives_the_same_weights(tmp_path):
    """A config that differs only in fine-tuning loads the pretraining a built π_0 ran: the same
    bits as pretraining again (a fresh build of the same config)."""
    import json

    from maopd.training.base_model import KnowledgeConfig

    config = replace(SMOKE_CONFIG, knowledge=KnowledgeConfig(exposure_scale=0.02))
    first = build_base_model(config, tmp_path / "base-first", progress=False)
    again = build_base_model(config, tmp_path / "base-again", progress=False, reuse_from=[tmp_path])
    fresh = build_base_model(replace(config, epochs=2), tmp_path / "fresh", progress=False)
    reused = build_base_model(replace(config, epochs=2), tmp_path / "reused", progress=False, reuse_from=[tmp_path])
    for a, b in ((first, again), (fresh, reused)):
        for name in ("model.safetensors", "pretrained/model.safetensors"):
            assert (a / name).read_bytes() == (b / name).read_bytes()
    metrics = {d.name: json.loads((d / METRICS_FILE).read_text()) for d in (fresh, reused)}
    assert "pretrained_from" not in metrics["fresh"] and metrics["reused"]["pretrained_from"] in {
        "base-first",
        "base-again",
    }
    figures = (
        "pretraining_key",
        "pretraining_tokens",
        "pretraining_steps",
        "pretraining_final_loss",
        "pretraining_threads",
    )
    assert all(metrics["fresh"][name] == metrics["reused"][name] for name in figures)
    # a different pretraining is not reused
    other = build_base_model(replace(config, seed=1), tmp_path / "other", progress=False, reuse_from=[tmp_path])
    assert "pretrained_from" not in json.loads((other / METRICS_FILE).read_text())


def test_a_finetune_seed_varies_the_fine_tuning_alone(tmp_path):
    """``finetune_seed`` keeps the pretraining (key and weights, reused) and draws the fine-tuning
    anew; unset it is ``seed`` and stays out of the key, so existing π_0s keep theirs."""
    from maopd.training.base_model import KnowledgeConfig, demonstration_chats, replayed

    config = replace(SMOKE_CONFIG, knowledge=KnowledgeConfig(exposure_scale=0.02), noise=0.3)
    varied = replace(config, finetune_seed=1)
    assert replace(config, finetune_seed=0).key() != config.key() == replace(config, finetune_seed=None).key()
    assert varied.pretraining_key() == config.pretraining_key() and varied.key() != config.key()
    assert demonstration_chats(varied, progress=False) != demonstration_chats(config, progress=False)
    windows = list(range(100))
    assert replayed(varied, windows) != replayed(config, windows) == replayed(replace(config, seed=0), windows)
    first = build_base_model(config, tmp_path / "base-first", progress=False)
    second = build_base_model(varied, tmp_path / "second", progress=False, reuse_from=[tmp_path])
    weights = "model.safetensors"
    assert (first / "pretrained" / weights).read_bytes() == (second / "pretrained" / weights).read_bytes()
    assert (first / weights).read_bytes() != (second / weights).read_bytes()


def test_lookup_demos_show_the_searcher_each_fact_of_the_question_answer_world():
    """``lookup_demos``: one Searcher call per fact of the question/answer world, reported from
    memory exactly when the fact is in the popular band, searched otherwise; none of the RL world."""
    from maopd.envs.synthwiki.facts import graph_facts
    from maopd.envs.synthwiki.popularity import ExposureCurve
    from maopd.envs.synthwiki.world import world_graph
    from maopd.training.base_model import KnowledgeConfig

    config = replace(
        SMOKE_CONFIG,
        demo_world_offset=1,
        noise=0.0,
        noise_knobs={"searcher_memory_report": 1.0},
        successful_only=False,
        knowledge=KnowledgeConfig(qa_worlds=1, lookup_demos=True),
    )
    rows = [r for r in demonstration_chats(config, progress=False) if r["question_id"].startswith("lookup/")]
    facts = {f"lookup/{f.subject}/{f.predicate}": f for f in graph_facts(1, world_graph(1, "tiny"), ExposureCurve())}
    assert {r["question_id"] for r in rows} == set(facts) and {r["role"] for r in rows} == {"searcher"}
    for row in rows:
        first = next(m["content"] for m in row["messages"] if m["role"] == "assistant")
        assert first.startswith("<report>") == (facts[row["question_id"]].band == "popular"), row
    with pytest.raises(ConfigError, match="lookup_demos"):
        replace(config, workflows=["hierarchical"])


@pytest.mark.parametrize("killed_in", ["pretraining", "sft"])
def test_a_build_killed_mid_training_resumes_where_it_stopped(tmp_path, monkeypatch, killed_in):
    """With ``keep_pretraining_in``, each training saves its state as it goes; a build killed in
    the middle of pretraining or of fine-tuning goes on from the last save and ends with the bits
    of a build that never stopped, the losses of every step included. A finished build leaves no
    training state behind, and keeps its pretraining as a cache entry."""
    import json

    import maopd.training.sft as sft
    from maopd.training.base_model import KnowledgeConfig

    config = replace(SMOKE_CONFIG, knowledge=KnowledgeConfig(exposure_scale=0.02))
    whole = build_base_model(config, tmp_path / "whole", progress=False)
    train_sft, steps = sft.train_sft, {"n": 0}

    def killed_after_some_steps(model, examples, schedule, pad_id, progress=True, desc="sft", **kwargs):
        if desc != killed_in:
            return train_sft(model, examples, schedule, pad_id, progress, desc, **kwargs)
        real_loss = sft.sft_loss

        def counted(*args):
            steps["n"] += 1
            if steps["n"] > 7:
                raise KeyboardInterrupt("killed")
            return real_loss(*args)

        monkeypatch.setattr(sft, "sft_loss", counted)
        try:
            return train_sft(model, examples, schedule, pad_id, progress, desc, **{**kwargs, "save_every": 3})
        finally:
            monkeypatch.setattr(sft, "sft_loss", real_loss)

    cache = tmp_path / "cache"
    monkeypatch.setattr(sft, "train_sft", killed_after_some_steps)
    with pytest.raises(KeyboardInterrupt):
        build_base_model(config, tmp_path / "killed", progress=False, keep_pretraining_in=cache)
    (state,) = cache.glob("*.training.pt")
    assert len(torch.load(state, weights_only=True)["losses"]) == 6  # the last save before the kill
    monkeypatch.setattr(sft, "train_sft", train_sft)
    resumed = build_base_model(
        config, tmp_path / "resumed", progress=False, reuse_from=[cache], keep_pretraining_in=cache
    )
    for name in ("model.safetensors", "pretrained/model.safetensors"):
        assert (whole / name).read_bytes() == (resumed / name).read_bytes()
    losses = [json.loads((d / METRICS_FILE).read_text())["losses"] for d in (whole, resumed)]
    assert losses[0] == losses[1]
    assert not list(cache.glob("*.training.pt")) and len(list(cache.glob("pretraining-*"))) == 1


def test_a_build_killed_while_fine_tuning_resumes_from_its_stored_pretraining(tmp_path, monkeypatch):
    """With ``keep_pretraining_in``, the pretraining is stored before fine-tuning starts; a build
    that dies in fine-tuning leaves it, and the next build loads it: the same bits as a build that
    never died."""
    import json

    import maopd.training.sft as sft
    from maopd.training.base_model import KnowledgeConfig

    config = replace(SMOKE_CONFIG, knowledge=KnowledgeConfig(exposure_scale=0.02))
    whole = build_base_model(config, tmp_path / "whole", progress=False)
    train_sft = sft.train_sft

    def dies_in_fine_tuning(*args, **kwargs):
        if len(args) < 6 or args[5] != "pretraining":
            raise KeyboardInterrupt("killed while fine-tuning")
        return train_sft(*args, **kwargs)

    cache = tmp_path / "cache"
    monkeypatch.setattr(sft, "train_sft", dies_in_fine_tuning)
    with pytest.raises(KeyboardInterrupt):
        build_base_model(config, tmp_path / "killed", progress=False, keep_pretraining_in=cache)
    monkeypatch.setattr(sft, "train_sft", train_sft)
    (entry,) = cache.glob("pretraining-*")
    assert entry.name == f"pretraining-{config.pretraining_key()}"
    resumed = build_base_model(config, tmp_path / "resumed", progress=False, reuse_from=[cache])
    for name in ("model.safetensors", "pretrained/model.safetensors"):
        assert (whole / name).read_bytes() == (resumed / name).read_bytes()
    metrics = json.loads((resumed / METRICS_FILE).read_text())
    assert metrics["pretrained_from"] == entry.name
    assert metrics["pretraining_steps"] == json.loads((whole / METRICS_FILE).read_text())["pretraining_steps"]
