"""SynthWiki scripted teams: the expert on hand-built turns and through both environments; the noisy team."""

from __future__ import annotations

import pytest

from maopd.agents.expert_team import ExpertAnswerer, ExpertLeader, ExpertSearcher, expert_team
from maopd.agents.noisy_team import NoiseConfig, NoisyTeam
from maopd.envs import prompts
from maopd.envs.actions import parse_action
from maopd.envs.episode import run_episode
from maopd.envs.policy import AgentTurn
from maopd.envs.retrieval.base import Passage
from maopd.envs.retrieval.bm25 import BM25Retriever
from maopd.envs.roles import SOLVER_ROLE
from maopd.envs.synthwiki import build_world
from maopd.envs.synthwiki.demos import demonstrations, make_env
from maopd.envs.synthwiki.grammar import parse_question

QUESTION = "Where was the founder of Vellora born?"
VELLORA = Passage(
    "1",
    "Vellora Records",
    "Vellora Records is a music company. Vellora Records is also known as "
    "Vellora. Dalen Marsk founded Vellora Records. Vellora Records was founded in 1931.",
    9.0,
)
DALEN = Passage(
    "2", "Dalen Marsk", "Dalen Marsk is a singer. Dalen Marsk is a native of Kelvar. Dalen Marsk was born in 1960.", 8.0
)
DISTRACTOR = Passage("3", "Dalen Morsk", "Dalen Morsk is a chef. Dalen Morsk was born in Tarvel.", 7.0)


def leader_turn(*extra: dict) -> AgentTurn:
    messages = (prompts.system_message("leader"), prompts.question_message(QUESTION, 3, 5), *extra)
    return AgentTurn("leader", "leader", messages, ("delegate", "select"), task=QUESTION)


def searcher_turn(task: str, *extra: dict, allowed=("search", "report")) -> AgentTurn:
    messages = (prompts.system_message("searcher"), prompts.task_message(task), *extra)
    return AgentTurn("searcher_0", "searcher", messages, allowed, call_id="searcher_0@w1", task=task)


def test_expert_leader_delegates_hop_by_hop_then_selects():
    leader = ExpertLeader()
    first = leader.decide(leader_turn())
    assert parse_action(first, "leader").subtasks == ("Who founded Vellora?",)
    after_wave_1 = leader_turn(
        {"role": "assistant", "content": first},
        prompts.reports_message([(1, "Who founded Vellora?", "Vellora was founded by Dalen Marsk.")]),
    )
    second = leader.decide(after_wave_1)
    assert parse_action(second, "leader").subtasks == ("Where was Dalen Marsk born?",)
    done = leader_turn(
        *after_wave_1.messages[2:],
        {"role": "assistant", "content": second},
        prompts.reports_message([(2, "Where was Dalen Marsk born?", "Dalen Marsk was born in Kelvar.")]),
    )
    assert leader.decide(done) == "<select>all</select>"


def test_expert_leader_delegates_a_comparison_in_one_wave():
    turn = AgentTurn(
        "leader",
        "leader",
        (
            prompts.system_message("leader"),
            prompts.question_message("Who was born earlier, Dalen Marsk or Kira Vell?", 3, 5),
        ),
        ("delegate", "select"),
        task="Who was born earlier, Dalen Marsk or Kira Vell?",
    )
    action = parse_action(ExpertLeader().decide(turn), "leader")
    assert action.subtasks == ("When was Dalen Marsk born?", "When was Kira Vell born?")


def test_expert_searcher_resolves_aliases_and_ignores_near_duplicates():
    searcher = ExpertSearcher()
    assert searcher.decide(searcher_turn("Who founded Vellora?")) == "<search>Who founded Vellora?</search>"
    info = prompts.information_message([VELLORA, DISTRACTOR], 600)
    turn = searcher_turn(
        "Who founded Vellora?", {"role": "assistant", "content": "<search>Who founded Vellora?</search>"}, info
    )
    assert searcher.decide(turn) == "<report>Vellora was founded by Dalen Marsk.</report>"
    # born_in, not the birth year nor the near-duplicate's birthplace
    info = prompts.information_message([DISTRACTOR, DALEN], 600)
    turn = searcher_turn("Where was Dalen Marsk born?", {"role": "assistant", "content": "<search>x</search>"}, info)
    assert searcher.decide(turn) == "<report>Dalen Marsk was born in Kelvar.</report>"


