"""Tuning the main job on dev, never on test: ``maopd tune eval``, ``maopd tune beta``,
``maopd tune judge`` and ``maopd tune gates``.

``dev_eval``: systems (a model, run or checkpoint, played in a workflow) on the dev split with the
main job's evaluation protocol (``eval.attempts`` workflows per question, one answer candidate,
temperature 0.6, top-p 0.95, macro avg@k over question types with question-bootstrap CIs, paired
differences), plus what the testbed's design needs to see: the share of workflows that search at
least once, searches per workflow, and the share that end without an answer.

``calibrate_beta``: the OPD coefficient β from gradient norms. Stage II gives Searcher tokens the
advantage β·log(π_T/π_old) (Eq. 5) and Leader/Answerer tokens role-normalised GRPO advantages
(Eq. 1), so β sets how hard the Searchers pull the shared model against the other roles. The
paper's 0.01 was set for a 7B model and its Teacher; with another model and Teacher the same β
can make the Searcher term vanish or dominate. On ``batches`` Stage II batches of dev questions
(the preset's Stage II config from π_0, with the run's Stage I as Teacher, at β = 1, the entropy
bonus and PPO-ptx off), ``maopd.training.role_gradients`` gives the Searcher gradient norm g_S and the
Leader/Answerer one g_LA on the same rows; g_S is linear in β, so β* = median(g_LA / g_S) makes
them equal and [0.3, 3]·β* keeps them within 0.3–3× of each other. A batch with g_LA = 0 (every
GRPO group shares one outcome) is left out of the median.

``judge_figures``: a model as the Prompted Critic's judge, on recorded reports and on a held-out
balanced set of decidable labels, with the judge gate.

``gate_figures``: every gate of the testbed (``maopd.study.gates``, where the thresholds and checks are)
measured on dev for a base model directory: closed-book recall by popularity band after
pretraining and as the Searcher reporting without a search (``closed_book_figures``), the cascade
with the Searcher forced not to search and forced to search on popular 1-hop questions
(``forced_search_figures``), the judge (``judge_figures``) and the level of every workflow
(``dev_eval``).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maopd.base.config import ConfigError
from maopd.envs.workflows import workflow_names
from maopd.pipeline.config import PipelineConfig, stage_config, stage_dir
from maopd.pipeline.job import evaluate, held_out_manifest
from maopd.study.gates import GATES, judge_checks

if TYPE_CHECKING:
    from maopd.envs.synthwiki.judge_labels import JudgeExample
    from maopd.training.critic import PromptedCritic

PAPER_OPD_BETA = 0.01


def parse_system(text: str) -> tuple[str, str, Path]:
    """``NAME=WORKFLOW:MODEL``."""
    name, sep, rest = text.partition("=")
    workflow, sep2, model = rest.partition(":")
    if not (sep and sep2 and name and model) or workflow not in workflow_names():
        raise ConfigError(f"--system {text!r}: expected NAME=WORKFLOW:MODEL with WORKFLOW one of {workflow_names()}")
    return name, workflow, Path(model)


def search_figures(records) -> dict[str, Any]:
    """Share of workflows with at least one search, searches per workflow, share without an answer,
    and per question type the exact match of workflows with and without a search (what skipping
    search is worth: the testbed's closed-book temptation)."""
    count = max(len(records), 1)
    searches = [r.counters.get("search_actions", 0) for r in records]
    split: dict[str, dict[str, list[float]]] = {}
    for record, searched in zip(records, searches):
        split.setdefault(record.dataset, {"with_search": [], "without_search": []})[
            "with_search" if searched > 0 else "without_search"
        ].append(record.score)
    return {
        "workflows": len(records),
        "searching_share": sum(s > 0 for s in searches) / count,
        "searches_per_workflow": sum(searches) / count,
        # the evaluation record's counters are its costs; whether an answer came is the workflow's
        "no_answer_share": sum(bool(r.trajectory and r.trajectory.counters.no_answer) for r in records) / count,
        "em_by_search": {
            dataset: {
                kind: {"workflows": len(scores), "em": sum(scores) / len(scores) if scores else None}
                for kind, scores in kinds.items()
            }
            for dataset, kinds in sorted(split.items())
        },
    }


def dev_eval(
    config: PipelineConfig, systems: list[tuple[str, str, Path]], comparisons: list[tuple[str, str]], out: Path
) -> dict[str, Any]:
    """Play and score ``systems`` on ``config.eval`` (its split must be dev); writes ``out``'s
    records.jsonl (resumable), summary.json and tables."""
    from maopd.evaluation.records import load_records
    from maopd.evaluation.scoring import score_records
    from maopd.training.checkpoint import resolve_model_dir

    if config.eval.split != "dev":
        raise ConfigError(f"eval.split: tuning runs on dev, got {config.eval.split!r}")
    names = {name for name, _, _ in systems}
    for pair in comparisons:
        if len(pair) != 2 or not set(pair) <= names:
            raise ConfigError(f"--compare {','.join(pair)!r}: expected A,B with A and B among the --system names")
    out.mkdir(parents=True, exist_ok=True)
    records_path = out / "records.jsonl"
    manifest = held_out_manifest(config)
    seconds = {}
    for name, workflow, model in systems:
        started = time.perf_counter()
        evaluate(config, name, workflow, resolve_model_dir(model), manifest, records_path)
        seconds[name] = round(time.perf_counter() - started, 1)
    records = load_records([records_path])
    summary = score_records(records, comparisons, out)
    avg = f"avg@{config.eval.attempts}"
    return {
        "split": "dev",
        "attempts": config.eval.attempts,
        "questions": len(manifest),
        "systems": {
            name: {
                "workflow": workflow,
                "model": str(model),
                "seconds": seconds[name],
                avg: summary["methods"][name]["accuracy"][avg],
                **search_figures([r for r in records if r.method == name]),
            }
            for name, workflow, model in systems
        },
        "differences": [{"a": c["a"], "b": c["b"], avg: c["differences"][avg]} for c in summary["comparisons"]],
    }


BALANCED_SEED = 0


def balanced_judge_figures(critic: PromptedCritic, examples: Sequence[JudgeExample]) -> dict[str, Any]:
    """The judge's greedy verdicts on balanced examples of decidable labels
    (``maopd.envs.synthwiki.judge_labels.JudgeExample``): balanced accuracy (an unparseable verdict is a
    no, as in training), the recall on each class and the share judged yes per report kind."""
    from maopd.evaluation.classifier_metrics import balanced_accuracy

    verdicts = [v == 1.0 for v in critic.judge([(e.question, e.subquestion, e.report) for e in examples])]
    labels = [e.useful for e in examples]
    kinds = sorted({e.kind for e in examples})
    return {
        "examples": len(examples),
        "negatives": labels.count(False),
        "balanced_accuracy": balanced_accuracy(labels, verdicts),
        "true_positive_rate": _share([v for v, label in zip(verdicts, labels) if label]),
        "true_negative_rate": _share([not v for v, label in zip(verdicts, labels) if not label]),
        "yes_rate_by_kind": {k: _share([v for v, e in zip(verdicts, examples) if e.kind == k]) for k in kinds},
    }


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def judge_gate(balanced: dict[str, Any], judge_rate: float) -> dict[str, Any]:
    """The judge gate's checks (``maopd.study.gates``) on ``balanced_judge_figures`` and the judge rate on
    own reports."""
    checks = judge_checks(balanced["balanced_accuracy"], balanced["negatives"], judge_rate)
    low, high = GATES.judge_rate
    return {
        "thresholds": {
            "balanced_accuracy": f">= {GATES.judge_accuracy}",
            "negatives": f">= {GATES.judge_negatives}",
            "judge_rate": f"in ({low}, {high})",
        },
        "checks": checks,
        "met": all(checks.values()),
    }


def judge_figures(
    model: Path, records_path: Path, limit: int | None = None, balanced: int | None = None
) -> dict[str, Any]:
    """A model as the Prompted Critic's judge, and its gate.

    On the reports of recorded workflows (``maopd tune eval``'s records, which keep each
    workflow's trajectory; the first ``limit`` workflows that hold a report): exactly the judge
    calls and figures of training (``maopd.training.critic``: ``critic/format_rate``, ``gold_rate``,
    ``agreement``, ``judge_rate``), and ``p_yes_auc_vs_gold``, the ROC AUC of the judge's P(yes)
    (``PromptedCritic.yes_probabilities``) against gold correctness, a description. On a held-out
    balanced set of decidable labels (``maopd.envs.synthwiki.judge_labels.judge_examples`` on the
    embedded world's dev split, ``balanced`` examples, all by default): ``balanced_judge_figures``.
    ``gate``: ``judge_gate`` on both, where ``critic/judge_rate`` is the judge rate on the model's
    own dev reports when the records are the same model's (``methods`` names the recorded systems
    whose reports were judged)."""
    from maopd.envs.synthwiki import load_default_world
    from maopd.envs.synthwiki.judge_labels import judge_examples
    from maopd.envs.synthwiki.knowledge import Knowledge
    from maopd.evaluation.classifier_metrics import roc_auc
    from maopd.evaluation.records import load_records
    from maopd.evaluation.solvers import model_policy
    from maopd.training.checkpoint import resolve_model_dir
    from maopd.training.config import CriticConfig
    from maopd.training.critic import PromptedCritic, searcher_reports
    from maopd.training.trainer import world_report_gold

    judged = [r for r in load_records([records_path]) if r.trajectory and r.trajectory.reports]
    workflows = [r.trajectory for r in judged]
    if not workflows:
        raise ConfigError(
            f"{records_path}: no recorded workflow holds a report to judge; record hierarchical or "
            "cascade workflows with `maopd tune eval` first"
        )
    workflows = workflows[:limit]
    config = CriticConfig()
    policy = model_policy(str(resolve_model_dir(model)), max_new_tokens=config.max_new_tokens)
    report_gold = world_report_gold(corpus=None)
    critic = PromptedCritic(policy, config, report_gold)
    critic.searcher_rewards([[workflow] for workflow in workflows])
    recorded = critic.last_metrics

    reports = [(w.question, e.sub_query, e.summary) for w in workflows for e in searcher_reports(w) if e.reported]
    gold = [report_gold(sub_query, summary) for _, sub_query, summary in reports]
    auc = roc_auc(gold, critic.yes_probabilities(reports))

    world = load_default_world()
    facts = Knowledge(document.text for document in world.corpus.documents)
    examples = judge_examples(world.splits["dev"], facts, BALANCED_SEED, balanced)
    held_out = {"split": "dev", "seed": BALANCED_SEED, **balanced_judge_figures(critic, examples)}
    return {
        "model": str(model),
        "records": str(records_path),
        "workflows": len(workflows),
        "methods": sorted({r.method for r in judged[: len(workflows)]}),  # whose reports were judged
        **recorded,
        "p_yes_auc_vs_gold": auc,
        "balanced": held_out,
        "gate": judge_gate(held_out, recorded["critic/judge_rate"]),
    }


def calibrate_beta(pipeline: PipelineConfig, batches: int, seed: int = 0, progress=print) -> dict[str, Any]:
    """β* from ``batches`` Stage II batches of dev questions (module docstring)."""
    from maopd.training.base_model import load_or_build_base_model
    from maopd.training.role_gradients import role_gradient_norms
    from maopd.training.trainer import Trainer

    teacher = stage_dir(pipeline, "stage1", "full")
    if not (teacher / "config.yaml").is_file():
        raise ConfigError(f"run_dir: {teacher} holds no Stage I run; run `maopd train` first (its Teacher is needed)")
    base_model = load_or_build_base_model(pipeline.base_model)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        config = replace(stage_config(pipeline, "stage2", "full", base_model, teacher), seed=seed, run_dir=scratch)
        config.advantage.opd_beta = 1.0
        config.ppo.entropy_coef = 0.0
        config.ptx.coef = 0.0
        config.env.split = "dev"
        config.rollout.first_question = 0
        config.logging.tensorboard = False
        config.logging.progress = False
        config.validate()
        trainer = Trainer(config)
        for index in range(batches):
            batch, _ = trainer.collect()
            ppo_batch, metrics = trainer.prepare(batch)
            norms = role_gradient_norms(trainer, ppo_batch)
            ratio = norms["leader_answerer"] / norms["searcher"] if norms["searcher"] > 0 else None
            rows.append(
                {
                    "batch": index,
                    **norms,
                    "beta_equal_norms": ratio,
                    "searcher_kl_k1": metrics.get("teacher/searcher_kl_k1"),
                }
            )
            progress(rows[-1])
    usable = [r["beta_equal_norms"] for r in rows if r["beta_equal_norms"] and r["leader_answerer"] > 0]
    beta = statistics.median(usable) if usable else None
    return {
        "seed": seed,
        "batches": rows,
        "usable_batches": len(usable),
        "beta_equal_norms": beta,
        "beta_range_0.3_to_3x": [0.3 * beta, 3 * beta] if beta else None,
        "paper_beta": PAPER_OPD_BETA,
        "paper_beta_norm_ratio": PAPER_OPD_BETA / beta if beta else None,
    }


# ``maopd tune gates --quick``: a few of everything, to check that every part runs
QUICK_FACTS_PER_BAND = 6
QUICK_FORCED_QUESTIONS = 4
QUICK_JUDGE_WORKFLOWS = 8
QUICK_JUDGE_BALANCED = 20


def base_model_world(model: Path) -> tuple[int, str, str | None]:
    """π_0's world seed and size (its ``sft_config.yaml``, else ``SFTConfig``'s defaults) and its
    config key (its ``sft_metrics.json``; None when absent). Read as plain data, so that a model
    built by a newer ``SFTConfig`` is still read."""
    import json

    from maopd.base.run_dir import read_record
    from maopd.training.base_model import CONFIG_FILE, METRICS_FILE, SFTConfig

    saved = read_record(model / CONFIG_FILE) or {}
    defaults = SFTConfig()
    metrics = model / METRICS_FILE
    key = json.loads(metrics.read_text(encoding="utf-8")).get("config_key") if metrics.is_file() else None
    return int(saved.get("world_seed", defaults.world_seed)), str(saved.get("world_size", defaults.world_size)), key


def closed_book_figures(model: Path, seed: int, size: str, facts_per_band: int | None = None) -> dict[str, Any]:
    """Gate 1: recall of every fact about a dev entity of the world (the first ``facts_per_band``
    of each band), by popularity band, against chance (``chance_rates`` over all of the world's
    facts, averaged over a band's facts): ``pretrained``, ``model/pretrained/`` as a language model,
    and ``searcher``, the fine-tuned model as the Searcher reporting without a search
    (``maopd.evaluation.fact_recall``)."""
    from transformers import AutoModelForCausalLM

    from maopd.envs.rewards import report_has_gold
    from maopd.envs.synthwiki.facts import chance_rates, graph_facts
    from maopd.envs.synthwiki.grammar import subquestion
    from maopd.envs.synthwiki.popularity import BANDS, ExposureCurve
    from maopd.envs.synthwiki.world import world_graph
    from maopd.evaluation.fact_recall import REPORT_TOKENS, greedy_answers, recall_report, searcher_reports
    from maopd.evaluation.solvers import model_policy
    from maopd.training.base_model import PRETRAINED_DIR

    facts = graph_facts(seed, world_graph(seed, size), ExposureCurve())
    chance = chance_rates(facts)
    dev = [f for f in facts if f.split == "dev"]
    if facts_per_band is not None:
        dev = [f for b in BANDS for f in [f for f in dev if f.band == b][:facts_per_band]]
    questions = [subquestion(f.predicate, f.subject) for f in dev]
    policy = model_policy(str(model), temperature=0.0, max_new_tokens=REPORT_TOKENS)

    pretrained = model / PRETRAINED_DIR
    if (pretrained / "config.json").is_file():
        language_model = AutoModelForCausalLM.from_pretrained(pretrained, local_files_only=True).eval()
        answers = greedy_answers(language_model, policy.tokenizer, questions)
        lm_figures = recall_report(dev, answers, chance=chance)
    else:
        lm_figures = {"not_measured": "no pretrained/ checkpoint"}
    # the fine-tuned model asked as pretrained/ is: what fine-tuning kept of what pretraining stored
    kept = recall_report(dev, greedy_answers(policy.model, policy.tokenizer, questions), chance=chance)
    reports = searcher_reports(policy, questions)
    correct = [report_has_gold(report, fact.answers) for report, fact in zip(reports, dev)]
    return {
        "world": {"seed": seed, "size": size},
        "facts": len(dev),
        "pretrained": lm_figures,
        "finetuned_language_model": kept,
        "searcher": recall_report(dev, reports, correct=correct, chance=chance),
    }


def popular_lookups(seed: int, size: str) -> list:
    """The world's dev 1-hop lookup questions whose subject is in the popular band."""
    from maopd.envs.synthwiki import load_default_world
    from maopd.envs.synthwiki.popularity import band, entity_ranks
    from maopd.envs.synthwiki.world import world_graph

    entities = world_graph(seed, size)
    ranks = entity_ranks(seed, entities)
    return [
        q
        for q in load_default_world(seed, size).splits["dev"]
        if q.metadata["hops"] == 1
        and q.metadata["type"] == "lookup"
        and band(ranks[q.metadata["entities"][0]], len(entities)) == "popular"
    ]


def forced_search_figures(
    model: Path, seed: int, size: str, config: PipelineConfig, limit: int | None = None
) -> dict[str, Any]:
    """Gate 2: the cascade played by the model on the world's popular-band dev 1-hop lookups (the
    first ``limit``), ``eval.attempts`` workflows each with the evaluation's sampling, once with the
    Searcher's first output forced to begin with ``<report>`` (no search) and once with
    ``<search>``; the exact match of each arm's answers."""
    from maopd.envs.synthwiki import load_default_world
    from maopd.evaluation.runner import attempt_seed
    from maopd.evaluation.solvers import checkpoint_solver

    questions = popular_lookups(seed, size)[:limit]
    if not questions:
        return {"not_measured": "no popular-band 1-hop dev question"}
    ev = config.eval
    batch = [q for q in questions for _ in range(ev.attempts)]
    seeds = [attempt_seed(ev.seed, "1-hop", q.id, a) for q in questions for a in range(ev.attempts)]
    corpus = load_default_world(seed, size).corpus
    figures: dict[str, Any] = {"questions": len(questions), "attempts": ev.attempts}
    for arm, start in (("no_search", "<report>"), ("search", "<search>")):
        solve = checkpoint_solver(
            "cascade",
            str(model),
            corpus,
            questions,
            ev.temperature,
            ev.top_p,
            ev.max_new_tokens,
            forced_starts={"searcher": start},
        )
        records = solve(batch, seeds)
        figures[arm] = {
            "start": start,
            "em": sum(r.rewards.em for r in records) / len(records),
            "searching_share": sum(r.counters.search_actions > 0 for r in records) / len(records),
        }
    return figures


def band_questions(seed: int, size: str, count: int, band: str, hop_mix: dict[str, float] | None = None) -> list:
    """``count`` questions of the world's dev sub-graph, of the kinds ``hop_mix`` weighs (the
    world's mix by default), whose least popular entity is in ``band``: a question mix the
    testbed's design weighs before the world asks it. Drawn from a stream of their own (never the
    test split's entities)."""
    import random

    from maopd.envs.synthwiki.popularity import entity_bands
    from maopd.envs.synthwiki.questions import DEFAULT_HOP_MIX, QuestionWriter
    from maopd.envs.synthwiki.world import QUESTION_SUBGRAPHS, world_graph

    entities = world_graph(seed, size)
    rng = random.Random(f"{seed}:design-{band}")
    writer = QuestionWriter(entities, "dev", rng, QUESTION_SUBGRAPHS["dev"], entity_bands(seed, entities))
    try:
        return writer.write(count, hop_mix or DEFAULT_HOP_MIX, band=band)
    except ValueError as exc:
        raise ConfigError(f"--band {band}: {exc}; ask fewer questions or weigh the kinds with --hop-mix") from None


def collapse_figures(
    model: Path,
    seed: int,
    size: str,
    config: PipelineConfig,
    limit: int | None = None,
    questions: list | None = None,
    env: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The preconditions of search collapse (``maopd.study.gates.COLLAPSE``), measured in the
    hierarchy on the world's dev questions of every type (the first ``limit``; or ``questions``), ``eval.attempts``
    workflows each with the evaluation's sampling, in three arms: as π_0 plays (``unforced``), with
    every Searcher call's first output forced to begin with ``<report>`` (``no_search``), and with
    ``<search>`` (``search``). Per arm: EM, the share of workflows without a search (over the
    well-formed ones, no format failure), of workflows with a format failure, and of those ended
    by a budget without an answer. Per question: each arm's mean EM, its kind and the popularity
    band of its least popular entity, so that a question mix's figures can be read from them.
    ``env`` (a partial ``SearchEnvConfig``: budgets, passages, a retriever) goes to the environment:
    the levers of the testbed's design."""
    from maopd.base.config import from_dict
    from maopd.envs.search_env import SearchEnvConfig, shared_retriever
    from maopd.envs.synthwiki import load_default_world
    from maopd.envs.synthwiki.popularity import entity_bands, weakest_band
    from maopd.envs.synthwiki.questions import question_kind
    from maopd.envs.synthwiki.world import world_graph
    from maopd.evaluation.runner import attempt_seed
    from maopd.evaluation.solvers import checkpoint_solver

    world = load_default_world(seed, size)
    questions = (questions if questions is not None else world.splits["dev"])[:limit]
    bands = entity_bands(seed, world_graph(seed, size))
    typed = from_dict(SearchEnvConfig, env or {})
    # the environment takes a retriever as an object, built here from its settings
    env_options = {key: getattr(typed, key) for key in env or {} if key != "retriever"}
    if "retriever" in (env or {}):
        env_options["retriever"] = shared_retriever(typed.retriever, world.corpus)
    ev = config.eval
    batch = [q for q in questions for _ in range(ev.attempts)]
    seeds = [attempt_seed(ev.seed, question_kind(q), q.id, a) for q in questions for a in range(ev.attempts)]
    per_question: dict[str, dict[str, Any]] = {
        q.id: {"kind": question_kind(q), "band": weakest_band(q.metadata["entities"], bands)} for q in questions
    }
    figures: dict[str, Any] = {"questions": len(questions), "attempts": ev.attempts, "env_options": env or {}}
    for arm, start in (("unforced", None), ("no_search", "<report>"), ("search", "<search>")):
        solve = checkpoint_solver(
            "hierarchical",
            str(model),
            world.corpus,
            questions,
            ev.temperature,
            ev.top_p,
            ev.max_new_tokens,
            forced_starts={"searcher": start} if start else None,
            **env_options,
        )
        records = solve(batch, seeds)
        well_formed = [r for r in records if r.counters.format_failures == 0]
        figures[arm] = {
            "start": start,
            "em": sum(r.rewards.em for r in records) / len(records),
            "no_search_share": sum(r.counters.search_actions == 0 for r in well_formed) / len(well_formed)
            if well_formed
            else None,
            "format_failure_share": 1 - len(well_formed) / len(records),
            "no_answer_share": sum((r.counters.no_answer or 0) for r in records) / len(records),
            "searches_per_workflow": sum(r.counters.search_actions for r in records) / len(records),
        }
        ems: dict[str, list[float]] = {}
        for record in records:
            ems.setdefault(record.question_id, []).append(record.rewards.em)
        for question_id, scores in ems.items():
            per_question[question_id][arm] = sum(scores) / len(scores)
    figures["per_question"] = per_question
    figures.update(paired_figures(per_question))
    return figures


def paired_figures(per_question: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Over the questions ``per_question`` holds: EM(forced no search) / EM(forced search) and the
    mean within-question difference EM(no search) − EM(search), in points."""
    rows = list(per_question.values())
    no_search = sum(row["no_search"] for row in rows) / len(rows)
    search = sum(row["search"] for row in rows) / len(rows)
    return {
        "ratio": no_search / search if search else None,
        "paired_difference_points": 100 * (no_search - search),
        "no_search_em": no_search,
        "search_em": search,
    }


def class_figures(per_question: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """``collapse_figures``' per-question EMs grouped by question kind and popularity band, each
    group with its size, every arm's EM and ``paired_figures``: what a question mix weighs."""
    groups: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for question_id, row in per_question.items():
        groups.setdefault((row["kind"], row["band"]), {})[question_id] = row
    return [
        {
            "kind": kind,
            "band": band,
            "questions": len(rows),
            "unforced_em": sum(row["unforced"] for row in rows.values()) / len(rows),
            **paired_figures(rows),
        }
        for (kind, band), rows in sorted(groups.items())
    ]


def gate_figures(
    model: Path, questions_per_type: int | None, attempts: int, out: Path, quick: bool = False, progress=print
) -> dict[str, Any]:
    """Every gate of ``maopd.study.gates`` measured on dev for the base model directory ``model``: the
    figures of each part, its seconds, and the checks as rows. Parts 1 and 2 ask π_0's world
    (``sft_config.yaml``); parts 3 and 4 play the environments' embedded world (``dev_eval``,
    ``judge_figures``), each workflow's records in ``out/eval/<workflow>/``."""
    from maopd.envs.synthwiki.world import DEFAULT_SEED, DEFAULT_SIZE
    from maopd.pipeline.config import load_preset
    from maopd.study import gates

    if not (model / "config.json").is_file():
        raise ConfigError(f"--model {model}: not a model directory (no config.json)")
    seed, size, key = base_model_world(model)
    if quick and questions_per_type is None:
        questions_per_type = 1
    overrides = ["eval.split=dev", f"eval.attempts={attempts}"]
    if questions_per_type is not None:
        overrides.append(f"eval.questions_per_type={questions_per_type}")
    config = load_preset("default", overrides)
    seconds: dict[str, float] = {}

    def timed(part: str, fn, *args):
        progress(f"gates: {part} ...")
        started = time.perf_counter()
        result = fn(*args)
        seconds[part] = round(time.perf_counter() - started, 1)
        return result

    recall = timed(
        "closed_book_recall", closed_book_figures, model, seed, size, QUICK_FACTS_PER_BAND if quick else None
    )
    forced = timed(
        "forced_search", forced_search_figures, model, seed, size, config, QUICK_FORCED_QUESTIONS if quick else None
    )

    def level() -> dict[str, Any]:
        systems, questions = {}, 0
        for workflow in gates.GATED_WORKFLOWS:
            result = dev_eval(config, [(workflow, workflow, model)], [], out / "eval" / workflow)
            systems[workflow], questions = result["systems"][workflow], result["questions"]
        return {"questions": questions, "questions_per_type": questions_per_type, "attempts": attempts, **systems}

    levels = timed("level", level)

    def judge() -> dict[str, Any]:
        records = out / "eval" / "hierarchical" / "records.jsonl"
        limits = (QUICK_JUDGE_WORKFLOWS, QUICK_JUDGE_BALANCED) if quick else (None, None)
        try:
            return judge_figures(model, records, *limits)
        except ConfigError as exc:  # the hierarchy wrote no report to judge
            return {"not_measured": str(exc)}

    judged = timed("judge", judge)
    figures = {"closed_book_recall": recall, "forced_search": forced, "level": levels, "judge": judged}
    rows = gates.gate_rows(figures)
    return {
        "model": str(model),
        "config_key": key,
        "world": {"seed": seed, "size": size},  # of parts 1 and 2
        "eval_world": {"seed": DEFAULT_SEED, "size": DEFAULT_SIZE},  # of parts 3 and 4
        "quick": quick,
        "thresholds": asdict(gates.GATES),
        "rows": rows,
        "verdict": gates.overall(rows),
        "seconds": seconds,
        "figures": figures,
    }
