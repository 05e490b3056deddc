"""Does a model of π_0's architecture know facts in proportion to their subject's popularity?

A small proxy of π_0's pretraining, to design it on evidence. Two SynthWiki knowledge graphs of
the same generator (``maopd.envs.synthwiki.generator``) stand in for the worlds:

* the **RL world** (seed ``rl_seed``): each of its facts is stated as often as its subject's
  popularity says (``maopd.envs.synthwiki.popularity``, the definition every consumer reads), each time
  in one of ``phrasings`` of ``schema.RECALL_STATEMENTS``; it never appears in question form;
* the **pretraining world** (the next seed): its facts are stated the same way, and for a share
  ``qa_share`` of its entities each fact also appears as a question/answer pair (the question
  template, then the answer) as often as it is stated, so that the model can learn to answer a
  question from a fact it read as a statement (Allen-Zhu & Li, Physics of Language Models 3.1).

A generated graph (not a subset of the default world) keeps the real worlds' entity types, value
ranges and name pieces at a size one CPU thread trains in minutes, and never reads the RL world's
own facts. The tokenizer is π_0's kind (byte-level BPE over the templates, never over names,
``maopd.agents.tokenizer``) and the model a randomly initialised ``Qwen3ForCausalLM`` of π_0's shape
(``configs/pipeline_default.yaml``: hidden 128, 3 layers, 4 heads of 32, intermediate 384). After
language modelling on the shuffled statements, the probe asks every RL-world fact in question
form (``grammar.subquestion``), decodes greedily up to the first ".", and scores exact match
against any surface form of the answer, per popularity band and per exposure count, next to the
chance rate of guessing each relation's most common value. Writes ``<out>/<name>.json`` and
``<out>/<name>.md``.

    python benchmarks/knowledge_probe.py [--quick] [--name NAME] [--phrasings 8] [--qa-share 0.5]
        [--exposure-scale 1] [--world-scale 1] [--hidden 128 --layers 3] [--epochs 1]
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from maopd.base.arguments import positive_int, seed_int
from maopd.base.atomic import write_text_atomically
from maopd.base.json_files import write_json
from maopd.base.machine import simd_extensions
from maopd.envs.synthwiki.facts import Fact, graph_facts, question_answer, statements
from maopd.evaluation.fact_recall import greedy_answers, recall_report

RESULTS = Path(__file__).parent / "results" / "knowledge_probe"
GROUP = 8  # statements per pretraining text, shuffled together
# The real worlds' entity mix (the ``tiny`` preset's counts); ``world_scale`` multiplies it.
BASE_COUNTS = {"country": 6, "city": 45, "university": 20, "band": 25, "person": 110, "company": 45, "river": 15}


@dataclass(frozen=True)
class ProbeConfig:
    rl_seed: int = 1000
    world_scale: float = 1.0
    exposure_scale: float = 1.0
    phrasings: int = 8
    qa_share: float = 0.5
    epochs: int = 1
    hidden_size: int = 128
    num_layers: int = 3
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 384
    vocab_size: int = 8192
    seq_len: int = 256
    batch_size: int = 16
    lr: float = 3e-3
    seed: int = 0
    pretraining_probe: int = 300  # pretraining-world facts probed per group (QA seen / not seen)


QUICK = {
    "world_scale": 0.25,
    "exposure_scale": 0.1,
    "hidden_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "intermediate_size": 64,
    "vocab_size": 600,
    "seq_len": 128,
    "pretraining_probe": 20,
}


def world_facts(seed: int, scale: float, curve) -> list[Fact]:
    """Every fact of the graph of ``seed`` at ``scale`` times the tiny preset's entity mix."""
    from maopd.envs.synthwiki.generator import GraphSize, generate_graph

    counts = {kind: max(1, round(n * scale)) for kind, n in BASE_COUNTS.items()}
    return graph_facts(seed, generate_graph(seed, GraphSize(counts)), curve)


def pretraining_corpus(
    rl: list[Fact], other: list[Fact], qa_subjects: set[str], config: ProbeConfig
) -> tuple[list[str], dict]:
    """Shuffled texts of ``GROUP`` items: every statement of both worlds, and the question/answer
    pairs of the pretraining world's ``qa_subjects`` (never of the RL world)."""
    rng = random.Random(config.seed)
    rl_items = [s for fact in rl for s in statements(fact, config.phrasings, rng)]
    other_items = [s for fact in other for s in statements(fact, config.phrasings, rng)]
    qa_items = [question_answer(f) for f in other if f.subject in qa_subjects for _ in range(f.exposures)]
    items = rl_items + other_items + qa_items
    rng.shuffle(items)
    texts = [" ".join(items[i : i + GROUP]) for i in range(0, len(items), GROUP)]
    counts = {"rl_statements": len(rl_items), "pretraining_statements": len(other_items), "qa_pairs": len(qa_items)}
    return texts, counts