def test_expert_searcher_chains_a_full_question_and_reports_on_its_last_turn():
    searcher = ExpertSearcher()
    first_search = {"role": "assistant", "content": "<search>Who founded Vellora?</search>"}
    turn = searcher_turn(QUESTION, first_search, prompts.information_message([VELLORA], 600))
    assert searcher.decide(turn) == "<search>Where was Dalen Marsk born?</search>"
    missed = prompts.information_message([DISTRACTOR], 600)
    last = searcher_turn(
        QUESTION,
        first_search,
        prompts.information_message([VELLORA], 600),
        {"role": "assistant", "content": "<search>Where was Dalen Marsk born?</search>"},
        missed,
        allowed=("report",),
    )
    assert searcher.decide(last) == "<report>Vellora was founded by Dalen Marsk.</report>"


def test_expert_answerer_follows_the_chain_and_compares():
    reports = [
        (1, "Who founded Vellora?", "Vellora was founded by Dalen Marsk."),
        (2, "Where was Dalen Marsk born?", "Dalen Marsk was born in Kelvar."),
    ]
    turn = AgentTurn(
        "answerer",
        "answerer",
        (prompts.system_message("answerer"), prompts.answerer_message(QUESTION, reports)),
        ("answer",),
        task=QUESTION,
    )
    assert ExpertAnswerer().decide(turn) == "<answer>Kelvar</answer>"
    reports = [(1, "t", "Kelvar has a population of 1,200,000."), (2, "t", "Tarvel is home to 950,000 people.")]
    turn = AgentTurn(
        "answerer",
        "answerer",
        (
            prompts.system_message("answerer"),
            prompts.answerer_message("Which has more people, Tarvel or Kelvar?", reports),
        ),
        ("answer",),
        task="Which has more people, Tarvel or Kelvar?",
    )
    assert ExpertAnswerer().decide(turn) == "<answer>Kelvar</answer>"


@pytest.fixture(scope="module")
def small():
    world = build_world(seed=0, size="small")
    return world, BM25Retriever(world.corpus)


def _em(workflow, team, world, retriever, questions):
    rows = demonstrations(workflow, team, retriever, questions, successful_only=False)
    by_question = {}
    for row in rows:
        by_question[row["question_id"]] = row["em"]
    return sum(by_question.values()) / len(questions)


@pytest.mark.parametrize("workflow", ["hierarchical", "cascade"])
def test_expert_team_reaches_95_percent_exact_match_with_bm25(small, workflow):
    world, retriever = small
    questions = world.splits["dev"][:150]
    assert _em(workflow, expert_team(), world, retriever, questions) >= 0.95


def test_expert_solver_scores_like_the_expert_cascade(small):
    """The single agent searches hop by hop as the cascade's Searcher does and answers as the
    Answerer does, with one more step: it is at least as accurate on the same questions."""
    world, retriever = small
    questions = world.splits["dev"][:150]
    single = _em("single", expert_team(), world, retriever, questions)
    assert single >= 0.95 and single >= _em("cascade", expert_team(), world, retriever, questions)


def test_single_agent_demonstrations_end_with_the_solvers_answer(small):
    world, retriever = small
    rows = list(demonstrations("single", expert_team(), retriever, world.splits["train"][:5]))
    assert rows and {row["role"] for row in rows} == {"solver"} and {row["workflow"] for row in rows} == {"single"}
    for row in rows:
        chat = row["messages"]
        assert chat[0]["content"] == SOLVER_ROLE.prompt and chat[-1]["role"] == "assistant"
        assert parse_action(chat[-1]["content"], "solver").kind == "answer"
        # one chat per call: the answer is not repeated after the history that holds it
        assert chat[-2]["role"] == "user"


@pytest.mark.parametrize("workflow", ["hierarchical", "single"])
def test_noisy_team_accuracy_falls_as_noise_rises(small, workflow):
    world, retriever = small
    questions = world.splits["dev"][:80]
    accuracies = [
        _em(workflow, NoisyTeam(NoiseConfig.uniform(rate), seed=1), world, retriever, questions)
        for rate in (0.0, 0.1, 0.3)
    ]
    assert accuracies[0] >= 0.95 and accuracies[0] > accuracies[1] > accuracies[2]


def test_noise_knobs_are_validated():
    with pytest.raises(ValueError, match="leader_drop_report"):
        NoiseConfig(leader_drop_report=1.5)


def test_demonstrations_are_the_environment_chats(small):
    world, retriever = small
    rows = list(demonstrations("hierarchical", expert_team(), retriever, world.splits["train"][:5]))
    roles = {row["role"] for row in rows}
    assert roles == {"leader", "searcher", "answerer"}
    for row in rows:
        assert row["messages"][0] == prompts.system_message(row["role"])
        assert row["messages"][-1]["role"] == "assistant"
        assert parse_action(row["messages"][-1]["content"], row["role"]).valid


