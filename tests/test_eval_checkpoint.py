"""Evaluating a saved model: batched, seeded by question, with token counts in the records."""

from agents.tiny_model import build_tiny_lm, save_model
from benchmarks.eval.solvers import checkpoint_solver
from envs.synthwiki import load_default_world


def test_checkpoint_solver_is_seeded_per_question(tmp_path):
    world = load_default_world()
    model, tokenizer = build_tiny_lm([q.question for q in world.splits["test"][:50]], vocab_size=600)
    save_model(model, tokenizer, tmp_path / "model")
    questions = world.splits["test"][:3]
    solve = checkpoint_solver("cascade", str(tmp_path / "model"), None, questions, max_new_tokens=8)
    together = solve(questions, [11, 12, 13])
    alone = solve(questions[2:], [13])
    assert [r["question_id"] for r in together] == [q.id for q in questions]
    assert together[2]["candidates"] == alone[0]["candidates"]
    assert all(r["counters"]["input_tokens"] > 0 and r["counters"]["output_tokens"] > 0 for r in together)
