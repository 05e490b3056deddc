"""``maopd tune eval``, ``maopd tune beta``, ``maopd tune judge`` and ``maopd tune gates``: the main
job's settings chosen on dev, and the testbed's gates measured there.

The logic is in maopd/study/tuning.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

from maopd.base.arguments import bounded_int, seed_int
from maopd.base.atomic import write_text_atomically
from maopd.base.json_files import write_json
from maopd.base.machine import simd_extensions


def register(subparsers) -> None:
    tune = subparsers.add_parser("tune", help="choose settings on the dev split (never on test)")
    commands = tune.add_subparsers(dest="tune_command", required=True, metavar="SUBCOMMAND")

    dev = commands.add_parser(
        "eval",
        help="systems on dev with the main job's protocol, plus search figures",
        description="Each --system NAME=WORKFLOW:MODEL (a model directory, run directory "
        "or checkpoint) is played eval.attempts times per dev question and scored like "
        "the main job; also reports the share of workflows that search, searches per "
        "workflow and the share without an answer. Resumes from OUT/records.jsonl.",
    )
    dev.add_argument("--system", action="append", required=True, metavar="NAME=WORKFLOW:MODEL")
    dev.add_argument("--compare", action="append", default=[], metavar="A,B", help="paired difference A - B")
    dev.add_argument("--questions-per-type", type=bounded_int(1), help="dev questions of each type (default: all)")
    dev.add_argument("--attempts", type=bounded_int(1), default=4)
    dev.add_argument("--preset", default="default", help="the pipeline preset whose eval settings apply")
    dev.add_argument("--out", required=True, help="output directory")
    dev.set_defaults(func=_eval)

    beta = commands.add_parser(
        "beta",
        help="the OPD coefficient beta from Searcher vs Leader/Answerer gradient norms",
        description="Needs a run directory whose Stage I is done (its Teacher). Plays "
        "Stage II batches of dev questions and prints beta* (equal gradient norms) and "
        "the range within 0.3-3x.",
    )
    beta.add_argument("--run-dir", required=True, help="a main-job run directory whose Stage I is done")
    beta.add_argument("--preset", default="default")
    beta.add_argument("--batches", type=bounded_int(1), default=6)
    beta.add_argument("--seed", type=seed_int, default=0)
    beta.add_argument("--out", help="also write the figures here (JSON)")
    beta.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="pipeline overrides, e.g. stage2.rollout.batch_size=8"
    )
    beta.set_defaults(func=_beta)

    judge = commands.add_parser(
        "judge",
        help="a model as the Prompted Critic's judge on recorded workflows' reports",
        description="Prompts MODEL with the critic prompt on every report of the workflows "
        "in RECORDS (from `maopd tune eval`) and prints the judge's figures as training logs "
        "them: the share of parseable verdicts, of gold-correct reports, of verdicts that "
        "agree with gold correctness, and of reports judged useful; the ROC AUC of its P(yes) "
        "against gold correctness; its balanced accuracy on a held-out balanced set of "
        "decidable labels (the world's dev split); and the judge gate on them (judge rate on "
        "MODEL's own reports when RECORDS are MODEL's).",
    )
    judge.add_argument("--model", required=True, help="a model directory, run directory or checkpoint")
    judge.add_argument("--records", required=True, help="records.jsonl of `maopd tune eval`")
    judge.add_argument(
        "--workflows", type=bounded_int(1), help="judge the reports of the first N workflows (default: all)"
    )
    judge.add_argument(
        "--balanced",
        type=bounded_int(2),
        help="examples in the held-out balanced set, half of them negatives (default: all of dev)",
    )
    judge.add_argument("--out", help="also write the figures here (JSON)")
    judge.set_defaults(func=_judge)

    gates = commands.add_parser(
        "gates",
        help="every testbed gate of a base model on dev, before any RL",
        description="Measures on the dev split, for the base model directory MODEL: closed-book "
        "recall by popularity band after pretraining (MODEL/pretrained/) and as the Searcher "
        "reporting without a search; the cascade's exact match with the Searcher forced not to "
        "search and forced to search, on popular-band 1-hop questions; the judge gate; and the "
        "level and search share of every workflow (`maopd tune eval`, eval.attempts runs per "
        "question). Prints the table of checks and writes OUT/gates.json and OUT/gates.md; the "
        "workflows' records go to OUT/eval/ (resumable).",
    )
    gates.add_argument("--model", required=True, help="a base model directory (with sft_config.yaml)")
    gates.add_argument(
        "--questions-per-type", type=bounded_int(1), help="dev questions of each type in the level part (default: all)"
    )
    gates.add_argument("--attempts", type=bounded_int(1), default=4)
    gates.add_argument("--out", help="output directory (default: runs/gates/<model directory name>)")
    gates.add_argument("--threads", type=bounded_int(1), default=1, help="torch threads (1: the machine is shared)")
    gates.add_argument("--quick", action="store_true", help="a few facts and questions per part (a smoke run)")
    gates.set_defaults(func=_gates)

    collapse = commands.add_parser(
        "collapse",
        help="the preconditions of search collapse of a base model, in the hierarchy on dev",
        description="Plays the hierarchy with MODEL on the world's dev questions of every type, "
        "--attempts workflows each, in three arms: unforced, every Searcher call forced to report "
        "without a search, and forced to search; prints the collapse gates (EM ratio, mean paired "
        "difference, forced-search EM; maopd/study/gates.py COLLAPSE) and writes OUT/collapse.json "
        "(per-question EMs included) and OUT/collapse.md. --env KEY=VALUE sets an environment "
        "option (budgets, topk, passage length): a lever of the testbed's design.",
    )
    collapse.add_argument("--model", required=True, help="a base model directory (with sft_config.yaml)")
    collapse.add_argument("--questions", type=bounded_int(1), help="the first N dev questions (default: all)")
    collapse.add_argument(
        "--band",
        choices=("popular", "middle", "long_tail"),
        help="instead of the dev split, --questions new questions of the dev sub-graph whose least popular "
        "entity is in this popularity band (a question mix's lever; default 300)",
    )
    collapse.add_argument(
        "--hop-mix",
        type=hop_mix,
        metavar="KIND=W,...",
        help="with --band: the kinds' weights, e.g. 1-hop=100,2-hop=40,comparison=60 (default: the world's mix)",
    )
    collapse.add_argument("--attempts", type=bounded_int(1), default=4)
    collapse.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="an environment option")
    collapse.add_argument("--out", required=True, help="output directory")
    collapse.add_argument("--threads", type=bounded_int(1), default=1, help="torch threads (1: the machine is shared)")
    collapse.set_defaults(func=_collapse)

    levers = commands.add_parser(
        "collapse-levers",
        help="a table of testbed-design levers from several `maopd tune collapse` runs",
        description="Reads each NAME=DIR's collapse.json (one lever setting each: a question band, an "
        "environment option) and writes OUT/levers.md and OUT/levers.json: every lever's effect on the EMs "
        "of the three arms, the ratio, the paired difference and the unforced no-search share.",
    )
    levers.add_argument("runs", nargs="+", metavar="NAME=DIR", help="a lever's name and its collapse output")
    levers.add_argument("--out", required=True, help="output directory")
    levers.set_defaults(func=_collapse_levers)

    recipe = commands.add_parser(
        "recipe-gates",
        help="the gates of one π_0 recipe over its builds (fine-tuning seeds)",
        description="Reads the gates.json `maopd tune gates` wrote for each build of one SFTConfig "
        "(built with several finetune_seed values, measured with the same options) and applies "
        "every check to the figures averaged over the builds, each build's values beside "
        "(maopd/study/gates.py). Prints the table and writes OUT/recipe_gates.json and OUT/recipe_gates.md.",
    )
    recipe.add_argument("gates_files", nargs="+", metavar="GATES_JSON", help="a build's gates.json, two or more")
    recipe.add_argument("--out", required=True, help="output directory")
    recipe.set_defaults(func=_recipe_gates)


def _recipe_gates(args) -> int:
    from maopd.base.config import ConfigError
    from maopd.evaluation.provenance import git_commit
    from maopd.study.gates import recipe_gates, recipe_table

    builds = []
    for path in args.gates_files:
        try:
            builds.append(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable gates.json ({exc}); pass the files maopd tune gates wrote")
        if not isinstance(builds[-1], dict) or "figures" not in builds[-1]:
            raise ConfigError(f"{path}: has no gate figures; pass the gates.json maopd tune gates wrote")
    try:
        result = recipe_gates(builds)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    result = {"command": " ".join(args.command_line), "commit": git_commit(short=True), **result}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = recipe_table(result)
    listing = "\n".join(
        f"{i + 1}. `{b['model']}` (config key {b['config_key']}): {b['verdict']}" for i, b in enumerate(builds)
    )
    head = (
        f"# Gates of one recipe over {len(builds)} builds, on dev\n\n- **Command**: `{result['command']}`\n"
        f"- **Commit**: {result['commit']}\n- **Verdict on the means**: {result['verdict']}\n\n"
        f"Builds (each build's own verdict):\n\n{listing}\n\n"
    )
    return _write_gates(out, "recipe_gates", result, head, table)


def hop_mix(text: str) -> dict[str, float]:
    """``KIND=WEIGHT,...`` (kinds of ``maopd.envs.synthwiki.questions.KINDS``) as an argparse type."""
    import argparse

    from maopd.envs.synthwiki.questions import validate_hop_mix

    try:
        pairs = [item.split("=", 1) for item in text.split(",")]
        return validate_hop_mix({kind.strip(): float(weight) for kind, weight in pairs})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}; expected e.g. 1-hop=100,2-hop=40") from None


def _collapse(args) -> int:

    import torch

    from maopd.base.config import ConfigError, apply_overrides, check_partial
    from maopd.envs.search_env import SearchEnvConfig
    from maopd.evaluation.provenance import git_commit
    from maopd.pipeline.config import DEFAULT_PRESET, load_preset
    from maopd.study.gates import collapse_rows, markdown_table, overall
    from maopd.study.tuning import band_questions, base_model_world, class_figures, collapse_figures

    env_options = check_partial(SearchEnvConfig, apply_overrides({}, args.env), "--env")
    torch.set_num_threads(args.threads)
    model, out = Path(args.model), Path(args.out)
    seed, size, key = base_model_world(model)
    config = load_preset(DEFAULT_PRESET, ["eval.split=dev", f"eval.attempts={args.attempts}"])
    started = time.perf_counter()
    if args.hop_mix and not args.band:
        raise ConfigError("--hop-mix: weighs the kinds of --band questions; give --band too")
    questions = band_questions(seed, size, args.questions or 300, args.band, args.hop_mix) if args.band else None
    figures = collapse_figures(model, seed, size, config, args.questions, questions, env_options)
    figures["band"] = args.band
    rows = collapse_rows(figures)
    result = {
        "command": " ".join(args.command_line),
        "commit": git_commit(short=True),
        "machine": measuring_machine(),
        "model": str(model),
        "config_key": key,
        "world": {"seed": seed, "size": size},
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
        "verdict": overall(rows),
        "figures": figures,
    }
    arms = "\n".join(
        f"- **{arm}**: EM {figures[arm]['em']:.3f}, no-search share {_share(figures[arm]['no_search_share'])}, "
        f"searches/workflow {figures[arm]['searches_per_workflow']:.2f}, format failures "
        f"{figures[arm]['format_failure_share']:.3f}, ended without answer {figures[arm]['no_answer_share']:.3f}"
        for arm in ("unforced", "no_search", "search")
    )
    head = (
        f"# Collapse preconditions of `{result['model']}` (config key {key}) on dev\n\n"
        f"- **Command**: `{result['command']}`\n- **Commit**: {result['commit']}\n"
        f"- **Machine**: {result['machine']}\n- **Seconds**: {result['seconds']}\n"
        f"- **Environment options**: {env_options or 'the defaults'}\n"
        f"- **Verdict**: {result['verdict']}\n\n{arms}\n\n"
    )
    classes = class_figures(figures["per_question"])
    result["classes"] = classes
    head += (
        "By question kind and popularity band of the least popular entity:\n\n"
        + class_table(classes)
        + "\n\nThe gates, over every question measured:\n\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    return _write_gates(out, "collapse", result, head, markdown_table(rows))


def _collapse_levers(args) -> int:
    from maopd.base.config import ConfigError
    from maopd.base.json_files import read_json_file

    rows = []
    for item in args.runs:
        name, sep, directory = item.partition("=")
        if not (sep and name and directory):
            raise ConfigError(f"{item!r}: expected NAME=DIR, DIR holding a `maopd tune collapse` collapse.json")
        result = read_json_file(Path(directory) / "collapse.json", ConfigError, "a maopd tune collapse result")
        figures = result["figures"]
        rows.append(
            {
                "lever": name,
                "directory": directory,
                "command": result["command"],
                "questions": figures["questions"],
                "attempts": figures["attempts"],
                "band": figures.get("band"),
                "env_options": figures["env_options"],
                **{f"{arm}_em": figures[arm]["em"] for arm in ("unforced", "no_search", "search")},
                "unforced_no_search_share": figures["unforced"]["no_search_share"],
                "ratio": figures["ratio"],
                "paired_difference_points": figures["paired_difference_points"],
                "verdict": result["verdict"],
            }
        )
    lines = [
        "| lever | questions | EM unforced | EM no search | EM search | ratio | paired difference, points "
        "| unforced no-search share | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['lever']} | {r['questions']} x {r['attempts']} | {_em_cells(r)} "
            f"| {r['unforced_no_search_share']:.3f} | {r['verdict']} |"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "levers.json", {"command": " ".join(args.command_line), "levers": rows}, indent=1)
    table = "\n".join(lines)
    write_text_atomically(out / "levers.md", f"`{' '.join(args.command_line)}`\n\n{table}\n")
    print(table)
    return 0


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def class_table(classes: list[dict]) -> str:
    """``class_figures``' groups as markdown."""
    lines = [
        "| kind | band | questions | EM unforced | EM no search | EM search | ratio | paired difference, points |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {c['kind']} | {c['band']} | {c['questions']} | {_em_cells(c)} |" for c in classes]
    return "\n".join(lines)


