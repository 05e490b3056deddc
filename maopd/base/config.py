"""Typed dataclass configs, loadable from YAML, with errors that name the offending field.

Every config in the project is a plain ``@dataclass``. ``from_dict`` builds one from nested
dicts (as YAML gives them) and checks each value against the field's type annotation, so a typo
or a wrong type fails at load time with the dotted path of the field, not deep inside a run.

A field's range or choices and its help text are declared on it,
``batch_size: int = checked(32, ge=1, help="questions per step")``, and ``check_fields(self)`` in the
dataclass's ``__post_init__`` checks them all; ``field_like`` declares a setting that another config
defines (its range, its help, and its default unless another is given). ``field_help`` reads the help
back, as ``maopd config show --explain`` prints it.

A renamed field keeps loading under its old name: the dataclass lists it in a class attribute
``RENAMED = {"old": "new"}``, and ``from_dict`` and ``check_partial`` read the old key as the new
one, so configs and run records written before the rename still load (and compare equal).

A field added after run records were written may be declared ``checked(..., record_default=False)``:
the record (``to_record``, what ``save_yaml`` writes) leaves it out while it holds its default, so a
run that leaves it alone writes the record it wrote before the field existed (and compares equal);
loading such a record gives the field its default.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import re
import reprlib
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import yaml

from maopd.base.atomic import write_text_atomically
from maopd.base.errors import UserError
from maopd.base.secrets import redact_strings

T = TypeVar("T")


class ConfigError(UserError, ValueError):
    """A config value is missing, unknown or of the wrong type. The message names the field."""


SHOWN_CHARS = 120
_SHOWN = reprlib.Repr()  # reprs only the first items and characters of what it is given: bounded work
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother = 3, SHOWN_CHARS, 40, SHOWN_CHARS
_SHOWN.maxtuple = _SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxset = 6


def shown(value: Any) -> str:
    """``repr(value)`` cut to at most ``SHOWN_CHARS`` characters, for an error message: a config
    value can be as long as its file, and a message echoing it whole would be unreadable."""
    text = _SHOWN.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


@dataclasses.dataclass(frozen=True)
class Constraint:
    """The values a field accepts: bounds (``ge``/``gt``/``le``/``lt``), or ``choices``; ``null``
    says what None means where None is accepted, ``what`` names the kind of value (``a probability``),
    and ``note`` adds why (``0 is greedy``)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    null: str | None = None
    what: str = ""
    note: str = ""

    def describe(self) -> str:
        """``must be ...`` as an error message says it."""
        if self.choices is not None:
            allowed = f"one of {list(self.choices)}"
        elif self.le is not None and (self.ge is not None or self.gt is not None):
            low, high = ("[", self.ge) if self.ge is not None else ("(", self.gt)
            allowed = f"in {low}{high}, {self.le}]"
        elif self.lt is not None and (self.ge is not None or self.gt is not None):
            low, high = ("[", self.ge) if self.ge is not None else ("(", self.gt)
            allowed = f"in {low}{high}, {self.lt})"
        else:
            bounds = [(">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt)]
            allowed = " and ".join(f"{op} {bound}" for op, bound in bounds if bound is not None)
        what = f"{self.what} " if self.what else ""
        null = f" or null ({self.null})" if self.null else ""
        note = f" ({self.note})" if self.note else ""
        return f"must be {what}{allowed}{null}{note}"

    def accepts(self, value: Any) -> bool:
        if self.choices is None and self.ge is None and self.gt is None and self.le is None and self.lt is None:
            return True  # no range or choices declared (a field given for its help text): the type check decides
        if value is None:
            return self.null is not None
        if self.choices is not None:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        return not (
            (self.ge is not None and not value >= self.ge)
            or (self.gt is not None and not value > self.gt)
            or (self.le is not None and not value <= self.le)
            or (self.lt is not None and not value < self.lt)
        )


CONSTRAINT = "constraint"  # the metadata key of a field's Constraint
HELP = "help"  # the metadata key of a field's help text
UNRECORDED_DEFAULT = "unrecorded_default"  # the metadata key of ``record_default=False``


def checked(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Sequence[Any] | None = None,
    null: str | None = None,
    what: str = "",
    note: str = "",
    help: str = "",
    record_default: bool = True,
    metadata: dict[str, Any] | None = None,
) -> Any:
    """A dataclass field with its ``Constraint``, which ``check_fields`` checks, its ``help`` text
    (what the setting does, for a user reading ``maopd config show --explain``), and any other ``metadata``.
    ``record_default=False``: ``to_record`` leaves the field out while it holds its default (see the
    module docstring)."""
    constraint = Constraint(ge, gt, le, lt, None if choices is None else tuple(choices), null, what, note)
    unrecorded = {} if record_default else {UNRECORDED_DEFAULT: True}
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        metadata={**(metadata or {}), **unrecorded, CONSTRAINT: constraint, HELP: help},
    )


def field_help(cls: type, name: str) -> str:
    """The help text of dataclass ``cls``'s field ``name`` ("" when it has none)."""
    spec = next(f for f in dataclasses.fields(cls) if f.name == name)
    return spec.metadata.get(HELP, "")


def probability(default: float, help: str = "", **metadata: Any) -> Any:
    """A field holding a probability: ``checked`` in [0, 1]."""
    return checked(default, ge=0, le=1, what="a probability", help=help, metadata=metadata or None)


MAX_SEED = 2**32 - 1  # numpy's legacy seeding (np.random.seed) takes no larger seed


def seed_field(default: int | None = 0, null: str | None = None, help: str = "", **metadata: Any) -> Any:
    """A field holding a random seed: ``checked`` in [0, ``MAX_SEED``]; with ``null``, None too
    (meaning what ``null`` names)."""
    return checked(default, ge=0, le=MAX_SEED, null=null, what="a seed", help=help, metadata=metadata or None)


def field_like(cls: type, name: str, default: Any = dataclasses.MISSING, help: str = "") -> Any:
    """A field declared as ``cls``'s field ``name`` is: its constraint, its help (unless ``help`` is
    given), and its default unless ``default`` is given. A setting several configs carry is so
    defined once, in ``cls``."""
    spec = next(f for f in dataclasses.fields(cls) if f.name == name)
    if default is dataclasses.MISSING:
        default = spec.default
    return dataclasses.field(default=default, metadata={**spec.metadata, **({HELP: help} if help else {})})


@functools.cache
def _annotations(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_fields(config: Any) -> None:
    """ConfigError naming the first field of dataclass ``config`` whose value its declared
    ``Constraint`` refuses (an integer field also refuses a non-integer)."""
    hints = _annotations(type(config))
    for spec in dataclasses.fields(config):
        constraint = spec.metadata.get(CONSTRAINT)
        if constraint is None:
            continue
        value = getattr(config, spec.name)
        integer = hints[spec.name] is int or hints[spec.name] == int | None
        if integer and value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise ConfigError(f"{spec.name}: must be an integer, got {shown(value)}")
        if not constraint.accepts(value):
            raise ConfigError(f"{spec.name}: {constraint.describe()}, got {shown(value)}")


def _coerce(value: Any, annotation: Any, path: str) -> Any:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if annotation is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in args:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: no type in {annotation} accepts {shown(value)}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{path}: {shown(value)} is not one of {list(args)}")
        return value
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping for {annotation.__name__}, got {shown(value)}")
        return from_dict(annotation, value, path)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {shown(value)}")
        item_type = args[0] if args else Any
        items = [_coerce(v, item_type, f"{path}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {shown(value)}")
        key_type, value_type = args if args else (Any, Any)
        return {_coerce(k, key_type, path): _coerce(v, value_type, f"{path}.{k}") for k, v in value.items()}
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true/false, got {shown(value)}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {shown(value)}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {shown(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{path}: expected a finite number, got {shown(value)}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {shown(value)}")
        return value
    if annotation is Path:
        if not isinstance(value, (str, Path)):
            raise ConfigError(f"{path}: expected a path, got {shown(value)}")
        return Path(value)
    return value


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the known name closest to a mistyped ``name``, else ''."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _unknown_key(cls: type, key: Any, path: str) -> ConfigError:
    known = ", ".join(sorted(f.name for f in dataclasses.fields(cls) if f.init))
    hint = ""
    if isinstance(key, str) and "." in key:
        head, _, rest = key.partition(".")
        hint = f"; config files nest their keys ({head}: {{{rest}: ...}}), dotted paths are for key=value overrides"
    if not hint and isinstance(key, str):
        # a config may say where a key that belongs elsewhere goes (``cls.unknown_key_hint``)
        hint = getattr(cls, "unknown_key_hint", lambda _: "")(key) or did_you_mean(
            key, (f.name for f in dataclasses.fields(cls) if f.init)
        )
    return ConfigError(
        f"{path}.{key}: unknown key{hint} (known keys: {known})"
        if path
        else f"{key}: unknown key{hint} (known keys: {known})"
    )


def _prefixed(path: str, exc: Exception) -> ConfigError:
    """``exc`` (raised by a dataclass's ``__post_init__`` about its own fields) with ``path.`` in front."""
    return ConfigError(f"{path}.{exc}" if path else str(exc))


def _current_names(cls: type, data: dict[str, Any], path: str) -> dict[str, Any]:
    """``data`` with the old names of renamed fields (``cls.RENAMED``) replaced by the new ones."""
    renamed = getattr(cls, "RENAMED", {})
    if not any(key in renamed for key in data):
        return data
    current: dict[str, Any] = {}
    for key, value in data.items():
        name = renamed.get(key, key)
        if name in current or (name != key and name in data):
            where = f"{path}." if path else ""
            raise ConfigError(f"{where}{key}: is the old name of {where}{name}, which is set too; keep only {name}")
        current[name] = value
    return current


def current_names(cls: type, data: dict[str, Any], path: str = "") -> dict[str, Any]:
    """``data``, a (partial) mapping of dataclass ``cls``'s fields, with the old names of renamed
    fields replaced by the new ones at every level: for a mapping about to be merged over
    defaults, which already hold the new names."""
    data = _current_names(cls, data, path)
    hints = typing.get_type_hints(cls)
    return {
        key: current_names(hints[key], value, f"{path}.{key}" if path else key)
        if dataclasses.is_dataclass(hints.get(key)) and isinstance(value, dict)
        else value
        for key, value in data.items()
    }


def from_dict(cls: type[T], data: dict[str, Any], path: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys, bad types and the checks of each
    dataclass's ``__post_init__`` raise ``ConfigError`` naming the full dotted path."""
    hints = typing.get_type_hints(cls)
    data = _current_names(cls, data, path)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted((k for k in data if k not in fields), key=str)
    if unknown:
        raise _unknown_key(cls, unknown[0], path)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(value, hints[name], f"{path}.{name}" if path else name)
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{path or cls.__name__}: {exc}") from exc
    except ValueError as exc:  # ConfigError included: a __post_init__ check names its field
        raise _prefixed(path, exc) from None
    return obj


def check_partial(cls: type, data: Any, path: str) -> dict[str, Any]:
    """``data``, a partial override of dataclass ``cls`` (any subset of its fields, nested), with
    every key checked against ``cls``'s field tree and every value coerced to its field's type.

    Cross-field and range checks need the whole config: build it (``from_dict``) for those.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of {cls.__name__} fields, got {shown(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    data = _current_names(cls, data, path)
    checked: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            raise _unknown_key(cls, key, path)
        where = f"{path}.{key}" if path else str(key)
        annotation = hints[key]
        if dataclasses.is_dataclass(annotation) and isinstance(value, dict):
            checked[key] = check_partial(annotation, value, where)
        else:
            checked[key] = to_dict(_coerce(value, annotation, where))
    return checked


def defaults_dict(cls: type) -> dict[str, Any]:
    """The field defaults of dataclass ``cls`` as plain data, without constructing ``cls``
    (whose own checks may need fields that only a layer above sets)."""
    values: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):
        if spec.default_factory is not dataclasses.MISSING:
            values[spec.name] = to_dict(spec.default_factory())
        elif spec.default is not dataclasses.MISSING:
            values[spec.name] = to_dict(spec.default)
    return values


def config_diff(old: dict[str, Any], new: dict[str, Any], ignore: tuple[str, ...] = (), prefix: str = "") -> list[str]:
    """The dotted keys on which two plain config dicts differ, as ``key: old -> new`` lines."""
    lines = []
    for key in sorted(set(old) | set(new), key=str):
        dotted = f"{prefix}{key}"
        if dotted in ignore:
            continue
        a, b = old.get(key, "<unset>"), new.get(key, "<unset>")
        if isinstance(a, dict) and isinstance(b, dict):
            lines += config_diff(a, b, ignore, f"{dotted}.")
        elif a != b:
            lines.append(f"{dotted}: {a!r} -> {b!r}")
    return lines


def _unrecorded(config: Any, spec: dataclasses.Field) -> bool:
    """Whether a record leaves field ``spec`` of ``config`` out: declared ``record_default=False``
    and holding its default."""
    if not spec.metadata.get(UNRECORDED_DEFAULT):
        return False
    default = spec.default if spec.default_factory is dataclasses.MISSING else spec.default_factory()
    return getattr(config, spec.name) == default


def to_dict(config: Any, record: bool = False) -> dict[str, Any]:
    """The config as plain, YAML/JSON-serialisable data; ``record``: as ``to_record`` writes it,
    without the fields declared ``record_default=False`` that hold their default."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value):
            kept = [f for f in dataclasses.fields(value) if not (record and _unrecorded(value, f))]
            return {f.name: plain(getattr(value, f.name)) for f in kept}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, Path):
            return str(value)
        return value

    return plain(config)


def to_record(config: Any) -> dict[str, Any]:
    """The config as saved, logged or compared with a saved one: ``to_dict`` with every secret
    redacted (``maopd.base.secrets``), so that a URL's credentials never reach a file or a log, and
    the fields declared ``record_default=False`` left out while they hold their default."""
    return redact_strings(to_dict(config, record=True))


@dataclasses.dataclass(frozen=True)
class ConfigLayer:
    """One layer of a config built from layers (defaults, presets, files, the command line): its
    name and the settings it holds, a partial nested mapping."""

    name: str
    values: dict[str, Any]

    def holds(self, key: str) -> bool:
        """Whether the layer sets dotted ``key``."""
        node: Any = self.values
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True


def setting_layer(layers: Sequence[ConfigLayer], key: str) -> ConfigLayer | None:
    """The layer that set dotted ``key``: the last of ``layers`` (lowest first) that holds it."""
    return next((layer for layer in reversed(layers) if layer.holds(key)), None)


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c`` in nested ``data`` in place, copying (or creating) the mappings on the way."""
    *parents, last = key.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        node[part] = dict(child) if isinstance(child, dict) else {}
        node = node[part]
    node[last] = value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML, as a config file's are) to nested ``data``."""
    data = dict(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {shown(item)} is not of the form key=value")
        key, raw = item.split("=", 1)
        set_dotted(data, key, parse_yaml(raw, f"override {shown(item)}"))
    return data


# The YAML every config file, override and run record is read with: YAML 1.2's core schema, so
# that `010` is 10 and `1:30` a string (YAML 1.1, PyYAML's default, reads them as 8 and 90, and
# `1e-6` as a string), without aliases, which let a few hundred bytes expand to gigabytes.
MAX_YAML_DEPTH = 64  # nesting levels; a config needs a handful, a recursive parse of deeper input would overflow
_YAML_RULES = (  # (tag, pattern, first characters): YAML 1.2.2, section 10.3.2
    ("null", r"~|null|Null|NULL|", "~nN"),
    ("bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    (
        "float",
        r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)",
        "-+.0123456789",
    ),
)
_YAML_SPECIAL_FLOATS = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}


class _RefusedYAML(yaml.MarkedYAMLError):
    """Valid YAML that a config may not hold (an alias, nesting past ``MAX_YAML_DEPTH``, a huge integer)."""


class _ConfigLoader(yaml.SafeLoader):
    yaml_implicit_resolvers: dict = {}
    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _RefusedYAML(None, None, "an alias (*name) is not accepted; write the value out", event.start_mark)
        if self.depth >= MAX_YAML_DEPTH:
            raise _RefusedYAML(None, None, f"nested more than {MAX_YAML_DEPTH} levels deep", event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        # PyYAML keeps the last of two equal keys: a block written twice would silently lose the first
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                continue  # an unhashable key is refused by the mapping itself
            line = key_node.start_mark.line + 1
            if key in seen:
                problem = f"the key {shown(key)} is written twice (lines {seen[key]} and {line}); keep one"
                raise _RefusedYAML(None, None, problem, key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_number(self, node: yaml.ScalarNode) -> int | float:
        text = self.construct_scalar(node)
        try:
            if node.tag.endswith(":int"):
                base = {"0o": 8, "0x": 16}.get(text[:2], 10)
                return int(text[2:] if base != 10 else text, base)
            special = _YAML_SPECIAL_FLOATS.get(text.lower())
            return float(text) if special is None else special
        except ValueError:  # an explicit !!int or !!float tag on other text, or over Python's 4300 digits
            problem = f"{shown(text)} is not a number YAML reads, or has over 4300 digits"
            raise _RefusedYAML(None, None, problem, node.start_mark) from None


class _ConfigDumper(yaml.SafeDumper):
    """Quotes every string that ``_ConfigLoader`` (or a YAML 1.1 reader) would read as another type."""


for _tag, _pattern, _first in _YAML_RULES:
    for _class in (_ConfigLoader, _ConfigDumper):
        _class.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(f"^(?:{_pattern})$"), list(_first))
_ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile("^$"), [""])
_ConfigLoader.add_constructor("tag:yaml.org,2002:int", _ConfigLoader.construct_number)
_ConfigLoader.add_constructor("tag:yaml.org,2002:float", _ConfigLoader.construct_number)


def parse_yaml(text: str, source: str) -> Any:
    """The data of YAML ``text`` under the config rules above; ``ConfigError`` names ``source``
    (``config file runs/x.yaml``, ``override 'steps=5'``), what is wrong and where."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, _RefusedYAML):
            raise ConfigError(f"{source}: {problem}{where}") from None
        raise ConfigError(f"{source} is not valid YAML ({problem}{where}); fix its syntax") from None


def dump_yaml(data: Any) -> str:
    """``data`` as YAML that ``parse_yaml`` reads back as the same data."""
    return yaml.dump(data, Dumper=_ConfigDumper, sort_keys=False)


def parse_yaml_file(path: Path) -> Any:
    """The YAML in ``path``; malformed YAML or a binary file is a ``ConfigError`` naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text; give a YAML file") from None
    return parse_yaml(text, f"config file {path}")


def read_yaml_mapping(path: str | Path | None) -> dict[str, Any]:
    """The mapping in a YAML config file ({} when ``path`` is None); errors name the file."""
    if path is None:
        return {}
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    loaded = parse_yaml_file(path)
    if loaded is None:
        # an empty file is a mistake (a truncated copy, the wrong path), not "every default"
        raise ConfigError(f"config file {path} is empty; write the settings it should hold, or pass no file")
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return loaded


def load_yaml(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Load ``cls`` from a YAML file (or from its defaults when ``path`` is None) plus overrides."""
    merged = to_dict(from_dict(cls, read_yaml_mapping(path)))
    return from_dict(cls, apply_overrides(merged, overrides or []))


def save_yaml(config: Any, path: str | Path) -> None:
    """``config`` as its record (secrets redacted) in ``path``, through the one writer."""
    write_text_atomically(path, dump_yaml(to_record(config)))
