"""Which layer set each value of the main job's config: what ``maopd config show`` prints.

A value of the main job comes from one of these layers, lowest first, each over the one before:

1. ``default``: the dataclass defaults (``PipelineConfig``'s; ``TrainConfig``'s for a stage run);
2. for a stage run, the stage's and the variant's settings (``maopd.training.config.STAGE_SETTINGS``
   and ``VARIANT_SETTINGS``);
3. the preset file (``configs/pipeline_<name>.yaml``, or a YAML path given as the preset);
4. an experiment's settings (``maopd.pipeline.config.EXPERIMENTS``: ``quick``, ``paper_beta``, ...);
5. the command line (``KEY=VALUE``);
6. for a stage run, what the pipeline sets itself (``PIPELINE_KEYS``: stage, seed, run directory, π_0).

A stage run's setting in layers 3–5 comes from the ``stages`` section every stage shares or from the
stage's own section; the pipeline lays the stage's section over the shared one after both are read
(``stage_settings``), so a stage section of the preset wins over a ``stages`` setting of the command
line. The layers here are those the config is built from (``config_layers``, ``load_experiment``,
``pipeline_settings``); a value the config's own checks derive from others is named as such.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from maopd.base.config import (
    ConfigLayer,
    apply_overrides,
    current_names,
    defaults_dict,
    field_help,
    read_yaml_mapping,
    set_dotted,
    setting_layer,
    to_dict,
)
from maopd.pipeline.config import (
    DEFAULT_PRESET,
    EXPERIMENTS,
    STAGES,
    TEAM,
    PipelineConfig,
    load_experiment,
    pipeline_settings,
    preset_file,
    section_name,
    stage_config,
    stage_dir,
    stage_setting,
)
from maopd.training.base_model import base_model_dir
from maopd.training.config import TrainConfig, config_layers

# PipelineConfig's partial TrainConfigs (``teams``: one per team), shown resolved per stage run
STAGE_SECTIONS = ("stages", *STAGES, "teams")
DERIVED = "derived from other settings by the config's checks"


@dataclass(frozen=True)
class Setting:
    """One resolved value: its dotted key, its value, the layer that set it and the field's help."""

    key: str
    value: Any
    layer: str
    help: str


def leaf_keys(cls: type, prefix: str = "") -> list[tuple[str, type, str]]:
    """(dotted key, dataclass, field name) of every setting of dataclass ``cls``, nested
    dataclasses walked into; a mapping- or list-valued field is one setting."""
    keys = []
    hints = typing.get_type_hints(cls)
    for spec in dataclasses.fields(cls):
        key = f"{prefix}{spec.name}"
        if dataclasses.is_dataclass(hints[spec.name]):
            keys += leaf_keys(hints[spec.name], f"{key}.")
        else:
            keys.append((key, cls, spec.name))
    return keys


def _value(data: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        data = data[part]
    return data


def _settings(cls: type, layers: list[ConfigLayer], resolved: dict[str, Any], prefix: str = "") -> list[Setting]:
    settings = []
    for key, owner, name in leaf_keys(cls):
        if key.split(".")[0] in STAGE_SECTIONS and cls is PipelineConfig:
            continue
        value = _value(resolved, key)
        layer = setting_layer(layers, key)
        named = layer.name if layer is not None and _value(layer.values, key) == value else DERIVED
        settings.append(Setting(f"{prefix}{key}", value, named, field_help(owner, name)))
    return settings


def resolve(preset: str = DEFAULT_PRESET, overrides: list[str] | None = None) -> list[Setting]:
    """Every setting of the main job under ``preset`` (a preset, an experiment or a YAML path) and
    ``overrides``: the pipeline's own, then each stage run's, as ``<run>.<key>`` where ``<run>`` is
    the run's directory name (``stage1``, ``stage2_full``, ``single``)."""
    overrides = overrides or []
    config = load_experiment(preset, overrides)
    experiment = EXPERIMENTS.get(preset)
    name = DEFAULT_PRESET if experiment is not None else preset
    path = preset_file(name)
    sources = [
        (
            f"preset {name} ({path.name})" if path.name == f"pipeline_{name}.yaml" else f"preset {path}",
            read_yaml_mapping(path),
        ),
        (f"experiment {preset}", apply_overrides({}, [stage_setting(o) for o in experiment or []])),
        ("command line", apply_overrides({}, [stage_setting(o) for o in overrides])),
    ]
    top = [ConfigLayer("default", defaults_dict(PipelineConfig))]
    top += [ConfigLayer(name, values) for name, values in sources]
    settings = _settings(PipelineConfig, top, to_dict(config))
    pi0 = base_model_dir(config.base_model)
    for stage, variant in config.stage_runs():
        teacher = stage_dir(config, "stage1", "full") if stage == "stage2" else None
        pipeline = pipeline_settings(config, stage, variant, pi0, teacher)
        own: dict[str, Any] = {}
        for key, value in pipeline.items():
            set_dotted(own, key, value)
        layers = config_layers(own)[:3]  # the defaults, the stage's and the variant's settings
        for section in ("stages", section_name(stage, variant)):
            layers += [
                ConfigLayer(f"{name}: {section}", current_names(TrainConfig, _section(values, section)))
                for name, values in sources
            ]
        layers.append(ConfigLayer("the pipeline", own))
        resolved = to_dict(stage_config(config, stage, variant, pi0, teacher))
        settings += _settings(TrainConfig, layers, resolved, f"{stage_dir(config, stage, variant).name}.")
    return settings


def _section(values: dict[str, Any], dotted: str) -> dict[str, Any]:
    for part in dotted.split("."):
        values = values.get(part) or {}
    return values


def matching(settings: list[Setting], key: str) -> list[Setting]:
    """The settings ``key`` names: one setting, or, for ``stages.K``, ``K`` of every stage run, and
    for ``stage2.K``, ``K`` of every Stage II run (one per variant)."""
    exact = [s for s in settings if s.key == key]
    if exact:
        return exact
    section, _, rest = key.partition(".")
    if section not in STAGE_SECTIONS or not rest:
        return []
    if section == "teams":  # teams.<workflow>.K is K of that team's run
        workflow, _, rest = rest.partition(".")
        return [s for s in settings if s.key == f"{TEAM}_{workflow}.{rest}"]
    runs = "" if section == "stages" else section
    return [s for s in settings if s.key.partition(".")[2] == rest and s.key.partition(".")[0].startswith(runs)]