def _em_cells(figures: dict) -> str:
    """The cells EM unforced | EM no search | EM search | ratio | paired difference of a row."""
    ratio = "—" if figures["ratio"] is None else f"{figures['ratio']:.2f}"
    return (
        f"{figures['unforced_em']:.3f} | {figures['no_search_em']:.3f} | {figures['search_em']:.3f} | {ratio} "
        f"| {figures['paired_difference_points']:.1f}"
    )


def measuring_machine() -> str:
    """The machine a measurement ran on, in one line: CPUs, the torch threads it used, versions, SIMD."""
    import os
    import platform

    import torch

    return (
        f"{platform.machine()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch thread(s), "
        f"Python {platform.python_version()}, torch {torch.__version__}, SIMD {' '.join(simd_extensions())}"
    )


def _write_gates(out: Path, name: str, result: dict, head: str, table: str) -> int:
    """Save ``result`` as OUT/NAME.json and ``head`` + ``table`` as OUT/NAME.md; print the table."""
    write_json(out / f"{name}.json", result, indent=1)
    write_text_atomically(out / f"{name}.md", head + table + "\n")
    print(table)
    print(f"verdict: {result['verdict']}; written to {out / name}.json and .md")
    return 0


def _judge(args) -> int:
    from maopd.evaluation.provenance import git_commit
    from maopd.study.tuning import judge_figures

    result = judge_figures(Path(args.model), Path(args.records), args.workflows, args.balanced)
    result = {"command": " ".join(args.command_line), "commit": git_commit(short=True), **result}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out, result, indent=1)
    return 0


