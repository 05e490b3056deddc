"""How often each method's workflows search, give up, and get it right when they do search.

Usage: python benchmarks/results/main_job_session6/search_behaviour.py runs/<name>/eval/records.jsonl
"""

import json
import sys

records = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
for method in dict.fromkeys(r["method"] for r in records):
    rows = [r for r in records if r["method"] == method]
    searched = [r for r in rows if r["search_actions"] > 0]
    without = 1 - len(searched) / len(rows)
    unknown = sum((r["strict_answer"] or "").lower() == "unknown" for r in rows) / len(rows)
    em = sum(r["score"] for r in searched) / max(1, len(searched))
    print(f"{method}: {len(rows)} workflows; without a search {without:.1%}; answer 'unknown' {unknown:.1%}; "
          f"EM of workflows with a search {em:.1%} ({len(searched)})")
