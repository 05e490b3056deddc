"""The report on a pre-registered testbed, assembled from saved runs on any machine.

The pre-registered table runs in parts (``maopd.study.preregistration.Plan``), each a resumable command
whose run directory stays on the machine that ran it. After each part:

* ``save_runs`` copies what the report needs from the run directory into a folder to commit: per
  seed, its config (``seed_<s>.yaml``), its job's record and timings (``pipeline.yaml``,
  ``pipeline.json``), every stage run's ``config.yaml`` and ``metrics.jsonl``, and its evaluation
  records without their trajectories (scores and counters kept) as ``eval/records.jsonl.gz``.
  Checkpoints are not kept: a later part resumes from the run directory it shares with the
  earlier ones.
* ``build_report`` checks that the saved seeds ran the pre-registered configs on the registered
  testbed, writes the seed report over them (``maopd.evaluation.seed_report``: pooled and per-seed
  accuracy, both intervals, the score matrix, searches and training EM over training, the
  Teacher–student divergence, the judge), and the verdict of every claim of the pre-registration
  by its rules (``claims.json``, ``claims.md``), with every system's accuracy and its workflows
  answered without a search by the popularity band of the entity a question names, and every
  system's avg@4, pass@4 and 4/4 with both intervals and its workload per workflow
  (``tables.md``). A claim whose systems have not run yet is "not run yet"; one whose gates
  failed is "not tested" whatever its figures.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from maopd.base.atomic import copy_file, write_file_atomically, write_text_atomically
from maopd.base.config import ConfigError
from maopd.base.json_files import write_json

METRICS = {"avg@4": "avg", "pass@4": "pass", "4/4": "all"}  # a claim's metric: seed_statistics' name
SEARCHES_CHANGE = "searches_change"
NOT_RUN = "not run yet"


def save_runs(run_dir: Path, out: Path) -> list[Path]:
    """Copy every seed of ``run_dir`` (``seed_<s>/``, from ``maopd experiment --seeds``) into ``out``
    (module docstring); returns the seeds' saved directories."""
    seeds = sorted(p for p in run_dir.glob("seed_*") if p.is_dir())
    if not seeds:
        raise ConfigError(f"{run_dir} holds no seed_<s>/ directory: give the --run-dir of a --seeds run")
    saved = []
    for seed in seeds:
        target = out / seed.name
        target.mkdir(parents=True, exist_ok=True)
        copy_file(run_dir / f"{seed.name}.yaml", out / f"{seed.name}.yaml")
        for name in ("pipeline.yaml", "pipeline.json"):
            if (seed / name).is_file():
                copy_file(seed / name, target / name)
        for stage in sorted(p for p in seed.iterdir() if (p / "metrics.jsonl").is_file()):
            (target / stage.name).mkdir(exist_ok=True)
            for name in ("config.yaml", "metrics.jsonl"):
                copy_file(stage / name, target / stage.name / name)
        records = seed / "eval" / "records.jsonl"
        if records.is_file():
            (target / "eval").mkdir(exist_ok=True)
            _save_records(records, target / "eval" / "records.jsonl.gz")
        saved.append(target)
    return saved


def _save_records(source: Path, target: Path) -> None:
    """The records without their trajectories, gzipped with a fixed timestamp (the same records
    give the same bytes), written whole before it replaces an older copy."""
    from maopd.evaluation.records import iter_records, record_line

    def write(raw) -> None:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle:
            for record in iter_records(source):
                record.trajectory = None
                handle.write(record_line(record).encode("utf-8"))

    write_file_atomically(target, write)


