"""Hostile inputs: repros of data loss, leaks, silent-wrong results, hangs and tracebacks, run against
the current code, each outcome classified.

Each repro is what an attacker or a careless user would do (symlinks planted in a run directory,
two trainings on one run directory, a YAML alias bomb, a server that trickles its answer or sends
NaN, malformed files, numbers out of range). It runs ``maopd`` as a subprocess (``python -m
maopd.cli``), or a few lines of Python in a subprocess for the library API, at toy size (the tiny
Stage I config with ``steps=2``, the smoke preset, a few questions of the embedded world), against
servers on 127.0.0.1 only. Each outcome is classified from what can be seen from outside:

* **hang**: the command ran past its bound (it is killed at 1.5 times the bound);
* **traceback**: ``Traceback (most recent call last)`` in its output;
* **data loss**: a file outside the run directory (or an input of the command) changed or vanished;
* **leak**: a secret in the output or in a file written, or untrusted text that would act (an
  unescaped ``<script>`` in the viewer, code run from a file);
* **silent-wrong**: the command succeeded (or went on) with a result that is wrong (a refused input
  accepted, NaN in a record, mixed records);
* **clear error**: a non-zero exit with its message and none of the above;
* **OK**: exit 0 and none of the above.

The first five are failures. Writes ``hostile_inputs.json`` (the command, the counts, each repro's
outcome and detail) and ``README.md`` (a table) to ``--out``. ``maopd/base/raw_http.py``'s ``RawServer``
plays the misbehaving servers.

    OMP_NUM_THREADS=1 python benchmarks/hostile_inputs.py --out benchmarks/results/hostile_inputs

Exit status 0 when no repro fails, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from maopd.base.arguments import positive_int
from maopd.base.atomic import write_text_atomically
from maopd.base.json_files import read_json_file, write_json
from maopd.base.raw_http import RawServer, http_answer
from maopd.evaluation.provenance import git_commit
from maopd.evaluation.records import MINIMAL_RECORD

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "hostile_inputs"
OUTCOMES = ("OK", "clear error", "traceback", "silent-wrong", "data loss", "leak", "hang")
FAILURES = OUTCOMES[2:]
TRACEBACK = "Traceback (most recent call last)"
# A tiny Stage I run's CLI arguments (tests of run directories use them too).
TINY = [
    "--config",
    str(REPO / "configs" / "tiny_cpu_stage1.yaml"),
    "env.max_steps=3",
    "rollout.max_new_tokens=8",
    "logging.progress=false",
    "logging.tensorboard=false",
]
SECRET = "sk-hostileSECRET0123456789abcdef"
KEY_ENV = "HOSTILE_INPUTS_KEY"
# Wall-clock bounds of whole commands are loose: the harness may share a loaded machine, where the
# interpreter's imports alone take minutes. A request's own deadline is timed inside the process.
TRAIN_BOUND_S = 900  # a tiny training of a few steps
COMMAND_BOUND_S = 300  # one command that should refuse or finish at once
REQUEST_SLACK_S = 8  # a request may overrun its timeout_s by this much (retries are off)


@dataclass
class Ran:
    """How one subprocess ended."""

    returncode: int | None
    output: str  # stdout and stderr together
    seconds: float
    timed_out: bool

    @property
    def last_line(self) -> str:
        lines = [line for line in self.output.splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""


@dataclass
class Finding:
    outcome: str
    detail: str
    seconds: float = 0.0


@dataclass
class Repro:
    name: str
    group: str  # data loss, security, silent-wrong, hangs, tracebacks
    what: str
    run: Callable[[Path], Finding]
    slow: bool = False  # trains a model


REPROS: list[Repro] = []


def repro(group: str, what: str, slow: bool = False):
    def register(function: Callable[[Path], Finding]) -> Callable[[Path], Finding]:
        REPROS.append(Repro(function.__name__, group, what, function, slow))
        return function

    return register


# ----------------------------------------------------------------------------- running and judging


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": str(REPO)}
    for name in ("MAOPD_DEBUG", "MAOPD_CRASH_AT", "MAOPD_LOCKS"):
        env.pop(name, None)
    return env | (extra or {})


def start(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        argv, cwd=cwd, env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )


def finish(process: subprocess.Popen, started: float, bound_s: float) -> Ran:
    """Wait for ``process`` up to 1.5 times ``bound_s`` from ``started``; kill it past that."""
    try:
        output, _ = process.communicate(timeout=max(1.0, 1.5 * bound_s - (time.perf_counter() - started)))
        timed_out = False
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        timed_out = True
    return Ran(process.returncode, output, round(time.perf_counter() - started, 2), timed_out)


def cli(work: Path, *args: str, bound_s: float = COMMAND_BOUND_S, env: dict[str, str] | None = None) -> Ran:
    started = time.perf_counter()
    return finish(start([sys.executable, "-m", "maopd.cli", *args], work, env), started, bound_s)


def python(work: Path, body: str, bound_s: float = COMMAND_BOUND_S, env: dict[str, str] | None = None) -> Ran:
    """``body`` in a fresh interpreter; a ``UserError`` it raises is one line and exit status 2, as in
    ``maopd``. It may print a JSON line last, which the repro reads with ``last_json``."""
    code = "import sys\nfrom maopd.base.errors import UserError\ntry:\n"
    code += textwrap.indent(textwrap.dedent(body), "    ")
    code += "\nexcept UserError as exc:\n    print(' '.join(str(exc).split()), file=sys.stderr)\n    sys.exit(2)\n"
    started = time.perf_counter()
    return finish(start([sys.executable, "-c", code], work, env), started, bound_s)


def last_json(ran: Ran) -> dict:
    for line in reversed(ran.output.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def classify(
    runs: Ran | list[Ran],
    bound_s: float,
    lost: list[str] = (),
    leaked: list[str] = (),
    wrong: list[str] = (),
    hung: list[str] = (),
) -> Finding:
    """The outcome, in the order of the module docstring: the first that applies. ``hung``: parts
    timed inside the process that overran their own deadline."""
    runs = [runs] if isinstance(runs, Ran) else runs
    seconds = round(sum(r.seconds for r in runs), 2)
    slowest = max(runs, key=lambda r: r.seconds)
    if any(r.timed_out for r in runs) or slowest.seconds > bound_s:
        return Finding("hang", f"ran {slowest.seconds:.0f} s (bound {bound_s} s)", seconds)
    if hung:
        return Finding("hang", "; ".join(hung), seconds)
    for ran in runs:
        if TRACEBACK in ran.output:
            return Finding("traceback", ran.last_line, seconds)
    for outcome, problems in (("data loss", lost), ("leak", leaked), ("silent-wrong", wrong)):
        if problems:
            return Finding(outcome, "; ".join(problems), seconds)
    for ran in runs:
        if ran.returncode != 0:
            return Finding("clear error", ran.last_line, seconds)
    return Finding("OK", runs[-1].last_line, seconds)


def accepted(ran: Ran) -> list[str]:
    """For an input that must be refused: exit 0 is silent-wrong."""
    return ["accepted (exit 0)"] if ran.returncode == 0 else []


def must_be_refused(ran: Ran) -> Finding:
    """The outcome of a command given an input it must refuse: accepting it is silent-wrong."""
    return classify(ran, COMMAND_BOUND_S, wrong=accepted(ran))


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def changed(before: dict[str, bytes], directory: Path) -> list[str]:
    after = snapshot(directory) if directory.is_dir() else {}
    gone = [f"{directory / name} deleted" for name in before if name not in after]
    return gone + [
        f"{directory / name} overwritten" for name in before if name in after and after[name] != before[name]
    ]


def secret_in(secret: str, ran: Ran, *directories: Path) -> list[str]:
    found = ["in the output"] if secret in ran.output else []
    for directory in directories:
        for path in sorted(directory.rglob("*")) if directory.is_dir() else ():
            if path.is_file() and secret.encode() in path.read_bytes():
                found.append(f"in {path.relative_to(directory.parent)}")
    return [f"{secret[:6]}… {where}" for where in found]


def world_questions(path: Path, count: int = 2, duplicate: bool = False, no_answer: bool = False) -> Path:
    """A manifest of ``count`` test questions of the embedded world, optionally damaged."""
    from maopd.envs.synthwiki import load_default_world
    from maopd.evaluation.manifest import ManifestEntry, question_hash

    rows = [
        ManifestEntry("w", q, question_hash(q.question)).to_dict() for q in load_default_world().splits["test"][:count]
    ]
    if duplicate:
        rows.append(rows[0])
    if no_answer:
        rows[0]["golden_answers"] = []
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def corpus_file(path: Path, texts: list[str], bom: bool = False) -> Path:
    lines = "".join(json.dumps({"id": str(i), "contents": f"Title {i}\n{t}"}) + "\n" for i, t in enumerate(texts))
    path.write_text(("\ufeff" if bom else "") + lines, encoding="utf-8")
    return path


def record(**fields) -> dict:
    return MINIMAL_RECORD | fields


def records_file(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def chat_answer(content) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}


def openai_eval(work: Path, url: str, out: Path, *extra: str, bound_s: float = COMMAND_BOUND_S) -> Ran:
    manifest = work / "manifest.jsonl"
    if not manifest.exists():
        world_questions(manifest, 1)
    argv = ["eval", "run", "--manifest", str(manifest), "--policy", "checkpoint", "--backend", "openai"]
    argv += ["--base-url", url, "--api-key-env", KEY_ENV, "--workflow", "single", "--attempts", "1"]
    return cli(work, *argv, "--out", str(out), *extra, bound_s=bound_s, env={KEY_ENV: SECRET})


def served(body, status: int = 200) -> RawServer:
    return RawServer(lambda request: [http_answer(body, status)])


# ----------------------------------------------------------------------------- data loss


def _elsewhere(work: Path) -> Path:
    """Someone else's files, which a run must never touch: five checkpoints and notes."""
    elsewhere = work / "elsewhere"
    for step in range(1, 6):
        (elsewhere / "ckpts" / f"step_{step}").mkdir(parents=True)
        (elsewhere / "ckpts" / f"step_{step}" / "trainer_state.pt").write_text("theirs")
    (elsewhere / "samples").mkdir()
    for step in range(1, 4):
        (elsewhere / "samples" / f"step_{step}.json").write_text("their sample")
    (elsewhere / "notes.txt").write_text("their notes")
    return elsewhere


