"""π_0 figures: how long the base model takes to build, and how well it plays each workflow.

Builds π_0 from an ``SFTConfig`` (``maopd.training.base_model``; fresh, not from the cache, so the
build is timed) and plays the SynthWiki dev split with it in both workflows, every role played by
π_0 through ``HFPolicy`` at the paper's evaluation sampling (temperature 0.6, top-p 0.95),
batched across questions by the rollout collector (``maopd.training.rollout``). Reports exact match,
the format-failure rate (format failures per model output) and per-role output counts, next to
the expert scripted team on the same questions. Writes
``benchmarks/results/base_model/figures.{json,md}`` with the command that produced them.

    python benchmarks/base_model_figures.py [--config FILE] [key=value ...] [--questions N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from maopd.base.arguments import positive_int, seed_int
from maopd.base.atomic import write_text_atomically
from maopd.envs.records import WorkflowRecord

RESULTS = Path(__file__).parent / "results"


def team_figures(records: list[WorkflowRecord]) -> dict:
    outputs = sum(len(call.outputs) for record in records for call in record.calls)
    failures = sum(record.counters.format_failures for record in records)
    return {
        "questions": len(records),
        "em": round(sum(max(r.candidate_scores, default=0.0) for r in records) / len(records), 4),
        "model_outputs": outputs,
        "format_failures": failures,
        "format_failure_rate": round(failures / max(outputs, 1), 4),
        "searches_per_question": round(sum(r.counters.search_actions for r in records) / len(records), 2),
    }


def samples(records: list[WorkflowRecord], count: int = 3) -> list[dict]:
    """What the team wrote on the first questions: to see how it fails, not just that it does."""
    return [
        {
            "question": record.question,
            "golden_answers": record.golden_answers,
            "outputs": [{"role": call.role, "outputs": call.outputs} for call in record.calls],
            "extracted_answers": record.extracted_answers,
        }
        for record in records[:count]
    ]


def play_expert(workflow: str, retriever, questions) -> list[WorkflowRecord]:
    from maopd.agents.expert_team import expert_team
    from maopd.envs.episode import run_episode
    from maopd.envs.synthwiki.demos import make_env

    env = make_env(workflow, retriever, questions)
    return [run_episode(env, expert_team(), seed=i, options={"question_index": i}) for i in range(len(questions))]


def play_model(workflow: str, retriever, questions, model_dir: Path, seed: int) -> list[WorkflowRecord]:
    from maopd.agents.hf_policy import HFPolicy
    from maopd.agents.sampling import SamplingConfig
    from maopd.agents.tiny_model import load_model
    from maopd.envs.synthwiki.demos import make_env
    from maopd.training.rollout import TeamRolloutCollector

    model, tokenizer = load_model(model_dir)
    policy = HFPolicy(model, tokenizer, SamplingConfig(max_new_tokens=128), seed=seed)
    collector = TeamRolloutCollector(lambda: make_env(workflow, retriever, questions), policy)
    batch = collector.collect(questions, group_size=1, seed=seed)
    return [row[0] for row in batch.records]


def markdown(result: dict) -> str:
    build = result["build"]
    lines = [
        (
            f"π_0 (base model) figures: SynthWiki seed {result['config']['world_seed']}, size "
            f"`{result['config']['world_size']}`, split `{result['split']}` ({result['questions']} questions), "
            "BM25 top-3, sampling temperature 0.6 / top-p 0.95."
        ),
        "",
        f"Command: `{result['command']}`",
        "",
        "| team | workflow | EM | format failures / outputs | searches / question |",
        "|---|---|---|---|---|",
    ]
    for team in ("expert", "pi0"):
        for workflow, figures in result[team].items():
            lines.append(
                f"| {team} | {workflow} | {figures['em']:.3f} | {figures['format_failures']} / "
                f"{figures['model_outputs']} ({figures['format_failure_rate']:.3f}) | "
                f"{figures['searches_per_question']} |"
            )
    lines += [
        "",
        (
            f"Build: {build['wall_seconds']} s wall, {build['cpu_seconds']} s CPU (process), "
            f"{build['metrics']['parameters']:,} parameters, vocabulary {build['metrics']['vocab_size']}, "
            f"{build['metrics']['demonstrations']} demonstration calls "
            f"({build['metrics']['training_tokens']:,} tokens, {build['metrics']['assistant_tokens']:,} trained), "
            f"{build['metrics']['steps']} steps, loss {build['metrics']['first_loss']:.3f} → "
            f"{build['metrics']['final_loss']:.3f}."
        ),
        f"Machine: {result['machine']}; load average before the build: {build['load_average']}.",
        f"Evaluation wall time: {result['eval_seconds']} s.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="SFTConfig YAML file (default: the built-in defaults)")
    parser.add_argument("overrides", nargs="*", help="SFTConfig overrides, key=value")
    parser.add_argument("--split", default="dev", choices=["dev", "test"])
    parser.add_argument("--questions", type=positive_int, default=None, help="first N questions of the split")
    parser.add_argument("--seed", type=seed_int, default=0, help="sampling seed of the evaluation")
    parser.add_argument("--out", default=str(RESULTS / "base_model" / "figures"), help="output path without extension")
    parser.add_argument("--keep-model", help="build π_0 into this directory and keep it (default: a temporary one)")
    args = parser.parse_args(argv)

    from maopd.base.config import load_yaml, to_dict
    from maopd.base.json_files import write_json
    from maopd.envs.retrieval.bm25 import BM25Retriever
    from maopd.envs.synthwiki.world import load_default_world
    from maopd.training.base_model import METRICS_FILE, SFTConfig, build_base_model

    config = load_yaml(SFTConfig, args.config, args.overrides)
    load_average = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="pi0-") as tmp:
        wall, cpu = time.perf_counter(), time.process_time()
        model_dir = build_base_model(config, Path(args.keep_model or Path(tmp) / "model"))
        build = {
            "wall_seconds": round(time.perf_counter() - wall, 1),
            "cpu_seconds": round(time.process_time() - cpu, 1),
            "load_average": load_average,
            "metrics": {k: v for k, v in json.loads((model_dir / METRICS_FILE).read_text()).items() if k != "losses"},
        }
        world = load_default_world(config.world_seed, config.world_size)
        questions = world.splits[args.split][: args.questions]
        retriever = BM25Retriever(world.corpus)
        started = time.perf_counter()
        # the workflows π_0 was shown (SFTConfig.workflows)
        expert = {w: team_figures(play_expert(w, retriever, questions)) for w in config.workflows}
        pi0_records = {w: play_model(w, retriever, questions, model_dir, args.seed) for w in config.workflows}
        pi0 = {w: team_figures(records) for w, records in pi0_records.items()}
        eval_seconds = round(time.perf_counter() - started, 1)

    result = {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "config": to_dict(config),
        "split": args.split,
        "questions": len(questions),
        "expert": expert,
        "pi0": pi0,
        "build": build,
        "eval_seconds": eval_seconds,
        "pi0_samples": {w: samples(records) for w, records in pi0_records.items()},
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out.with_suffix(".json"), result, indent=1)
    write_text_atomically(out.with_suffix(".md"), markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
