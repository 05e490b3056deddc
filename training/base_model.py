"""π_0, the base model of the embedded world: a tiny Qwen3 pretrained on other worlds' passages
(and on the facts it is to know, by popularity), then fine-tuned on a scripted team's demos.

It plays the part of an instruction-tuned base model. ``build_base_model`` runs, from one seed:

1. the scripted team (``maopd.agents.noisy_team``, its knobs ``noise`` and ``noise_knobs``) on the first
   ``demo_questions`` train questions of ``demo_worlds`` SynthWiki worlds, in every workflow of
   ``workflows``, recording one demonstration per model call (every role, in the environments'
   exact chat format); in the worlds π_0 is pretrained to know, its Searchers may report from
   memory what π_0 knows (``DEMONSTRATED_KNOWLEDGE``);
2. a byte-level BPE tokenizer trained on the world's templates and the role prompts, never on
   names (``maopd.envs.synthwiki.schema.template_texts``, ``maopd.agents.tokenizer``). A tokenizer trained on
   the demonstrations gives every training entity a whole-word token and spells test entities
   from pieces; the model then memorises training names and cannot copy test ones. Spelling
   every name from the same pieces makes copying from the context the only way to get names
   right, on any split;
3. a random tiny ``Qwen3ForCausalLM`` (``maopd.agents.tiny_model``), pretrained as a language model on
   the passages of ``pretrain_worlds`` other worlds, each group of passages followed by some of
   their sentences again, where it learns to copy names and values from its context
   (``pretraining_texts``), then on the facts it is to know without search, each stated as often
   as its subject's popularity says (``knowledge_texts``, ``KnowledgeConfig``); the language model
   at that point is saved in ``pretrained/``;
4. fine-tuning on the demonstrations (``maopd.training.sft``), with the loss on the model's own tokens
   only, and a share of the knowledge texts read again.

The same config gives the same weights, bit for bit (on the same machine, torch version and
torch thread count).
``load_or_build_base_model`` caches the result under a hash of the config and ``BUILD_VERSION``.
The default preset's π_0 is shipped in ``models/base-<key>/`` (its size and build time are in its
``sft_metrics.json``), so the main job starts from it; models/README.md shows the command
that rebuilds it identically.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Sequence
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from maopd.base.atomic import build_directory_atomically, copy_directory
from maopd.base.config import ConfigError, check_fields, checked, probability, seed_field, to_dict
from maopd.base.json_files import write_json
from maopd.base.limits import BATCH, HEADS, HIDDEN_SIZE, INTERMEDIATE_SIZE, LAYERS, VOCABULARY
from maopd.base.paths import package_data
from maopd.base.run_dir import cache_entry, write_record
from maopd.envs.roles import ROLES, TEAM_ROLES
from maopd.envs.synthwiki.closed_book import ClosedBookConfig
from maopd.envs.synthwiki.schema import RECALL_STATEMENTS
from maopd.envs.synthwiki.world import SIZES as WORLD_SIZES
from maopd.envs.workflows import workflow_names, workflow_roles

if TYPE_CHECKING:
    from maopd.agents.noisy_team import NoiseConfig

# Bump when the build changes what a config produces, so cached models are rebuilt.
BUILD_VERSION = 3
CONFIG_FILE = "sft_config.yaml"
SHIPPED_DIR = package_data("models")
METRICS_FILE = "sft_metrics.json"
PRETRAINED_DIR = "pretrained"  # the language model after pretraining, inside π_0's directory
PRETRAINING_ENTRY = "pretraining"  # a cache entry holding a finished pretraining alone
CHAT_ROLES = ("system", "user", "assistant")
T = TypeVar("T")
# Field metadata for the cache key. KEYED_WHEN_SET: a setting whose default builds what the build
# without it builds; left out of the key while at its default, so that adding such a setting keeps
# every cached model's key. FINE_TUNING: a setting that only fine-tuning reads; left out of
# ``pretraining_key``, so that builds differing only in such settings share one pretraining.
KEYED_WHEN_SET = "keyed_when_set"
FINE_TUNING = "fine_tuning"
CRITIC_LABELS = ("gold", "decidable")  # SFTConfig.critic_labels
# What the demonstrating team knows of a knowledge world: the facts of its popular band, the ones π_0
# reads a hundred times or more. Its Searchers report those from memory (with
# noise_knobs.searcher_memory_report) and search everything else, so π_0 imitates recall, never a guess.
DEMONSTRATED_KNOWLEDGE = ClosedBookConfig(popular=1.0, middle=0.0, long_tail=0.0)
LOOKUP_WORKFLOW = "cascade"  # where KnowledgeConfig.lookup_demos are played: its Searcher's task is the question
# π_0's default recipe demonstrates these; a registered workflow joins it by a config, never by
# default, so that registering one keeps the key of every π_0 built so far.
DEMONSTRATED_WORKFLOWS = ("hierarchical", "cascade", "single")
KNOWLEDGE_GROUP = 8  # statements (or question/answer pairs) per pretraining text, shuffled together


@dataclass(frozen=True)
class KnowledgeConfig:
    """Facts π_0 knows without search, by popularity, in the knowledge probe's recipe
    (``benchmarks/knowledge_probe.py``): every fact of the knowledge worlds, the RL world
    (``world_seed``) and ``qa_worlds`` pretraining worlds (``world_seed + 1 …``), is stated
    ``ExposureCurve().scaled(exposure_scale)`` times by its subject's popularity, cycling through
    ``phrasings`` of ``schema.RECALL_STATEMENTS`` (none a question); for ``qa_share`` of the
    pretraining worlds' entities each fact is also a question/answer pair as often, so that π_0
    learns to answer a question from a fact it read as a statement without ever seeing an RL-world
    question (Allen-Zhu & Li, Physics of Language Models 3.1). ``replay``: the share of these
    texts read again during fine-tuning, so that fine-tuning does not overwrite them."""

    qa_worlds: int = checked(
        1,
        ge=1,
        help="Pretraining worlds (world_seed + 1, …) whose facts π_0 also learns, besides the RL world's; only "
        "these are also asked as question/answer pairs.",
    )
    qa_share: float = probability(
        0.5,
        help="The share of the question/answer worlds' entities whose facts are also written as a question with "
        "its answer, as often as they are stated.",
    )
    phrasings: int = checked(
        8,
        ge=1,
        le=min(len(t) for t in RECALL_STATEMENTS.values()),
        help="How many of each relation's recall statements (schema.RECALL_STATEMENTS) a fact's statements cycle "
        "through.",
    )
    exposure_scale: float = checked(
        1.0,
        gt=0,
        help="Scales how often each fact is stated (ExposureCurve().scaled(exposure_scale)): the same shape over "
        "popularity, more or fewer statements.",
    )
    replay: float = probability(
        0.1,
        help="The share of the knowledge texts read again during fine-tuning, so that fine-tuning does not "
        "overwrite them.",
        **{FINE_TUNING: True},
    )
    report_form: bool = checked(
        False,
        help="Also state facts in the sentence a Searcher's report writes (a passage sentence): a model stores a "
        "fact in the phrasings it read, and the fine-tuned Searcher reports in this one.",
    )
    # A Searcher's chat is far from the text pretraining stored facts in; a tiny model reaches for
    # them there only after many such reports, and tells known subjects from unknown ones by
    # seeing both.
    lookup_demos: bool = checked(
        False,
        metadata={KEYED_WHEN_SET: True, FINE_TUNING: True},
        help="Also demonstrate the Searcher's call on the one-hop lookup of every fact of the question/answer "
        "worlds (played in the cascade): the team reports the popular band's facts from memory and searches the "
        "rest.",
    )

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class SFTConfig:
    """Everything that determines π_0. Defaults: the base model used by the training recipes."""

    seed: int = seed_field(
        help="Seeds the build: the model's initial weights, the pretraining texts and their order, and the "
        "fine-tuning's draws unless finetune_seed is set."
    )
    finetune_seed: int | None = seed_field(
        None,
        null="seed",
        help="The seed of the fine-tuning's own draws (the demonstrating team, the judge's examples, the replayed "
        "knowledge texts, the batch order); null: seed. Set, it varies the fine-tuning of one pretraining, whose "
        "draws stay seed's: the build-to-build spread of a recipe.",
        **{KEYED_WHEN_SET: True, FINE_TUNING: True},
    )
    world_seed: int = seed_field(
        help="The SynthWiki world RL and evaluation play (maopd.envs.synthwiki.load_default_world); the other "
        "worlds of the build are numbered from it."
    )
    world_size: str = checked(
        "small", choices=tuple(WORLD_SIZES), help="The size of every SynthWiki world the build generates."
    )
    workflows: list[str] = checked(
        default_factory=lambda: list(DEMONSTRATED_WORKFLOWS),
        metadata={FINE_TUNING: True},
        help="The workflows demonstrated (registered in maopd.envs.workflows); by default the built-in three, so "
        "that each system of the main job (the team's two workflows and the single-agent baseline) starts from a "
        "π_0 that has seen its format.",
    )
    demo_questions: int = checked(
        600,
        ge=1,
        metadata={FINE_TUNING: True},
        help="The first N train questions of each demonstration world, played once per workflow.",
    )
    demo_worlds: int = checked(
        1,
        ge=1,
        metadata={FINE_TUNING: True},
        help="Demonstrations come from this many independently generated worlds: every extra world brings new "
        "names, so that memorising names stops paying and copying them from the context is what the model "
        "learns. RL and evaluation use the world_seed world only.",
    )
    demo_world_offset: int = checked(
        0,
        ge=0,
        metadata={KEYED_WHEN_SET: True, FINE_TUNING: True},
        help="The first demonstration world is world_seed + demo_world_offset. 1 keeps the world RL and "
        "evaluation play out of the demonstrations: π_0 then never saw a question of that world solved, as a "
        "real base model never saw the RL training set.",
    )
    noise: float = probability(
        0.1,
        help="The probability of each mistake of the scripted demonstrating team: every NoiseConfig knob that "
        "noise_knobs does not set.",
        **{FINE_TUNING: True},
    )
    noise_knobs: dict[str, float] = checked(
        default_factory=dict,
        metadata={KEYED_WHEN_SET: True, FINE_TUNING: True},
        help="NoiseConfig knobs set apart from noise, e.g. {searcher_skip_search: 0.3}: with noise 0 these teach "
        "π_0 decision mistakes (giving up without searching, dropping a report) and no corrupted copying.",
    )
    successful_only: bool = checked(
        False,
        metadata={FINE_TUNING: True},
        help="Keep only the demonstrations of episodes the team got right.",
    )
    critic_demos: bool = checked(
        False,
        metadata={KEYED_WHEN_SET: True},
        help="Also demonstrate the Prompted Critic's judge (maopd.envs.prompts.CRITIC_PROMPT) on every report of "
        "the played episodes, failed ones included. A base model that never saw a judge prompt answers it with "
        "noise.",
    )
    critic_labels: str = checked(
        "gold",
        choices=CRITIC_LABELS,
        metadata={KEYED_WHEN_SET: True, FINE_TUNING: True},
        help="How the judge demonstrations are labelled (maopd.envs.synthwiki.judge_labels). gold: the played "
        "reports, yes when a report states its sub-question's answer, which the judge cannot tell from its "
        "inputs when a well-formed report has a wrong value. decidable: balanced examples drawn from the "
        "demonstrated train questions (the asked fact stated, or an irrelevant, off-entity, wrong-relation, "
        "empty or 'no information' report), yes exactly when the report states a fact about the sub-question's "
        "entity and asked relation, which the judge can read from its inputs.",
    )
    pretrain_worlds: int = checked(
        0,
        ge=0,
        help="Pretrain as a language model on every passage of this many other worlds (world_seed + 1, …) before "
        "the demonstrations, as a real base model reads text before it is instruction-tuned; this is where it "
        "learns to copy a name from its context. It never reads the world_seed world. 0: no pretraining.",
    )
    pretrain_recall_group: int = checked(
        0,
        ge=0,
        help="After every group of this many pretraining passages, restate some of their sentences in a shuffled "
        "order (0: none). A value (a year, a city) appears once in a passage, so plain passages never teach "
        "copying it; the restatement does, among distractors, which is what a Searcher's report needs.",
    )
    pretrain_recall_sentences: int = checked(
        3, ge=1, help="How many sentences are restated after each group of pretrain_recall_group passages."
    )
    knowledge: KnowledgeConfig | None = checked(
        None,
        metadata={KEYED_WHEN_SET: True},
        help="What π_0 knows without search: every fact of the world_seed world and of knowledge.qa_worlds "
        "pretraining worlds, stated in pretraining as often as its subject's popularity says. null: π_0 knows "
        "no fact of the world_seed world.",
    )
    pretrain_epochs: int = checked(1, ge=1, help="Passes over the pretraining texts.")
    pretrain_seq_len: int = checked(256, ge=1, help="The length, in tokens, of the windows pretraining reads.")
    pretrain_batch_size: int = checked(16, ge=1, **BATCH.constraint(), help="Windows per pretraining batch.")
    pretrain_lr: float | None = checked(
        None,
        gt=0,
        null="lr",
        metadata={KEYED_WHEN_SET: True},
        help="The pretraining's learning rate; null: lr, the fine-tuning's.",
    )
    # Tokenizer and model (a Qwen3 architecture, see maopd.agents.tiny_model).
    vocab_size: int = checked(
        3072, ge=1, **VOCABULARY.constraint(), help="The most tokens the tokenizer's vocabulary may hold."
    )
    hidden_size: int = checked(128, ge=1, **HIDDEN_SIZE.constraint(), help="The width of the model's hidden states.")
    num_layers: int = checked(2, ge=1, **LAYERS.constraint(), help="Decoder layers.")
    num_heads: int = checked(4, ge=1, **HEADS.constraint(), help="Attention (query) heads per layer.")
    num_kv_heads: int = checked(
        2, ge=1, help="Key/value heads per layer (grouped-query attention); num_heads must be a multiple of it."
    )
    head_dim: int = checked(32, ge=1, **HIDDEN_SIZE.constraint(), help="The size of each attention head.")
    intermediate_size: int = checked(
        384, ge=1, **INTERMEDIATE_SIZE.constraint(), help="The width of each layer's feed-forward (MLP) block."
    )
    initializer_range: float = checked(0.02, gt=0, help="The standard deviation of the random initial weights.")
    # Training (see maopd.training.sft.TrainingSchedule).
    max_seq_len: int = checked(
        1024,
        ge=1,
        metadata={FINE_TUNING: True},
        help="The longest demonstration (one model call) fine-tuned on, in tokens; longer calls are left out, "
        "and counted in the metrics.",
    )
    epochs: int = checked(1, ge=1, metadata={FINE_TUNING: True}, help="Fine-tuning passes over the demonstrations.")
    lr: float = checked(2e-3, gt=0, metadata={FINE_TUNING: True}, help="The fine-tuning's peak learning rate (AdamW).")
    min_lr_ratio: float = checked(
        0.1,
        ge=0,
        le=1,
        help="After its warm-up the learning rate decays (cosine) to min_lr_ratio × its peak; for pretraining "
        "and fine-tuning alike.",
    )
    warmup_fraction: float = checked(
        0.03,
        ge=0,
        le=1,
        help="The share of the steps over which the learning rate rises linearly to its peak; for pretraining "
        "and fine-tuning alike.",
    )
    weight_decay: float = checked(0.01, ge=0, help="AdamW's weight decay, in pretraining and fine-tuning.")
    batch_size: int = checked(
        4, ge=1, **BATCH.constraint(), metadata={FINE_TUNING: True}, help="Demonstrations per fine-tuning batch."
    )
    grad_clip: float = checked(1.0, gt=0, help="Gradients are clipped to this norm, in pretraining and fine-tuning.")

    def __post_init__(self) -> None:
        unknown = [w for w in self.workflows if w not in workflow_names()]
        if not self.workflows or unknown:
            raise ConfigError(f"workflows: must name some of {list(workflow_names())}, got {self.workflows!r}")
        check_fields(self)
        if self.knowledge is not None and self.knowledge.lookup_demos and LOOKUP_WORKFLOW not in self.workflows:
            raise ConfigError(
                f"knowledge.lookup_demos: the lookups are played in the {LOOKUP_WORKFLOW} workflow; "
                f"add it to workflows or set lookup_demos: false"
            )
        if self.critic_labels != "gold" and not self.critic_demos:
            raise ConfigError(
                f"critic_labels: {self.critic_labels!r} labels judge demonstrations; set critic_demos: true"
            )
        try:
            self.noise_config()
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"noise_knobs: {exc}") from None

    def noise_config(self) -> NoiseConfig:
        """The scripted team's ``NoiseConfig``: every knob at ``noise``, then ``noise_knobs``."""
        from maopd.agents.noisy_team import NoiseConfig

        return replace(NoiseConfig.uniform(self.noise), **self.noise_knobs)

    def key(self) -> str:
        """A hash of the config and the build version: the cache key of the model it builds."""
        return config_hash(keyed_values(self))

    @property
    def finetuning_seed(self) -> int:
        return self.seed if self.finetune_seed is None else self.finetune_seed

    def pretraining_key(self) -> str:
        """A hash of what the language model of ``pretrained/`` depends on: the key's values less
        the ``FINE_TUNING`` settings, with the pretraining's learning rate."""
        values = keyed_values(self, leave_out=FINE_TUNING)
        return config_hash({**values, "pretrain_lr": self.pretraining_lr})

    @property
    def pretraining_lr(self) -> float:
        return self.lr if self.pretrain_lr is None else self.pretrain_lr