@repro(
    "data loss", "`checkpoints -> V/ckpts` and `config.yaml -> V/notes.txt` in the run dir; train steps=2", slow=True
)
def symlinked_checkpoints_and_config(work: Path) -> Finding:
    elsewhere = _elsewhere(work)
    before = snapshot(elsewhere)
    run_dir = work / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").symlink_to(elsewhere / "ckpts")
    (run_dir / "config.yaml").symlink_to(elsewhere / "notes.txt")
    ran = cli(
        work, "train", *TINY, "steps=2", "checkpoint.keep_last=1", "--run-dir", str(run_dir), bound_s=TRAIN_BOUND_S
    )
    return classify(ran, TRAIN_BOUND_S, lost=changed(before, elsewhere))


@repro("data loss", "`samples -> V/samples` in the run dir; train steps=2 with keep_samples=1", slow=True)
def symlinked_samples(work: Path) -> Finding:
    elsewhere = _elsewhere(work)
    before = snapshot(elsewhere)
    run_dir = work / "run"
    run_dir.mkdir()
    (run_dir / "samples").symlink_to(elsewhere / "samples")
    ran = cli(
        work, "train", *TINY, "steps=2", "logging.keep_samples=1", "--run-dir", str(run_dir), bound_s=TRAIN_BOUND_S
    )
    return classify(ran, TRAIN_BOUND_S, lost=changed(before, elsewhere))


@repro(
    "data loss",
    "a training holds the run dir while `optim.lr=0.05` and the same config again (which only the lock can "
    "stop) start there; then SIGKILL the holder and rerun: no stale lock, every metrics step once",
    slow=True,
)
def two_trainings_one_run_dir(work: Path) -> Finding:
    run_dir, metrics = work / "run", work / "run" / "metrics.jsonl"
    holder_argv = [sys.executable, "-m", "maopd.cli", "train", *TINY, "steps=1000", "--run-dir", str(run_dir)]
    started = time.perf_counter()
    holder = start(holder_argv, work)
    while holder.poll() is None and not (run_dir / ".lock").exists():
        time.sleep(0.05)
    others = [("steps=1000", "optim.lr=0.05"), ("steps=1000",)]
    contenders = [
        (start([*holder_argv[:4], *TINY, *o, "--run-dir", str(run_dir)], work), time.perf_counter()) for o in others
    ]
    other_lr, same = (finish(process, since, TRAIN_BOUND_S) for process, since in contenders)
    wrong = [] if holder.poll() is None else [f"the holder ended early: {holder.communicate()[0][-300:]}"]
    holder.send_signal(signal.SIGKILL)
    finish(holder, started, 2 * TRAIN_BOUND_S)
    done = [json.loads(line)["step"] for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    rerun = cli(work, "train", *TINY, f"steps={len(done) + 1}", "--run-dir", str(run_dir), bound_s=TRAIN_BOUND_S)
    wrong += accepted(other_lr)
    if "in use by another process" not in same.output:
        wrong.append(f"the same config again was not stopped by the lock: {same.last_line}")
    if rerun.returncode != 0:
        wrong.append(f"the rerun after the SIGKILL failed: {rerun.last_line}")
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    if steps != list(range(1, len(done) + 2)):
        wrong.append(f"metrics.jsonl holds steps {steps}")
    if "0.05" in ((run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").is_file() else ""):
        wrong.append("config.yaml claims the other run's lr 0.05")
    if (run_dir / ".lock").exists():
        wrong.append("a stale .lock is left")
    return classify([same, other_lr, rerun], TRAIN_BOUND_S, wrong=wrong)


def _stage1_without_its_record(work: Path, record: str | None) -> Path:
    run_dir = work / "run"
    (run_dir / "stage1" / "checkpoints" / "step_2").mkdir(parents=True)
    (run_dir / "stage1" / "metrics.jsonl").write_text('{"step": 1}\n')
    if record is not None:
        (run_dir / "stage1" / "config.yaml").write_text(record)
    return run_dir


def _pipeline_refused(work: Path, run_dir: Path) -> Finding:
    # the pipeline may first build π_0 into the shared cache: a training's bound
    ran = cli(
        work, "train", "--preset", "smoke", "stage1.optim.lr=0.5", "--run-dir", str(run_dir), bound_s=TRAIN_BOUND_S
    )
    return classify(ran, TRAIN_BOUND_S, wrong=accepted(ran))


@repro("data loss", "pipeline with `stage1/config.yaml` deleted; `train --preset smoke stage1.optim.lr=0.5`")
def pipeline_stage_config_deleted(work: Path) -> Finding:
    return _pipeline_refused(work, _stage1_without_its_record(work, None))


@repro("data loss", "pipeline with a damaged `stage1/config.yaml`; `train --preset smoke stage1.optim.lr=0.5`")
def pipeline_stage_config_damaged(work: Path) -> Finding:
    return _pipeline_refused(work, _stage1_without_its_record(work, "optim: [lr: 1\n"))


@repro("data loss", "`eval manifest --out` equal to its `--dataset`")
def manifest_over_its_dataset(work: Path) -> Finding:
    pool = work / "pool.jsonl"
    pool.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"q {i}?", "golden_answers": ["a"]}) + "\n" for i in range(5))
    )
    before = snapshot(work)
    ran = cli(work, "eval", "manifest", "--dataset", f"d={pool}", "--count", "d=2", "--out", str(pool))
    return classify(ran, COMMAND_BOUND_S, lost=changed(before, work), wrong=accepted(ran))


# ----------------------------------------------------------------------------- security


