"""Search per variant: test workflows (mean search actions, workflows without a search) and
training (mean `workflow/search_actions` of the first and last 5 steps).

Usage: python benchmarks/results/main_job_session4/table3/search_stats.py runs/table3_s4
"""

import collections
import json
import sys
from pathlib import Path

run = Path(sys.argv[1])
searches = collections.defaultdict(list)
for line in open(run / "eval" / "records.jsonl", encoding="utf-8"):
    record = json.loads(line)
    searches[record["method"]].append(record["search_actions"])
for method, counts in sorted(searches.items()):
    print(f"{method}: {sum(counts) / len(counts):.2f} search actions per test workflow, "
          f"{sum(c == 0 for c in counts)} / {len(counts)} workflows without a search")
for metrics in sorted(run.glob("stage2_*/metrics.jsonl")):
    rows = [json.loads(line) for line in open(metrics, encoding="utf-8")]
    first = sum(r["workflow/search_actions"] for r in rows[:5]) / 5
    last = sum(r["workflow/search_actions"] for r in rows[-5:]) / 5
    print(f"{metrics.parent.name}: training search actions {first:.2f} (first 5 steps) -> {last:.2f} (last 5)")
