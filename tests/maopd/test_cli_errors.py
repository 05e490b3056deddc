"""Bad input to ``maopd`` is one line naming the problem, exit status 2, never a stack trace.
Each case runs the real command line in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

REPO = Path(__file__).resolve().parents[2]
FIXTURE_CORPUS = REPO / "tests" / "fixture" / "corpus.jsonl"
FIXTURE_QUESTIONS = REPO / "tests" / "fixture" / "questions.jsonl"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """Broken and valid inputs, made once: ``{name: path}``."""
    from maopd.envs.datasets import load_questions
    from maopd.evaluation.manifest import ManifestEntry, question_hash

    root = tmp_path_factory.mktemp("inputs")
    paths = {"root": root}

    def make(name: str, content: str | bytes, key: str | None = None) -> Path:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        paths[key or name] = path
        return path

    make("a_file", "x")
    make("empty.jsonl", "", "empty")
    make("malformed.jsonl", "{not json\n", "malformed")
    make("binary.jsonl", b"\x00\xff\xfe\n", "binary")
    make("bad.yaml", "a: [1,\n", "bad_yaml")
    paths["garbage_config"] = make("garbage_config/config.json", "garbage{{").parent
    config = json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]})
    paths["truncated_model"] = make("truncated_model/config.json", config).parent
    weights = paths["truncated_model"] / "model.safetensors"
    safetensors.numpy.save_file({"w": np.zeros(1024, dtype=np.float32)}, str(weights))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut off half-way
    paths["not_empty"] = make("not_empty/x", "x").parent

    questions = load_questions(FIXTURE_QUESTIONS)[:2]
    manifest = make(
        "manifest.jsonl",
        "".join(json.dumps(ManifestEntry("fixture", q, question_hash(q.question)).to_dict()) + "\n" for q in questions),
        "manifest",
    )
    records = root / "records.jsonl"
    done = _maopd(
        [
            "eval",
            "run",
            "--manifest",
            str(manifest),
            "--corpus",
            str(FIXTURE_CORPUS),
            "--attempts",
            "1",
            "--out",
            str(records),
        ]
    )
    assert done.returncode == 0, done.stderr
    paths["records"] = records

    read_only = root / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    paths["read_only"] = read_only
    if os.geteuid() == 0:  # root writes into a mode-555 directory; nobody may create files in sysfs
        paths["read_only"] = Path("/sys/fs") if Path("/sys/fs").is_dir() else None
    return paths


def _maopd(argv: list[str]) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "MAOPD_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "maopd.cli", *argv],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


M = "{manifest}"
CORPUS = str(FIXTURE_CORPUS)

# (id, argv with {input} placeholders, words the one line must contain)
CASES = [
    # 1. eval run --policy checkpoint with a bad or missing model
    (
        "eval-truncated-safetensors",
        [
            "eval",
            "run",
            "--manifest",
            M,
            "--policy",
            "checkpoint",
            "--model",
            "{truncated_model}",
            "--out",
            "{root}/o.jsonl",
        ],
        ["truncated_model/model.safetensors", "--model"],
    ),
    (
        "eval-garbage-config-json",
        [
            "eval",
            "run",
            "--manifest",
            M,
            "--policy",
            "checkpoint",
            "--model",
            "{garbage_config}",
            "--out",
            "{root}/o.jsonl",
        ],
        ["garbage_config/config.json", "not valid JSON"],
    ),
    (
        "eval-checkpoint-without-model",
        ["eval", "run", "--manifest", M, "--policy", "checkpoint", "--out", "{root}/o.jsonl"],
        ["--model"],
    ),
    (
        "eval-policy-not-found",
        ["eval", "run", "--manifest", M, "--role", "searcher=no_such_package.mod:S", "--out", "{root}/o.jsonl"],
        ["no_such_package.mod:S", "no module 'no_such_package'"],
    ),
    (
        "eval-model-does-not-exist",
        [
            "eval",
            "run",
            "--manifest",
            M,
            "--policy",
            "checkpoint",
            "--model",
            "{root}/nothing/here",
            "--out",
            "{root}/o.jsonl",
        ],
        ["--model", "nothing/here"],
    ),
    # 2. an output path that is a regular file, or in a read-only directory
    (
        "train-run-dir-is-a-file",
        ["train", "--config", "configs/tiny_cpu_stage1.yaml", "--run-dir", "{a_file}"],
        ["a_file", "not a directory"],
    ),
    (
        "train-pipeline-run-dir-is-a-file",
        ["train", "--preset", "smoke", "--run-dir", "{a_file}"],
        ["a_file", "not a directory"],
    ),
    (
        "tune-eval-bad-system",
        ["tune", "eval", "--system", "nonsense", "--out", "{root}/t"],
        ["--system", "NAME=WORKFLOW:MODEL"],
    ),
    (
        "tune-beta-without-stage1",
        ["tune", "beta", "--preset", "smoke", "--run-dir", "{root}/no_run"],
        ["no_run/stage1", "Stage I"],
    ),
    (
        "world-build-out-is-a-file",
        ["world", "build", "--size", "tiny", "--out", "{a_file}"],
        ["a_file", "not a directory"],
    ),
    (
        "index-build-out-is-a-file",
        ["index", "build", "--kind", "bm25", "--corpus", CORPUS, "--out", "{a_file}"],
        ["a_file", "not a directory"],
    ),
    (
        "eval-run-out-under-a-file",
        ["eval", "run", "--manifest", M, "--corpus", CORPUS, "--out", "{a_file}/r.jsonl"],
        ["a_file", "not a directory"],
    ),
    (
        "eval-score-out-is-a-file",
        ["eval", "score", "{records}", "--draws", "10", "--out", "{a_file}"],
        ["a_file", "not a directory"],
    ),
    (
        "world-build-read-only",
        ["world", "build", "--size", "tiny", "--out", "{read_only}/w"],
        ["{read_only}/", "permission denied"],
    ),
    (
        "index-build-read-only",
        ["index", "build", "--kind", "bm25", "--corpus", CORPUS, "--out", "{read_only}/i"],
        ["{read_only}/", "permission denied"],
    ),
    (
        "eval-score-read-only",
        ["eval", "score", "{records}", "--draws", "10", "--out", "{read_only}/s"],
        ["{read_only}/", "permission denied"],
    ),
    (
        "train-read-only",
        ["train", "--config", "configs/tiny_cpu_stage1.yaml", "--run-dir", "{read_only}/run"],
        ["{read_only}/", "permission denied"],
    ),
    # 3. index build and retriever serve|query input
    (
        "index-build-missing-corpus",
        ["index", "build", "--kind", "bm25", "--corpus", "{root}/missing.jsonl", "--out", "{root}/i1"],
        ["missing.jsonl", "does not exist"],
    ),
    (
        "index-build-empty-corpus",
        ["index", "build", "--kind", "bm25", "--corpus", "{empty}", "--out", "{root}/i2"],
        ["empty.jsonl", "no documents"],
    ),
    (
        "index-build-dense-empty-corpus",
        ["index", "build", "--corpus", "{empty}", "--out", "{root}/i3"],
        ["empty.jsonl", "no documents"],
    ),
    (
        "index-build-pyserini-empty-corpus",
        ["index", "build", "--kind", "pyserini", "--corpus", "{empty}", "--out", "{root}/i4"],
        ["empty.jsonl", "no documents"],
    ),
    (
        "index-build-malformed-corpus",
        ["index", "build", "--kind", "bm25", "--corpus", "{malformed}", "--out", "{root}/i5"],
        ["malformed.jsonl:1", "invalid JSON"],
    ),
    (
        "index-build-binary-corpus",
        ["index", "build", "--kind", "bm25", "--corpus", "{binary}", "--out", "{root}/i6"],
        ["binary.jsonl:1", "UTF-8"],
    ),
    ("query-missing-corpus", ["retriever", "query", "--corpus", "{root}/missing.jsonl", "q"], ["missing.jsonl"]),
    ("query-empty-corpus", ["retriever", "query", "--corpus", "{empty}", "q"], ["empty.jsonl", "no documents"]),
    ("query-malformed-corpus", ["retriever", "query", "--corpus", "{malformed}", "q"], ["malformed.jsonl:1"]),
    (
        "serve-empty-corpus",
        ["retriever", "serve", "--corpus", "{empty}", "--port", "0"],
        ["empty.jsonl", "no documents"],
    ),
    ("query-kind-bogus", ["retriever", "query", "--corpus", CORPUS, "--set", "kind=bogus", "q"], ["kind", "bogus"]),
    (
        "serve-kind-bogus",
        ["retriever", "serve", "--corpus", CORPUS, "--set", "kind=bogus", "--port", "0"],
        ["kind", "bogus"],
    ),
    (
        "query-set-without-equals",
        ["retriever", "query", "--corpus", CORPUS, "--set", "noeq", "q"],
        ["noeq", "key=value"],
    ),
    ("serve-port-out-of-range", ["retriever", "serve", "--corpus", CORPUS, "--port", "70000"], ["--port", "70000"]),
    (
        "query-dead-server",
        ["retriever", "query", "--set", "kind=http", "--set", "url=http://127.0.0.1:9", "q"],
        ["http://127.0.0.1:9", "server is running"],
    ),
    ("query-malformed-yaml", ["retriever", "query", "--config", "{bad_yaml}", "q"], ["bad.yaml", "line 2"]),
    ("query-dense-without-corpus", ["retriever", "query", "--set", "kind=dense", "q"], ["--corpus", "'dense'"]),
    ("serve-without-corpus", ["retriever", "serve", "--port", "0"], ["--corpus", "'bm25'"]),
    # 4. malformed YAML names the file
    ("train-malformed-yaml", ["train", "--config", "{bad_yaml}"], ["bad.yaml", "not valid YAML", "line 2"]),
    ("train-preset-malformed-yaml", ["train", "--preset", "{bad_yaml}"], ["bad.yaml", "not valid YAML"]),
    # 5. train's refusals go through the shared mechanism
    ("train-resume-without-config", ["train", "--resume"], ["--resume"]),
    ("train-unknown-preset", ["train", "--preset", "bogus"], ["bogus", "known presets"]),
    ("world-build-unknown-size", ["world", "build", "--size", "bogus", "--out", "{root}/w"], ["--size", "bogus"]),
    ("sft-out-not-empty", ["sft", "--smoke", "--out", "{not_empty}"], ["--out", "not_empty"]),
    (
        "eval-manifest-dataset-without-name",
        ["eval", "manifest", "--dataset", "bogus", "--out", "{root}/m.jsonl"],
        ["--dataset", "bogus"],
    ),
    # 6. usage errors are one line too
    ("play-zero-searchers", ["play", "--num-searchers", "0"], ["--num-searchers", "out of range"]),
]


@pytest.mark.parametrize("argv,expected", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_naming_it_exit_2(inputs, argv, expected):
    if "{read_only}" in " ".join(argv) and inputs["read_only"] is None:
        pytest.skip("no directory this user cannot write to")
    argv, expected = (
        [word.format(**{k: str(v) for k, v in inputs.items()}) for word in words] for words in (argv, expected)
    )
    done = _maopd(argv)
    err = done.stderr.strip()
    assert done.returncode == 2, (argv, done.returncode, done.stderr[-2000:])
    assert err and "Traceback" not in err and len(err.splitlines()) == 1, (argv, done.stderr[-2000:])
    assert err.startswith(f"maopd {argv[0]}"), err
    for word in expected:
        assert word in err, (word, err)
