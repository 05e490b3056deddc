"""Every `maopd ...` command line in README.md and docs/*.md parses with the real argument parser.

A renamed flag or subcommand then fails here, not for a reader. How command lines are found and
read (the same rules for fenced code blocks and for inline code):

- **Where**: every line of a fenced code block (lines ending in `\\` are joined with the next), and
  every inline code span outside fenced blocks (spans may wrap lines). Shell comments (`#` at the
  start of a word, to the end of the line) are dropped. A line is cut at `&&`, `||`, `;` and `|`
  words; in each piece the command starts at the word `maopd` (or a path ending in `/maopd`, such
  as `.venv/bin/maopd`), or after `-m maopd.cli`. Whatever precedes it (`torchrun ...`,
  `OMP_NUM_THREADS=1`, `/usr/bin/time -v`) is not checked.
- **Synopsis notation** is expanded, so each form a reader may type is checked:
  `[...]` at the start of a word is an optional group, checked both without and with its content
  (`[--compare A B]...`, a repeatable group, likewise); inside a group a `...` word means "more of
  the same" and is dropped; a word `a|b|c` is a choice, checked with each alternative (Markdown
  tables escape it as `a\\|b`). Brackets after `=` are YAML values (`variants=[full]`), not syntax.
- **Placeholders**: a word wholly in capitals (`N`, `S`, `DIR`, `RUN_DIR`, `FILE`) or of the form
  `<...>` stands for a value and is replaced by `1`, which every argument type accepts.
- **References, not command lines**: a `...` word outside any group elides arguments, and a span
  made only of command words (`maopd eval run`, `maopd plot`) names a command. For these the test
  checks that every named (sub)command exists and, after a `...`, that every `--option` written
  is one of that command's; a span of command words is also parsed, and may fail only for missing
  required arguments. A bare `maopd` names the program and is skipped.
- **Messages, not commands**: `maopd train: ...` (a first word ending in `:`) quotes what the
  program prints, and is skipped.

Besides parsing: a `--config configs/...` or `models/...` path must exist, and no `maopd` command
in the docs writes into `benchmarks/results/` (committed results are reproduced into `runs/` and
their README says so).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import re
import shlex
from pathlib import Path

import pytest

from maopd.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OPTIONAL_GROUP = re.compile(r"(?<!\S)\[([^\[\]]*)\](?:\.\.\.)?")
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*|<[^<>]+>)$")
MAX_FORMS = 256
# The options that name where a command writes; committed results may still be read (--runs, --gates).
WRITING_FLAGS = ("--out", "--run-dir")


def _strip_comment(line: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", line)


def _fenced_and_inline(text: str) -> tuple[list[str], list[str]]:
    """The logical lines of fenced code blocks, and the inline code spans of everything else."""
    block_lines: list[str] = []
    prose: list[str] = []
    in_block, pending = False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            prose.append(line)
            continue
        line = _strip_comment(line).rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        block_lines.append(pending + line)
        pending = ""
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", "\n".join(prose))]
    return block_lines, spans


def _commands(line: str) -> list[str]:
    """The `maopd` argument strings (after the program name) of one line, unexpanded."""
    line = line.replace("\\|", "|")
    # separators are words of their own, so a choice like a|b stays inside one word
    pieces = re.split(r"\s(?:&&|\|\||;|\|)\s", f" {line} ")
    found = []
    for piece in pieces:
        words = piece.split()
        for i, word in enumerate(words):
            if word == "maopd" or word.endswith("/maopd"):
                found.append(" ".join(words[i + 1 :]))
                break
            if word == "-m" and i + 1 < len(words) and words[i + 1] == "maopd.cli":
                found.append(" ".join(words[i + 2 :]))
                break
    return found


def _expand_groups(text: str) -> list[str]:
    match = OPTIONAL_GROUP.search(text)
    if match is None:
        return [text]
    inner = " ".join(word for word in match.group(1).split() if word != "...")
    without = text[: match.start()] + text[match.end() :]
    with_group = text[: match.start()] + inner + text[match.end() :]
    return [*_expand_groups(without), *_expand_groups(with_group)]


def _forms(arguments: str) -> list[list[str]]:
    """Every concrete argv the synopsis `arguments` stands for."""
    forms = []
    for text in _expand_groups(arguments):
        words = shlex.split(text)
        choices = [word.split("|") if "|" in word and not word.startswith(("'", '"')) else [word] for word in words]
        for combination in itertools.product(*choices):
            forms.append(list(combination))
            if len(forms) > MAX_FORMS:
                raise AssertionError(f"too many forms for {arguments!r}")
    return forms


def _collect() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        block_lines, spans = _fenced_and_inline(path.read_text(encoding="utf-8"))
        for line in [*block_lines, *spans]:
            for arguments in _commands(line):
                # a bare `maopd` names the program; `maopd train: ...` quotes a message
                if arguments and not arguments.split()[0].endswith(":"):
                    found.append((f"{path.relative_to(ROOT)}: maopd {arguments}", arguments))
    return found


COMMANDS = _collect()


def _subcommand_names(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _check_reference(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """The (sub)commands before a `...` exist; every `--option` after it is one of the last one's."""
    elided = words.index("...") if "..." in words else len(words)
    for word in words[:elided]:
        children = _subcommand_names(parser)
        assert word in children, f"no subcommand {word!r} (has {sorted(children)})"
        parser = children[word]
    options = {option for action in parser._actions for option in action.option_strings}
    for word in words[elided:]:
        if word.startswith("--"):
            assert word.split("=", 1)[0] in options, f"no option {word!r} (has {sorted(options)})"