def build_tokenizer(vocab_size: int):
    """π_0's kind of tokenizer: the world's templates (and the recall statements'), never a name."""
    from maopd.agents.tokenizer import train_tokenizer
    from maopd.envs.synthwiki.schema import recall_template_texts, template_texts

    return train_tokenizer([*template_texts(), *recall_template_texts()], vocab_size=vocab_size)


def run_probe(config: ProbeConfig, progress: bool = True) -> dict:
    from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model
    from maopd.envs.synthwiki.grammar import subquestion
    from maopd.envs.synthwiki.popularity import ExposureCurve
    from maopd.training.base_model import shared_fields
    from maopd.training.sft import TrainingSchedule, language_model_windows, train_sft

    started = time.perf_counter()
    curve = ExposureCurve().scaled(config.exposure_scale)
    rl = world_facts(config.rl_seed, config.world_scale, curve)
    other = world_facts(config.rl_seed + 1, config.world_scale, curve)
    subjects = sorted({f.subject for f in other})
    qa_subjects = set(random.Random(config.seed).sample(subjects, round(config.qa_share * len(subjects))))
    texts, counts = pretraining_corpus(rl, other, qa_subjects, config)

    tokenizer = build_tokenizer(config.vocab_size)
    windows = language_model_windows(texts, tokenizer, config.seq_len)
    # π_0's initialisation and warm-up (SFTConfig's), the rest of the shape and schedule from the probe
    model = build_tiny_model(tokenizer, replace(shared_fields(TinyModelConfig, config), initializer_range=0.02))
    schedule = replace(shared_fields(TrainingSchedule, config), warmup_fraction=0.03)
    losses = train_sft(model, windows, schedule, tokenizer.pad_token_id, progress, "pretraining")
    trained = time.perf_counter()

    answers = greedy_answers(model, tokenizer, [subquestion(f.predicate, f.subject) for f in rl])
    rng = random.Random(config.seed)
    asked = [f for f in other if f.subject in qa_subjects]
    unasked = [f for f in other if f.subject not in qa_subjects]
    samples = {
        "qa_seen": rng.sample(asked, min(config.pretraining_probe, len(asked))),
        "qa_unseen": rng.sample(unasked, min(config.pretraining_probe, len(unasked))),
    }
    pretraining_world = {}
    for name, chosen in samples.items():
        if chosen:
            got = greedy_answers(model, tokenizer, [subquestion(f.predicate, f.subject) for f in chosen])
            pretraining_world[name] = recall_report(chosen, got, config.epochs)["overall"]
    return {
        "config": asdict(config),
        "exposure_curve": {**asdict(curve), "exponent": round(curve.exponent, 3)},
        "rl_world": {"entities": len({f.subject for f in rl}), "facts": len(rl)},
        "corpus": {**counts, "texts": len(texts), "tokens": len(windows) * config.seq_len},
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "steps": len(losses),
        "first_loss": round(losses[0], 4),
        "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
        "train_seconds": round(trained - started, 1),
        "probe_seconds": round(time.perf_counter() - trained, 1),
        "rl_world_recall": recall_report(rl, answers, config.epochs),
        "pretraining_world_recall": pretraining_world,
    }


def _row(name: str, figures: dict) -> str:
    exposures = f"{figures['exposures_min']}–{figures['exposures_max']}" if figures["facts"] else "—"
    recall = f"{figures['recall']:.3f}" if figures["facts"] else "—"
    chance = f"{figures['chance']:.3f}" if figures["facts"] else "—"
    return f"| {name} | {figures['facts']} | {exposures} | {recall} | {chance} |"


