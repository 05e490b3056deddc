"""An RLlib-style API over the stage trainer, for scripts and notebooks.

.. code-block:: python

    from maopd.training.algorithm import OPDConfig, OPDAlgorithm

    config = (
        OPDConfig()
        .environment(stage="stage2", num_candidates=5, max_steps=12)
        .rollouts(batch_size=32, group_size=5, temperature=1.0)
        .training(variant="full", lr=1e-6, minibatches=5, teacher_path="runs/stage1")
    )
    with config.build() as algo:    # holds run_dir until the block ends (or algo.stop())
        metrics = algo.train()      # one step: its metrics, also written to run_dir as by maopd train
        checkpoint = algo.save()    # run_dir/checkpoints/step_1
    algo = OPDAlgorithm.restore(checkpoint)  # goes on in the run directory that holds it

Each builder method sets fields of ``TrainConfig`` (``maopd.training.config``) by name; the same
stage/variant layering as ``maopd train --config FILE`` applies, so a script and the CLI build
identical configs from identical settings.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path
from typing import Any

from maopd.base.config import ConfigError, apply_overrides, did_you_mean, from_dict, read_yaml_mapping
from maopd.base.run_dir import CONFIG_FILE
from maopd.training.checkpoint import CHECKPOINTS, latest_checkpoint
from maopd.training.config import TrainConfig, apply_settings, build_config, load_config

# Builder keyword → TrainConfig field, for the names that do not match a field one to one.
_ALIASES = {"teacher_path": "teacher.path", "teacher_source": "teacher.source", "model_path": "model.path"}


_HINTS = typing.get_type_hints(TrainConfig)
# TrainConfig's sections (its dataclass-typed fields) and its plain top-level fields
SECTIONS = tuple(f.name for f in dataclasses.fields(TrainConfig) if dataclasses.is_dataclass(_HINTS[f.name]))
TOP_LEVEL = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in SECTIONS)


def _section_fields(section: str) -> set[str]:
    return {f.name for f in dataclasses.fields(_HINTS[section])}


class OPDConfig:
    """Builds a ``TrainConfig`` step by step; every method returns the builder."""

    def __init__(self, data: dict[str, Any] | None = None):
        self._data: dict[str, Any] = copy.deepcopy(data or {})

    @classmethod
    def from_file(cls, path: str | Path) -> OPDConfig:
        """The file's own settings (validated), so later stage/variant changes still layer."""
        load_config(path)
        return cls(read_yaml_mapping(path))

    def _set(self, names: dict[str, Any], sections: tuple[str, ...], top_level: tuple[str, ...] = ()) -> OPDConfig:
        """Put each keyword at the top level, or into the first of ``sections`` with that field."""
        settings = {}
        for key, value in names.items():
            if key in _ALIASES:
                settings[_ALIASES[key]] = value
            elif key in top_level:
                settings[key] = value
            else:
                owners = [s for s in sections if key in _section_fields(s)]
                if not owners:
                    known = [
                        *_ALIASES,
                        *top_level,
                        *(name for section in sections for name in _section_fields(section)),
                    ]
                    raise ConfigError(
                        f"{key}: not a field of {', '.join((*top_level, *sections))}{did_you_mean(key, known)}"
                    )
                settings[f"{owners[0]}.{key}"] = value
        self._data = apply_settings(self._data, settings)
        return self

    def environment(self, **env: Any) -> OPDConfig:
        """``stage`` ("stage1"/"stage2") and ``SearchEnvConfig`` fields (num_candidates, max_steps…)."""
        return self._set(env, ("env",), ("stage",))

    def rollouts(self, **rollout: Any) -> OPDConfig:
        """``RolloutConfig`` fields: batch_size (B), group_size (G), temperature, max_new_tokens…"""
        return self._set(rollout, ("rollout",))

    def training(self, **settings: Any) -> OPDConfig:
        """variant, steps, seed, run_dir, searcher_reward, teacher_path, model_path, and fields of
        ``optim``, ``ppo``, ``advantage``, ``critic`` (looked up in that order)."""
        return self._set(settings, ("optim", "ppo", "advantage", "critic"), TOP_LEVEL)

    def model(self, **model: Any) -> OPDConfig:
        """``ModelConfig`` fields: path (π_0), dtype, device, gradient_checkpointing, tiny…"""
        return self._set(model, ("model",))

    def teacher(self, **teacher: Any) -> OPDConfig:
        """``TeacherConfig`` fields: source ("none", "checkpoint", "base_model"), path, reference
        ("checkpoint", "base_model": the KL reference)."""
        return self._set(teacher, ("teacher",))

    def ptx(self, **ptx: Any) -> OPDConfig:
        """``PtxConfig`` fields (PPO-ptx): coef, data, batch_size, seq_len."""
        return self._set(ptx, ("ptx",))

    def distributed(self, **distributed: Any) -> OPDConfig:
        """``DistributedConfig`` fields (under torchrun): fsdp, mixed_precision, cpu_offload, backend, timeout_s."""
        return self._set(distributed, ("distributed",))

    def checkpointing(self, **checkpoint: Any) -> OPDConfig:
        return self._set(checkpoint, ("checkpoint",))

    def reporting(self, **logging: Any) -> OPDConfig:
        return self._set(logging, ("logging",))

    def update(self, overrides: list[str]) -> OPDConfig:
        """``a.b=value`` overrides, as on the command line."""
        self._data = apply_overrides(self._data, overrides)
        return self

    def to_train_config(self) -> TrainConfig:
        return build_config(self._data)

    def build(self) -> OPDAlgorithm:
        return OPDAlgorithm(self.to_train_config())