def keyed_values(config: Any, leave_out: str | None = None) -> dict[str, Any]:
    """The dataclass ``config`` as plain data, nested dataclasses included, less every
    ``KEYED_WHEN_SET`` field at its default and every field whose metadata has ``leave_out``."""

    def keyed(spec: Field) -> bool:
        if leave_out is not None and spec.metadata.get(leave_out):
            return False
        if not spec.metadata.get(KEYED_WHEN_SET):
            return True
        default = spec.default if spec.default_factory is MISSING else spec.default_factory()
        return getattr(config, spec.name) != default

    def plain(value: Any) -> Any:
        return keyed_values(value, leave_out) if is_dataclass(value) else to_dict(value)

    return {spec.name: plain(getattr(config, spec.name)) for spec in fields(config) if keyed(spec)}


def config_hash(values: dict[str, Any]) -> str:
    text = json.dumps({"build_version": BUILD_VERSION, **values}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# A base model small enough to build in well under a minute: for tests and CI.
SMOKE_CONFIG = SFTConfig(
    world_size="tiny",
    demo_questions=40,
    vocab_size=600,
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    head_dim=16,
    intermediate_size=64,
    max_seq_len=512,
    batch_size=8,
    pretrain_worlds=1,
    pretrain_seq_len=128,
)


def roles_shown(config: SFTConfig) -> tuple[str, ...]:
    """The roles whose calls ``sft_metrics.json`` counts, in ``ROLES`` order: the team roles always
    (zero when a workflow has none), the solver only when a workflow has it, so a π_0 of the team
    workflows alone records the same metrics whichever workflows exist."""
    played = {role for workflow in config.workflows for role in workflow_roles(workflow)}
    return tuple(role for role in ROLES if role in played or role in TEAM_ROLES)


def knowledge_worlds(config: SFTConfig) -> tuple[int, ...]:
    """The seeds of the worlds whose facts π_0 is pretrained to know (none without ``knowledge``):
    the RL world, then the question/answer worlds."""
    if config.knowledge is None:
        return ()
    return tuple(range(config.world_seed, config.world_seed + 1 + config.knowledge.qa_worlds))


def demonstration_chats(config: SFTConfig, progress: bool = True) -> list[dict]:
    """The noisy team's demonstrations (one row per model call) for every configured workflow."""
    from tqdm import tqdm

    from maopd.agents.noisy_team import NoisyTeam
    from maopd.envs.retrieval.bm25 import BM25Retriever
    from maopd.envs.synthwiki.closed_book import closed_book
    from maopd.envs.synthwiki.demos import decidable_judgements, demonstrations
    from maopd.envs.synthwiki.facts import graph_facts, lookup_question
    from maopd.envs.synthwiki.judge_labels import judge_examples
    from maopd.envs.synthwiki.knowledge import Knowledge
    from maopd.envs.synthwiki.popularity import ExposureCurve
    from maopd.envs.synthwiki.world import build_world, load_default_world, world_graph

    curve = ExposureCurve()
    rows = []
    for index in range(config.demo_worlds):
        seed = config.world_seed + config.demo_world_offset + index
        world = (
            load_default_world(seed, config.world_size)
            if seed == config.world_seed
            else build_world(seed, config.world_size)
        )
        questions = world.splits["train"][: config.demo_questions]
        retriever = BM25Retriever(world.corpus)
        # the team knows what π_0 is pretrained to know of this world, and nothing of the others
        known = seed in knowledge_worlds(config)
        book = closed_book(world.corpus, DEMONSTRATED_KNOWLEDGE, seed) if known else None
        # the world's facts, for the judge's labels: the closed book has parsed them already
        facts = (
            (book.knowledge if book else Knowledge(d.text for d in world.corpus.documents))
            if config.critic_demos
            else None
        )
        judge_played = facts if config.critic_labels == "gold" else None
        for workflow in config.workflows:
            team = NoisyTeam(config.noise_config(), config.finetuning_seed + index, book)
            calls = demonstrations(workflow, team, retriever, questions, config.successful_only, judge_played)
            rows += tqdm(calls, desc=f"demos (world {seed}, {workflow})", unit="call", disable=not progress)
        if facts is not None and judge_played is None:
            rows += decidable_judgements(judge_examples(questions, facts, config.finetuning_seed + index))
        if known and seed != config.world_seed and config.knowledge.lookup_demos:
            lookups = [lookup_question(f) for f in graph_facts(seed, world_graph(seed, config.world_size), curve)]
            team = NoisyTeam(config.noise_config(), config.finetuning_seed + index, book)
            calls = demonstrations(LOOKUP_WORKFLOW, team, retriever, lookups, config.successful_only)
            rows += [call for call in calls if call["role"] == "searcher"]
    return rows


def pretraining_texts(config: SFTConfig) -> list[str]:
    """Every passage of the pretraining worlds as ``title: text`` (the form retrieval shows); with
    ``pretrain_recall_group`` = k, each group of k passages is one text, one passage per line,
    followed by ``pretrain_recall_sentences`` of their sentences drawn at random (seeded)."""
    from maopd.agents.scripted import sentences
    from maopd.envs.synthwiki.world import build_world

    rng = random.Random(config.seed)
    texts = []
    for seed in range(config.world_seed + 1, config.world_seed + 1 + config.pretrain_worlds):
        documents = build_world(seed, config.world_size).corpus.documents
        if not config.pretrain_recall_group:
            texts += [f"{d.title}: {d.text}" for d in documents]
            continue
        for start in range(0, len(documents), config.pretrain_recall_group):
            group = documents[start : start + config.pretrain_recall_group]
            pool = [sentence for d in group for sentence in sentences(d.text)]
            recalled = rng.sample(pool, min(config.pretrain_recall_sentences, len(pool)))
            texts.append("\n".join(f"{d.title}: {d.text}" for d in group) + "\n" + " ".join(recalled))
    return texts


def knowledge_texts(config: SFTConfig) -> list[str]:
    """The knowledge worlds' facts (``KnowledgeConfig``): each stated as often as its subject's
    popularity says, and asked with its answer as often for ``qa_share`` of the question/answer
    worlds' entities (never the RL world's), shuffled into texts of ``KNOWLEDGE_GROUP`` items."""
    if config.knowledge is None:
        return []
    from maopd.envs.synthwiki.facts import graph_facts, question_answer, statements
    from maopd.envs.synthwiki.popularity import ExposureCurve
    from maopd.envs.synthwiki.world import world_graph

    knowledge = config.knowledge
    rng = random.Random(config.seed)
    curve = ExposureCurve().scaled(knowledge.exposure_scale)
    items = []
    for seed in knowledge_worlds(config):
        facts = graph_facts(seed, world_graph(seed, config.world_size), curve)
        items += [
            sentence for fact in facts for sentence in statements(fact, knowledge.phrasings, rng, knowledge.report_form)
        ]
        if seed != config.world_seed:
            subjects = sorted({fact.subject for fact in facts})
            asked = set(rng.sample(subjects, round(knowledge.qa_share * len(subjects))))
            items += [question_answer(fact) for fact in facts if fact.subject in asked for _ in range(fact.exposures)]
    rng.shuffle(items)
    return [" ".join(items[i : i + KNOWLEDGE_GROUP]) for i in range(0, len(items), KNOWLEDGE_GROUP)]


def pretraining_examples(config: SFTConfig, tokenizer) -> tuple[list, list]:
    """(passage windows, knowledge windows): ``pretraining_texts`` and ``knowledge_texts``, each
    separated by ``<|endoftext|>`` and cut into ``pretrain_seq_len`` windows with the loss on every
    token."""
    from maopd.training.sft import language_model_windows

    return (
        language_model_windows(pretraining_texts(config), tokenizer, config.pretrain_seq_len),
        language_model_windows(knowledge_texts(config), tokenizer, config.pretrain_seq_len),
    )


def replayed(config: SFTConfig, windows: list) -> list:
    """The share ``knowledge.replay`` of the knowledge windows, drawn with the fine-tuning's seed:
    read again in fine-tuning."""
    if config.knowledge is None or not windows:
        return []
    return random.Random(config.finetuning_seed).sample(windows, round(config.knowledge.replay * len(windows)))


def tail_mean(losses: list[float], last: int = 20) -> float:
    """The mean of the last ``last`` losses: a final loss that one noisy batch does not decide."""
    return sum(losses[-last:]) / len(losses[-last:])


def shared_fields(cls: type[T], config: Any) -> T:
    """Dataclass ``cls`` (the model's or the schedule's config) with every field dataclass ``config``
    has too taken from ``config``, the seed included, and its own defaults for the rest."""
    names = {spec.name for spec in fields(config)}
    return cls(**{spec.name: getattr(config, spec.name) for spec in fields(cls) if spec.name in names})


def reusable_pretraining(config: SFTConfig, roots: Sequence[Path]) -> Path | None:
    """The ``pretrained/`` under ``roots`` (a π_0's ``base-*`` directory, or a ``pretraining-*``
    entry a build stored before fine-tuning) whose pretraining equals ``config``'s (the
    ``pretraining_key`` its ``sft_metrics.json`` records), if any."""
    wanted = config.pretraining_key()
    for root in roots:
        entries = [
            *Path(root).glob(f"base-*/{METRICS_FILE}"),
            *Path(root).glob(f"{PRETRAINING_ENTRY}-*/{METRICS_FILE}"),
        ]
        for metrics in sorted(entries):
            try:
                recorded = json.loads(metrics.read_text(encoding="utf-8")).get("pretraining_key")
            except (OSError, ValueError):
                continue  # a damaged cache entry is rebuilt, never read
            pretrained = metrics.parent / PRETRAINED_DIR
            if recorded == wanted and (pretrained / "model.safetensors").is_file():
                return pretrained
    return None


def load_pretrained(model, tokenizer, pretrained: Path) -> dict[str, Any]:
    """Load ``pretrained/``'s weights into ``model`` (built from the same config, so the same
    shapes; its tokenizer must equal ``tokenizer``) and return the pretraining figures its π_0's
    ``sft_metrics.json`` recorded."""
    from safetensors.torch import load_file

    saved = json.loads((pretrained / "tokenizer.json").read_text(encoding="utf-8"))
    if saved["model"] != json.loads(tokenizer.backend_tokenizer.to_str())["model"]:
        raise ValueError(f"{pretrained}: its tokenizer differs from the one this config trains")
    missing, unexpected = model.load_state_dict(load_file(pretrained / "model.safetensors"), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # a tied lm_head is not saved: it is the embedding
        raise ValueError(f"{pretrained}: its weights do not fit this config's model")
    recorded = json.loads((pretrained.parent / METRICS_FILE).read_text(encoding="utf-8"))
    return {
        "pretrained_from": pretrained.parent.name,
        **{name: recorded.get(name) for name in PRETRAINING_FIGURES},
    }


def resume_file(root: Path | None, name: str) -> Path | None:
    """Where a build keeps the state its training resumes from (``<root>/<name>.training.pt``);
    None without a cache root."""
    if root is None:
        return None
    Path(root).mkdir(parents=True, exist_ok=True)
    return Path(root) / f"{name}.training.pt"


def store_pretraining(config: SFTConfig, pretrained: Path, figures: dict[str, Any], root: Path) -> Path:
    """Keep a finished pretraining as the cache entry ``<root>/pretraining-<key>/`` (its
    ``pretrained/`` and the figures), so that a build killed while fine-tuning, the long half of a
    build, starts the next time from there instead of pretraining again."""

    def store(staging: Path) -> None:
        copy_directory(pretrained, staging / PRETRAINED_DIR)
        write_json(staging / METRICS_FILE, {"pretraining_key": config.pretraining_key(), **figures}, indent=1)

    entry = Path(root) / f"{PRETRAINING_ENTRY}-{config.pretraining_key()}"
    return build_directory_atomically(entry, store, METRICS_FILE)


# The pretraining's figures in sft_metrics.json: a π_0 that reuses a pretraining copies its source's
PRETRAINING_FIGURES = (
    "pretraining_tokens",
    "knowledge_tokens",
    "pretraining_steps",
    "pretraining_final_loss",
    "pretraining_threads",
)


def build_base_model(
    config: SFTConfig,
    out_dir: str | Path,
    progress: bool = True,
    reuse_from: Sequence[Path] = (),
    keep_pretraining_in: Path | None = None,
) -> Path:
    """Build π_0 from ``config`` into ``out_dir`` (model, tokenizer, config and metrics). With
    ``reuse_from`` (roots of built π_0s and stored pretrainings), a pretraining one of them ran for
    the same ``pretraining_key`` is loaded instead of rerun: the same weights, since pretraining is
    deterministic, and its ``pretrained/`` copied into ``out_dir``. With ``keep_pretraining_in``
    (a cache root), a pretraining run here is also stored there before fine-tuning starts, and both
    trainings save their state there as they go (``resume_file``), so a killed build goes on where
    it stopped."""

    import torch

    from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model, save_model
    from maopd.agents.tokenizer import train_tokenizer
    from maopd.envs.prompts import CRITIC_PROMPT, NO_FACTS, judgement_text
    from maopd.envs.synthwiki.schema import recall_template_texts, template_texts
    from maopd.training.sft import TrainingSchedule, encode_call, train_sft

    started = time.perf_counter()
    rows = demonstration_chats(config, progress)
    if not rows:
        raise ValueError(
            "the scripted team produced no demonstrations; raise demo_questions or set successful_only=false"
        )
    critic = (
        [CRITIC_PROMPT.format(question="", sub_query="", summary=""), judgement_text(True), judgement_text(False)]
        if config.critic_demos
        else []
    )
    statements = recall_template_texts() if config.knowledge is not None else []
    tokenizer = train_tokenizer(
        [*template_texts(), *statements, NO_FACTS, *CHAT_ROLES, *critic], vocab_size=config.vocab_size
    )
    encoded = [encode_call(tokenizer, row["messages"], row["role"]) for row in rows]
    examples = [e for e in encoded if len(e) <= config.max_seq_len]

    model = build_tiny_model(tokenizer, shared_fields(TinyModelConfig, config))
    schedule = shared_fields(TrainingSchedule, config)
    passages, knowledge = pretraining_examples(config, tokenizer)  # none without pretrain_worlds or knowledge
    pretraining = passages + knowledge
    source = reusable_pretraining(config, reuse_from) if pretraining else None
    if source is not None:
        pretrained_figures = load_pretrained(model, tokenizer, source)
        copy_directory(source, Path(out_dir) / PRETRAINED_DIR)
    elif pretraining:
        pretrain_schedule = replace(
            schedule, epochs=config.pretrain_epochs, batch_size=config.pretrain_batch_size, lr=config.pretraining_lr
        )
        pretrain_losses = train_sft(
            model,
            pretraining,
            pretrain_schedule,
            tokenizer.pad_token_id,
            progress,
            "pretraining",
            resume_file=resume_file(keep_pretraining_in, f"{PRETRAINING_ENTRY}-{config.pretraining_key()}"),
        )
        # the language model before fine-tuning, for the closed-book gate right after pretraining
        save_model(model, tokenizer, Path(out_dir) / PRETRAINED_DIR)
        pretrained_figures = {
            "pretraining_tokens": sum(len(e) for e in pretraining),
            "knowledge_tokens": sum(len(e) for e in knowledge),
            "pretraining_steps": len(pretrain_losses),
            "pretraining_final_loss": tail_mean(pretrain_losses),
            "pretraining_threads": torch.get_num_threads(),
        }
        if keep_pretraining_in is not None:
            store_pretraining(config, Path(out_dir) / PRETRAINED_DIR, pretrained_figures, keep_pretraining_in)
    else:
        pretrained_figures = {name: None for name in PRETRAINING_FIGURES}
    replay = replayed(config, knowledge)
    finetuning = replace(schedule, seed=config.finetuning_seed)
    losses = train_sft(
        model,
        examples + replay,
        finetuning,
        tokenizer.pad_token_id,
        progress,
        resume_file=resume_file(keep_pretraining_in, f"base-{config.key()}"),
    )

    out_dir = save_model(model, tokenizer, out_dir)
    write_record(config, out_dir, CONFIG_FILE)
    metrics = {
        "config_key": config.key(),
        "demonstrations": len(rows),
        "calls_per_role": {role: sum(r["role"] == role for r in rows) for role in (*roles_shown(config), "critic")},
        "calls_too_long": len(encoded) - len(examples),
        "training_tokens": sum(len(e) for e in examples),
        "assistant_tokens": sum(sum(e.loss_mask) for e in examples),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "pretraining_key": config.pretraining_key(),
        **pretrained_figures,
        "replayed_tokens": sum(len(e) for e in replay),
        "steps": len(losses),
        "first_loss": losses[0],
        "final_loss": tail_mean(losses),
        "losses": losses,
        "build_seconds": round(time.perf_counter() - started, 1),
        "torch_threads": torch.get_num_threads(),
    }
    write_json(out_dir / METRICS_FILE, metrics, indent=1)
    return out_dir


def default_cache_dir() -> Path:
    from maopd.envs.synthwiki.world import cache_dir

    return cache_dir() / "base_models"


def base_model_dir(config: SFTConfig, cache_dir: str | Path | None = None, shipped_dir: Path = SHIPPED_DIR) -> Path:
    """Where π_0 for ``config`` is (shipped with the repo) or will be (in the cache), without building it."""
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return cache_entry(f"base-{config.key()}", METRICS_FILE, shipped_dir, cache_root)


def load_or_build_base_model(
    config: SFTConfig,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    shipped_dir: Path = SHIPPED_DIR,
    reuse: bool = True,
) -> Path:
    """The directory of π_0 for ``config``: shipped with the repo, else from the cache, else built
    and cached atomically (reusing the pretraining of a shipped or cached π_0, with ``reuse``)."""
    directory = base_model_dir(config, cache_dir, shipped_dir)
    if (directory / METRICS_FILE).is_file():
        return directory
    roots = (shipped_dir, directory.parent) if reuse else ()
    keep = directory.parent if reuse else None
    return build_directory_atomically(
        directory, lambda out: build_base_model(config, out, progress, roots, keep), METRICS_FILE
    )
