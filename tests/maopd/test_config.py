"""Typed configs: YAML loading, overrides, and errors that name the field."""

from dataclasses import dataclass, field

import pytest

from maopd.base.config import ConfigError, apply_overrides, from_dict, load_yaml, to_dict


@dataclass
class Inner:
    lr: float = 0.1
    names: list[str] = field(default_factory=list)


@dataclass
class Outer:
    steps: int = 3
    flag: bool = False
    inner: Inner = field(default_factory=Inner)
    path: str | None = None


def test_round_trip_and_overrides(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("steps: 5\ninner:\n  names: [a, b]\n")
    loaded = load_yaml(Outer, cfg, ["inner.lr=1e-6", "flag=true", "path=x"])
    assert loaded == Outer(5, True, Inner(1e-6, ["a", "b"]), "x")
    assert from_dict(Outer, to_dict(loaded)) == loaded


@pytest.mark.parametrize(
    "data, message",
    [
        ({"stepz": 1}, "stepz: unknown key"),
        ({"steps": "many"}, "steps: expected an integer"),
        ({"inner": {"lr": "fast"}}, "inner.lr: expected a number"),
        ({"inner": {"names": "a"}}, "inner.names: expected a list"),
        ({"flag": 1}, "flag: expected true/false"),
    ],
)
def test_errors_name_the_field(data, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(Outer, data)


def test_bad_override_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["steps"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(Outer, tmp_path / "nope.yaml")
