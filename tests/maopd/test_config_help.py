"""Every config field carries its help text on the field (``checked(..., help=...)``), as TRL's
``field(metadata={"help": ...})`` do: ``maopd config show --explain KEY`` prints it."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from maopd.agents.noisy_team import NoiseConfig
from maopd.agents.openai_policy import OpenAIPolicyConfig
from maopd.base.config import field_help
from maopd.evaluation.runner import EvalSettings
from maopd.pipeline.config import PipelineConfig
from maopd.training.config import TrainConfig
from maopd.training.distributed_rollout import RayRolloutConfig
from maopd.training.marl.trainer import MarlConfig

ROOTS = (PipelineConfig, TrainConfig, MarlConfig, NoiseConfig, OpenAIPolicyConfig, EvalSettings, RayRolloutConfig)


def _configs() -> list[type]:
    """Every dataclass reachable from ``ROOTS`` through field types."""
    found: list[type] = []

    def walk(cls: type) -> None:
        if cls in found:
            return
        found.append(cls)
        for spec in dataclasses.fields(cls):
            annotation = typing.get_type_hints(cls)[spec.name]
            for inner in (annotation, *typing.get_args(annotation)):
                if dataclasses.is_dataclass(inner):
                    walk(inner)

    for root in ROOTS:
        walk(root)
    return found


@pytest.mark.parametrize("config", _configs(), ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_field_has_help(config):
    missing = [spec.name for spec in dataclasses.fields(config) if not field_help(config, spec.name).strip()]
    assert not missing, f"{config.__name__}: fields without help text: {missing}"