def _is_reference(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    if "..." in argv:
        return True
    for word in argv:
        children = _subcommand_names(parser)
        if word not in children:
            return False
        parser = children[word]
    return True


def test_the_docs_have_maopd_commands():
    assert len(COMMANDS) >= 30, COMMANDS


@pytest.mark.parametrize("where,arguments", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_doc_command_parses(where, arguments):
    parser = build_parser()
    for argv in _forms(arguments):
        reference = _is_reference(parser, argv)
        if reference:
            _check_reference(parser, argv)
            if "..." in argv:
                continue
        argv = ["1" if PLACEHOLDER.match(word) else word for word in argv]
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(argv)
        except SystemExit as exit_:
            if reference and "required" in stderr.getvalue():
                continue  # names a command whose required arguments the sentence leaves out
            pytest.fail(f"{where}\n  as {argv}: exit {exit_.code}\n{stderr.getvalue()}")
        for flag, value in itertools.pairwise(argv):
            if flag == "--config" and value.startswith(("configs/", "models/")) and "<" not in value:
                assert (ROOT / value).exists(), f"{where}: {value} does not exist"
            if flag in WRITING_FLAGS:
                assert "benchmarks/results" not in value, f"{where} writes into benchmarks/results/"


def test_synopsis_notation_is_expanded():
    assert sorted(map(tuple, _forms("play [--workflow hierarchical|cascade] [--seed N]"))) == sorted(
        [
            ("play",),
            ("play", "--seed", "N"),
            ("play", "--workflow", "hierarchical"),
            ("play", "--workflow", "cascade"),
            ("play", "--workflow", "hierarchical", "--seed", "N"),
            ("play", "--workflow", "cascade", "--seed", "N"),
        ]
    )
    assert _forms("train 'variants=[full, x]'") == [["train", "variants=[full, x]"]]
    assert _forms("score r.jsonl [--compare A B]... --out o") == [
        ["score", "r.jsonl", "--out", "o"],
        ["score", "r.jsonl", "--compare", "A", "B", "--out", "o"],
    ]
    assert _commands("bash scripts/setup.sh && .venv/bin/maopd train  ") == ["train"]
    assert _commands("torchrun --nproc_per_node 8 -m maopd.cli train --config c.yaml") == ["train --config c.yaml"]
