"""TRL's ``GRPOTrainer`` trains through the ``environment_factory`` classes: the tools it finds on
them are the role's action kinds, a tool call from the model reaches the environment, and
``get_reward`` is the call's reward in the workflow record."""

from __future__ import annotations

import functools
import inspect

import pytest

from tests.integration_support import require

require("trl")

from transformers.utils import get_json_schema  # noqa: E402

from maopd.agents.integrations.role_session import CALL_OVER, TOOL_PROMPTS, call_reward  # noqa: E402
from maopd.agents.integrations.trl_env import (  # noqa: E402
    ENVIRONMENTS,
    SearcherEnvironment,
    question_dataset,
    trl_environment,
)

# Small passages keep the tiny model's prompts short.
OPTIONS = {"split": "test", "topk": 1, "max_passage_chars": 80}


def trl_tools(environment) -> list[str]:
    """The methods TRL's GRPOTrainer exposes as tools (its rule: public functions of the class
    other than ``reset`` and ``get_reward``)."""
    names = [name for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)]
    return sorted(name for name in names if name not in ("reset", "get_reward") and not name.startswith("_"))


@pytest.mark.parametrize(
    ("role", "tools"),
    [
        ("searcher", ["report", "search"]),
        ("answerer", ["answer"]),
        ("leader", ["delegate", "select"]),
        ("solver", ["answer", "search"]),
    ],
)
def test_each_class_exposes_its_roles_action_kinds_as_tools_with_schemas(role, tools):
    environment = trl_environment(role, "single" if role == "solver" else "hierarchical", **OPTIONS)()
    assert trl_tools(environment) == tools
    for name in tools:
        schema = get_json_schema(getattr(environment, name))
        assert schema["function"]["name"] == name and schema["function"]["parameters"]["required"]


def test_a_rollout_through_the_tools_is_scored_by_the_record():
    dataset = question_dataset("cascade", size=3, **OPTIONS)
    assert dataset.column_names == ["prompt", "question_index"] and len(dataset) == 3
    environment = trl_environment("searcher", "cascade", **OPTIONS)()
    prompt = environment.reset(**dataset[1])
    assert prompt.startswith(TOOL_PROMPTS["searcher"]) and "Task: " in prompt
    assert environment.search("Koduth Bloom").startswith("<information>")
    assert environment.report("Koduth Bloom was formed in Lilunirn.").endswith(CALL_OVER)
    with pytest.raises(ValueError, match=CALL_OVER):
        environment.search("late")
    session = environment.session
    assert environment.get_reward() == call_reward(session.record, "searcher", session.call_id) == 0.05
    assert [kind for kind, _ in environment.tool_calls] == ["search", "report"]
    assert session.record.question == session.env.questions[1].question


def test_get_reward_ends_a_call_the_model_left_open():
    environment = trl_environment("answerer", "cascade", **OPTIONS)()
    environment.reset(question_index=0)
    assert environment.get_reward() == -1.0 and environment.session.record.candidates == [""]


def test_the_factory_checks_its_arguments_at_once():
    with pytest.raises(ValueError, match="role='critic'"):
        trl_environment("critic")
    with pytest.raises(ValueError, match="does not play"):
        trl_environment("leader", "cascade")
    assert set(ENVIRONMENTS) == set(TOOL_PROMPTS)


# ----- GRPOTrainer, two steps on a tiny Qwen3 ----------------------------------------------------
SEARCH = {"name": "search", "arguments": {"query": "river"}}
REPORT = {"name": "report", "arguments": {"text": "river"}}
# one token each, so that a few supervised steps teach the tiny model the tool-call format
FORMAT_TOKENS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"]


def _assistant(call: dict) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]}


def tool_calling_tiny_model(questions: int):
    """A tiny Qwen3 with Qwen3's chat template, taught in a few supervised steps to call
    ``search`` on the first turn and ``report`` after the search's answer, on the prompts TRL will
    render for the first ``questions`` questions."""
    import torch
    from trl.chat_template_utils import get_training_chat_template, qwen3_chat_template

    from maopd.agents.tiny_model import build_tiny_model
    from maopd.agents.tokenizer import train_tokenizer

    environment = SearcherEnvironment("cascade", **OPTIONS)
    tools = [environment.search, environment.report]
    conversations = []
    for index in range(questions):
        user = {"role": "user", "content": environment.reset(question_index=index)}
        passages = environment.search("river")
        conversations.append([user, _assistant(SEARCH)])
        conversations.append([user, _assistant(SEARCH), {"role": "tool", "name": "search", "content": passages}])
        conversations[-1].append(_assistant(REPORT))
    draft = train_tokenizer([])
    draft.chat_template = qwen3_chat_template
    template = get_training_chat_template(draft)  # what TRL renders with: Qwen3's is not prefix-preserving

    def render(tokenizer, messages, **kwargs):
        return tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, **kwargs)

    tokenizer = train_tokenizer([render(draft, c, tokenize=False) for c in conversations])
    tokenizer.chat_template = qwen3_chat_template
    tokenizer.add_tokens(FORMAT_TOKENS)
    model = build_tiny_model(tokenizer)
    rows, labels = [], []
    for conversation in conversations:
        ids = render(tokenizer, conversation, tokenize=True, return_dict=True)["input_ids"]
        prompt = render(tokenizer, conversation[:-1], add_generation_prompt=True, tokenize=True, return_dict=True)
        prompt = prompt["input_ids"]
        assert ids[: len(prompt)] == prompt
        rows.append(torch.tensor(ids))
        labels.append(torch.tensor([-100] * len(prompt) + ids[len(prompt) :]))

    def left_pad(tensors, value):
        flipped = [t.flip(0) for t in tensors]
        return torch.nn.utils.rnn.pad_sequence(flipped, batch_first=True, padding_value=value).flip(1)

    ids, labels = left_pad(rows, tokenizer.pad_token_id), left_pad(labels, -100)
    mask = left_pad([torch.ones_like(row) for row in rows], 0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(50):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return model.eval(), tokenizer


@pytest.fixture
def one_thread():
    """One torch thread: the same sums (so the same sampled tokens) on any machine, and no thread
    contention on a loaded two-core one, where two threads run this model several times slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_grpo_trainer_trains_two_steps_through_the_environment_factory(tmp_path, monkeypatch, one_thread):
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    scored = []

    class Scored(SearcherEnvironment):
        def get_reward(self) -> float:
            reward = super().get_reward()
            scored.append((reward, self.session.record, self.session.call_id, list(self.tool_calls)))
            return reward

    model, tokenizer = tool_calling_tiny_model(questions=2)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=256,
        max_tool_calling_iterations=2,
        temperature=0.5,
        learning_rate=1e-5,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=question_dataset("cascade", size=2, **OPTIONS),
        environment_factory=functools.partial(Scored, "cascade", **OPTIONS),
    )
    trainer.train()

    assert trainer.state.global_step == 2 and len(scored) == 4  # two steps of one question × two generations
    for reward, record, call_id, tool_calls in scored:
        assert reward == call_reward(record, "searcher", call_id)
        outputs = next(call for call in record.calls if call.call_id == call_id).outputs
        assert [action for _, action in tool_calls] == outputs[: len(tool_calls)]
    calls = [call for *_, tool_calls in scored for call in tool_calls]
    assert ("search", "<search>river</search>") in calls, "no tool call from the model reached the environment"
    searched = [record.counters.search_actions for _, record, _, _ in scored]
    assert sum(searched) >= 1
    logged = {key for entry in trainer.state.log_history for key in entry}
    assert "rewards/Scored/mean" in logged and "tools/call_frequency" in logged