def check_saved_configs(runs: Path, record: dict[str, Any]) -> dict[int, str]:
    """Each saved seed's part (its Stage II variants): refuse a seed the plan lacks or a config
    that is not the pre-registered one of its part."""
    from maopd.base.config import load_yaml, to_dict
    from maopd.pipeline.config import PipelineConfig, load_experiment
    from maopd.pipeline.seeds import seed_config
    from maopd.study.preregistration import PLAN as plan

    registered_plan = {key: record["plan"].get(key) for key in asdict(plan)}
    if json.loads(json.dumps(registered_plan)) != json.loads(json.dumps(asdict(plan))):  # tuples read as lists
        raise ConfigError(
            "the code's plan (maopd.study.preregistration.PLAN) is not the pre-registered one: restore it"
        )
    parts = {}
    for path in sorted(runs.glob("seed_*.yaml")):
        saved = load_yaml(PipelineConfig, path)
        if saved.seed not in plan.seeds:
            raise ConfigError(f"{path}: seed {saved.seed} is not pre-registered (seeds {list(plan.seeds)})")
        part = next((name for name, variants in plan.parts if list(variants) == saved.variants), None)
        if part is None:
            raise ConfigError(f"{path}: variants {saved.variants} are no pre-registered part's")
        registered = seed_config(load_experiment("table3", plan.part_overrides(dict(plan.parts)[part])), saved.seed)
        wanted, got = to_dict(registered), to_dict(saved)
        wanted.pop("run_dir"), got.pop("run_dir")
        if wanted != got:
            changed = sorted(key for key in wanted if wanted[key] != got.get(key))
            raise ConfigError(f"{path}: not the pre-registered config of part {part} (differs in {changed})")
        parts[saved.seed] = part
    if not parts:
        raise ConfigError(f"{runs} holds no saved seed (seed_<s>.yaml): run maopd report save first")
    return parts


def searches_by_stage(seed_dirs: list[Path]) -> dict[str, dict[str, np.ndarray]]:
    """Per stage run, per seed, the searches per workflow at each training step."""
    from maopd.evaluation.seed_report import SEARCHES, metric_series, stage_metrics

    return {
        stage: {seed: metric_series(rows, SEARCHES) for seed, rows in by_seed.items()}
        for stage, by_seed in stage_metrics(seed_dirs).items()
    }


def searches_change_difference(
    a: dict[str, np.ndarray], b: dict[str, np.ndarray], window: int, expect: str, tested: bool
) -> dict[str, Any]:
    """The change in searches per workflow (last ``window`` Stage II steps − first) of A minus B's,
    over the seeds both ran: the bootstrap over each window's steps and the seed-level t-interval."""
    from maopd.evaluation.metrics import BOOTSTRAP_SEED, percentile_interval
    from maopd.evaluation.seed_report import window_draws
    from maopd.evaluation.seed_statistics import t_interval, verdict

    seeds = sorted(set(a) & set(b))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    drawn_a = window_draws([a[s] for s in seeds], window, rng)
    drawn_b = window_draws([b[s] for s in seeds], window, rng)
    if drawn_a is None or drawn_b is None:
        raise ConfigError(f"a seed logged no search count in the first or last {window} steps: cannot compare")
    per_seed = (drawn_a[1] - drawn_a[0]) - (drawn_b[1] - drawn_b[0])
    seed_interval = t_interval(dict(zip(seeds, per_seed.tolist())))
    bootstrap_ci = list(percentile_interval(drawn_a[2] - drawn_b[2]))
    return {
        "question_bootstrap": {
            "macro": seed_interval.mean,
            "ci": bootstrap_ci,
            "resamples": "steps within each window and seed",
        },
        "seed_interval": seed_interval.to_dict(),
        "expect": expect,
        "verdict": verdict(bootstrap_ci, seed_interval.ci, expect, tested),
        "window": window,
    }


