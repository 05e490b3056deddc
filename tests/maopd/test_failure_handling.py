"""The reliability suite: what docs/reliability.md guarantees under crashes and bad input.

One section per guarantee: no duplicated metrics after a crash, no leaked API key, paths read from
a run dir stay inside it and nothing is unpickled, counters stay finite, empty answers are
handled, bounds are checked, bad input gives one-line errors instead of stack traces, and the
smaller ones. Metrics after a crash across the whole pipeline are also checked by
``benchmarks/fault_injection.py``.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch

from maopd.agents.openai_policy import (
    InsecureKeyError,
    OpenAIPolicy,
    OpenAIPolicyConfig,
    OpenAIPolicyError,
)
from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model
from maopd.agents.tokenizer import train_tokenizer
from maopd.base.secrets import redact_url
from maopd.envs.policy import AgentTurn
from maopd.envs.prompts import system_message, task_message
from maopd.training import checkpoint as ckpt
from maopd.training.run_logging import METRICS_FILE, read_metrics, truncate_metrics
from tests.checkpoints import save_test_checkpoint

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-reliability-test-0123456789"


# --------------------------------------------------------------------------- metrics after a crash


TINY = [
    "steps=2",
    "env.max_steps=3",
    "rollout.max_new_tokens=8",
    "checkpoint.every=2",
    "logging.progress=false",
    "logging.tensorboard=false",
]


def _tiny_config(run_dir: Path):
    from maopd.training.config import load_config

    return load_config(REPO / "configs" / "tiny_cpu_stage1.yaml", [f"run_dir={run_dir}", *TINY])


@pytest.mark.slow
def test_rows_of_a_run_killed_before_its_first_checkpoint_are_not_kept(tmp_path):
    """A kill after step 1's row but before any checkpoint: the rerun starts from empty metrics."""
    from maopd.training.trainer import train_stage

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / METRICS_FILE).write_text(json.dumps({"step": 1, "stale": True}) + "\n")
    train_stage(_tiny_config(run_dir))
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2]
    assert not any("stale" in row for row in rows)


def test_truncating_to_step_zero_empties_the_metrics(tmp_path):
    (tmp_path / METRICS_FILE).write_text(json.dumps({"step": 1}) + "\n" + json.dumps({"step": 2}) + "\n")
    truncate_metrics(tmp_path, 0)
    assert read_metrics(tmp_path) == []


# --------------------------------------------------------------------------- the API key


