"""Latency of the retrieval server under a flood of concurrent requests, on 127.0.0.1.

The baseline is the same server answering one request at a time, measured in the same run; the
loaded figures are reported next to it and as ratios. Each wave sends ``--concurrency`` requests at
once (one query each, BM25 over a small synthetic corpus) and waits for all of them; every answer
must be 200 or a clear 503. The load generator runs in its own process, so that it does not share
the server's interpreter; memory is the server process's resident set before and after the waves.
Writes benchmarks/results/server_abuse/server_abuse.{json,md}.

    python benchmarks/server_abuse.py --concurrency 1000 --waves 3
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import platform
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from maopd.base.arguments import positive_int
from maopd.base.atomic import write_text_atomically
from maopd.base.json_files import write_json
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.retrieval.corpus import Corpus, Document
from maopd.envs.retrieval.server import BackgroundServer, ServerLimits, create_app

RESULTS = Path(__file__).parent / "results" / "server_abuse" / "server_abuse"


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def corpus(size: int) -> Corpus:
    return Corpus(
        Document(str(i), f"Entity {i}", f"Entity {i} was born in city {i % 97} and works on topic {i % 31}.")
        for i in range(size)
    )


async def timed_requests(url: str, count: int, concurrent: bool) -> tuple[list[float], Counter]:
    latencies, statuses = [], Counter()
    limits = httpx.Limits(max_connections=max(count, 1), max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def one(i: int) -> None:
            start = time.perf_counter()
            try:
                response = await client.post(
                    f"{url}/retrieve", json={"queries": [f"topic {i % 31} city {i % 97}"], "topk": 3}
                )
                statuses[response.status_code] += 1
            except httpx.HTTPError as exc:
                statuses[type(exc).__name__] += 1
            latencies.append((time.perf_counter() - start) * 1000)

        if concurrent:
            await asyncio.gather(*(one(i) for i in range(count)))
        else:
            for i in range(count):
                await one(i)
    return latencies, statuses


def run_wave(url: str, count: int, concurrent: bool) -> tuple[list[float], Counter, float]:
    """One wave in the load-generator process: latencies (ms), answers, and wall seconds."""
    start = time.perf_counter()
    latencies, statuses = asyncio.run(timed_requests(url, count, concurrent))
    return latencies, statuses, time.perf_counter() - start


def percentiles(latencies: list[float]) -> dict[str, float]:
    values = np.asarray(latencies)
    return {f"p{q}": float(np.percentile(values, q)) for q in (50, 90, 99)} | {"max": float(values.max())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=positive_int, default=1000)
    parser.add_argument("--waves", type=positive_int, default=3)
    parser.add_argument("--baseline-requests", type=positive_int, default=200)
    parser.add_argument("--corpus-size", type=positive_int, default=2000)
    parser.add_argument(
        "--max-concurrency", type=positive_int, default=1024, help="the server's in-flight limit (ServerLimits)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.disable(logging.INFO)

    limits = ServerLimits(max_concurrency=args.max_concurrency)
    retriever = BM25Retriever(corpus(args.corpus_size))
    context = multiprocessing.get_context("spawn")
    with (
        BackgroundServer(create_app(retriever, limits), limits=limits) as server,
        ProcessPoolExecutor(1, mp_context=context) as client,
    ):
        client.submit(run_wave, server.url, 20, False).result()  # warm-up
        baseline, baseline_status, _ = client.submit(run_wave, server.url, args.baseline_requests, False).result()
        rss_before = rss_mib()
        waves = []
        for _ in range(args.waves):
            latencies, statuses, wall = client.submit(run_wave, server.url, args.concurrency, True).result()
            waves.append(
                {
                    "wall_s": wall,
                    "statuses": {str(k): v for k, v in statuses.items()},
                    "latency_ms": percentiles(latencies),
                }
            )
        rss_after = rss_mib()

    base = percentiles(baseline)
    loaded = [wave["latency_ms"] for wave in waves]
    report = {
        "command": "python " + " ".join([sys.argv[0].replace(str(Path.cwd()) + "/", ""), *sys.argv[1:]]),
        "machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}",
        "settings": vars(args) | {"out": str(args.out)},
        "baseline_sequential_ms": base,
        "baseline_statuses": {str(k): v for k, v in baseline_status.items()},
        "waves": waves,
        "p50_ratio_vs_baseline": [wave["p50"] / base["p50"] for wave in loaded],
        "p99_ratio_vs_baseline": [wave["p99"] / base["p99"] for wave in loaded],
        "rss_mib_before_waves": rss_before,
        "rss_mib_after_waves": rss_after,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out.with_suffix(".json"), report, indent=2)
    write_text_atomically(args.out.with_suffix(".md"), markdown(report))
    print(markdown(report))
    return 0


def markdown(report: dict) -> str:
    base = report["baseline_sequential_ms"]
    lines = [
        "# Retrieval server under concurrent load",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']}",
        "",
        "| run | answers | wall s | p50 ms | p90 ms | p99 ms | max ms | p50 / baseline | p99 / baseline |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| baseline, sequential | {report['baseline_statuses']} | | {base['p50']:.1f} | {base['p90']:.1f} | "
        f"{base['p99']:.1f} | {base['max']:.1f} | 1 | 1 |",
    ]
    for i, wave in enumerate(report["waves"]):
        lat = wave["latency_ms"]
        lines.append(
            f"| wave {i + 1}, {report['settings']['concurrency']} concurrent | {wave['statuses']} | "
            f"{wave['wall_s']:.2f} | "
            f"{lat['p50']:.1f} | {lat['p90']:.1f} | {lat['p99']:.1f} | {lat['max']:.1f} | "
            f"{report['p50_ratio_vs_baseline'][i]:.1f} | {report['p99_ratio_vs_baseline'][i]:.1f} |"
        )
    memory = (
        f"Server resident memory: {report['rss_mib_before_waves']:.0f} MiB before the waves, "
        f"{report['rss_mib_after_waves']:.0f} MiB after."
    )
    lines += ["", memory, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