@repro("security", "a subtask `task` of `<script>alert(1)</script>`; `eval score r.jsonl --out o` writes viewer.html")
def viewer_script(work: Path) -> Finding:
    payload = "<script>alert(1)</script>"
    passage = {"id": payload, "title": payload, "text": payload, "score": 1.0}
    trajectory = {
        "subtasks": [{"wave": 1, "agent": payload, "task": payload}],
        "searches": [{"wave": 1, "agent": payload, "query": payload, "passages": [passage]}],
        "reports": [{"number": 1, "agent": payload, "task": payload, "text": payload}],
        "format_errors": [{"env_step": 1, "agent": payload, "error": payload}],
        "calls": [{"call_id": payload, "agent": payload, "outputs": [payload]}],
    }
    rows = [record(method=f"m{payload}", question=payload, trajectory=trajectory, attempt=a) for a in range(2)]
    ran = cli(
        work, "eval", "score", str(records_file(work / "r.jsonl", rows)), "--out", str(work / "o"), "--draws", "10"
    )
    viewer = work / "o" / "viewer.html"
    html = viewer.read_text(encoding="utf-8") if viewer.is_file() else ""
    leaked = ["viewer.html holds an unescaped <script>"] if payload in html else []
    wrong = [] if ran.returncode != 0 or viewer.is_file() else ["no viewer.html written"]
    return classify(ran, COMMAND_BOUND_S, leaked=leaked, wrong=wrong)


@repro(
    "security",
    "`env.retriever.url=http://u:TOKEN@127.0.0.1:P` in training, then a resume with another host: "
    "the refusal and the run dir",
    slow=True,
)
def url_credentials_in_run_dir(work: Path) -> Finding:
    run_dir = work / "run"
    runs = []
    for host in ("127.0.0.1:9", "127.0.0.2:9"):  # the discard port: nothing answers
        url = f"http://hostile:{SECRET}@{host}"
        argv = ["env.retriever.kind=http", f"env.retriever.url={url}", "env.retriever.retries=0"]
        runs.append(cli(work, "train", *TINY, "steps=2", *argv, "--run-dir", str(run_dir), bound_s=TRAIN_BOUND_S))
    leaked = [found for ran in runs for found in secret_in(SECRET, ran, run_dir)]
    return classify(runs, TRAIN_BOUND_S, leaked=sorted(set(leaked)))


@repro("security", "an OpenAI server answering 401 with the key echoed JSON-escaped (`sk\\u002d...`)")
def key_echoed_json_escaped(work: Path) -> Finding:
    echo = json.dumps({"error": {"message": "bad key " + SECRET.replace("-", "\\u002d")}}).replace("\\\\", "\\")
    with RawServer(lambda request: [http_answer(echo, 401)]) as server:
        ran = openai_eval(work, server.url + "/v1", work / "r.jsonl", "--model", "m")
    return classify(ran, COMMAND_BOUND_S, leaked=secret_in(SECRET, ran, work))


@repro("security", "a key sent over plain http to `evil.localhost` (resolved by DNS, not loopback)")
def key_to_dot_localhost(work: Path) -> Finding:
    ran = openai_eval(work, "http://evil.localhost:9/v1", work / "r.jsonl", "--model", "m")
    refused = "over plain http" in ran.output  # InsecureKeyError, before any request
    return classify(ran, COMMAND_BOUND_S, leaked=[] if refused else ["evil.localhost taken for loopback"])


@repro(
    "security", "a YAML of nested aliases under `variants:` (346 bytes, 9 × 4^12 nodes expanded) as `train --config`"
)
def yaml_alias_bomb(work: Path) -> Finding:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
        for i in range(12)
    ]
    bomb = work / "bomb.yaml"
    bomb.write_text("variants:\n" + textwrap.indent("\n".join(lines), "  ") + "\n")
    ran = cli(work, "train", "--config", str(bomb), "--run-dir", str(work / "run"))
    wrong = [f"the error echoes {len(ran.output)} characters"] if len(ran.output) > 2000 else []
    return classify(ran, COMMAND_BOUND_S, wrong=wrong + accepted(ran))


@repro(
    "security", "the non-finite dump's loader and docs: a planted `nonfinite/step_1.pt` that runs code when unpickled"
)
def planted_nonfinite_pickle(work: Path) -> Finding:
    marker = work / "pwned"
    ran = python(
        work,
        f"""
        import os, pathlib, re, torch
        class Bomb:
            def __reduce__(self):
                return (os.system, ("touch {marker}",))
        path = pathlib.Path("nonfinite/step_1.pt"); path.parent.mkdir()
        torch.save({{"x": Bomb()}}, path)
        texts = ["training/nonfinite.py", "docs/reliability.md", "docs/training.md"]
        unsafe = r"weights_only\\s*=\\s*False"
        advice = [p for p in texts if re.search(unsafe, (pathlib.Path("{REPO}") / p).read_text())]
        try:
            torch.load(path, weights_only=True)  # how the docs say to load it
        except Exception as exc:
            print("refused:", type(exc).__name__)
        print('{{"advice": %r}}'.replace("'", '"') % advice)
        """,
    )
    leaked = ["the planted pickle ran code"] if marker.exists() else []
    advice = last_json(ran).get("advice", [])
    return classify(ran, COMMAND_BOUND_S, leaked=leaked + [f"{p} advises unpickling" for p in advice])


# ----------------------------------------------------------------------------- silent-wrong


def _scripted_eval(work: Path, out: Path, *extra: str) -> Ran:
    manifest = work / "manifest.jsonl"
    if not manifest.exists():
        world_questions(manifest, 2)
    return cli(work, "eval", "run", "--manifest", str(manifest), "--attempts", "1", "--out", str(out), *extra)


@repro("silent-wrong", "`eval run --out r.jsonl` resumed with another `--seed`")
def eval_resume_other_seed(work: Path) -> Finding:
    first = _scripted_eval(work, work / "r.jsonl")
    second = _scripted_eval(work, work / "r.jsonl", "--seed", "1")
    return classify([first, second], COMMAND_BOUND_S, wrong=accepted(second))


@repro("silent-wrong", "`eval run --out r.jsonl` of a model (OpenAI backend) resumed with another `--temperature`")
def eval_resume_other_temperature(work: Path) -> Finding:
    with served(chat_answer("<answer>x</answer>")) as server:
        runs = [
            openai_eval(work, server.url + "/v1", work / "r.jsonl", "--model", "m", "--temperature", t)
            for t in ("0.6", "0.9")
        ]
    return classify(runs, COMMAND_BOUND_S, wrong=accepted(runs[1]))


@repro("silent-wrong", "`eval run --out r.jsonl` resumed with another `--corpus`")
def eval_resume_other_corpus(work: Path) -> Finding:
    first = _scripted_eval(work, work / "r.jsonl")
    corpus = corpus_file(work / "c.jsonl", ["Paris is the capital of France.", "Berlin is in Germany."])
    second = _scripted_eval(work, work / "r.jsonl", "--corpus", str(corpus))
    return classify([first, second], COMMAND_BOUND_S, wrong=accepted(second))


@repro("silent-wrong", "an explicit `--method m` for a cascade run, then a hierarchical run into the same file")
def eval_one_method_two_workflows(work: Path) -> Finding:
    first = _scripted_eval(work, work / "r.jsonl", "--method", "m", "--workflow", "cascade")
    second = _scripted_eval(work, work / "r.jsonl", "--method", "m", "--workflow", "hierarchical")
    return classify([first, second], COMMAND_BOUND_S, wrong=accepted(second))


@repro("silent-wrong", "two `--model`s (OpenAI backend, a 127.0.0.1 server) into one `--out`, default method names")
def eval_default_method_names_the_model(work: Path) -> Finding:
    with served(chat_answer("<answer>x</answer>")) as server:
        runs = [openai_eval(work, server.url + "/v1", work / "r.jsonl", "--model", m) for m in ("alpha", "beta")]
    methods = sorted({json.loads(line)["method"] for line in (work / "r.jsonl").read_text().splitlines()})
    wrong = [] if len(methods) == 2 else [f"records of both models under {methods}"]
    return classify(runs, COMMAND_BOUND_S, wrong=wrong)


@repro("silent-wrong", "a dense index built with `--prefix-style e5`, queried with `prefix_style=none`")
def dense_index_prefix_mismatch(work: Path) -> Finding:
    corpus = corpus_file(work / "c.jsonl", ["Paris is the capital of France.", "Berlin is in Germany."])
    build = cli(work, "index", "build", "--corpus", str(corpus), "--out", str(work / "idx"), "--prefix-style", "e5")
    query = ["retriever", "query", "--corpus", str(corpus), "--set", "kind=dense", "--set", f"index_dir={work / 'idx'}"]
    ran = cli(work, *query, "--set", "prefix_style=none", "Paris")
    return classify([build, ran], COMMAND_BOUND_S, wrong=accepted(ran) if build.returncode == 0 else [])