class EchoServer:
    """Answers every request with ``status`` and a body that echoes the request's headers and URL."""

    def __init__(self, status: int = 401):
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                server.paths.append(self.path)
                data = json.dumps({"error": "bad key", "you sent": dict(self.headers), "path": self.path}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _turn():
    return AgentTurn(
        agent="searcher_0",
        role="searcher",
        messages=(system_message("searcher"), task_message("x")),
        allowed=("search", "report"),
        num_candidates=1,
    )


@pytest.mark.parametrize("status", [401, 503])
def test_an_endpoint_that_echoes_the_key_never_gets_it_into_errors_or_logs(monkeypatch, caplog, status):
    monkeypatch.setenv("MAOPD_TEST_KEY", SECRET)
    server = EchoServer(status)
    try:
        base_url = f"http://user:pass@127.0.0.1:{server.port}/v1?api_key={SECRET}"
        config = OpenAIPolicyConfig(
            base_url=base_url, model="m", api_key_env="MAOPD_TEST_KEY", max_retries=1, backoff_s=0.0
        )
        policy = OpenAIPolicy(config)
        with caplog.at_level(logging.DEBUG), pytest.raises(OpenAIPolicyError) as error:
            policy.act([_turn()])
    finally:
        server.close()
    # the query string stays a query string: the request went to the right path
    assert server.paths[0] == f"/v1/chat/completions?api_key={SECRET}"
    shown = [str(error.value), caplog.text, repr(policy), str(policy), repr(config), json.dumps(config.to_dict())]
    for text in shown:
        assert SECRET not in text and "user:pass" not in text, text
    assert "you sent" in str(error.value)  # the body is still quoted, redacted
    assert "api_key=***" in str(error.value)


def test_the_key_is_not_in_the_policy_state(monkeypatch):
    monkeypatch.setenv("MAOPD_TEST_KEY", SECRET)
    policy = OpenAIPolicy(
        OpenAIPolicyConfig(base_url="https://api.example.com/v1", model="m", api_key_env="MAOPD_TEST_KEY")
    )
    assert SECRET not in repr(vars(policy))
    assert SECRET.encode() not in pickle.dumps(policy)
    assert "api key set" in repr(policy)


@pytest.mark.parametrize("base_url", ["http://10.1.2.3:8000/v1", "http://api.example.com/v1"])
def test_a_key_is_never_sent_over_plain_http_to_another_host(monkeypatch, base_url):
    monkeypatch.setenv("MAOPD_TEST_KEY", SECRET)
    config = OpenAIPolicyConfig(base_url=base_url, model="m", api_key_env="MAOPD_TEST_KEY")
    with pytest.raises(InsecureKeyError, match="allow_insecure_key"):
        OpenAIPolicy(config)
    OpenAIPolicy(
        OpenAIPolicyConfig(base_url=base_url, model="m", api_key_env="MAOPD_TEST_KEY", allow_insecure_key=True)
    )
    for fine in (
        "https://api.example.com/v1",
        "http://127.0.0.1:8000/v1",
        "http://localhost:8000/v1",
        "http://[::1]:8000/v1",
    ):
        OpenAIPolicy(OpenAIPolicyConfig(base_url=fine, model="m", api_key_env="MAOPD_TEST_KEY"))
    monkeypatch.delenv("MAOPD_TEST_KEY")
    OpenAIPolicy(config)  # no key, nothing to protect


def test_redact_url_hides_credentials_and_query_values():
    assert redact_url("http://u:p@h:1/v1?api_key=X&x=1#frag") == "http://***@h:1/v1?api_key=***&x=***"
    assert redact_url("http://127.0.0.1:8000/x") == "http://127.0.0.1:8000/x"


# --------------------------------------------------------------------------- paths read from a run dir


@pytest.fixture(scope="module")
def tiny():
    tokenizer = train_tokenizer(["a few words for a tiny tokenizer"], vocab_size=300)
    return build_tiny_model(tokenizer, TinyModelConfig(seed=1)), tokenizer


def _save(run_dir, step, tiny, state=None):
    return save_test_checkpoint(run_dir, step, *tiny, state=state)


@pytest.mark.parametrize("pointer", ["../../other/checkpoints/step_7", "ABSOLUTE", "step_1/../../../other"])
def test_the_latest_pointer_cannot_leave_the_run_dir(tmp_path, tiny, pointer, caplog):
    other = _save(tmp_path / "other", 7, tiny)
    own = _save(tmp_path / "runs" / "mine", 1, tiny)
    text = str(other) if pointer == "ABSOLUTE" else pointer
    (own.parent / ckpt.LATEST).write_text(text + "\n")
    with caplog.at_level(logging.WARNING):
        assert ckpt.latest_checkpoint(tmp_path / "runs" / "mine") == own
    assert "pointer" in caplog.text


def test_a_step_dir_symlinked_outside_the_run_dir_is_ignored(tmp_path, tiny):
    other = _save(tmp_path / "other", 7, tiny)
    own = _save(tmp_path / "mine", 1, tiny)
    (own.parent / "step_9").symlink_to(other, target_is_directory=True)
    (own.parent / ckpt.LATEST).write_text("step_9\n")
    assert ckpt.latest_checkpoint(tmp_path / "mine") == own
    assert [p.name for p in ckpt.list_checkpoints(own.parent)] == ["step_1"]


@pytest.mark.slow
def test_trainer_state_loads_with_weights_only_and_restores_rng_exactly(tmp_path, tiny, monkeypatch):
    model = tiny[0]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    random.seed(3)
    np.random.seed(4)
    torch.manual_seed(5)
    np.random.normal()  # numpy caches a gaussian
    state = {
        "step": 1,
        "optimizer": optimizer.state_dict(),
        "loader": {"epoch": 0, "position": 2, "seed": 0},
        "rng": ckpt.capture_rng_state(),
    }
    expected = (random.random(), np.random.normal(), torch.rand(1))
    path = _save(tmp_path, 1, tiny, state)

    loads = []
    real_load = torch.load

    def spy(*args, **kwargs):
        loads.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    loaded = ckpt.load_trainer_state(path)
    assert loads == [True]
    assert json.loads((path / ckpt.TRAINER_STATE_JSON).read_text())["step"] == 1
    ckpt.restore_rng_state(loaded["rng"])
    assert (random.random(), np.random.normal()) == expected[:2] and torch.equal(torch.rand(1), expected[2])
    fresh = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fresh.load_state_dict(loaded["optimizer"])
    a, b = fresh.state_dict(), optimizer.state_dict()
    assert a["param_groups"] == b["param_groups"]
    assert all(torch.equal(a["state"][i][k], b["state"][i][k]) for i in b["state"] for k in b["state"][i])
    assert loaded["loader"] == state["loader"]


def test_a_pickled_trainer_state_is_never_unpickled(tmp_path, tiny):
    """A trainer_state.pt holding arbitrary pickled objects is refused, not executed."""
    path = _save(tmp_path, 1, tiny)
    torch.save({"payload": os.system}, path / ckpt.TRAINER_STATE)  # a global weights_only refuses
    with pytest.raises(Exception, match="(?i)weights_only|unsupported global|not a list"):
        ckpt.load_trainer_state(path)


# --------------------------------------------------------------------------- non-finite counters


def _env():
    from maopd.envs import cascade_search_v1

    env = cascade_search_v1.raw_env(
        questions=[{"id": "q", "question": "Who?", "golden_answers": ["Paris"]}],
        corpus=REPO / "tests" / "fixture" / "corpus.jsonl",
    )
    env.reset(seed=0)
    return env


def _play(env, action_for):
    while env.agents and env.record is None:
        env.step(action_for(env.agent_selection))
    return env.record


@pytest.mark.parametrize("counts", [(-7, float("nan")), (float("inf"), "12"), (True, 1.5), (10**400, -0.0)])
def test_invalid_token_counts_never_reach_a_record(counts):
    from maopd.envs.policy import AgentOutput

    n_in, n_out = counts
    with pytest.raises(ValueError, match="non-negative integer"):
        AgentOutput(texts=["x"], input_tokens=n_in, output_tokens=n_out)
    env = _env()
    record = _play(
        env,
        lambda agent: {
            "text": "<answer>Paris</answer>" if agent == "answerer" else "<search>x</search>",
            "input_tokens": n_in,
            "output_tokens": n_out,
        },
    )
    text = json.dumps(record.to_json(), allow_nan=False)
    assert json.loads(text)["counters"]["input_tokens"] >= 0


def test_eval_records_refuse_non_finite_or_negative_counters(tmp_path):
    from maopd.evaluation.records import MINIMAL_RECORD, RecordError, load_records

    base = MINIMAL_RECORD
    for bad in ("NaN", "Infinity", "-1.25"):
        path = tmp_path / "records.jsonl"
        path.write_text(json.dumps(base)[:-1] + f', "search_actions": {bad}}}\n')
        with pytest.raises(RecordError, match="search_actions"):
            load_records([path])


# --------------------------------------------------------------------------- empty answers


@pytest.mark.parametrize("gold", ["The", "A", "!!!", "the a an"])
def test_an_empty_answer_never_matches(gold):
    from maopd.envs.actions import strict_answer
    from maopd.envs.rewards import exact_match

    assert exact_match("", [gold]) == 0.0
    assert exact_match("   ", [gold]) == 0.0
    assert exact_match("the", ["Paris"]) == 0.0
    assert exact_match(strict_answer("<answer></answer>"), [gold]) == 0.0  # how the env scores a candidate
    assert exact_match(gold, [gold]) == 1.0  # matched on its raw stripped form
    assert exact_match(f"  {gold} ", [gold]) == 1.0


def test_eval_score_does_not_count_an_empty_answer_correct(tmp_path):
    from maopd.evaluation.records import load_records

    path = tmp_path / "records.jsonl"
    path.write_text(
        json.dumps(
            {
                "method": "m",
                "dataset": "d",
                "question_id": "q",
                "attempt": 0,
                "golden_answers": ["The"],
                "final_output": "<answer></answer>",
            }
        )
        + "\n"
    )
    assert load_records([path])[0].score == 0.0


# --------------------------------------------------------------------------- bounds


@pytest.mark.parametrize(
    "overrides",
    [{"num_searchers": 10**6}, {"max_steps": 5.5}, {"topk": True}, {"max_steps": "5"}, {"num_candidates": 2.0}],
)
def test_env_config_bounds_and_types(overrides):
    from maopd.base.config import ConfigError
    from maopd.envs import hierarchical_search_v1

    with pytest.raises(ConfigError):
        hierarchical_search_v1.raw_env(
            corpus=REPO / "tests" / "fixture" / "corpus.jsonl",
            questions=REPO / "tests" / "fixture" / "questions.jsonl",
            **overrides,
        )


@pytest.mark.parametrize("index", [-1, 10**9, "3", 1.5, True])
def test_question_index_must_be_an_index(index):
    env = _env()
    with pytest.raises(ValueError, match="question_index"):
        env.reset(options={"question_index": index})


def test_an_oversized_question_is_refused():
    env = _env()
    with pytest.raises(ValueError, match="characters"):
        env.reset(options={"question": {"id": "x", "question": "w" * 5_000_000, "golden_answers": ["a"]}})


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "run", "--manifest", "m", "--out", "o", "--attempts", "0"],
        ["eval", "run", "--manifest", "m", "--out", "o", "--attempts", "-2"],
        ["eval", "run", "--manifest", "m", "--out", "o", "--batch-size", "0"],
        ["eval", "score", "r", "--draws", "0"],
        ["eval", "score", "r", "--draws", "-5"],
        ["eval", "score", "r", "--draws", str(10**9)],
        ["index", "build", "--corpus", "c", "--out", "o", "--chunk-size", "0"],
        ["retriever", "query", "q", "-k", "0"],
        ["retriever", "query", "q", "-k", "-5"],
        ["retriever", "serve", "--max-k", "0"],
        ["retriever", "serve", "--max-queries", "-1"],
        ["retriever", "serve", "--port", "70000"],
        ["play", "--num-searchers", "0"],
        ["play", "--num-searchers", str(10**6)],
        ["play", "--question-index", "-1"],
    ],
)
def test_cli_numbers_out_of_range_are_usage_errors(argv, capsys):
    from maopd.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    assert "out of range" in capsys.readouterr().err


