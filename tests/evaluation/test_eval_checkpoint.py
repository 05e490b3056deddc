"""Evaluating a saved model: batched, seeded by question, with token counts in the records."""

from maopd.agents.tiny_model import build_tiny_lm, save_model
from maopd.envs.synthwiki import load_default_world
from maopd.evaluation.solvers import checkpoint_solver


def test_checkpoint_solver_is_seeded_per_question(tmp_path):
    world = load_default_world()
    model, tokenizer = build_tiny_lm([q.question for q in world.splits["test"][:50]], vocab_size=600)
    save_model(model, tokenizer, tmp_path / "model")
    questions = world.splits["test"][:3]
    solve = checkpoint_solver("cascade", str(tmp_path / "model"), None, questions, max_new_tokens=8)
    together = solve(questions, [11, 12, 13])
    alone = solve(questions[2:], [13])
    assert [r.question_id for r in together] == [q.id for q in questions]
    assert together[2].candidates == alone[0].candidates
    assert all(r.counters.input_tokens > 0 and r.counters.output_tokens > 0 for r in together)


def test_the_single_workflow_is_evaluated_like_the_teams(tmp_path):
    """``maopd tune eval --system NAME=single:MODEL`` and the eval runner accept the single agent;
    its records carry what the scorer reads (one candidate, counters, the solver's call)."""
    from maopd.evaluation.records import from_workflow
    from maopd.evaluation.solvers import debugging_policy, team_solver
    from maopd.study.tuning import parse_system

    assert parse_system("solo=single:runs/m")[:2] == ("solo", "single")
    world = load_default_world()
    model, tokenizer = build_tiny_lm([q.question for q in world.splits["test"][:50]], vocab_size=600)
    save_model(model, tokenizer, tmp_path / "model")
    questions = world.splits["test"][:2]
    for solve in (
        checkpoint_solver("single", str(tmp_path / "model"), None, questions, max_new_tokens=8),
        team_solver("single", debugging_policy("scripted"), None, questions),
    ):
        for question, record in zip(questions, solve(questions, [1, 2])):
            assert record.workflow == "single" and {c.role for c in record.calls} == {"solver"}
            scored = from_workflow(record, "solo", "synthwiki", 0, 1)
            assert scored.question_id == question.id and len(record.candidates) <= 1
            assert "search_actions" in scored.counters