@repro("silent-wrong", "overrides read as YAML 1.1: `steps=010`, `steps=1:30`")
def overrides_yaml_1_1(work: Path) -> Finding:
    ran = python(
        work,
        f"""
        import json
        from maopd.base.errors import UserError
        from maopd.training.config import load_config
        got = {{"010": load_config("{TINY[1]}", ["steps=010"]).steps}}
        try:
            got["1:30"] = load_config("{TINY[1]}", ["steps=1:30"]).steps
        except UserError as exc:
            got["1:30"] = "refused"
        print(json.dumps(got))
        """,
    )
    got = last_json(ran)
    wrong = [] if got == {"010": 10, "1:30": "refused"} else [f"read as {got}"]
    return classify(ran, COMMAND_BOUND_S, wrong=wrong)


def _retrieval_server(answer) -> RawServer:
    """A retrieval server whose /health is ours and whose /retrieve answers ``answer``."""

    def respond(request: bytes):
        if request.startswith(b"GET /health"):
            return [http_answer(answer.get("health", {"retriever": "bm25", "corpus": "x"}))]
        return [http_answer(answer["retrieve"])]

    return RawServer(respond)


def _query(work: Path, url: str) -> Ran:
    return cli(work, "retriever", "query", "--set", "kind=http", "--set", f"url={url}", "--set", "retries=0", "Paris")


@repro("silent-wrong", 'a retrieval server returning `"score": NaN`')
def retrieval_nan_score(work: Path) -> Finding:
    nan = '{"result": [[{"document": {"id": "1", "contents": "Paris"}, "score": NaN}]]}'
    with _retrieval_server({"retrieve": nan}) as server:
        ran = _query(work, server.url)
    wrong = ["NaN in the results"] if ran.returncode == 0 and "nan" in ran.output.lower() else []
    return classify(ran, COMMAND_BOUND_S, wrong=wrong)


@repro("silent-wrong", "counters of 1e308 in records: `summary.json` must hold no Infinity or NaN")
def huge_counters_in_summary(work: Path) -> Finding:
    rows = [record(attempt=a, counters={"search_actions": 1e308}, input_tokens=1e308) for a in range(2)]
    ran = cli(
        work, "eval", "score", str(records_file(work / "r.jsonl", rows)), "--out", str(work / "o"), "--draws", "10"
    )
    summary = work / "o" / "summary.json"
    text = summary.read_text() if summary.is_file() else ""
    wrong = ["summary.json holds Infinity or NaN"] if "Infinity" in text or "NaN" in text else []
    return classify(ran, COMMAND_BOUND_S, wrong=wrong)


@repro("silent-wrong", "a manifest with a duplicated question id")
def manifest_duplicated_id(work: Path) -> Finding:
    ran = _scripted_eval(work, work / "r.jsonl", "--manifest", str(world_questions(work / "m.jsonl", duplicate=True)))
    return must_be_refused(ran)


@repro("silent-wrong", "a manifest with `golden_answers: []`")
def manifest_no_golden_answer(work: Path) -> Finding:
    ran = _scripted_eval(work, work / "r.jsonl", "--manifest", str(world_questions(work / "m.jsonl", no_answer=True)))
    return must_be_refused(ran)


def _config_refused(work: Path, *overrides: str, preset: bool = False) -> Finding:
    config = ["--preset", "smoke"] if preset else [*TINY, "steps=1"]
    ran = cli(work, "train", *config, *overrides, "--run-dir", str(work / "run"), bound_s=TRAIN_BOUND_S)
    return classify(ran, TRAIN_BOUND_S, wrong=accepted(ran))


@repro("silent-wrong", "negative `ppo.role_loss_weights`")
def negative_role_loss_weight(work: Path) -> Finding:
    return _config_refused(work, "ppo.role_loss_weights={searcher: -1.0}")


@repro("silent-wrong", "`world demos --limit -1` (meant all but one)")
def world_demos_negative_limit(work: Path) -> Finding:
    ran = cli(work, "world", "demos", "--limit", "-1", "--out", str(work / "d.jsonl"))
    return must_be_refused(ran)


@repro("silent-wrong", "`raw_env(config=c, topk=...)` must leave the caller's config alone, accepted or refused")
def env_keeps_callers_config(work: Path) -> Finding:
    ran = python(
        work,
        """
        import copy, json
        from maopd.envs.hierarchical_search_v1 import raw_env
        from maopd.envs.search_env import SearchEnvConfig
        config = SearchEnvConfig()
        before = copy.deepcopy(config)
        raw_env(config=config, topk=2)
        try:
            raw_env(config=config, topk=-7)
        except Exception:
            pass
        print(json.dumps({"unchanged": config == before}))
        """,
    )
    wrong = [] if last_json(ran).get("unchanged") else ["the caller's config changed"]
    return classify(ran, COMMAND_BOUND_S, wrong=wrong if ran.returncode == 0 else [])


@repro("silent-wrong", "`observe('mallory')` on the environment")
def observe_unknown_agent(work: Path) -> Finding:
    ran = python(
        work,
        """
        from maopd.envs.hierarchical_search_v1 import raw_env
        env = raw_env()
        env.reset(seed=0)
        try:
            env.observe("mallory")
            print("observed")
        except ValueError as exc:
            print("refused:", exc)
            sys.exit(2)
        """,
    )
    return must_be_refused(ran)


@repro("silent-wrong", "`|` and a line break in a method name: `tables.md` rows keep their cells")
def pipe_in_method_name(work: Path) -> Finding:
    rows = [record(method=m, attempt=a) for m in ("a|b\nc", "plain") for a in range(2)]
    ran = cli(
        work, "eval", "score", str(records_file(work / "r.jsonl", rows)), "--out", str(work / "o"), "--draws", "10"
    )
    tables = work / "o" / "tables.md"
    wrong = []
    for table in (tables.read_text() if tables.is_file() else "").split("\n\n"):
        widths = {line.replace("\\|", "").count("|") for line in table.splitlines() if line.startswith("|")}
        if len(widths) > 1:
            wrong.append(f"a table whose rows have {sorted(widths)} cell separators")
    return classify(ran, COMMAND_BOUND_S, wrong=wrong)


# ----------------------------------------------------------------------------- hangs


@repro("hangs", "an OpenAI server trickling a byte every 0.25 s; the request must end near `timeout_s`")
def openai_trickle(work: Path) -> Finding:
    answer = http_answer(chat_answer("<answer>" + "x" * 400 + "</answer>"))
    timeout_s = 2
    with RawServer(
        lambda request: [answer[i : i + 1] for i in range(len(answer))], pause_s=0.25, seconds=300
    ) as server:
        ran = python(
            work,
            f"""
            import json, time
            from maopd.agents.openai_policy import OpenAIPolicy, OpenAIPolicyConfig
            from maopd.envs.policy import AgentTurn
            from maopd.envs.prompts import system_message, task_message
            config = OpenAIPolicyConfig(base_url="{server.url}/v1", model="m", api_key_env="{KEY_ENV}",
                                        timeout_s={timeout_s}, max_retries=0)
            turn = AgentTurn(agent="searcher_0", role="searcher", messages=(system_message("searcher"),
                             task_message("capital of France")), allowed=("search", "report"), num_candidates=1)
            policy = OpenAIPolicy(config)
            started = time.monotonic()
            try:
                policy.act([turn])
            finally:
                print(json.dumps({{"request_s": time.monotonic() - started}}), flush=True)
            """,
            env={KEY_ENV: SECRET},
        )
    request_s = last_json(ran).get("request_s", 0.0)
    hung = (
        [f"the request took {request_s:.1f} s, timeout_s {timeout_s}"]
        if request_s > timeout_s + REQUEST_SLACK_S
        else []
    )
    return classify(ran, COMMAND_BOUND_S, wrong=accepted(ran), hung=hung)


@repro("hangs", "an OpenAI server answering a 50 MB body")
def openai_huge_body(work: Path) -> Finding:
    body = json.dumps(chat_answer("<answer>" + "x" * (50 * 2**20) + "</answer>"))
    with RawServer(lambda request: [http_answer(body)], seconds=120) as server:
        ran = openai_eval(work, server.url + "/v1", work / "r.jsonl", "--model", "m")
    return must_be_refused(ran)


# ----------------------------------------------------------------------------- tracebacks