# --------------------------------------------------------------------------- one-line errors


def _cli(argv, capsys):
    from maopd.cli import main

    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\x00\xff\xfe\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("a: [1\n")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (["eval", "score", str(binary), "--out", str(tmp_path / "o")], "binary.jsonl"),
        (["eval", "score", str(empty), "--out", str(tmp_path / "o")], "empty.jsonl"),
        (["plot", str(tmp_path / "missing")], "missing"),
        (["train", "--config", str(bad_yaml)], "bad.yaml"),
        (["play", "--split", "bogus"], "split"),
        (
            ["train", "--config", "configs/tiny_cpu_stage1.yaml", "--run-dir", str(tmp_path / "none"), "--resume"],
            "no checkpoint",
        ),
    ]
    for argv, expected in cases:  # more cases, run as subprocesses: tests/maopd/test_cli_errors.py
        code, err = _cli(argv, capsys)
        assert code == 2, argv
        assert expected in err, (argv, err)
        assert "Traceback" not in err and len(err.splitlines()) == 1, (argv, err)


@pytest.mark.parametrize("module_name", ["maopd.envs.cascade_search_v1", "maopd.envs.hierarchical_search_v1"])
def test_env_misuse_gives_clear_errors(module_name):
    import importlib

    module = importlib.import_module(module_name)
    kwargs = {
        "corpus": REPO / "tests" / "fixture" / "corpus.jsonl",
        "questions": REPO / "tests" / "fixture" / "questions.jsonl",
    }
    env = module.env(**kwargs)
    for misuse in (lambda: env.step("x"), lambda: env.last(), lambda: env.render()):
        with pytest.raises(Exception, match="(?i)reset") as error:
            misuse()
        assert not isinstance(error.value, (KeyError, AttributeError)) or "reset" in str(error.value)
    raw = module.raw_env(**kwargs)
    with pytest.raises(RuntimeError, match="reset"):
        raw.step("x")
    raw.reset(seed=0)
    while raw.agents:
        agent = raw.agent_selection
        raw.step(None if raw.terminations[agent] or raw.truncations[agent] else "")
    with pytest.raises(RuntimeError, match="episode is over"):
        raw.step("")
    parallel = module.parallel_env(**kwargs)
    with pytest.raises(RuntimeError, match="reset"):
        parallel.step({})
    parallel.reset(seed=0)
    with pytest.raises(TypeError, match="dict"):
        parallel.step("str")


