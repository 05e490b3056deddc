"""Corrupted copies: 1-hop answers within edit distance 2 of the gold answer but not equal to it.

Usage: python benchmarks/results/dev_tuning_session4/copy_errors.py runs/<name>/eval/records.jsonl
Prints, per method, the 1-hop workflows, the correct ones, the near misses (e.g. 1904 → 1804,
Sikenal → Siken) and a few examples.
"""

import collections
import json
import sys


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


counts = collections.defaultdict(collections.Counter)
examples = collections.defaultdict(list)
for line in open(sys.argv[1], encoding="utf-8"):
    record = json.loads(line)
    if record["dataset"] != "1-hop":
        continue
    method, answer = record["method"], (record["strict_answer"] or "").strip().lower()
    golds = [g.lower() for g in record["golden_answers"]]
    counts[method]["workflows"] += 1
    if record["score"]:
        counts[method]["correct"] += 1
    elif answer and min(edit_distance(answer, g) for g in golds) <= 2:
        counts[method]["near_miss"] += 1
        examples[method].append(f"{record['golden_answers'][0]} -> {record['strict_answer']}")
for method, c in sorted(counts.items()):
    print(f"{method}: {c['workflows']} workflows, {c['correct']} correct, {c['near_miss']} near misses; "
          f"e.g. {', '.join(examples[method][:6])}")
