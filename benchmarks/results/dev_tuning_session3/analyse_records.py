"""Where π_0 fails on 1-hop questions, from an evaluation's records.jsonl (ad hoc, kept as the record).

    python benchmarks/results/dev_tuning_session3/analyse_records.py runs/dev15_a20/eval/records.jsonl

Prints, per method and question type, how many questions were solved 0..4 times out of 4, and for
the cascade methods (C-MAS base, C-MAS + RL) on 1-hop questions: how many workflows searched once,
whether the gold answer was in the retrieved passages and in the Searcher's report, and whether a
wrong final answer occurs anywhere in the passages.
"""

import collections
import json
import re
import sys

records = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
solved = collections.defaultdict(lambda: collections.defaultdict(float))
for r in records:
    solved[(r["method"], r["dataset"])][r["question_id"]] += r["score"]
for key in sorted(solved):
    print(*key, "questions by number of attempts solved:", sorted(collections.Counter(map(int, solved[key].values())).items()))

for method in ("C-MAS base", "C-MAS + RL"):
    one_hop = [r for r in records if r["method"] == method and r["dataset"] == "1-hop"]
    if not one_hop:
        continue
    gold_in_passages = gold_in_report = wrong = wrong_in_passages = one_search = 0
    for r in one_hop:
        trajectory = r["trajectory"]
        passages = " ".join(p["text"][:600] for s in trajectory["searches"] for p in s["passages"])
        gold = r["golden_answers"][0]
        gold_in_passages += gold in passages
        gold_in_report += any(gold in report["text"] for report in trajectory["reports"])
        one_search += len(trajectory["searches"]) == 1
        answer = re.match(r"<answer>(.*)</answer>", r["final_output"] or "")
        if r["score"] == 0 and answer:
            wrong += 1
            wrong_in_passages += answer.group(1).strip() in passages
    print(f"{method}, 1-hop workflows: {len(one_hop)} ({one_search} with exactly one search); gold answer in "
          f"the passages {gold_in_passages}, in the report {gold_in_report}; wrong answers {wrong}, of which in "
          f"the passages {wrong_in_passages}")
