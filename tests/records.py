"""The smallest evaluation record ``benchmarks.eval.records`` accepts, for tests that break one field."""

MINIMAL_RECORD = {
    "method": "m",
    "dataset": "d",
    "question_id": "q",
    "attempt": 0,
    "golden_answers": ["a"],
    "final_output": "<answer>a</answer>",
}
