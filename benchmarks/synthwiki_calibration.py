"""SynthWiki calibration: how much retrieval needs decomposition, and how well scripted teams do.

Measured on one world (default: seed 0, size ``small``, the dev split; the test split stays sealed
for the reported figures) with the in-process BM25 retriever, top-3 passages:

* recall of each supporting passage in the top 3 when the query is its gold sub-question;
* the same when the query is the full question (one search for all supporting passages);
* exact match of the expert team on the hierarchical and the cascade workflow;
* exact match of the noisy team (every knob at the same rate) on both workflows;

all per question kind (1-hop, 2-hop, 3-hop, comparison). Writes
``benchmarks/results/synthwiki_calibration/synthwiki_calibration.{json,md}`` with the command that produced them.

    python benchmarks/synthwiki_calibration.py [--seed 0] [--size small] [--split dev]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

from tqdm import tqdm

from maopd.agents.expert_team import expert_team
from maopd.agents.noisy_team import NoiseConfig, NoisyTeam
from maopd.base.arguments import seed_int
from maopd.base.atomic import write_text_atomically
from maopd.base.json_files import write_json
from maopd.envs.datasets import Question
from maopd.envs.episode import run_episode
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.synthwiki.demos import make_env
from maopd.envs.synthwiki.questions import KINDS, question_kind
from maopd.envs.synthwiki.world import build_world
from maopd.envs.workflows import workflow_names

TOPK = 3
NOISE_RATES = (0.02, 0.05, 0.1, 0.2, 0.3)
RESULTS = Path(__file__).parent / "results"


def mean_by_kind(pairs: list[tuple[str, float]]) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for kind, value in pairs:
        groups[kind].append(value)
        groups["all"].append(value)
    return {kind: round(sum(v) / len(v), 4) for kind, v in groups.items()}


def retrieval_recall(retriever: BM25Retriever, questions: list[Question]) -> dict[str, dict[str, float]]:
    gold, full = [], []
    for question in tqdm(questions, desc="recall", unit="q"):
        steps = [step for wave in question.metadata["decomposition"] for step in wave]
        results = retriever.search([step["subquestion"] for step in steps] + [question.question], TOPK)
        full_ids = {p.id for p in results[-1]}
        for step, passages in zip(steps, results):
            gold.append((question_kind(question), float(step["passage"] in {p.id for p in passages})))
            full.append((question_kind(question), float(step["passage"] in full_ids)))
    return {"gold_subquestion": mean_by_kind(gold), "full_question": mean_by_kind(full)}


def team_accuracy(
    workflow: str, team, retriever: BM25Retriever, questions: list[Question], label: str
) -> dict[str, float]:
    env = make_env(workflow, retriever, questions)
    pairs = []
    for index, question in enumerate(tqdm(questions, desc=label, unit="q")):
        record = run_episode(env, team, seed=index, options={"question_index": index})
        pairs.append((question_kind(question), max(record.candidate_scores, default=0.0)))
    return mean_by_kind(pairs)


def markdown(report: dict) -> str:
    columns = [*KINDS, "all"]
    lines = [
        (
            f"SynthWiki calibration: seed {report['seed']}, size `{report['size']}`, split `{report['split']}` "
            f"({report['questions']} questions, {report['passages']} passages), BM25 top-{TOPK}."
        ),
        "",
        f"Command: `{report['command']}`",
        "",
        "| measure | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    rows = [
        ("BM25 recall@3, gold sub-question", report["recall"]["gold_subquestion"]),
        ("BM25 recall@3, full question", report["recall"]["full_question"]),
    ]
    for workflow in workflow_names():
        rows.append((f"expert team EM, {workflow}", report["expert"][workflow]))
        for rate, figures in report["noisy"][workflow].items():
            rows.append((f"noisy team EM (noise {rate}), {workflow}", figures))
    for name, figures in rows:
        lines.append(f"| {name} | " + " | ".join(f"{figures.get(c, float('nan')):.3f}" for c in columns) + " |")
    lines += ["", f"World build time: {report['build_seconds']:.2f} s; total run time: {report['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--size", default="small")
    parser.add_argument("--split", default="dev", choices=["train", "dev", "test"])
    parser.add_argument(
        "--out",
        default=str(RESULTS / "synthwiki_calibration" / "synthwiki_calibration"),
        help="output path without suffix",
    )
    args = parser.parse_args(argv)

    started = time.perf_counter()
    world = build_world(args.seed, args.size)
    build_seconds = time.perf_counter() - started
    questions = world.splits[args.split]
    retriever = BM25Retriever(world.corpus)
    report = {
        "command": " ".join(
            ["python benchmarks/synthwiki_calibration.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "seed": args.seed,
        "size": args.size,
        "split": args.split,
        "questions": len(questions),
        "passages": len(world.corpus),
        "build_seconds": round(build_seconds, 3),
        "recall": retrieval_recall(retriever, questions),
        "expert": {w: team_accuracy(w, expert_team(), retriever, questions, f"expert {w}") for w in workflow_names()},
        "noisy": {
            w: {
                str(rate): team_accuracy(
                    w, NoisyTeam(NoiseConfig.uniform(rate), args.seed), retriever, questions, f"noisy {rate} {w}"
                )
                for rate in NOISE_RATES
            }
            for w in workflow_names()
        },
    }
    report["seconds"] = round(time.perf_counter() - started, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out.with_suffix(".json"), report, indent=1, sort_keys=True)
    write_text_atomically(out.with_suffix(".md"), markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