def claim_verdicts(record: dict[str, Any], matrix, searches: dict[str, dict[str, np.ndarray]]) -> list[dict]:
    """Every claim of the pre-registration ``record`` with its figures and verdict by the rules."""
    from maopd.evaluation.seed_statistics import side_by_side
    from maopd.pipeline.config import VARIANT_METHODS

    stage_of = {method: f"stage2_{variant}" for variant, method in VARIANT_METHODS.items()}
    window = record["plan"]["searches_window"]
    out = []
    for claim in record["claims"]:
        tested = claim["status"] == "open"
        row = {key: claim[key] for key in ("name", "paper", "a", "b", "metric", "direction", "needs", "status")}
        if claim["metric"] == SEARCHES_CHANGE:
            runs = [searches.get(stage_of.get(system, ""), {}) for system in (claim["a"], claim["b"])]
            if not all(runs):
                out.append({**row, "verdict": NOT_RUN})
                continue
            figures = searches_change_difference(runs[0], runs[1], window, claim["direction"], tested)
        else:
            if not {claim["a"], claim["b"]} <= set(matrix.systems):
                out.append({**row, "verdict": NOT_RUN})
                continue
            figures = side_by_side(
                matrix, claim["a"], claim["b"], claim["direction"], tested, metric=METRICS[claim["metric"]]
            )
        out.append({**row, **{k: v for k, v in figures.items() if k not in ("a", "b", "expect")}})
    return out


TABLE_ROWS = (  # Table 1, then Table 3's variants, as the paper lists them
    "C-MAS base",
    "H-MAS base",
    "C-MAS + RL",
    "Prompted Critic",
    "MultiAgent-OPD",
    "Single agent base",
    "Search-R1 (single agent + RL)",
    "w/ outcome-based Searcher RL",
    "w/ base-model teacher",
    "w/o direct Searcher supervision",
)


def in_table_order(systems) -> list[str]:
    """``systems`` in the paper's table order, any other after them by name."""
    return [s for s in TABLE_ROWS if s in systems] + sorted(s for s in systems if s not in TABLE_ROWS)


def system_figures(matrix) -> dict[str, dict[str, dict]]:
    """Every system's avg@4, pass@4 and 4/4 with the question bootstrap and the seed-level interval."""
    from maopd.evaluation.seed_statistics import side_by_side

    return {
        system: {
            metric: {k: v for k, v in side_by_side(matrix, system, metric=name).items() if k not in ("a", "b")}
            for metric, name in METRICS.items()
        }
        for system in in_table_order(matrix.systems)
    }