@repro(
    "tracebacks",
    "a full disk at the second checkpoint's save: ENOSPC without a file name, and torch.save's `unexpected pos` "
    "(injected into torch.save)",
    slow=True,
)
def full_disk_checkpoint(work: Path) -> Finding:
    runs, wrong = [], []
    failures = {
        "enospc": 'OSError(errno.ENOSPC, "No space left on device")',
        "short_write": 'RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 6912 vs 6803")',
    }
    for name, failure in failures.items():
        run_dir = work / name
        ran = python(
            work,
            f"""
            import errno, torch
            from maopd.cli import main
            real_save, calls = torch.save, []
            def full(obj, f, *args, **kwargs):
                calls.append(f)
                if len(calls) > 1:  # the first checkpoint saves; the disk is full at the second
                    raise {failure}
                return real_save(obj, f, *args, **kwargs)
            torch.save = full
            sys.exit(main(["train", *{TINY!r}, "steps=2", "--run-dir", "{run_dir}"]))
            """,
            bound_s=TRAIN_BOUND_S,
        )
        runs.append(ran)
        wrong += [f"{name}: {w}" for w in accepted(ran)]
        latest = run_dir / "checkpoints" / "latest"
        if not latest.is_file() or latest.read_text().strip() != "step_1":
            wrong.append(f"{name}: step_1 is not the latest checkpoint any more")
        if list((run_dir / "checkpoints").glob("*.staging-*")):
            wrong.append(f"{name}: a staging directory is left")
    return classify(runs, TRAIN_BOUND_S, wrong=wrong)


@repro(
    "tracebacks",
    "valid JSON but wrong `trainer_state.json` in the last checkpoint (`{}`, a tensor index of 99999, "
    '`"step": "four"`): each resume falls back to the previous checkpoint',
    slow=True,
)
def wrong_trainer_state(work: Path) -> Finding:
    base = work / "base"
    runs = [cli(work, "train", *TINY, "steps=2", "--run-dir", str(base), bound_s=TRAIN_BOUND_S)]
    wrong = []
    for name, damage in (
        ("empty", lambda state: {}),
        (
            "tensor index",
            lambda state: json.loads(json.dumps(state).replace('{"__tensor__": 0}', '{"__tensor__": 99999}')),
        ),
        ("step", lambda state: state | {"step": "four"}),
    ):
        run_dir = work / name.replace(" ", "_")
        shutil.copytree(base, run_dir, symlinks=True)
        state_file = run_dir / "checkpoints" / "step_2" / "trainer_state.json"
        state_file.write_text(json.dumps(damage(json.loads(state_file.read_text()))))
        ran = cli(work, "train", *TINY, "steps=3", "--run-dir", str(run_dir), bound_s=TRAIN_BOUND_S)
        runs.append(ran)
        if ran.returncode != 0:
            wrong.append(f"{name}: no fall-back to step_1 ({ran.last_line})")
        elif "step_2" not in ran.output:
            wrong.append(f"{name}: resumed without naming the damaged step_2")
    return classify(runs, TRAIN_BOUND_S, wrong=wrong)


@repro("tracebacks", "200,000 nested `[` in a JSONL file (`eval score`)")
def deeply_nested_jsonl(work: Path) -> Finding:
    path = records_file(work / "r.jsonl", ["[" * 200_000 + "]" * 200_000])
    ran = cli(work, "eval", "score", str(path), "--out", str(work / "o"))
    return must_be_refused(ran)


@repro("tracebacks", "a corpus with no indexable word (`index build --kind bm25`)")
def corpus_without_words(work: Path) -> Finding:
    corpus = work / "c.jsonl"
    corpus.write_text('{"id": "1", "contents": "!!! ???"}\n{"id": "2", "contents": "the a of"}\n')
    ran = cli(work, "index", "build", "--kind", "bm25", "--corpus", str(corpus), "--out", str(work / "idx"))
    return must_be_refused(ran)


@repro("tracebacks", "a corpus holding a lone surrogate `\\ud800` (`index build --kind bm25`)")
def corpus_lone_surrogate(work: Path) -> Finding:
    corpus = work / "c.jsonl"
    corpus.write_text('{"id": "1", "contents": "Title\\nbad \\ud800 text"}\n{"id": "2", "contents": "T\\nfine"}\n')
    ran = cli(work, "index", "build", "--kind", "bm25", "--corpus", str(corpus), "--out", str(work / "idx"))
    return classify(ran, COMMAND_BOUND_S)


def _openai_answers(work: Path, body) -> Finding:
    with served(body) as server:
        ran = openai_eval(work, server.url + "/v1", work / "r.jsonl", "--model", "m")
    return classify(ran, COMMAND_BOUND_S, wrong=accepted(ran), leaked=secret_in(SECRET, ran, work))


@repro("tracebacks", "an OpenAI server answering `[1, 2]`")
def openai_answers_a_list(work: Path) -> Finding:
    return _openai_answers(work, [1, 2])


@repro("tracebacks", "an OpenAI server answering `null`")
def openai_answers_null(work: Path) -> Finding:
    return _openai_answers(work, "null")


@repro("tracebacks", "an OpenAI server answering non-string `content`")
def openai_non_string_content(work: Path) -> Finding:
    return _openai_answers(work, chat_answer({"text": 5}))


@repro("tracebacks", "a dead OpenAI server (nothing listens on the port)")
def openai_dead_server(work: Path) -> Finding:
    ran = openai_eval(work, "http://127.0.0.1:9/v1", work / "r.jsonl", "--model", "m")
    return must_be_refused(ran)


@repro("tracebacks", "retrieval `/health` answering `[1, 2]`")
def retrieval_health_list(work: Path) -> Finding:
    ok = {"result": [[{"document": {"id": "1", "contents": "Paris"}, "score": 1.0}]]}
    with _retrieval_server({"health": [1, 2], "retrieve": ok}) as server:
        ran = _query(work, server.url)
    return classify(ran, COMMAND_BOUND_S)


@repro("tracebacks", "malformed `/retrieve` results (rows that are not lists, documents without fields)")
def retrieval_malformed_results(work: Path) -> Finding:
    runs = []
    for body in ({"result": [5]}, {"result": [[{"document": 3}]]}, {"result": "x"}):
        with _retrieval_server({"retrieve": body}) as server:
            runs.append(_query(work, server.url))
    return classify(runs, COMMAND_BOUND_S, wrong=[w for ran in runs for w in accepted(ran)])


@repro("tracebacks", "seeds outside numpy's range: `seed=-1`, `seed=4294967296` in a training config")
def seeds_out_of_range(work: Path) -> Finding:
    runs = [
        cli(work, "train", *TINY, f"seed={seed}", "--run-dir", str(work / "run"), bound_s=TRAIN_BOUND_S)
        for seed in (-1, 2**32)
    ]
    return classify(runs, TRAIN_BOUND_S, wrong=[w for ran in runs for w in accepted(ran)])


@repro("tracebacks", "`optim.betas=[2,3]`")
def betas_out_of_range(work: Path) -> Finding:
    return _config_refused(work, "optim.betas=[2,3]")


@repro("tracebacks", "`base_model.world_size=bogus` (smoke preset)")
def unknown_world_size(work: Path) -> Finding:
    return _config_refused(work, "base_model.world_size=bogus", preset=True)


@repro("tracebacks", "a damaged `eval:` section in the run dir's `pipeline.yaml` (smoke preset)")
def damaged_pipeline_record(work: Path) -> Finding:
    run_dir = work / "run"
    (run_dir / "eval").mkdir(parents=True)
    (run_dir / "eval" / "records.jsonl").write_text("")
    (run_dir / "pipeline.yaml").write_text("eval: 5\nbase_model: {}\n")
    ran = cli(work, "train", "--preset", "smoke", "--run-dir", str(run_dir), bound_s=TRAIN_BOUND_S)
    return classify(ran, TRAIN_BOUND_S, wrong=accepted(ran))


@repro("tracebacks", "`eval score` of a malformed trajectory and of a 10^400 counter")
def malformed_records(work: Path) -> Finding:
    huge = json.dumps(record())[:-1] + ', "input_tokens": 1' + "0" * 400 + "}"
    runs = [
        cli(work, "eval", "score", str(records_file(work / f"{name}.jsonl", [row])), "--out", str(work / name))
        for name, row in (("trajectory", record(trajectory={"subtasks": 5})), ("counter", huge))
    ]
    return classify(runs, COMMAND_BOUND_S, wrong=[w for ran in runs for w in accepted(ran)])


