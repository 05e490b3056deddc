"""Where a run's metrics and samples go: ``metrics.jsonl``, TensorBoard, optionally W&B.

``RUN_DIR/metrics.jsonl`` holds one JSON object per logged step (``{"step": N, "<name>": value,
…}``); it is the source of truth that ``maopd plot`` reads. TensorBoard event files go to
``RUN_DIR/tb/``. W&B is used when ``logging.wandb`` is set (the config refuses it without the package;
``pip install -e '.[logging]'``): it writes under ``RUN_DIR/wandb/``, and the run's W&B id is kept in
``RUN_DIR/wandb/run-id``, so that a resumed run logs to the W&B run it started (``resume="allow"``,
offline too). W&B keeps a run's history as first sent: the steps a stopped run logged after its last
checkpoint keep their first values there, where ``metrics.jsonl`` has the resumed run's.
Sample trajectories (full workflow records) go to ``RUN_DIR/samples/step_N.jsonl``; only the
newest ``keep_samples`` files are kept when it is set.

``metrics.jsonl`` and the TensorBoard events grow by one row of scalars per logged step (about
1.2 kB per step for the tiny Stage I run), by design: they are the run's history.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from pathlib import Path
from typing import Any

from maopd.base.atomic import open_for_append, output_directory, write_text_atomically, writing
from maopd.base.errors import UserError
from maopd.base.json_files import drop_torn_last_line, iter_json_lines, json_text
from maopd.base.run_dir import LOGGER_DIRS

METRICS_FILE = "metrics.jsonl"
WANDB_DIR = LOGGER_DIRS[0]  # where W&B writes when given dir=RUN_DIR
WANDB_ID_FILE = "run-id"
_TORN_STEP = re.compile(r'\s*\{\s*"step"\s*:\s*(\d+)')

logger = logging.getLogger(__name__)


class MetricsFileError(UserError, ValueError):
    """A run's ``metrics.jsonl`` is damaged. The message names the file and line."""


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    return [row for _, row in iter_json_lines(path, MetricsFileError, "metrics file")]


def truncate_metrics(run_dir: str | Path, last_step: int) -> None:
    """Drop rows logged after ``last_step``: a resumed run logs those steps again.

    ``last_step`` 0 (no checkpoint survived) empties the file. A last line without its newline was
    cut short by a crash mid-write; it is dropped too, with a warning when its step is one the
    resumed run will not log again (its row is then lost, which only outside damage can cause:
    a step's row is written before its checkpoint).
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return
    torn = drop_torn_last_line(path)
    if torn is not None:
        match = _TORN_STEP.match(torn)
        if match is None or int(match.group(1)) <= last_step:
            step = match.group(1) if match else "unknown"
            logger.warning(
                "%s: the last line (step %s) was cut short and is dropped; the checkpoint of "
                "step %d exists, so that row will not be logged again",
                path,
                step,
                last_step,
            )
    kept = [row for row in read_metrics(run_dir) if row.get("step", 0) <= last_step]
    # whole or not at all, so that a crash now cannot lose the rows being kept
    write_text_atomically(path, "".join(json_text(row, str(path)) + "\n" for row in kept))


def wandb_run_id(run_dir: Path) -> str:
    """The W&B run id of ``run_dir``: the one recorded there, else a new one, recorded before use."""
    path = run_dir / WANDB_DIR / WANDB_ID_FILE
    recorded = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    if recorded:
        return recorded
    run_id = uuid.uuid4().hex[:16]  # letters and digits, as W&B's ids; unique within a project
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, run_id + "\n")
    return run_id


class MetricsLogger:
    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_project: str = "multiagent-opd",
        config: dict[str, Any] | None = None,
        keep_samples: int = 0,
    ):
        self.run_dir = Path(run_dir)
        self.keep_samples = keep_samples  # 0: keep every sample file
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(output_directory(self.run_dir / "tb")))
        self.wandb = None
        if wandb:  # LoggingConfig refuses wandb: true without the package
            import wandb as wandb_module

            self.wandb = wandb_module.init(
                project=wandb_project,
                dir=str(output_directory(self.run_dir / WANDB_DIR, library_links=True).parent),
                config=config,
                id=wandb_run_id(self.run_dir),
                resume="allow",
            )

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **metrics}
        with writing(self.metrics_path), open_for_append(self.metrics_path) as handle:
            handle.write(json_text(row, str(self.metrics_path)) + "\n")
        scalars = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        if self.tb is not None:
            for name, value in scalars.items():
                self.tb.add_scalar(name, value, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)

    def write_samples(self, step: int, records: list[dict[str, Any]]) -> Path:
        directory = self.run_dir / "samples"
        directory.mkdir(exist_ok=True)
        path = directory / f"step_{step}.jsonl"
        write_text_atomically(path, "".join(json_text(r, str(path), default=str) + "\n" for r in records))
        if self.keep_samples:
            by_step = sorted(directory.glob("step_*.jsonl"), key=lambda p: int(p.stem.removeprefix("step_")))
            for old in by_step[: -self.keep_samples]:
                old.unlink()
        return path

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