# --------------------------------------------------------------------------- smaller ones


def test_a_staging_dir_of_a_dead_builder_is_removed(tmp_path, dead_pid):
    from maopd.base.atomic import remove_stale_staging

    stale = tmp_path / f"base-x.staging-{dead_pid}-abc"
    live = tmp_path / f"base-x.staging-{os.getpid()}-def"
    other = tmp_path / "base-y.staging-1-xyz"
    for path in (stale, live, other):
        path.mkdir()
    remove_stale_staging(tmp_path, "base-x")
    assert not stale.exists() and live.exists() and other.exists()


def test_a_torn_row_of_a_checkpointed_step_is_not_dropped_silently(tmp_path, caplog):
    (tmp_path / METRICS_FILE).write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "lo')
    with caplog.at_level(logging.WARNING):
        truncate_metrics(tmp_path, 2)
    assert read_metrics(tmp_path) == [{"step": 1}]
    assert "step 2" in caplog.text and "cut short" in caplog.text


def test_the_server_binds_before_announcing_and_warns_on_a_public_host(tmp_path, capsys, monkeypatch):
    import socket

    from maopd.commands import retrieval

    corpus = REPO / "tests" / "fixture" / "corpus.jsonl"
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        code, err = _cli(
            ["retriever", "serve", "--corpus", str(corpus), "--port", str(port), "--set", "kind=bm25"], capsys
        )
    finally:
        busy.close()
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in err
    assert "serving" not in capsys.readouterr().out
    # the warning's test of the host (maopd.base.network, covered by tests/maopd/test_redaction.py)
    assert not retrieval.is_loopback_host("0.0.0.0") and retrieval.is_loopback_host("127.0.0.1")
