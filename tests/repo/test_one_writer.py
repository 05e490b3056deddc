"""Every file the project writes goes through the one writer (``maopd/base/atomic.py``).

The test reads the source of every module that ships or runs (the package, the benchmarks and
scripts; not the tests, which write their fixtures) and fails on a write that bypasses the writer:
``open`` in a writing mode, ``write_text``, ``to_csv``, ``savefig``, ``torch.save``, ``json.dump``,
a library handed a directory of its own (TensorBoard, W&B, faiss), a link made, a file copied. Such
a call is accepted only

* inside a function or lambda handed to one of the writer's functions (it then writes the
  writer's temporary file or staging directory), or
* when one of its arguments is the writer's ``output_directory(...)`` (a directory the writer
  created and checked for a library to fill).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("maopd", "envs", "agents", "training", "benchmarks", "scripts")
WRITER = "maopd/base/atomic.py"
# a lock file is locked where it stands, so it cannot be written beside and renamed; lock.py opens
# it with O_NOFOLLOW and writes only its holder's pid into it
LOCKS = "maopd/base/lock.py"
WRITER_FUNCTIONS = {
    "write_file_atomically",
    "write_path_atomically",
    "write_files_atomically",
    "build_directory_atomically",
}
# the harness that plants hostile files (links among them) for the commands it runs to refuse; its
# own results go through the writer
HOSTILE_HARNESS = "benchmarks/hostile_inputs.py"
WRITING_MODES = set("wax+")
# methods that write a file or a directory whatever object they are called on
WRITING_METHODS = {
    "write_text",
    "write_bytes",
    "to_csv",
    "to_parquet",
    "to_excel",
    "savefig",
    "save_pretrained",
    "save_file",
    "write_index",
    "symlink_to",
    "hardlink_to",
    "touch",
}
# module.function calls that write
WRITING_FUNCTIONS = {
    ("torch", "save"),
    ("np", "save"),
    ("np", "savez"),
    ("np", "savetxt"),
    ("numpy", "save"),
    ("json", "dump"),
    ("pickle", "dump"),
    ("shutil", "copy"),
    ("shutil", "copy2"),
    ("shutil", "copyfile"),
    ("shutil", "copytree"),
    ("shutil", "move"),
    ("os", "symlink"),
    ("os", "link"),
    ("os", "truncate"),
    ("wandb", "init"),
    ("wandb_module", "init"),
}
WRITING_CONSTRUCTORS = {"SummaryWriter", "GzipFile"}


def _mode(call: ast.Call, position: int) -> str | None:
    """The mode string ``call`` passes at ``position`` or as ``mode=``, when it is a literal."""
    for keyword in call.keywords:
        if keyword.arg == "mode" and isinstance(keyword.value, ast.Constant):
            return keyword.value.value
    if len(call.args) > position and isinstance(call.args[position], ast.Constant):
        return call.args[position].value
    return None


def _os_open_writes(call: ast.Call) -> bool:
    if len(call.args) < 2:
        return False
    flags = {node.attr for node in ast.walk(call.args[1]) if isinstance(node, ast.Attribute)}
    return bool(flags & {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"})


def writes(call: ast.Call) -> str | None:
    """What ``call`` writes with, when it writes a file; None otherwise."""
    function = call.func
    if isinstance(function, ast.Name):
        if function.id == "open" and set(_mode(call, 1) or "") & WRITING_MODES:
            return f"open(..., {_mode(call, 1)!r})"
        if function.id in WRITING_CONSTRUCTORS:
            return function.id
        return None
    if not isinstance(function, ast.Attribute):
        return None
    name = function.attr
    owner = function.value.id if isinstance(function.value, ast.Name) else None
    if name == "open":
        position = 0 if owner not in ("gzip", "io", "os", "bz2", "lzma") else 1
        if owner == "os":
            return "os.open" if _os_open_writes(call) else None
        mode = _mode(call, position) or ""
        return f".open({mode!r})" if set(mode) & WRITING_MODES else None
    if (
        owner == "yaml"
        and name in ("dump", "safe_dump")
        and (len(call.args) > 1 or any(k.arg == "stream" for k in call.keywords))
    ):
        return f"yaml.{name}(..., stream)"
    if owner == "ray" and name == "init" and not any(k.arg == "address" for k in call.keywords):
        return "ray.init"  # a local cluster writes its session files; joining one (address=) writes none here
    if name in WRITING_METHODS:
        return f".{name}"
    if name == "to_json" and call.args:
        return ".to_json(path)"
    if (owner, name) in WRITING_FUNCTIONS:
        return f"{owner}.{name}"
    return None


def _called_name(call: ast.Call) -> str | None:
    function = call.func
    if isinstance(function, ast.Name):
        return function.id
    if isinstance(function, ast.Attribute):
        return function.attr
    return None


def bypassing_writes(source: str) -> list[tuple[int, str]]:
    """(line, what) for each write in ``source`` that does not go through the writer."""
    tree = ast.parse(source)
    handed = set()  # function names and lambda nodes handed to a writer
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called_name(node) in WRITER_FUNCTIONS:
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(argument, ast.Lambda):
                    handed.add(id(argument))
                elif isinstance(argument, ast.Name):
                    handed.add(argument.id)
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, inside_writer: bool) -> None:
        # a wrapper that is itself a writing method (an FSDP model's save_pretrained) is checked where it is called
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            node.name in handed or node.name in WRITING_METHODS
        ):
            inside_writer = True
        if isinstance(node, ast.Lambda) and id(node) in handed:
            inside_writer = True
        if isinstance(node, ast.Call) and not inside_writer:
            what = writes(node)
            checked_directory = any(
                isinstance(inner, ast.Call) and _called_name(inner) == "output_directory"
                for argument in [*node.args, *(k.value for k in node.keywords)]
                for inner in ast.walk(argument)
            )
            if what is not None and not checked_directory:
                found.append((node.lineno, what))
        for child in ast.iter_child_nodes(node):
            visit(child, inside_writer)

    visit(tree, False)
    return found


def scanned_files() -> list[Path]:
    files = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*.py")):
            relative = path.relative_to(REPO).as_posix()
            if "/tests/" in f"/{relative}" or relative in (WRITER, LOCKS, HOSTILE_HARNESS):
                continue
            files.append(path)
    return files


def test_every_write_goes_through_the_writer():
    bypasses = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in scanned_files()
        for line, what in bypassing_writes(path.read_text(encoding="utf-8"))
    ]
    assert not bypasses, "writes that bypass maopd/base/atomic.py:\n" + "\n".join(bypasses)


@pytest.mark.parametrize(
    "line",
    [
        'open(path, "w")',
        'open(path, mode="a", encoding="utf-8")',
        'path.open("wb")',
        'Path(p).write_text("x")',
        "frame.to_csv(out)",
        "figure.savefig(out)",
        "torch.save(state, out)",
        "json.dump(data, handle)",
        'gzip.open(path, "wt")',
        "os.open(path, os.O_WRONLY | os.O_CREAT)",
        "shutil.copy2(a, b)",
        "model.save_pretrained(out)",
        "SummaryWriter(str(run_dir / 'tb'))",
        "os.symlink(a, b)",
    ],
)
def test_a_bypassing_write_is_found(line):
    assert bypassing_writes(line), line


@pytest.mark.parametrize(
    "source",
    [
        'open(path, encoding="utf-8")',
        'path.open("rb")',
        "write_path_atomically(out, lambda tmp: figure.savefig(tmp))",
        "def build(staging):\n    model.save_pretrained(staging)\nbuild_directory_atomically(out, build)",
        "SummaryWriter(str(output_directory(run_dir / 'tb')))",
        "record.to_json()",
    ],
)
def test_writes_through_the_writer_pass(source):
    assert not bypassing_writes(source), source


def test_the_scan_fails_when_a_bypassing_write_is_added():
    """A module of the project with one write added fails the scan."""
    module = REPO / "maopd" / "evaluation" / "scoring.py"
    source = module.read_text(encoding="utf-8")
    assert not bypassing_writes(source)
    assert bypassing_writes(source + '\n\ndef leak(out):\n    (out / "x.txt").write_text("x")\n')
