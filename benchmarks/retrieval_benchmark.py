"""Retrieval benchmark on real data: recall@k of supporting paragraphs, and throughput.

Closed corpus: every paragraph of HotpotQA dev300, MuSiQue dev200, 2Wiki dev200 (the 164 rows that
carry context) and PopQA 1000, deduplicated by title + text. Each question is asked against the
whole pool. Recall@k = share of a question's supporting paragraphs in its top k, averaged over
questions; for MuSiQue also per gold sub-question (``#n`` replaced by step n's gold answer).

Throughput: QPS and per-call latency at batch 1, 32 and 256 for each retriever, the HTTP server's
overhead against in-process calls, and bm25s against pyserini's Lucene BM25, all in one run.

    python benchmarks/retrieval_benchmark.py --data ../shared/data/real --out runs/benchmarks/retrieval
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from maopd.base.atomic import write_text_atomically
from maopd.base.json_files import iter_json_lines, write_json
from maopd.envs.retrieval.corpus import Corpus, Document

BATCH_SIZES = (1, 32, 256)


@dataclass
class Probe:
    """A query and the (title, text) paragraphs that support it."""

    dataset: str
    query: str
    gold: list[tuple[str, str]]
    sub_questions: list[tuple[str, tuple[str, str]]] = field(default_factory=list)


def _jsonl(path: Path) -> list[dict]:
    return [row for _, row in iter_json_lines(path, ValueError, "data file")]


def load_probes(data: Path) -> tuple[list[Probe], list[tuple[str, str]]]:
    """Questions with their gold paragraphs, and every paragraph the four datasets carry."""
    probes, paragraphs = [], []
    for row in _jsonl(data / "hotpotqa_distractor_dev300.jsonl"):
        pairs = [(t, "".join(s)) for t, s in zip(row["context"]["title"], row["context"]["sentences"])]
        support = set(row["supporting_facts"]["title"])
        paragraphs += pairs
        probes.append(Probe("hotpotqa", row["question"], [p for p in pairs if p[0] in support]))
    for row in _jsonl(data / "2wiki_dev200_context.jsonl"):
        if not row.get("context"):
            continue
        pairs = [(t, " ".join(s)) for t, s in row["context"]]
        support = {title for title, _ in row["supporting_facts"]}
        paragraphs += pairs
        probes.append(Probe("2wiki", row["question"], [p for p in pairs if p[0] in support]))
    for row in _jsonl(data / "musique_ans_dev200_paragraphs.jsonl"):
        pairs = [(p["title"], p["paragraph_text"]) for p in row["paragraphs"]]
        paragraphs += pairs
        gold = [pair for pair, p in zip(pairs, row["paragraphs"]) if p["is_supporting"]]
        probes.append(Probe("musique", row["question"], gold, musique_sub_questions(row, pairs)))
    for row in json.loads((data / "popqa1000_paragraphs.json").read_text(encoding="utf-8")):
        pairs = [(p["title"], p["text"]) for p in row["paragraphs"]]
        paragraphs += pairs
        probes.append(
            Probe("popqa", row["question"], [pair for pair, p in zip(pairs, row["paragraphs"]) if p["is_supporting"]])
        )
    return probes, paragraphs


def musique_sub_questions(row: dict, pairs: list[tuple[str, str]]) -> list[tuple[str, tuple[str, str]]]:
    """Gold decomposition steps as queries: ``#1 >> capital`` -> ``Mountrail County capital``."""
    answers, steps = {}, []
    for number, step in enumerate(row["question_decomposition"], start=1):
        query = re.sub(r"#(\d+)", lambda m: answers.get(int(m.group(1)), ""), step["question"])
        steps.append((query.replace(" >> ", " ").strip(), pairs[step["paragraph_support_idx"]]))
        answers[number] = step["answer"]
    return steps


def closed_corpus(paragraphs: list[tuple[str, str]]) -> Corpus:
    unique = dict.fromkeys(paragraphs)
    return Corpus(Document(f"p{n}", title, text) for n, (title, text) in enumerate(unique))


