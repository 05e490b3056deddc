"""The files a training run reads, recorded by content, so that a resume notices one rewritten in place.

A stage run reads from disk the model it starts from (``model.path``: a model directory, or the
model of a checkpoint or run directory), the Teacher and KL reference when a checkpoint is loaded
for them (``teacher.path``), the corpus and questions the environments play (``env.corpus``,
``env.questions``) and PPO-ptx's examples (``ptx.data``, when ``ptx.coef > 0``). The config records
their paths; ``RUN_DIR/inputs.json`` records each one's content fingerprint
(``maopd.base.fingerprint``), redacted as ``config.yaml`` is. A run that resumes from a checkpoint
is refused before any work, in one line naming the file, when one of them holds other content than
the one recorded (a corpus or model rewritten in place), or when the record holds no fingerprint of
it. The tiny model, a Hugging Face hub id and the embedded world are no files of the user's and are
not recorded; a retriever's saved index records its corpus's fingerprint itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from maopd.base.config import ConfigError
from maopd.base.fingerprint import changed_input, input_fingerprints
from maopd.base.json_files import read_json_file, write_json
from maopd.base.secrets import redact_strings
from maopd.training.config import TrainConfig
from maopd.training.model_loading import frozen_sources, model_source

INPUTS_FILE = "inputs.json"


def input_files(config: TrainConfig) -> dict[str, str | None]:
    """The files ``config``'s run reads, by name (a model by its resolved model directory)."""
    files = {"model": _model_dir(config.model.path) if config.model.path != "tiny" else None}
    if "checkpoint" in frozen_sources(config) and config.teacher.path is not None:
        files["teacher"] = _model_dir(config.teacher.path)
    files |= {"corpus": config.env.corpus, "questions": config.env.questions}
    files["ptx_data"] = config.ptx.data if config.ptx.coef > 0 else None
    return {name: None if path is None else os.path.abspath(path) for name, path in files.items()}


def _model_dir(path: str) -> str | None:
    source = model_source(path)
    return str(source) if isinstance(source, Path) else None  # a hub id has no directory of the user's


def checked_inputs(config: TrainConfig, resuming: bool) -> dict[str, dict[str, str]]:
    """The fingerprints of ``config``'s inputs, to record in its run directory; when ``resuming``,
    first a ``ConfigError`` naming the first input whose content differs from the recorded one."""
    now = input_fingerprints(input_files(config))
    if not resuming:
        return now
    record = Path(config.run_dir) / INPUTS_FILE
    recorded = read_json_file(record, ConfigError, "inputs record") if record.is_file() else {}
    changed = changed_input(recorded, now)
    if changed is not None:
        raise ConfigError(
            f"{changed.file}: the {changed.label} holds other content than the one run_dir {config.run_dir} was "
            f"trained from ({changed.was} -> {changed.now}, by {record}); a run resumes only from the inputs that "
            "made it: restore it, or train in another run_dir"
        )
    return now


def record_inputs(run_dir: str | Path, fingerprints: dict[str, dict[str, str]]) -> None:
    """Write ``RUN_DIR/inputs.json``: ``fingerprints`` with every string redacted as a saved config's is."""
    write_json(Path(run_dir) / INPUTS_FILE, redact_strings(fingerprints), indent=1, sort_keys=True)
