"""The pre-registration of the report on a testbed: everything fixed before the first RL run.

A comparison on a testbed is a claim about the method only if the testbed, the runs and the
analysis were fixed before any figure could steer them. ``preregistration`` writes that down from
the code itself:

* **the testbed** (``testbed_components``): the world's format and test-split versions with a hash
  of the sealed test split's questions, the environments' names, every prompt the model reads, the
  π_0 of each training seed (its config key and a hash of its weights) and the resolved config of
  every pre-registered run;
  ``testbed_hash`` is a hash of them all. ``tests/repo/test_preregistration.py`` recomputes them
  from the code, so a change to any of them after the pre-registration fails until it is
  registered as a new testbed version;
* **the gates** measured on dev before any RL (``maopd tune gates`` on each π_0, ``maopd tune
  recipe-gates`` over them), and the share of dev and test questions per popularity band of the
  entity they start from;
* **the runs** (``PLAN``): each stage's steps, questions per step B and workflows per question G,
  the training seeds (a seed reseeds Stage I and Stage II and picks its π_0), and the resumable
  commands that run them, in parts;
* **the statistics and the verdict rules** (``maopd.evaluation.seed_statistics``): the paired
  question bootstrap and the seed-level interval side by side; *reproduces* when both exclude zero
  in the paper's direction, *contradicts* when both exclude it the other way, *inconclusive*
  otherwise, *not tested* when a gate the claim needs failed;
* **the claims** (``CLAIMS``), each with its comparison, direction, metric and the gates it needs.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from maopd.base.atomic import write_text_atomically
from maopd.base.config import ConfigError
from maopd.base.json_files import write_json

GATE_GROUPS = {  # the gate rows (``maopd.study.gates``) each precondition is made of
    "knowledge": ("recall after pretraining", "recall as Searcher, no search", "forced no search vs search"),
    "judge": ("judge",),
    "level": ("level", "searching"),
}


@dataclass(frozen=True)
class StagePlan:
    steps: int
    batch_size: int  # questions per step, B
    group_size: int  # workflows per question, G


@dataclass(frozen=True)
class Plan:
    """The report's runs: one Stage II length for every Table 3 variant (the paper runs them all
    the same length), Stage I as the main job trains it, and the single agent given the questions
    Stage I and Stage II see together, so the baseline is not starved of training.

    Training seed s trains from the π_0 of fine-tuning seed s (``pi0_per_seed``): the seeds are the
    recipe's builds whose gates were measured, so the claims and their preconditions are read over
    the same draws. The table runs in ``parts``, each a resumable command of its own (a later part
    adds Stage II variants to the same run directory, which reuses what the earlier ones trained
    and evaluated), so that none runs past a session."""

    stage1: StagePlan = StagePlan(40, 8, 5)
    stage2: StagePlan = StagePlan(120, 4, 5)
    single: StagePlan = StagePlan(100, 8, 5)
    seeds: tuple[int, ...] = (0, 1, 2)
    parts: tuple[tuple[str, tuple[str, ...]], ...] = (  # (name, the Stage II variants trained so far)
        ("stage1_and_single_agent", ()),
        ("opd_and_outcome_rl", ("full", "outcome_searcher_rl")),
        ("teacher_ablations", ("full", "outcome_searcher_rl", "base_model_teacher", "no_searcher_supervision")),
        (
            "prompted_critic",
            ("full", "outcome_searcher_rl", "base_model_teacher", "no_searcher_supervision", "prompted_critic"),
        ),
    )
    attempts: int = 4
    searches_window: int = 10  # Stage II steps averaged at the start and at the end of training
    run_dir: str = "runs/report"
    report_dir: str = "benchmarks/results/popularity_testbed_report"  # committed: runs/ after each part, the report

    def overrides(self) -> list[str]:
        """The settings every pre-registered run adds to ``maopd experiment table3``."""
        return [
            "pi0_per_seed=true",
            f"stages.steps={self.stage1.steps}",
            f"stage1.rollout.batch_size={self.stage1.batch_size}",
            f"stages.rollout.group_size={self.stage1.group_size}",
            f"stage2.steps={self.stage2.steps}",
            f"stage2.rollout.batch_size={self.stage2.batch_size}",
            f"single.steps={self.single.steps}",
            f"single.rollout.batch_size={self.single.batch_size}",
            f"eval.attempts={self.attempts}",
        ]

    def part_overrides(self, variants: tuple[str, ...]) -> list[str]:
        return [*self.overrides(), f"variants=[{', '.join(variants)}]"]

    def commands(self) -> list[str]:
        """One command per part, in order; each resumes a part cut short."""
        seeds = " ".join(map(str, self.seeds))
        # the settings before --seeds, which takes every number after it
        return [
            "maopd experiment table3 "
            + " ".join(f"'{o}'" if " " in o else o for o in self.part_overrides(variants))
            + f" --run-dir {self.run_dir} --seeds {seeds}"
            for _, variants in self.parts
        ]

    def save_command(self) -> str:
        """Run after each part, then commit its output: the report is built from what it saved."""
        return f"maopd report save --run-dir {self.run_dir} --out {self.report_dir}/runs"

    def build_command(self) -> str:
        return (
            f"maopd report build --runs {self.report_dir}/runs --preregistration"
            f" benchmarks/results/preregistration/preregistration.json --out {self.report_dir}"
        )


PLAN = Plan()
# The workflows the report's systems play: the environments its testbed hash covers.
REPORT_WORKFLOWS = ("hierarchical", "cascade", "single")


@dataclass(frozen=True)
class Claim:
    name: str
    paper: str  # what the paper reports
    a: str  # system (``VARIANT_METHODS`` names and the pipeline's base systems)
    b: str
    metric: str  # avg@4, pass@4, 4/4, or searches_change
    direction: str  # "higher": a above b
    needs: tuple[str, ...]  # GATE_GROUPS


OPD, OUTCOME = "MultiAgent-OPD", "w/ outcome-based Searcher RL"
CLAIMS = (
    Claim("stage1", "Stage I's GRPO improves the cascade", "C-MAS + RL", "C-MAS base", "avg@4", "higher", ("level",)),
    Claim("opd_vs_base", "MultiAgent-OPD improves the hierarchy", OPD, "H-MAS base", "avg@4", "higher", ("level",)),
    Claim("coverage", "the gain extends to coverage", OPD, "H-MAS base", "pass@4", "higher", ("level",)),
    Claim("consistency", "the gain extends to consistency", OPD, "H-MAS base", "4/4", "higher", ("level",)),
    Claim(
        "vs_outcome_searcher_rl",
        "Table 3: distilling the Searchers beats outcome-based Searcher RL",
        OPD,
        OUTCOME,
        "avg@4",
        "higher",
        ("level", "knowledge"),
    ),
    Claim(
        "search_collapse",
        "Table 8: outcome-based Searcher RL loses search over training while MultiAgent-OPD keeps it"
        " (change in searches per workflow, last minus first window of Stage II, OPD minus outcome RL)",
        OPD,
        OUTCOME,
        "searches_change",
        "higher",
        ("level", "knowledge"),
    ),
    Claim(
        "vs_base_model_teacher",
        "Table 3: the cascade-trained Teacher beats the base model as Teacher",
        OPD,
        "w/ base-model teacher",
        "avg@4",
        "higher",
        ("level",),
    ),
    Claim(
        "vs_no_searcher_supervision",
        "Table 3: direct Searcher supervision helps",
        OPD,
        "w/o direct Searcher supervision",
        "avg@4",
        "higher",
        ("level",),
    ),
    Claim(
        "vs_prompted_critic",
        "Table 1: OPD beats a prompted critic's judge reward",
        OPD,
        "Prompted Critic",
        "avg@4",
        "higher",
        ("level", "judge"),
    ),
    Claim(
        "vs_single_agent",
        "Table 1: the trained hierarchy beats the single agent trained with RL",
        OPD,
        "Search-R1 (single agent + RL)",
        "avg@4",
        "higher",
        ("level",),
    ),
)

STATISTICS = {
    "metrics": "avg@4 (mean exact match of a seed's 4 workflows per question), pass@4 (one of them right) and 4/4"
    " (all of them right), each over one seed's 4 attempts, macro-averaged over the question types (1-hop, 2-hop,"
    " 3-hop, comparison) of the held-out test split; searches per workflow from Stage II's training metrics",
    "question_bootstrap": "paired over questions: each question's figure averaged over the seeds (for avg@4 its mean"
    " score over every attempt of every seed), the macro mean, 95% percentile interval of the resampled questions"
    " (maopd.evaluation.seed_statistics)",
    "seed_interval": "per training seed the macro figure (of a difference: the difference of the two systems'"
    " figures for that seed), Student-t 95% interval over the seeds both systems ran",
    "searches_change": "per seed, the mean searches per workflow over the last window of Stage II steps minus"
    " the first window; the claim compares the two variants' changes with the seed-level interval and the"
    " bootstrap over the window's steps",
}
VERDICT_RULES = {
    "reproduces": "the question bootstrap and the seed-level interval both exclude zero in the paper's direction",
    "contradicts": "both exclude zero in the other direction",
    "inconclusive": "otherwise",
    "not tested": "a gate the claim needs was not met on dev (the claim's precondition failed)",
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def report_configs(plan: Plan = PLAN) -> dict[str, Any]:
    """The resolved pipeline config of each pre-registered part, without its run directory."""
    from maopd.base.config import to_dict
    from maopd.pipeline.config import load_experiment

    configs = {}
    for name, variants in plan.parts:
        # as a run records it: a field added since, at its default, is no change of testbed
        resolved = to_dict(load_experiment("table3", plan.part_overrides(variants)), record=True)
        resolved.pop("run_dir", None)
        configs[name] = resolved
    return configs


def registered_pi0s(plan: Plan = PLAN) -> list[tuple[int, Any]]:
    """(training seed, π_0's ``SFTConfig``) of every pre-registered seed."""
    from maopd.pipeline.config import load_experiment

    config = load_experiment("table3", plan.overrides())
    return [(seed, config.pi0_for_seed(seed)) for seed in plan.seeds]


def testbed_components(plan: Plan = PLAN) -> dict[str, Any]:
    """Everything the report's figures depend on besides the training itself (module docstring)."""
    from maopd.envs import prompts
    from maopd.envs.synthwiki.world import FORMAT_VERSION, TEST_SPLIT_VERSION, load_default_world
    from maopd.envs.workflows import env_module
    from maopd.training.base_model import base_model_dir

    pi0s = registered_pi0s(plan)
    base_model = pi0s[0][1]
    world = load_default_world(base_model.world_seed, base_model.world_size)
    test = "\n".join(json.dumps(q.to_dict(), sort_keys=True) for q in world.splits["test"])
    pi0 = []
    for seed, config in pi0s:
        weights = base_model_dir(config) / "model.safetensors"
        if not weights.is_file():
            raise ConfigError(
                f"π_0 of training seed {seed} is not built ({weights} is missing): build it first "
                f"(maopd sft --config models/base-{config.key()}/sft_config.yaml, or run the seed)"
            )
        pi0.append({"training_seed": seed, "key": config.key(), "weights_sha256": _sha256(weights.read_bytes())})
    return {
        "world": {
            "seed": base_model.world_seed,
            "size": base_model.world_size,
            "format_version": FORMAT_VERSION,
            "test_split_version": TEST_SPLIT_VERSION,
            "test_split_sha256": _sha256(test.encode()),
        },
        # named below the import root, which the registration predates: a move is no change of environment
        "environments": sorted(env_module(workflow).__name__.removeprefix("maopd.") for workflow in REPORT_WORKFLOWS),
        "prompts_sha256": _sha256(
            json.dumps(
                [prompts.ROLE_PROMPTS, prompts.CRITIC_PROMPT, prompts.NO_FACTS, prompts.LAST_TURN_NOTICE],
                sort_keys=True,
            ).encode()
        ),
        "pi0": pi0,
        "configs_sha256": _sha256(json.dumps(report_configs(plan), sort_keys=True).encode()),
    }


def testbed_hash(components: dict[str, Any]) -> str:
    return _sha256(json.dumps(components, sort_keys=True).encode())[:16]


def named_bands(split: str) -> dict[str, tuple[str, str]]:
    """Per question id of ``split``: its type and the popularity band of the entity it names (its
    first). A property of the split, not of any model."""
    from maopd.envs.synthwiki.popularity import band, entity_ranks
    from maopd.envs.synthwiki.questions import question_kind
    from maopd.envs.synthwiki.world import load_default_world, world_graph
    from maopd.pipeline.config import load_preset

    base_model = load_preset("default").base_model
    seed, size = base_model.world_seed, base_model.world_size
    entities = world_graph(seed, size)
    ranks = entity_ranks(seed, entities)
    return {
        question.id: (question_kind(question), band(ranks[question.metadata["entities"][0]], len(entities)))
        for question in load_default_world(seed, size).splits[split]
    }


def band_shares() -> dict[str, dict[str, dict[str, float]]]:
    """Per split (dev, test) and question type: the share of questions whose first entity (the one
    the question names) is in each popularity band."""
    from maopd.envs.synthwiki.popularity import BANDS

    shares: dict[str, dict[str, dict[str, float]]] = {}
    for split in ("dev", "test"):
        by_type: dict[str, Counter] = {}
        for kind, named in named_bands(split).values():
            by_type.setdefault(kind, Counter())[named] += 1
            by_type.setdefault("all", Counter())[named] += 1
        shares[split] = {
            kind: {b: round(counts[b] / sum(counts.values()), 4) for b in BANDS} for kind, counts in by_type.items()
        }
    return shares


def claim_status(claim: Claim, rows: list[dict[str, str]]) -> str:
    """ "open" when every gate the claim needs was met on dev, else "not tested"."""
    failing = {row["gate"] for row in rows if row["verdict"] not in ("met", "description")}
    needed = {gate for group in claim.needs for gate in GATE_GROUPS[group]}
    return "not tested" if failing & needed else "open"


def preregistration(gates: dict[str, Any], commit: str, plan: Plan = PLAN) -> dict[str, Any]:
    """The pre-registration as a JSON-ready dict (module docstring)."""
    components = testbed_components(plan)
    measured = [build.get("config_key") for build in gates.get("builds", [gates])]
    registered = [pi0["key"] for pi0 in components["pi0"]]
    if sorted(map(str, measured)) != sorted(registered):
        raise ConfigError(
            f"the gates were measured on π_0 {', '.join(map(str, measured))}, the registered seeds train from "
            f"{', '.join(registered)}: run maopd tune gates on each of them and maopd tune recipe-gates over them"
        )
    return {
        "testbed_hash": testbed_hash(components),
        "testbed": components,
        "applies_to_commit": commit,
        "gates": {key: gates[key] for key in ("verdict", "rows", "builds", "command", "commit") if key in gates},
        "band_shares": band_shares(),
        "plan": {
            **asdict(plan),
            "overrides": plan.overrides(),
            "commands": plan.commands(),
            "save_command": plan.save_command(),
            "build_command": plan.build_command(),
        },
        "statistics": STATISTICS,
        "verdict_rules": VERDICT_RULES,
        "claims": [{**asdict(claim), "status": claim_status(claim, gates["rows"])} for claim in CLAIMS],
    }


def markdown(record: dict[str, Any]) -> str:
    """The pre-registration for a reader: the same record as ``preregistration.json``."""
    from maopd.study.gates import markdown_table, recipe_table

    plan, testbed = record["plan"], record["testbed"]
    lines = [
        "# Pre-registration of the report on the popularity testbed",
        "",
        f"Written by `maopd preregister` at commit {record['applies_to_commit']}, before any RL run on this"
        " testbed (dev included). `preregistration.json` holds the same record;"
        " `tests/repo/test_preregistration.py` recomputes the testbed from the code and fails if it changed.",
        "",
        f"## The testbed: hash `{record['testbed_hash']}`",
        "",
        f"- world: seed {testbed['world']['seed']}, size {testbed['world']['size']}, format version"
        f" {testbed['world']['format_version']}, test split version {testbed['world']['test_split_version']}"
        f" (sha256 of its questions `{testbed['world']['test_split_sha256'][:16]}…`, sealed: no figure computed"
        " on it before the report)",
        f"- environments: {', '.join(f'`{name}`' for name in testbed['environments'])}; prompts sha256"
        f" `{testbed['prompts_sha256'][:16]}…`",
        "- π_0 of each training seed (the recipe over fine-tuning seeds: training seed s trains from the π_0 of"
        " fine-tuning seed s):",
        *(
            f"  - seed {pi0['training_seed']}: `models/base-{pi0['key']}/` (weights sha256"
            f" `{pi0['weights_sha256'][:16]}…`)"
            for pi0 in testbed["pi0"]
        ),
        f"- the registered runs' resolved configs: sha256 `{testbed['configs_sha256'][:16]}…`",
        "",
        f"## Gates on dev, before any RL: {record['gates']['verdict']}",
        "",
        f"`{record['gates']['command']}` (commit {record['gates']['commit']}); every check applies to the mean"
        " over the builds, each build's value beside it (✗: not met by that build alone); figures:"
        " [`testbed_recipe_gates/`](../testbed_recipe_gates/README.md).",
        "",
        recipe_table(record["gates"]) if "builds" in record["gates"] else markdown_table(record["gates"]["rows"]),
        "",
        "## Questions per popularity band of the entity they name",
        "",
        "| split | type | popular | middle | long tail |",
        "|---|---|---|---|---|",
    ]
    for split, by_type in record["band_shares"].items():
        for kind, shares in sorted(by_type.items()):
            lines.append(f"| {split} | {kind} | {shares['popular']} | {shares['middle']} | {shares['long_tail']} |")
    lines += ["", "## Runs", ""]
    for stage in ("stage1", "stage2", "single"):
        lines.append(
            f"- {stage}: {plan[stage]['steps']} steps, B = {plan[stage]['batch_size']} questions per step,"
            f" G = {plan[stage]['group_size']} workflows per question"
        )
    lines += [
        f"- seeds: {', '.join(map(str, plan['seeds']))} for every system; a seed reseeds Stage I, Stage II and the"
        " single agent, and picks its π_0",
        f"- evaluation: every test question, {plan['attempts']} workflows each",
        "",
        "The table runs in parts, in this order, each a resumable command (a part cut short resumes from its last"
        " checkpoint when run again); each adds Stage II variants to the same run directory. After each part,"
        f" `{plan['save_command']}` saves its seeds' configs, training metrics and evaluation records, which are"
        " committed; the report and the claims' verdicts are built from them alone:",
        "",
        "```bash",
        *plan["commands"],
        plan["build_command"],
        "```",
        "",
        "## Statistics",
        "",
        *(f"- **{name}**: {text}" for name, text in record["statistics"].items()),
        "",
        "## Verdict rules",
        "",
        *(f"- **{name}**: {text}" for name, text in record["verdict_rules"].items()),
        "",
        "## Claims",
        "",
        "| claim | what the paper reports | A − B | metric | expected | needs gates | status |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {c['name']} | {c['paper']} | {c['a']} − {c['b']} | {c['metric']} | {c['direction']} |"
            f" {', '.join(c['needs'])} | {c['status']} |"
            for c in record["claims"]
        ),
        "",
    ]
    return "\n".join(lines)


def write_preregistration(gates_path: Path, out: Path, commit: str) -> Path:
    gates = json.loads(gates_path.read_text(encoding="utf-8"))
    record = preregistration(gates, commit)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "preregistration.json"
    write_json(path, record, indent=1, ensure_ascii=False)
    write_text_atomically(out / "README.md", markdown(record))
    return path