def recall(retriever, queries: list[str], golds: list[list[str]], k: int) -> float:
    results = retriever.search(queries, k)
    return float(np.mean([len({p.id for p in r} & set(g)) / len(g) for r, g in zip(results, golds)]))


def recall_table(retrievers: dict, probes: list[Probe], ids: dict, ks=(3, 10)) -> dict:
    table = {}
    for name, retriever in retrievers.items():
        row = {}
        for dataset in ("hotpotqa", "musique", "2wiki", "popqa"):
            chosen = [p for p in probes if p.dataset == dataset and p.gold]
            golds = [[ids[g] for g in p.gold] for p in chosen]
            for k in ks:
                row[f"{dataset}@{k}"] = recall(retriever, [p.query for p in chosen], golds, k)
        subs = [s for p in probes for s in p.sub_questions]
        for k in ks:
            row[f"musique_subq@{k}"] = recall(retriever, [q for q, _ in subs], [[ids[g]] for _, g in subs], k)
        row["questions"] = sum(1 for p in probes if p.gold)
        row["musique_sub_questions"] = len(subs)
        table[name] = row
        print(name, {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    return table


def time_calls(retriever, queries: list[str], batch: int, k: int, budget_s: float = 6.0) -> dict:
    """Mean latency of ``search`` calls of ``batch`` queries, over distinct queries, within a time budget."""
    retriever.search(queries[:batch], k)  # warm-up
    latencies, offset, spent = [], 0, 0.0
    while spent < budget_s and len(latencies) < 200:
        chunk = [queries[(offset + i) % len(queries)] for i in range(batch)]
        offset += batch
        start = time.perf_counter()
        retriever.search(chunk, k)
        latencies.append(time.perf_counter() - start)
        spent += latencies[-1]
        if len(latencies) >= 3 and spent > budget_s / 2 and batch >= 256:
            break
    mean = float(np.mean(latencies))
    return {
        "batch": batch,
        "calls": len(latencies),
        "latency_ms": 1000 * mean,
        "p90_latency_ms": 1000 * float(np.percentile(latencies, 90)),
        "qps": batch / mean,
    }


def perf_table(retrievers: dict, queries: list[str], k: int = 3) -> dict:
    from maopd.envs.retrieval.http_client import HTTPRetriever
    from maopd.envs.retrieval.server import BackgroundServer, ServerLimits, create_app

    table = {}
    for name, retriever in retrievers.items():
        table[name] = [time_calls(retriever, queries, b, k) for b in BATCH_SIZES]
        print(name, table[name], flush=True)
        if name == "pyserini-bm25":
            continue
        with BackgroundServer(create_app(retriever, ServerLimits(max_queries=512))) as server:
            client = HTTPRetriever(server.url, timeout_s=120)
            table[f"{name} via HTTP"] = [time_calls(client, queries, b, k) for b in BATCH_SIZES]
            client.close()
        print(f"{name} via HTTP", table[f"{name} via HTTP"], flush=True)
    return table


def ratios(perf: dict) -> dict:
    out = {}
    for name in list(perf):
        if f"{name} via HTTP" in perf:
            out[f"{name}: HTTP latency / in-process latency"] = {
                str(a["batch"]): b["latency_ms"] / a["latency_ms"] for a, b in zip(perf[name], perf[f"{name} via HTTP"])
            }
    if "pyserini-bm25" in perf and "bm25s" in perf:
        out["bm25s QPS / pyserini Lucene QPS"] = {
            str(a["batch"]): a["qps"] / b["qps"] for a, b in zip(perf["bm25s"], perf["pyserini-bm25"])
        }
    return out


def markdown(result: dict) -> str:
    lines = [
        f"# Retrieval benchmark\n\nCommand: `{result['command']}`\n",
        f"Machine: {result['machine']}\n",
        f"Closed corpus: {result['corpus_size']} paragraphs (fingerprint {result['corpus_fingerprint']}).\n",
        "## Recall of supporting paragraphs\n",
    ]
    columns = [c for c in next(iter(result["recall"].values())) if "@" in c]
    lines.append("| retriever | " + " | ".join(columns) + " |")
    lines.append("|---" * (len(columns) + 1) + "|")
    for name, row in result["recall"].items():
        lines.append(f"| {name} | " + " | ".join(f"{row[c]:.3f}" for c in columns) + " |")
    lines.append(
        "\n## Throughput (k=3)\n\n| retriever | batch | calls | latency ms | p90 ms | QPS |\n|---|---|---|---|---|---|"
    )
    for name, rows in result["perf"].items():
        for r in rows:
            lines.append(
                f"| {name} | {r['batch']} | {r['calls']} | {r['latency_ms']:.2f} | {r['p90_latency_ms']:.2f} | "
                f"{r['qps']:.1f} |"
            )
    lines.append("\n## Ratios (same run)\n\n| ratio | batch 1 | batch 32 | batch 256 |\n|---|---|---|---|")
    for name, values in result["ratios"].items():
        lines.append(f"| {name} | " + " | ".join(f"{values[str(b)]:.2f}" for b in BATCH_SIZES) + " |")
    lines.append("\n## Index builds\n")
    lines += [f"- {name}: {seconds:.1f} s" for name, seconds in result["build_seconds"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/real", type=Path)
    parser.add_argument("--out", default="runs/benchmarks/retrieval", help="writes OUT.json and OUT.md")
    parser.add_argument("--skip-perf", action="store_true")
    args = parser.parse_args()

    from maopd.envs.retrieval.bm25 import BM25Retriever
    from maopd.envs.retrieval.dense import DenseRetriever
    from maopd.envs.retrieval.encoder import TextEncoder
    from maopd.envs.retrieval.pyserini_adapter import (
        PyseriniBM25Retriever,
        build_lucene_index,
        pyserini_available,
    )

    probes, paragraphs = load_probes(args.data)
    corpus = closed_corpus(paragraphs)
    ids = {(d.title, d.text): d.id for d in corpus.documents}
    print(f"{len(probes)} questions, {len(corpus)} unique paragraphs", flush=True)

    builds, retrievers = {}, {}
    start = time.perf_counter()
    retrievers["bm25s"] = BM25Retriever(corpus)
    builds["bm25s"] = time.perf_counter() - start
    start = time.perf_counter()
    retrievers["dense MiniLM flat"] = DenseRetriever.build(
        corpus, TextEncoder("minilm", batch_size=64), show_progress=True
    )
    builds["dense MiniLM flat (encode + index)"] = time.perf_counter() - start
    workdir = tempfile.TemporaryDirectory()
    available, why = pyserini_available()
    if available:
        corpus_path = Path(workdir.name) / "corpus.jsonl"
        corpus.write_jsonl(corpus_path)
        start = time.perf_counter()
        build_lucene_index(corpus_path, Path(workdir.name) / "lucene")
        builds["pyserini Lucene (subprocess incl. JVM start)"] = time.perf_counter() - start
        retrievers["pyserini-bm25"] = PyseriniBM25Retriever(str(Path(workdir.name) / "lucene"), corpus)
    else:
        print(f"pyserini skipped: {why}", flush=True)

    result = {
        "command": "python " + " ".join(sys.argv),
        "machine": (
            f"{platform.processor() or platform.machine()}, {platform.system()}, python {platform.python_version()}"
        ),
        "corpus_size": len(corpus),
        "corpus_fingerprint": corpus.fingerprint,
        "build_seconds": builds,
        "recall": recall_table(retrievers, probes, ids),
        "perf": {},
        "ratios": {},
    }
    if not args.skip_perf:
        queries = [p.query for p in probes]
        result["perf"] = perf_table(retrievers, queries)
        result["ratios"] = ratios(result["perf"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out.with_suffix(".json"), result, indent=2)
    write_text_atomically(out.with_suffix(".md"), markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
