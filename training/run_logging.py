"""Where a run's metrics and samples go: ``metrics.jsonl``, TensorBoard, optionally W&B.

``RUN_DIR/metrics.jsonl`` holds one JSON object per logged step (``{"step": N, "<name>": value,
…}``); it is the source of truth that ``maopd plot`` reads. TensorBoard event files go to
``RUN_DIR/tb/``. W&B is used only when ``logging.wandb`` is set and the package is installed.
Sample trajectories (full workflow records) go to ``RUN_DIR/samples/step_N.jsonl``.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not a JSON object ({exc.msg})") from exc
    return rows


def truncate_metrics(run_dir: str | Path, last_step: int) -> None:
    """Drop rows logged after ``last_step``: a resumed run logs those steps again."""
    path = Path(run_dir) / METRICS_FILE
    kept = [row for row in read_metrics(run_dir) if row.get("step", 0) <= last_step]
    if path.is_file():
        path.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")


class MetricsLogger:
    def __init__(self, run_dir: str | Path, tensorboard: bool = True, wandb: bool = False,
                 wandb_project: str = "multiagent-opd", config: dict[str, Any] | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / METRICS_FILE
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(self.run_dir / "tb"))
        self.wandb = None
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError:
                warnings.warn("logging.wandb is set but wandb is not installed; skipping W&B", stacklevel=2)
            else:
                self.wandb = wandb_module.init(project=wandb_project, dir=str(self.run_dir), config=config)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **metrics}
        with open(self.metrics_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
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
        path.write_text("".join(json.dumps(r, default=str) + "\n" for r in records), encoding="utf-8")
        return path

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
