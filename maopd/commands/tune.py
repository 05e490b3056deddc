"""``maopd tune eval``, ``maopd tune beta`` and ``maopd tune judge``: the main job's settings chosen on dev.

The logic is in maopd/tuning.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

from maopd.cli import bounded_int


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
    beta.add_argument("--seed", type=int, default=0)
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


def _judge(args) -> int:
    from benchmarks.provenance import git_commit
    from maopd.tuning import judge_figures

    result = judge_figures(Path(args.model), Path(args.records), args.workflows, args.balanced)
    result = {"command": " ".join(args.command_line), "commit": git_commit(short=True), **result}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


def _eval(args) -> int:
    from benchmarks.provenance import git_commit
    from maopd.pipeline.config import load_preset
    from maopd.tuning import dev_eval, parse_system

    # a ConfigError is bad input: maopd.cli prints it as one line
    overrides = ["eval.split=dev", f"eval.attempts={args.attempts}"]
    if args.questions_per_type:
        overrides.append(f"eval.questions_per_type={args.questions_per_type}")
    systems = [parse_system(s) for s in args.system]
    comparisons = [tuple(c.split(",", 1)) for c in args.compare]
    result = dev_eval(load_preset(args.preset, overrides), systems, comparisons, Path(args.out))

    result = {"command": " ".join(args.command_line), "commit": git_commit(short=True), **result}
    (Path(args.out) / "dev_eval.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result["systems"], indent=1))
    return 0


def _beta(args) -> int:
    from benchmarks.provenance import git_commit
    from maopd.pipeline.config import load_preset
    from maopd.tuning import calibrate_beta

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
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0