@repro("tracebacks", "a retrieval `cache_path` that is garbage or a directory, and `cache_max_entries=-5`")
def bad_retrieval_cache(work: Path) -> Finding:
    corpus = corpus_file(work / "c.jsonl", ["Paris is the capital of France.", "Berlin is in Germany."])
    (work / "garbage.sqlite").write_bytes(os.urandom(4096))
    (work / "a_dir").mkdir()
    query = ["retriever", "query", "--corpus", str(corpus), "--set", "kind=bm25", "--set", "cache=true"]
    runs = [
        cli(work, *query, "--set", setting, "Paris")
        for setting in (f"cache_path={work / 'garbage.sqlite'}", f"cache_path={work / 'a_dir'}", "cache_max_entries=-5")
    ]
    return classify(runs, COMMAND_BOUND_S, wrong=[w for ran in runs for w in accepted(ran)])


@repro("tracebacks", "`play --seed -1` and `play --question-index 99999`")
def play_out_of_range(work: Path) -> Finding:
    runs = [cli(work, "play", *argv) for argv in (["--seed", "-1"], ["--question-index", "99999"])]
    return classify(runs, COMMAND_BOUND_S, wrong=[w for ran in runs for w in accepted(ran)])


@repro("tracebacks", "`world demos --noise 5`")
def world_demos_noise(work: Path) -> Finding:
    ran = cli(work, "world", "demos", "--noise", "5", "--out", str(work / "d.jsonl"))
    return must_be_refused(ran)


@repro("tracebacks", "a corpus and a manifest starting with a UTF-8 byte order mark (must be read)")
def byte_order_marks(work: Path) -> Finding:
    corpus = corpus_file(work / "c.jsonl", ["Paris is the capital of France.", "Berlin is in Germany."], bom=True)
    index = cli(work, "index", "build", "--kind", "bm25", "--corpus", str(corpus), "--out", str(work / "idx"))
    manifest = world_questions(work / "m.jsonl")
    manifest.write_text("\ufeff" + manifest.read_text(), encoding="utf-8")
    ran = _scripted_eval(work, work / "r.jsonl", "--manifest", str(manifest))
    refused = [f"{name} refused: {r.last_line}" for name, r in (("corpus", index), ("manifest", ran)) if r.returncode]
    return classify([index, ran], COMMAND_BOUND_S, wrong=refused)


# ----------------------------------------------------------------------------- round 4: links, secrets, models, bounds


def _victims(work: Path, *names: str) -> Path:
    """Someone else's files, one per name, outside the command's output directory."""
    victims = work / "victims"
    victims.mkdir()
    for name in names:
        (victims / name).write_text(f"their {name}")
    return victims


def _links_to_victims(out: Path, victims: Path, names: tuple[str, ...]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        (out / name).symlink_to(victims / name)


@repro("data loss", "`viewer.html`, `tables.md`, `summary.json` symlinked out of `eval score`'s `--out`")
def links_in_eval_score_out(work: Path) -> Finding:
    names = ("viewer.html", "tables.md", "summary.json")
    victims = _victims(work, *names)
    _links_to_victims(work / "o", victims, names)
    before = snapshot(victims)
    rows = [record(attempt=a) for a in range(2)]
    ran = cli(work, "eval", "score", str(records_file(work / "r.jsonl", rows)), "--out", str(work / "o"))
    return classify(ran, COMMAND_BOUND_S, lost=changed(before, victims))


@repro("data loss", "`m.jsonl.report.json` symlinked elsewhere; `eval manifest --out m.jsonl`")
def link_at_manifest_report(work: Path) -> Finding:
    victims = _victims(work, "report.json")
    (work / "m.jsonl.report.json").symlink_to(victims / "report.json")
    pool = work / "pool.jsonl"
    pool.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"q {i}?", "golden_answers": ["a"]}) + "\n" for i in range(5))
    )
    before = snapshot(victims)
    ran = cli(work, "eval", "manifest", "--dataset", f"d={pool}", "--count", "d=2", "--out", str(work / "m.jsonl"))
    return classify(ran, COMMAND_BOUND_S, lost=changed(before, victims))


@repro("data loss", "`corpus.jsonl` symlinked out of `world build --out`")
def link_in_world_build_out(work: Path) -> Finding:
    victims = _victims(work, "corpus.jsonl")
    _links_to_victims(work / "w", victims, ("corpus.jsonl",))
    before = snapshot(victims)
    ran = cli(work, "world", "build", "--size", "tiny", "--out", str(work / "w"))
    return classify(ran, COMMAND_BOUND_S, lost=changed(before, victims))


@repro("data loss", "`cp -al runs/a runs/b`, then train `runs/b` with another lr: `runs/a` must not change", slow=True)
def hard_linked_run_copy(work: Path) -> Finding:
    first = cli(work, "train", *TINY, "steps=1", "--run-dir", str(work / "a"), bound_s=TRAIN_BOUND_S)
    subprocess.run(["cp", "-al", str(work / "a"), str(work / "b")], check=True)
    before = snapshot(work / "a")
    second = cli(work, "train", *TINY, "steps=2", "--run-dir", str(work / "b"), bound_s=TRAIN_BOUND_S)
    return classify([first, second], TRAIN_BOUND_S, lost=changed(before, work / "a"))


@repro("security", "`eval run --retriever-set url=http://user:SECRET@127.0.0.1:P`: `OUT.settings.json`")
def secret_in_eval_settings(work: Path) -> Finding:
    ok = {"result": [[{"document": {"id": "1", "contents": "Paris"}, "score": 1.0}]]}
    with _retrieval_server({"retrieve": ok}) as server:
        url = server.url.replace("http://", f"http://user:{SECRET}@")
        ran = _scripted_eval(work, work / "r.jsonl", "--retriever-set", "kind=http", "--retriever-set", f"url={url}")
    return classify(ran, COMMAND_BOUND_S, leaked=secret_in(SECRET, ran, work))


@repro("security", "`--backend openai --base-url http://user:S@127.0.0.1:1/v1?api_key=S`, a run that fails")
def secret_in_failed_eval_settings(work: Path) -> Finding:
    ran = openai_eval(work, f"http://user:{SECRET}@127.0.0.1:1/v1?api_key={SECRET}", work / "r.jsonl", "--model", "m")
    return classify(ran, COMMAND_BOUND_S, leaked=secret_in(SECRET, ran, work))


def _tiny_model(work: Path, edit: str = "", config: dict | None = None, as_bin: bool = False) -> Path:
    """A saved tiny model, its weights changed by ``edit`` (Python on ``tensors``) and its
    config.json by ``config``; with ``as_bin``, its weights saved as ``pytorch_model.bin`` instead."""
    model = work / "model"
    ran = python(
        work,
        f"""
        import json, os
        import torch
        from safetensors.torch import load_file, save_file
        from maopd.agents.tiny_model import build_tiny_lm, save_model
        save_model(*build_tiny_lm(["The capital of France is Paris."]), {str(model)!r})
        tensors = load_file({str(model / "model.safetensors")!r})
        {edit or "pass"}
        if {as_bin!r}:
            os.remove({str(model / "model.safetensors")!r})
            torch.save(tensors, {str(model / "pytorch_model.bin")!r})
        else:
            save_file(tensors, {str(model / "model.safetensors")!r})
        path = {str(model / "config.json")!r}
        with open(path) as handle:
            saved = json.load(handle)
        with open(path, "w") as handle:
            json.dump(saved | {config or {}!r}, handle)
        """,
    )
    if ran.returncode != 0:
        raise RuntimeError(f"could not save the tiny model: {ran.last_line}")
    return model


def _model_eval(work: Path, model: Path | str, env: dict[str, str] | None = None) -> Ran:
    world_questions(work / "manifest.jsonl", 1)
    return cli(
        work, "eval", "run", "--manifest", str(work / "manifest.jsonl"), "--attempts", "1", "--policy", "checkpoint",
        "--model", str(model), "--max-new-tokens", "4", "--out", str(work / "r.jsonl"), env=env,
    )  # fmt: skip