def markdown(result: dict) -> str:
    """The per-band and per-exposure tables, with the command, machine and commit."""
    recall = result["rl_world_recall"]
    header = "| {} | facts | exposures | recall (EM) | chance |\n|---|---|---|---|---|"
    lines = [
        f"# Knowledge probe `{result['name']}`",
        "",
        f"- **Command**: `{result['command']}`",
        f"- **Commit**: {result['commit']}",
        f"- **Machine**: {result['machine']}",
        f"- **Model**: {result['parameters']:,} parameters, vocabulary {result['vocab_size']}; "
        f"{result['corpus']['tokens']:,} training tokens, {result['steps']} steps, loss "
        f"{result['first_loss']} → {result['final_loss']}; {result['train_seconds']} s training",
        f"- **RL world**: {result['rl_world']['entities']} entities, {result['rl_world']['facts']} facts; "
        f"statements {result['corpus']['rl_statements']:,} (RL world), "
        f"{result['corpus']['pretraining_statements']:,} (pretraining world), "
        f"{result['corpus']['qa_pairs']:,} question/answer pairs (pretraining world only)",
        "",
        "RL-world facts asked in question form, by popularity band:",
        "",
        header.format("band"),
        *(_row(band, figures) for band, figures in recall["bands"].items()),
        _row("all", recall["overall"]),
        "",
        "By exposures (statements read, all epochs):",
        "",
        header.format("exposures"),
        *(_row(name, figures) for name, figures in recall["by_exposures"].items()),
        "",
        "Pretraining-world facts (seen as statements; `qa_seen`: their subject's questions were trained on):",
        "",
        header.format("group"),
        *(_row(name, figures) for name, figures in result["pretraining_world_recall"].items()),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny proxy and model (about a minute)")
    parser.add_argument("--name", default=None, help="output name (default: default, or quick)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="output directory")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (1: the machine is shared)")
    parser.add_argument("--no-progress", action="store_true")
    options = {
        "--rl-seed": ("rl_seed", seed_int, "seed of the RL world (the pretraining world is the next seed)"),
        "--world-scale": ("world_scale", float, "entity counts, times the tiny preset's"),
        "--exposure-scale": ("exposure_scale", float, "every anchor of the exposure curve, times this"),
        "--phrasings": ("phrasings", positive_int, "recall statements used per predicate (1 to 8)"),
        "--qa-share": ("qa_share", float, "share of the pretraining world's entities with question/answer pairs"),
        "--epochs": ("epochs", positive_int, "passes over the corpus"),
        "--hidden": ("hidden_size", positive_int, "model width"),
        "--layers": ("num_layers", positive_int, "model depth"),
        "--intermediate": ("intermediate_size", positive_int, "MLP width"),
        "--seq-len": ("seq_len", positive_int, "training window (tokens)"),
        "--batch-size": ("batch_size", positive_int, "windows per step"),
        "--lr": ("lr", float, "peak learning rate"),
        "--seed": ("seed", seed_int, "initialisation, corpus order, question/answer entities"),
    }
    for flag, (dest, kind, text) in options.items():
        parser.add_argument(flag, dest=dest, type=kind, default=None, help=text)
    args = parser.parse_args(argv)
    given = {dest: getattr(args, dest) for dest, _, _ in options.values() if getattr(args, dest) is not None}
    config = ProbeConfig(**{**(QUICK if args.quick else {}), **given})
    _check(parser, config)

    from maopd.evaluation.provenance import git_commit

    torch.set_num_threads(args.threads)
    name = args.name or ("quick" if args.quick else "default")
    result = {
        "name": name,
        "command": "python benchmarks/knowledge_probe.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "commit": git_commit(short=True),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s), Python "
        f"{platform.python_version()}, torch {torch.__version__}, SIMD {' '.join(simd_extensions())}",
        **run_probe(config, progress=not args.no_progress),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / f"{name}.json", result, indent=1)
    write_text_atomically(args.out / f"{name}.md", markdown(result))
    print(markdown(result))


def _check(parser: argparse.ArgumentParser, config: ProbeConfig) -> None:
    from maopd.envs.synthwiki.schema import RECALL_STATEMENTS

    most = min(len(t) for t in RECALL_STATEMENTS.values())
    if not 1 <= config.phrasings <= most:
        parser.error(f"--phrasings must be in 1..{most}, got {config.phrasings}")
    if not 0 <= config.qa_share <= 1:
        parser.error(f"--qa-share must be in [0, 1], got {config.qa_share}")
    if config.exposure_scale <= 0 or config.world_scale <= 0:
        parser.error("--exposure-scale and --world-scale must be positive")
    if min(config.epochs, config.hidden_size, config.num_layers, config.seq_len, config.batch_size) < 1:
        parser.error("--epochs, --hidden, --layers, --seq-len and --batch-size must be at least 1")


if __name__ == "__main__":
    main()
