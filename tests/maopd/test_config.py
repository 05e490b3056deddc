"""Typed configs: YAML loading, overrides, and errors that name the field."""

from dataclasses import dataclass, field

import pytest

from maopd.base.config import (
    ConfigError,
    apply_overrides,
    check_fields,
    checked,
    dump_yaml,
    field_like,
    from_dict,
    load_yaml,
    parse_yaml,
    parse_yaml_file,
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
        ({"stepz": 1}, "stepz: unknown key; did you mean .steps.?"),
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


def _alias_bomb() -> str:
    """Under 500 bytes of YAML whose aliases expand to 9**10 strings under ``variants:``."""
    text = "variants:\n - - &a0 [full,full,full,full,full,full,full,full,full]\n"
    for level in range(1, 10):
        text += f"   - &a{level} [" + ",".join([f"*a{level - 1}"] * 9) + "]\n"
    return text


def test_aliases_are_refused_before_any_expansion(tmp_path):
    from maopd.pipeline.config import load_preset

    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())
    assert path.stat().st_size < 600
    with pytest.raises(ConfigError, match=r"^config file .*bomb.yaml: an alias \(\*name\) is not accepted.* line 3"):
        load_preset(str(path))
    with pytest.raises(ConfigError, match=r"^override 'variants=\*a': an alias"):
        apply_overrides({}, ["variants=*a"])


@pytest.mark.parametrize(
    ("text", "key", "lines"),
    [
        ("seed: 1\nseed: 2\n", "'seed'", "lines 1 and 2"),
        ("stages:\n  optim: {lr: 0.1}\n  steps: 3\n  optim:\n    lr: 0.2\n", "'optim'", "lines 2 and 4"),
        ("stage1:\n  env:\n    topk: 2\n    topk: 3\n", "'topk'", "lines 3 and 4"),
    ],
)
def test_a_key_written_twice_at_any_depth_is_refused_naming_both_lines(tmp_path, text, key, lines):
    """YAML keeps the last of two equal keys; a config would silently lose the first."""
    from maopd.pipeline.config import load_preset

    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"^config file .*twice.yaml: the key {key} is written twice \({lines}\)"):
        load_preset(str(path))


def test_nesting_past_the_bound_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("steps: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="nested more than 64 levels deep"):
        load_yaml(Outer, path)


@pytest.mark.parametrize(
    "text, value",
    [
        ("010", 10),  # YAML 1.1: octal 8
        ("0o10", 8),
        ("0x10", 16),
        ("1e-6", 1e-6),  # YAML 1.1: a string
        ("1:30", "1:30"),  # YAML 1.1: sexagesimal 90
        ("1_000", "1_000"),  # YAML 1.1: 1000
        ("yes", "yes"),  # YAML 1.1: true
        ("2024-01-01", "2024-01-01"),  # YAML 1.1: a date
        ("True", True),
        ("~", None),
        ("-.inf", -float("inf")),
    ],
)
def test_files_and_overrides_follow_yaml_1_2_number_rules(tmp_path, text, value):
    path = tmp_path / "c.yaml"
    path.write_text(f"value: {text}\n")
    assert parse_yaml_file(path) == {"value": value}
    assert apply_overrides({}, [f"value={text}"]) == {"value": value}


def test_override_steps_010_is_ten_and_1_30_is_refused():
    assert load_yaml(Outer, None, ["steps=010"]).steps == 10
    with pytest.raises(ConfigError, match="^steps: expected an integer, got '1:30'$"):
        load_yaml(Outer, None, ["steps=1:30"])


def test_an_integer_python_cannot_read_is_one_line():
    with pytest.raises(ConfigError, match="^override .*: '1111.*' is not a number YAML reads, or has over 4300 digits"):
        apply_overrides({}, ["steps=" + "1" * 5000])


def test_error_messages_cut_long_values():
    with pytest.raises(ConfigError) as caught:
        from_dict(Outer, {"steps": ["x" * 10_000] * 10_000})
    assert len(str(caught.value)) < 300
    with pytest.raises(ConfigError) as caught:
        Ranged(split="y" * 100_000)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize("value", ["1e5", "0o17", "010", "yes", "1:30", "null", "", 1e-6, float("inf"), True, None, 7])
def test_dumped_yaml_reads_back_the_same(value):
    assert parse_yaml(dump_yaml({"value": value}), "dumped") == {"value": value}