@repro("silent-wrong", "a `model.safetensors` without `model.embed_tokens.weight` (`eval run --model`)")
def model_without_embeddings(work: Path) -> Finding:
    return must_be_refused(_model_eval(work, _tiny_model(work, 'tensors.pop("model.embed_tokens.weight")')))


@repro("silent-wrong", "weights saved as int32 (`eval run --model`)")
def model_int32_weights(work: Path) -> Finding:
    edit = "tensors = {k: v.to(torch.int32) for k, v in tensors.items()}"
    return must_be_refused(_model_eval(work, _tiny_model(work, edit)))


@repro("silent-wrong", "the corpus rewritten in place between `eval run --attempts 2` and `--attempts 3`")
def corpus_rewritten_between_resumes(work: Path) -> Finding:
    corpus = corpus_file(work / "c.jsonl", ["Paris is the capital of France.", "Berlin is in Germany."])
    first = _scripted_eval(work, work / "r.jsonl", "--corpus", str(corpus))
    corpus_file(corpus, ["Rome is the capital of France.", "Berlin is in Germany."])
    second = _scripted_eval(work, work / "r.jsonl", "--corpus", str(corpus), "--attempts", "2")
    return classify([first, second], COMMAND_BOUND_S, wrong=accepted(second))


@repro("tracebacks", "a tensor of the wrong shape (`eval run --model`)")
def model_wrong_shape(work: Path) -> Finding:
    return must_be_refused(_model_eval(work, _tiny_model(work, 'tensors["model.norm.weight"] = torch.ones(3)')))


@repro("tracebacks", "`hidden_size: 1e6` in config.json (`eval run --model`)")
def model_float_hidden_size(work: Path) -> Finding:
    return must_be_refused(_model_eval(work, _tiny_model(work, config={"hidden_size": 1e6})))


@repro("tracebacks", "all-NaN embeddings (`eval run --model`)")
def model_nan_embeddings(work: Path) -> Finding:
    edit = 'tensors["model.embed_tokens.weight"].fill_(float("nan"))'
    return must_be_refused(_model_eval(work, _tiny_model(work, edit)))


@repro("tracebacks", "a chat template the Jinja sandbox refuses (`eval run --model`)")
def model_sandboxed_template(work: Path) -> Finding:
    model = _tiny_model(work)
    (model / "chat_template.jinja").write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    return must_be_refused(_model_eval(work, model))


@repro("tracebacks", "a credit-benchmark plug-in that raises, returns None or NaN, or changes its episodes")
def credit_plugin_errors(work: Path) -> Finding:
    bodies = {
        "raises": 'raise KeyError("no column")',
        "none": "return None",
        "nan": "return [np.full(len(ep.decisions), np.nan) for ep in episodes]",
        "mutates": "episodes[0].decisions.pop()\n    return [np.zeros(len(ep.decisions)) for ep in episodes]",
    }
    runs = []
    for name, body in bodies.items():
        plugin = work / f"{name}.py"
        plugin.write_text(
            "import numpy as np\nfrom maopd.training.marl.credit import register\n\n\n"
            f'@register("{name}")\ndef method(episodes, context):\n    {body}\n'
        )
        started = time.perf_counter()
        argv = [sys.executable, "-m", "benchmarks.credit_assignment", "--plugin", str(plugin), "--methods", name]
        argv += ["--scenarios", "lazy_searcher_v1", "--seeds", "0", "1", "--iterations", "1", "--episodes", "4"]
        argv += ["--eval-questions", "4", "--workers", "2", "--out", str(work / f"out_{name}")]
        ran = finish(start(argv, REPO), started, COMMAND_BOUND_S)
        runs.append(ran)
    return classify(runs, COMMAND_BOUND_S, wrong=[a for r in runs for a in accepted(r)])


@repro("tracebacks", "`train env.retriever.kind=pyserini env.retriever.index_dir=/nonexistent`")
def pyserini_missing_index(work: Path) -> Finding:
    return _config_refused(work, "env.retriever.kind=pyserini", "env.retriever.index_dir=/nonexistent")


@repro("tracebacks", "`raw_env`'s `render`, `observe` and `last` before `reset`")
def env_before_reset(work: Path) -> Finding:
    ran = python(
        work,
        """
        import json
        from maopd.envs.hierarchical_search_v1 import raw_env
        said = {}
        for method, args in (("render", ()), ("observe", ("leader",)), ("last", ())):
            try:
                getattr(raw_env(render_mode="ansi"), method)(*args)
                said[method] = "accepted"
            except RuntimeError as exc:
                said[method] = str(exc)
        print(json.dumps(said))
        """,
    )
    said = last_json(ran)
    wrong = [f"{m}: {s}" for m, s in said.items() if "call reset() first" not in s]
    return classify(ran, COMMAND_BOUND_S, wrong=wrong)


@repro("hangs", "`num_hidden_layers: 200000` in config.json (`eval run --model`)")
def model_200000_layers(work: Path) -> Finding:
    return must_be_refused(_model_eval(work, _tiny_model(work, config={"num_hidden_layers": 200000})))


@repro("hangs", "`train ... rollout.batch_size=1000000000000`")
def huge_batch_size(work: Path) -> Finding:
    return _config_refused(work, "rollout.batch_size=1000000000000")


# ----------------------------------------------------------------------------- inputs by content, hub ids, .bin weights

HUB_REVISION = "0123456789abcdef0123456789abcdef01234567"


def _policy(work: Path) -> Path:
    """π_0 of the tiny config (``model.path: tiny``) saved as a model directory a run can start from."""
    model = work / "pi0"
    ran = python(
        work,
        f"""
        from maopd.agents.tiny_model import save_model
        from maopd.training.config import ModelConfig
        from maopd.training.model_loading import build_tiny_policy
        save_model(*build_tiny_policy(ModelConfig()), {str(model)!r})
        """,
    )
    if ran.returncode != 0:
        raise RuntimeError(f"could not save the tiny policy: {ran.last_line}")
    return model


def _rewrite_weights(work: Path, model: Path) -> None:
    """The same tensors, names and shapes with other values: a model rewritten in place."""
    weights = str(model / "model.safetensors")
    ran = python(
        work,
        f"""
        from safetensors.torch import load_file, save_file
        tensors = load_file({weights!r})
        tensors["model.norm.weight"] += 1
        save_file(tensors, {weights!r}, metadata={{"format": "pt"}})
        """,
    )
    if ran.returncode != 0:
        raise RuntimeError(f"could not rewrite the weights: {ran.last_line}")


def _resumed_training(work: Path, overrides: list[str], rewrite: Callable[[], None]) -> Finding:
    """``train steps=1`` with ``overrides``, ``rewrite`` an input in place, then the resume at
    ``steps=2``, which must be refused."""
    run = ["train", *TINY, *overrides]
    first = cli(work, *run, "steps=1", "--run-dir", str(work / "run"), bound_s=TRAIN_BOUND_S)
    rewrite()
    second = cli(work, *run, "steps=2", "--run-dir", str(work / "run"), bound_s=TRAIN_BOUND_S)
    return classify([first, second], TRAIN_BOUND_S, wrong=accepted(second) if first.returncode == 0 else [])


@repro(
    "silent-wrong",
    "the model directory of `model.path` rewritten in place between `train steps=1` and its resume at `steps=2`",
    slow=True,
)
def training_model_rewritten_between_resumes(work: Path) -> Finding:
    model = _policy(work)
    return _resumed_training(work, [f"model.path={model}"], lambda: _rewrite_weights(work, model))


@repro(
    "silent-wrong",
    "the `env.corpus` file rewritten in place between `train steps=1` and its resume at `steps=2`",
    slow=True,
)
def training_corpus_rewritten_between_resumes(work: Path) -> Finding:
    corpus = corpus_file(work / "c.jsonl", ["Paris is the capital of France.", "Berlin is in Germany."])

    def rewrite() -> None:
        corpus_file(corpus, ["Rome is the capital of France.", "Berlin is in Germany."])

    return _resumed_training(work, [f"env.corpus={corpus}"], rewrite)