def _eval(args) -> int:
    from maopd.evaluation.provenance import git_commit
    from maopd.pipeline.config import load_preset
    from maopd.study.tuning import dev_eval, parse_system

    # a ConfigError is bad input: maopd.cli prints it as one line
    overrides = ["eval.split=dev", f"eval.attempts={args.attempts}"]
    if args.questions_per_type:
        overrides.append(f"eval.questions_per_type={args.questions_per_type}")
    systems = [parse_system(s) for s in args.system]
    comparisons = [tuple(c.split(",", 1)) for c in args.compare]
    result = dev_eval(load_preset(args.preset, overrides), systems, comparisons, Path(args.out))

    result = {"command": " ".join(args.command_line), "commit": git_commit(short=True), **result}
    write_json(Path(args.out) / "dev_eval.json", result, indent=1)
    print(json.dumps(result["systems"], indent=1))
    return 0


def _beta(args) -> int:
    from maopd.evaluation.provenance import git_commit
    from maopd.pipeline.config import load_preset
    from maopd.study.tuning import calibrate_beta

    started = time.perf_counter()
    pipeline = load_preset(args.preset, [f"run_dir={args.run_dir}", *args.overrides])
    result = calibrate_beta(pipeline, args.batches, args.seed, progress=lambda row: print(json.dumps(row), flush=True))
    result = {
        "command": " ".join(args.command_line),
        "commit": git_commit(short=True),
        **result,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "batches"}, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out, result, indent=1)
    return 0


def _gates(args) -> int:

    import torch

    from maopd.evaluation.provenance import git_commit
    from maopd.study.gates import markdown_table
    from maopd.study.tuning import gate_figures

    torch.set_num_threads(args.threads)
    model = Path(args.model)
    out = Path(args.out) if args.out else Path("runs/gates") / model.resolve().name
    out.mkdir(parents=True, exist_ok=True)
    result = gate_figures(model, args.questions_per_type, args.attempts, out, args.quick)
    result = {
        "command": " ".join(args.command_line),
        "commit": git_commit(short=True),
        "machine": measuring_machine(),
        **result,
    }
    table = markdown_table(result["rows"])
    head = (
        f"# Gates of `{result['model']}` (config key {result['config_key']}) on dev\n\n"
        f"- **Command**: `{result['command']}`\n- **Commit**: {result['commit']}\n"
        f"- **Machine**: {result['machine']}\n- **Seconds per part**: {result['seconds']}\n"
        f"- **Verdict**: {result['verdict']}\n\n"
    )
    return _write_gates(out, "gates", result, head, table)