class OPDAlgorithm:
    """A stage run driven step by step: it writes what ``maopd train`` writes.

    ``train()`` runs one step and writes its outputs at the config's settings (``metrics.jsonl``
    and ``tb/`` every ``logging.every`` steps, ``samples/`` every ``logging.sample_every``, a
    checkpoint every ``checkpoint.every`` and at ``steps``; ``maopd.training.trainer.StageRun``). The run
    directory is held from ``build()`` until ``stop()``, the end of a ``with`` block or the end of
    the process. ``build()`` starts a fresh run and refuses a run directory that has checkpoints;
    ``restore()`` continues one.
    """

    def __init__(self, config: TrainConfig, checkpoint: str | Path | None = None):
        from maopd.training.trainer import StageRun

        self.config = config
        if checkpoint is None:
            self.run = StageRun(config, resume=False)
        else:  # the config is the checkpoint's own, so there is nothing to compare
            self.run = StageRun(config, check_config=False, checkpoint=Path(checkpoint))
        self.trainer = self.run.trainer

    @property
    def iteration(self) -> int:
        return self.trainer.step

    def train(self) -> dict[str, float]:
        """One training step (B questions × G trajectories, the PPO minibatch updates), with its outputs."""
        metrics = self.run.step()
        return {"step": self.trainer.step, **metrics}

    def save(self, directory: str | Path | None = None) -> Path:
        """Write a checkpoint now under ``directory`` (a run directory; default ``run_dir``)."""
        return self.trainer.save(directory)

    def stop(self) -> None:
        """Flush the loggers and let the run directory go."""
        self.run.close()

    def __enter__(self) -> OPDAlgorithm:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @classmethod
    def restore(cls, path: str | Path) -> OPDAlgorithm:
        """From a checkpoint directory or a run directory (its latest checkpoint). The run goes on in
        the run directory that holds the checkpoint, wherever it was first made."""
        path = Path(path)
        checkpoint = path if (path / "trainer_state.pt").is_file() else latest_checkpoint(path)
        if checkpoint is None:
            raise FileNotFoundError(f"{path}: neither a checkpoint nor a run directory with checkpoints")
        config = from_dict(TrainConfig, read_yaml_mapping(checkpoint / CONFIG_FILE))
        if checkpoint.parent.name == CHECKPOINTS:  # RUN_DIR/checkpoints/step_N
            config = dataclasses.replace(config, run_dir=str(checkpoint.parent.parent))
        return cls(config, checkpoint)