def _hub_cache(work: Path, model: Path, repo_id: str) -> dict[str, str]:
    """``model`` as hub id ``repo_id`` in a Hugging Face cache of huggingface_hub's layout, read
    offline: the environment that points a command at it."""
    repo = work / "hub" / ("models--" + repo_id.replace("/", "--"))
    shutil.copytree(model, repo / "snapshots" / HUB_REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(HUB_REVISION)
    return {"HF_HUB_CACHE": str(work / "hub"), "HF_HOME": str(work / "hf_home"), "HF_HUB_OFFLINE": "1"}


@repro("hangs", "`num_hidden_layers: 200000` in a hub id's cached config.json (`eval run --model org/name`)")
def hub_id_200000_layers(work: Path) -> Finding:
    env = _hub_cache(work, _tiny_model(work, config={"num_hidden_layers": 200000}), "maopd-hostile/deep")
    return must_be_refused(_model_eval(work, "maopd-hostile/deep", env))


@repro("silent-wrong", "`pytorch_model.bin` weights saved as int32 (`eval run --model`)")
def bin_int32_weights(work: Path) -> Finding:
    edit = "tensors = {k: v.to(torch.int32) for k, v in tensors.items()}"
    return must_be_refused(_model_eval(work, _tiny_model(work, edit, as_bin=True)))


@repro("security", "a `pytorch_model.bin` holding an object that runs code when unpickled (`eval run --model`)")
def bin_planted_pickle(work: Path) -> Finding:
    marker = work / "pwned"
    plant = f'type("Bomb", (), {{"__reduce__": lambda self: (os.system, ("touch {marker}",))}})()'
    model = _tiny_model(work, f'tensors["model.norm.weight"] = {plant}', as_bin=True)
    ran = _model_eval(work, model)
    leaked = ["the planted pickle ran code"] if marker.exists() else []
    return classify(ran, COMMAND_BOUND_S, leaked=leaked, wrong=accepted(ran))


# ----------------------------------------------------------------------------- report


def run_one(item: Repro, work: Path) -> dict:
    directory = work / item.name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    started = time.perf_counter()
    try:
        finding = item.run(directory)
    except Exception as exc:  # the harness's own failure is reported, never hidden as an outcome
        finding = Finding("harness error", f"{type(exc).__name__}: {exc}")
    finding.seconds = finding.seconds or round(time.perf_counter() - started, 2)
    finding.detail = finding.detail.replace(str(work), "$WORK")  # the same text whatever the temporary directory
    print(f"{item.name}: {finding.outcome} ({finding.detail[:160]})", flush=True)
    return {"name": item.name, "group": item.group, "what": item.what} | vars(finding)


def run_all(selected: list[Repro], work: Path, jobs: int) -> list[dict]:
    """The repros, ``jobs`` at a time (each in its own directory, with its own servers), those that
    train first since they take longest; the results in the groups' order."""
    longest_first = sorted(selected, key=lambda item: not item.slow)
    with ThreadPoolExecutor(jobs) as pool:
        done = {row["name"]: row for row in pool.map(lambda item: run_one(item, work), longest_first)}
    return [done[item.name] for item in selected]


def before_the_fix(row: dict) -> str:
    """A repro's outcomes in the runs on earlier commits (``--before``): reproduced there, or not."""
    said = []
    for earlier in row.get("before", []):
        outcome, commit = earlier["outcome"], earlier["commit"]
        if outcome == "harness error":
            said.append(f"could not run on {commit} ({earlier['detail']})")
        else:
            verdict = "reproduced" if outcome in FAILURES else "not reproduced"
            said.append(f"{verdict} on {commit}: {outcome} ({earlier['detail']})")
    return "; ".join(said) or "not run"


def readme(report: dict) -> str:
    counts = report["counts"]
    lines = [
        "# Hostile inputs: the repros against the current code",
        "",
        f"- **Command**: `{report['command']}` (writes `hostile_inputs.json` and this README).",
        f"- **Commit**: {report['commit']}.",
        f"- **Machine**: {report['machine']}; {report['total_seconds']} s in all.",
        "- **Outcomes** (benchmarks/hostile_inputs.py's docstring defines them): "
        + ", ".join(f"{counts.get(o, 0)} {o}" for o in (*OUTCOMES, "harness error") if counts.get(o) or o in OUTCOMES)
        + ".",
    ]
    before = report.get("before", [])
    if before:
        lines += [
            "- **Before the fix** (`--before`): the repros run on earlier commits, each in a checkout of that commit "
            "with its own environment, by this harness copied there (its `--only` repros), so that the old code "
            "answers them. A repro *reproduced* there when its outcome was a failure (traceback, silent-wrong, data "
            "loss, leak, hang):",
            *(
                f"  - {earlier['commit']}: `{earlier['command']}` ({earlier['machine']}), `{earlier['file']}`."
                for earlier in before
            ),
        ]
    lines += ["", "| group | repro | outcome | s | detail |" + (" before the fix |" if before else "")]
    lines.append("|---|---|---|---|---|" + ("---|" if before else ""))
    for row in report["results"]:
        cells = [
            row["group"],
            f"`{row['name']}`: {row['what']}",
            row["outcome"],
            f"{row['seconds']:.0f}",
            row["detail"],
            *([before_the_fix(row)] if before else []),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def read_earlier(paths: list[Path]) -> list[dict]:
    """The reports of ``--before``: this harness's ``hostile_inputs.json`` of runs on earlier commits."""
    earlier = []
    for path in paths:
        report = read_json_file(path, ValueError, "--before report")
        if not isinstance(report, dict) or not {"commit", "command", "machine", "results"} <= set(report):
            raise ValueError(f"{path}: not a hostile_inputs.json of this harness")
        shown = path.resolve().relative_to(REPO) if path.resolve().is_relative_to(REPO) else path
        earlier.append(report | {"file": str(shown)})
    return earlier


def add_earlier(earlier: list[dict], results: list[dict]) -> list[dict]:
    """Each repro's outcome in the ``earlier`` runs added to its row of ``results`` (``row["before"]``);
    returns what the report says of those runs."""
    for report in earlier:
        outcomes = {row["name"]: row for row in report["results"]}
        for row in results:
            if row["name"] in outcomes:
                then = outcomes[row["name"]]
                row.setdefault("before", []).append(
                    {"commit": report["commit"], "outcome": then["outcome"], "detail": then["detail"]}
                )
    return [{key: report[key] for key in ("commit", "command", "machine", "file")} for report in earlier]


def machine() -> str:
    """The machine, and the address space a process may take when it is limited (``ulimit -v``)."""
    described = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit != resource.RLIM_INFINITY:
        described += f", address space limited to {limit / 2**30:.1f} GiB per process (ulimit -v)"
    return described


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for hostile_inputs.json and README.md")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these repros only")
    parser.add_argument("--quick", action="store_true", help="skip the repros that train a model")
    parser.add_argument("--jobs", type=positive_int, default=1, help="repros run at a time (default 1)")
    parser.add_argument("--work", type=Path, help="where the repros run (default: a temporary directory, removed)")
    parser.add_argument(
        "--before",
        nargs="+",
        type=Path,
        default=[],
        metavar="JSON",
        help="hostile_inputs.json of runs of this harness on earlier commits: the README says whether each "
        "repro reproduced there",
    )
    args = parser.parse_args(argv)
    known = {item.name for item in REPROS}
    if args.only and set(args.only) - known:
        parser.error(f"--only: unknown repro(s) {sorted(set(args.only) - known)}")
    selected = [r for r in REPROS if (not args.only or r.name in args.only) and not (args.quick and r.slow)]
    try:
        earlier = read_earlier(args.before)
    except ValueError as exc:
        parser.error(f"--before: {exc}")
    work = args.work or Path(tempfile.mkdtemp(prefix="maopd-hostile-"))
    started = time.time()
    results = run_all(selected, work, args.jobs)
    counts = Counter(row["outcome"] for row in results)
    before = add_earlier(earlier, results)
    report = {
        "command": "OMP_NUM_THREADS=1 python benchmarks/hostile_inputs.py " + " ".join(argv or sys.argv[1:]),
        "commit": git_commit(short=True),
        "machine": machine(),
        "total_seconds": round(time.time() - started, 1),
        "counts": {o: counts.get(o, 0) for o in (*OUTCOMES, "harness error")},
        "failures": sum(counts.get(o, 0) for o in (*FAILURES, "harness error")),
        "before": before,
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "hostile_inputs.json", report, indent=2)
    write_text_atomically(args.out / "README.md", readme(report))
    print(", ".join(f"{n} {o}" for o, n in report["counts"].items()) + f"; wrote {args.out}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