def tables_markdown(figures: dict[str, dict[str, dict]]) -> str:
    from maopd.evaluation.seed_statistics import percent_interval

    lines = [
        "# Table 1 and Table 3 on test: every system, pooled over the training seeds",
        "",
        "Macro over question types (%), each figure over one seed's 4 attempts: the question bootstrap, then the"
        " seed-level t-interval with the number of seeds.",
        "",
        "| system | avg@4 | avg@4, seeds | pass@4 | pass@4, seeds | 4/4 | 4/4, seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for system, by_metric in figures.items():
        cells = []
        for metric in METRICS:
            figure = by_metric[metric]
            seeds = figure["seed_interval"]["seeds"]
            cells += [
                percent_interval(figure["question_bootstrap"]),
                f"{percent_interval(figure['seed_interval'])} ({seeds})",
            ]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def accuracy_by_band(matrix, bands: dict[str, tuple[str, str]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per system and popularity band of the entity a question names: the mean score over the
    band's questions (every type, every attempt of every seed) and their count."""
    from maopd.envs.synthwiki.popularity import BANDS

    named = np.array([bands[question_id][1] for _, question_id in matrix.questions])
    out = {}
    for system in in_table_order(matrix.systems):
        per_question = matrix.system(system).reshape(len(named), -1).mean(axis=1)
        out[system] = {
            b: {"avg": float(per_question[named == b].mean()), "questions": int((named == b).sum())}
            for b in BANDS
            if (named == b).any()
        }
    return out


def without_search_by_band(per_seed: dict[str, list], bands: dict[str, tuple[str, str]]) -> dict[str, dict]:
    """Per system and popularity band of the entity a question names, over every attempt of every
    seed: the share of workflows that answered without a search, and their mean exact match (None
    when there is none). What a system recalls and trusts without searching, band by band."""
    from maopd.envs.synthwiki.popularity import BANDS

    out: dict[str, dict] = {}
    records = [r for rows in per_seed.values() for r in rows]
    for system in in_table_order({r.method for r in records}):
        by_band = {}
        for b in BANDS:
            rows = [r for r in records if r.method == system and bands[r.question_id][1] == b]
            closed = [r.score for r in rows if r.counters.get("search_actions", 1) == 0]
            if rows:
                by_band[b] = {
                    "share": len(closed) / len(rows),
                    "avg": float(np.mean(closed)) if closed else None,
                    "workflows": len(rows),
                }
        out[system] = by_band
    return out


def workload(per_seed: dict[str, list]) -> dict[str, dict[str, dict]]:
    """Per system, each workload counter per workflow (search actions, reports, task assignments,
    input and output tokens; Appendix A) that all its records carry: its mean per seed (each
    seed's evaluation records) over every question and attempt, and the t-interval over seeds.
    Wall-clock duration is left out: it measures the machine."""
    from maopd.evaluation.records import COUNTER_FIELDS
    from maopd.evaluation.seed_statistics import t_interval

    out: dict[str, dict[str, dict]] = {}
    for system in in_table_order({r.method for records in per_seed.values() for r in records}):
        counters = {seed: [r.counters for r in records if r.method == system] for seed, records in per_seed.items()}
        counters = {seed: rows for seed, rows in counters.items() if rows}
        carried = [f for f in COUNTER_FIELDS if all(f in row for rows in counters.values() for row in rows)]
        out[system] = {
            field: t_interval(
                {seed: float(np.mean([row[field] for row in rows])) for seed, rows in counters.items()}
            ).to_dict()
            for field in carried
        }
    return out


def workload_markdown(figures: dict[str, dict[str, dict]]) -> str:
    from maopd.evaluation.records import COUNTER_FIELDS

    def cell(figure: dict | None) -> str:
        if figure is None:
            return "n/a"
        if figure["ci"] is None:
            return f"{figure['mean']:.2f}"
        low, high = figure["ci"]
        return f"{figure['mean']:.2f} [{low:.2f}, {high:.2f}]"

    lines = [
        "## Workload per workflow",
        "",
        "Mean per workflow over every test question and attempt, then over the training seeds with the seed-level"
        " t-interval (Appendix A's counters; tokens are the policy's prompt and completion tokens).",
        "",
        "| system | " + " | ".join(f.replace("_", " ") for f in COUNTER_FIELDS) + " |",
        "|---|" + "---|" * len(COUNTER_FIELDS),
    ]
    for system, by_field in figures.items():
        lines.append(f"| {system} | " + " | ".join(cell(by_field.get(f)) for f in COUNTER_FIELDS) + " |")
    return "\n".join(lines) + "\n"


def claims_markdown(
    claims: list[dict], record: dict[str, Any], by_band: dict[str, dict] | None = None, closed: dict | None = None
) -> str:
    def interval(figure: dict, scale: float) -> str:
        mean = figure["macro"] if "macro" in figure else figure["mean"]
        if figure.get("ci") is None:
            return f"{scale * mean:+.2f} (no interval)"
        low, high = figure["ci"]
        return f"{scale * mean:+.2f} [{scale * low:+.2f}, {scale * high:+.2f}]"

    lines = [
        f"# Claim by claim: the verdicts of the pre-registration (testbed `{record['testbed_hash']}`)",
        "",
        "Differences A − B in points of the metric (searches per workflow for the change in searches); the"
        " question bootstrap (for the change in searches: the bootstrap over each window's steps) beside the"
        " seed-level t-interval over the training seeds. Rules:",
        "",
        *(f"- **{name}**: {text}" for name, text in record["verdict_rules"].items()),
        "",
        "| claim | what the paper reports | A − B | metric | bootstrap | seeds: t-interval | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for claim in claims:
        scale = 1.0 if claim["metric"] == SEARCHES_CHANGE else 100.0
        if "question_bootstrap" in claim:
            figures = [
                interval(claim["question_bootstrap"], scale),
                f"{interval(claim['seed_interval'], scale)} ({claim['seed_interval']['seeds']} seeds)",
            ]
        else:
            figures = ["–", "–"]
        lines.append(
            f"| {claim['name']} | {claim['paper']} | {claim['a']} − {claim['b']} | {claim['metric']} | "
            + " | ".join(figures)
            + f" | **{claim['verdict']}** |"
        )
    if by_band:
        bands = list(next(iter(by_band.values())))
        counts = next(iter(by_band.values()))
        lines += [
            "",
            "## Accuracy by the popularity band of the entity a question names",
            "",
            "Mean exact match (%) over the band's test questions of every type, every attempt of every seed (not"
            " macro-averaged over types); π_0 recalls the popular band's facts without search and almost none of the"
            " long tail's (the gates).",
            "",
            "| system | " + " | ".join(f"{b} ({counts[b]['questions']} questions)" for b in bands) + " |",
            "|---|" + "---|" * len(bands),
            *(
                f"| {system} | " + " | ".join(f"{100 * figures[b]['avg']:.2f}" for b in bands) + " |"
                for system, figures in by_band.items()
            ),
        ]
    if closed:
        bands = list(next(iter(closed.values())))

        def cell(figure: dict) -> str:
            em = "–" if figure["avg"] is None else f"{100 * figure['avg']:.2f}"
            return f"{100 * figure['share']:.2f} ({em})"

        lines += [
            "",
            "## Workflows that answered without a search, by popularity band",
            "",
            "Share of the band's workflows (%) with no search action, every attempt of every seed, and in brackets"
            " their mean exact match (%; – when there is none): what a system answers from memory, and how well.",
            "",
            "| system | " + " | ".join(bands) + " |",
            "|---|" + "---|" * len(bands),
            *(
                f"| {system} | " + " | ".join(cell(figures[b]) if b in figures else "n/a" for b in bands) + " |"
                for system, figures in closed.items()
            ),
        ]
    return "\n".join(lines) + "\n"


def build_report(runs: Path, preregistration: Path, out: Path) -> dict[str, Any]:
    """The report from saved runs (module docstring); returns ``claims.json``'s content."""
    from maopd.evaluation.score_matrix import read_matrix
    from maopd.evaluation.seed_report import seed_records, write_report
    from maopd.pipeline.config import load_experiment, run_labels
    from maopd.pipeline.job import pipeline_comparisons
    from maopd.study.preregistration import named_bands, testbed_components, testbed_hash

    record = json.loads(preregistration.read_text(encoding="utf-8"))
    now = testbed_hash(testbed_components())
    if now != record["testbed_hash"]:
        raise ConfigError(
            f"the testbed is {now}, the pre-registration's is {record['testbed_hash']}: these runs are not on the"
            " registered testbed (tests/repo/test_preregistration.py names what changed)"
        )
    parts = check_saved_configs(runs, record)
    seed_dirs = [runs / f"seed_{seed}" for seed in sorted(parts)]
    every_variant = load_experiment("table3")
    # the seed report's pairs carry no verdict: the claims' verdicts follow their own gates (claims.md)
    comparisons, labels = pipeline_comparisons(every_variant), run_labels(every_variant)
    write_report(seed_dirs, comparisons, out, labels, window=record["plan"]["searches_window"])
    matrix = read_matrix(out / "score_matrix.json")
    claims = claim_verdicts(record, matrix, searches_by_stage(seed_dirs))
    bands = named_bands("test")
    by_band = accuracy_by_band(matrix, bands)
    per_seed = dict(zip((run.name for run in seed_dirs), seed_records(seed_dirs)))
    closed = without_search_by_band(per_seed, bands)
    systems = system_figures(matrix)
    workloads = workload(per_seed)
    write_text_atomically(out / "tables.md", tables_markdown(systems) + "\n" + workload_markdown(workloads))
    result = {
        "testbed_hash": record["testbed_hash"],
        "preregistration": str(preregistration),
        "parts": {f"seed_{seed}": part for seed, part in sorted(parts.items())},
        "claims": claims,
        "systems": systems,
        "accuracy_by_band": by_band,
        "without_search_by_band": closed,
        "workload": workloads,
    }
    write_json(out / "claims.json", result, indent=1, ensure_ascii=False)
    write_text_atomically(out / "claims.md", claims_markdown(claims, record, by_band, closed))
    return result
