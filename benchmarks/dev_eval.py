"""Systems on the dev split: the main job's evaluation protocol, for choosing settings (never test).

Each ``--system NAME=WORKFLOW:MODEL`` is played ``--attempts`` times per dev question (one answer
candidate, temperature 0.6, top-p 0.95, as ``maopd train`` evaluates), then scored like the main
job (macro avg@k over question types with question-bootstrap CIs; ``--compare A,B`` adds the
paired difference A − B). Besides accuracy it reports what the testbed's design needs to see: the
share of workflows that search at least once, searches per workflow, and the share that end
without an answer (budget exhausted, the paper's failure).

    python benchmarks/dev_eval.py --out runs/dev/pi0 \\
        --system "C-MAS base=cascade:models/base-<key>" --system "H-MAS base=hierarchical:models/base-<key>"
    python benchmarks/dev_eval.py --out runs/dev/stage1 --system "C-MAS base=cascade:models/base-<key>" \\
        --system "C-MAS + RL=cascade:runs/main/stage1" --compare "C-MAS + RL,C-MAS base"

Writes ``OUT/records.jsonl`` (resumable: finished attempts are skipped), ``OUT/summary.json`` and
the tables of ``maopd eval score``, and ``OUT/dev_eval.json`` (the command, the settings and the
per-system figures above).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.provenance import git_commit
from maopd.config import ConfigError
from maopd.pipeline import evaluate, held_out_manifest, load_preset

WORKFLOWS = ("cascade", "hierarchical")


def parse_system(text: str) -> tuple[str, str, Path]:
    name, sep, rest = text.partition("=")
    workflow, sep2, model = rest.partition(":")
    if not (sep and sep2 and name and model) or workflow not in WORKFLOWS:
        raise ConfigError(f"--system {text!r}: expected NAME=WORKFLOW:MODEL with WORKFLOW one of {WORKFLOWS}")
    return name, workflow, Path(model)


def search_figures(records) -> dict[str, float]:
    """Share of workflows with at least one search, searches per workflow, share without an answer."""
    count = max(len(records), 1)
    searches = [r.counters.get("search_actions", 0) for r in records]
    return {
        "workflows": len(records),
        "searching_share": sum(s > 0 for s in searches) / count,
        "searches_per_workflow": sum(searches) / count,
        "no_answer_share": sum(r.counters.get("no_answer", 0) > 0 for r in records) / count,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system", action="append", required=True, metavar="NAME=WORKFLOW:MODEL",
                        help="a model directory, run directory or checkpoint, played in WORKFLOW (repeatable)")
    parser.add_argument("--compare", action="append", default=[], metavar="A,B", help="paired difference A - B")
    parser.add_argument("--questions-per-type", type=int, help="dev questions of each type (default: all 300)")
    parser.add_argument("--attempts", type=int, default=4)
    parser.add_argument("--preset", default="default", help="the pipeline preset whose eval settings apply")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        systems = [parse_system(s) for s in args.system]
        comparisons = [tuple(c.split(",", 1)) for c in args.compare]
        names = {name for name, _, _ in systems}
        for pair in comparisons:
            if len(pair) != 2 or not set(pair) <= names:
                raise ConfigError(f"--compare {','.join(pair)!r}: expected A,B with A and B among the --system names")
        overrides = ["eval.split=dev", f"eval.attempts={args.attempts}"]
        if args.questions_per_type:
            overrides.append(f"eval.questions_per_type={args.questions_per_type}")
        config = load_preset(args.preset, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from benchmarks.eval.records import load_records
    from benchmarks.eval.scoring import score_records
    from training.checkpoint import resolve_model_dir

    out = Path(args.out)
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
    avg = f"avg@{args.attempts}"
    result = {
        "command": " ".join(["python benchmarks/dev_eval.py", *(argv if argv is not None else sys.argv[1:])]),
        "commit": git_commit(short=True),
        "split": "dev", "attempts": args.attempts, "questions": len(manifest),
        "systems": {name: {"workflow": workflow, "model": str(model), "seconds": seconds[name],
                           avg: summary["methods"][name]["accuracy"][avg],
                           **search_figures([r for r in records if r.method == name])}
                    for name, workflow, model in systems},
        "differences": [{"a": c["a"], "b": c["b"], avg: c["differences"][avg]} for c in summary["comparisons"]],
        "summary": "summary.json",
    }
    (out / "dev_eval.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result["systems"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
