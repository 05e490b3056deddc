"""The evaluation protocol of the paper's Appendix A.

One concept per module: ``converters`` (raw dataset formats to FlashRAG questions),
``manifest`` (the fixed, de-duplicated test sample), ``extraction`` (strict and flexible answer
extraction, failure taxonomy), ``records`` (the scored JSONL record format), ``runner`` (k
independent workflows per question, resumable), ``metrics`` (avg@k, pass@k, k/k, costs,
question-bootstrap CIs), ``report`` (tables, summary JSON, plot, trajectory viewer),
``score_matrix`` (the scores, question × attempt × seed × system, of several training seeds),
``seed_statistics`` (the question bootstrap and the seed-level t-interval side by side, and the
verdict rule) and ``student_t`` (t quantiles). The command line is ``maopd eval``
(maopd/commands/eval.py). The record format is documented in docs/evaluation.md.
"""