def test_memory_reports_state_what_the_closed_book_knows_and_need_a_closed_book(small):
    """searcher_memory_report: the Searcher reports, without searching, what the closed book recalls
    for every hop of its task when it knows them all; a team without a closed book never draws it."""
    from maopd.envs.synthwiki.closed_book import ClosedBook, ClosedBookConfig
    from maopd.envs.synthwiki.grammar import Chain, parse_question
    from maopd.envs.synthwiki.knowledge import final_answer

    world, _ = small
    perfect = ClosedBook(world.corpus, ClosedBookConfig(popular=1.0, middle=1.0, long_tail=1.0), world_seed=0)
    chains = [
        q
        for q in world.splits["dev"]
        if isinstance(parse_question(q.question), Chain) and len(parse_question(q.question).steps) >= 2
    ][:5]
    assert chains
    for question in chains:
        plan = parse_question(question.question)
        steps = perfect.recall_steps(plan)
        assert [s.predicate for s in steps] == list(plan.steps)  # every hop, from the first
        assert steps[-1].value == final_answer(plan, perfect.knowledge)
        team = NoisyTeam(NoiseConfig(searcher_memory_report=1.0), seed=0, closed_book=perfect)
        report = team.act([searcher_turn(question.question)])[0].texts[0]
        assert report == "<report>" + " ".join(s.sentence() for s in steps) + "</report>"
    without_book = NoisyTeam(NoiseConfig(searcher_memory_report=1.0), seed=0)
    assert without_book.act([searcher_turn(QUESTION)])[0].texts[0].startswith("<search>")

    # a book of the popular band only: what it knows is reported, anything else searched
    popular = ClosedBook(world.corpus, ClosedBookConfig(popular=1.0, middle=0.0, long_tail=0.0), world_seed=0)
    lookups = [q for q in world.splits["dev"] if isinstance(parse_question(q.question), Chain)]
    outputs = {"popular": set(), "other": set()}
    for question in lookups[:60]:
        plan = parse_question(question.question)
        steps = popular.recall_steps(plan)
        knows = all(popular.band(step.subject) == "popular" for step in steps)
        assert popular.knows(steps) == knows
        team = NoisyTeam(NoiseConfig(searcher_memory_report=1.0), seed=0, closed_book=popular)
        text = team.act([searcher_turn(question.question)])[0].texts[0]
        outputs["popular" if knows else "other"].add(text[: text.index(">") + 1])
        if knows:
            assert text == "<report>" + " ".join(s.sentence() for s in steps) + "</report>"
    assert outputs == {"popular": {"<report>"}, "other": {"<search>"}}

    # the single agent answers from the same recall, without searching
    env = make_env("single", small[1], chains)
    for index, question in enumerate(chains):
        team = NoisyTeam(NoiseConfig(searcher_memory_report=1.0), seed=0, closed_book=perfect)
        record = run_episode(env, team, options={"question_index": index})
        assert record.counters.search_actions == 0 and record.rewards.em == 1.0


def test_judge_demonstrations_say_yes_exactly_when_the_report_answers_its_sub_question(small):
    from maopd.envs.prompts import parse_judgement
    from maopd.envs.rewards import report_has_gold
    from maopd.envs.synthwiki.demos import judgements
    from maopd.envs.synthwiki.knowledge import Knowledge, final_answer

    world, retriever = small
    facts = Knowledge(d.text for d in world.corpus.documents)
    questions = world.splits["train"][:20]
    rows = list(
        demonstrations(
            "hierarchical",
            NoisyTeam(NoiseConfig.uniform(0.3), seed=0),
            retriever,
            questions,
            successful_only=True,
            judge_with=facts,
        )
    )
    verdicts = [r for r in rows if r["role"] == "critic"]
    assert {parse_judgement(r["messages"][-1]["content"]) for r in verdicts} == {0.0, 1.0}
    # judged on every played episode, failed ones too
    assert {r["question_id"] for r in verdicts} - {r["question_id"] for r in rows if r["role"] != "critic"}
    record = run_episode(make_env("cascade", retriever, questions), expert_team(), options={"question_index": 0})
    (row,) = judgements(record, facts)
    answer = final_answer(parse_question(questions[0].question), facts)
    assert parse_judgement(row["messages"][-1]["content"]) == report_has_gold(record.reports[0].text, [answer]) == 1.0
