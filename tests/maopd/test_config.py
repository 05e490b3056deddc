"""Typed configs: YAML loading, overrides, and errors that name the field."""

from dataclasses import dataclass, field

import pytest

from maopd.base.config import (
    ConfigError,
    apply_overrides,
    check_fields,
    checked,
    field_like,
    from_dict,
    load_yaml,
    probability,
    to_dict,
)


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


@dataclass
class Ranged:
    count: int = checked(1, ge=1)
    rate: float = checked(0.5, gt=0, le=1)
    share: float = probability(0.5)
    limit: int | None = checked(None, ge=1, null="no limit")
    split: str = checked("dev", choices=("dev", "test"))
    temperature: float = checked(1.0, ge=0, note="0 is greedy")

    def __post_init__(self) -> None:
        check_fields(self)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"count": 0}, r"^count: must be >= 1, got 0$"),
        ({"count": 1.5}, r"^count: must be an integer, got 1.5$"),
        ({"rate": 0.0}, r"^rate: must be in \(0, 1\], got 0.0$"),
        ({"share": 2.0}, r"^share: must be a probability in \[0, 1\], got 2.0$"),
        ({"limit": 0}, r"^limit: must be >= 1 or null \(no limit\), got 0$"),
        ({"split": "train"}, r"^split: must be one of \['dev', 'test'\], got 'train'$"),
        ({"temperature": -1.0}, r"^temperature: must be >= 0 \(0 is greedy\), got -1.0$"),
    ],
)
def test_a_constraint_declared_beside_its_field_is_one_line_naming_the_field(values, message):
    with pytest.raises(ConfigError, match=message):
        Ranged(**values)
    (name,) = values
    with pytest.raises(ConfigError, match=rf"^where\.{name}: "):  # loaded from a file: the full dotted path
        from_dict(Outer2, {"where": values})


@dataclass
class Outer2:
    where: Ranged = field(default_factory=Ranged)


def test_field_like_keeps_the_constraint_and_takes_the_default_unless_given():
    @dataclass
    class Borrower:
        count: int = field_like(Ranged, "count")
        rate: float = field_like(Ranged, "rate", 1.0)

        def __post_init__(self) -> None:
            check_fields(self)

    assert (Borrower().count, Borrower().rate) == (1, 1.0)
    with pytest.raises(ConfigError, match="rate: must be in"):
        Borrower(rate=1.5)
