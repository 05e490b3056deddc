"""The one writer (maopd/base/atomic.py): no write through a symbolic or hard link, one mode, whole files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from maopd.base.atomic import (
    DIRECTORY_MODE,
    FILE_MODE,
    LinkedOutputError,
    build_directory_atomically,
    copy_directory,
    open_atomically,
    open_for_append,
    output_directory,
    write_files_atomically,
    write_path_atomically,
    write_text_atomically,
)
from maopd.base.config import save_yaml
from maopd.base.json_files import drop_torn_last_line, write_json
from maopd.evaluation.records import record_line
from tests.evaluation.test_eval_metrics import make_records


def _victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs")
    return victim


@pytest.mark.parametrize(
    "write",
    [
        lambda path: write_text_atomically(path, "mine"),
        lambda path: write_json(path, {"a": 1}),
        lambda path: write_path_atomically(path, lambda temporary: temporary.write_text("mine")),
        lambda path: open_for_append(path).close(),
    ],
    ids=["text", "json", "path", "append"],
)
@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_link_at_the_target_is_refused_and_its_file_kept(tmp_path, write, link):
    victim = _victim(tmp_path)
    target = tmp_path / "out" / "viewer.html"
    target.parent.mkdir()
    target.symlink_to(victim) if link == "symbolic" else os.link(victim, target)
    with pytest.raises(LinkedOutputError, match="symbolic link" if link == "symbolic" else "2 hard links"):
        write(target)
    assert victim.read_text() == "theirs"
    assert sorted(p.name for p in target.parent.iterdir()) == ["viewer.html"]  # no temporary file left


def test_files_get_one_mode_whatever_the_umask(tmp_path):
    previous = os.umask(0o077)
    try:
        paths = [
            write_text_atomically(tmp_path / "a.txt", "x"),
            write_path_atomically(tmp_path / "b.txt", lambda temporary: temporary.write_text("x")),
        ]
        with open_for_append(tmp_path / "c.jsonl") as handle:
            handle.write("{}\n")
        paths.append(tmp_path / "c.jsonl")
    finally:
        os.umask(previous)
    assert {stat.S_IMODE(p.stat().st_mode) for p in paths} == {FILE_MODE}


def test_a_failed_write_leaves_the_file_as_it_was(tmp_path):
    path = write_text_atomically(tmp_path / "a.txt", "before")
    with pytest.raises(RuntimeError), open_atomically(path) as handle:
        handle.write("half")
        raise RuntimeError("killed")
    assert path.read_text() == "before"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_appends_are_not_rewrites(tmp_path):
    path = tmp_path / "m.jsonl"
    for row in ("1", "2"):
        with open_for_append(path) as handle:
            handle.write(row + "\n")
    inode = path.stat().st_ino
    with open_for_append(path) as handle:
        handle.write("3")  # torn
    assert drop_torn_last_line(path) == "3"
    assert path.read_text() == "1\n2\n" and path.stat().st_ino == inode


def test_a_hard_linked_config_yaml_is_refused_not_written_through(tmp_path):
    """After `cp -al runs/a runs/b`, saving runs/b's config would rewrite runs/a's."""
    (tmp_path / "a").mkdir()
    save_yaml({"lr": 0.1}, tmp_path / "a" / "config.yaml")
    subprocess.run(["cp", "-al", str(tmp_path / "a"), str(tmp_path / "b")], check=True)
    with pytest.raises(LinkedOutputError, match="cp -al"):
        save_yaml({"lr": 0.5}, tmp_path / "b" / "config.yaml")
    assert "0.1" in (tmp_path / "a" / "config.yaml").read_text()


def test_a_library_directory_is_checked(tmp_path):
    assert output_directory(tmp_path / "tb").is_dir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LinkedOutputError):
        output_directory(tmp_path / "linked")
    (tmp_path / "tb" / "events").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(LinkedOutputError):
        output_directory(tmp_path / "tb")


def test_saved_files_join_a_directory_one_by_one(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "kept.txt").write_text("kept")
    victim = _victim(tmp_path)
    (directory / "config.json").symlink_to(victim)
    with pytest.raises(LinkedOutputError):
        write_files_atomically(directory, lambda staging: (staging / "config.json").write_text("{}"))
    assert victim.read_text() == "theirs"
    (directory / "config.json").unlink()
    write_files_atomically(directory, lambda staging: (staging / "config.json").write_text("{}"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "victim.txt"]  # no staging left
    assert sorted(p.name for p in directory.iterdir()) == ["config.json", "kept.txt"]


def test_a_copied_directory_refuses_links_in_its_source(tmp_path):
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "a.txt").write_text("a")
    copy_directory(source, tmp_path / "copy")
    assert (tmp_path / "copy" / "sub" / "a.txt").read_text() == "a"
    (source / "b.txt").symlink_to(_victim(tmp_path))
    with pytest.raises(LinkedOutputError):
        copy_directory(source, tmp_path / "copy2")


def test_the_cli_names_a_linked_output_in_one_line(tmp_path):
    """`maopd eval score` into a directory where viewer.html is a link to someone's file."""
    victim = _victim(tmp_path)
    records = tmp_path / "r.jsonl"
    out = tmp_path / "o"
    out.mkdir()
    (out / "viewer.html").symlink_to(victim)
    records.write_text("".join(record_line(r) for r in make_records("m", {"d": [[1, 0]]})))
    done = subprocess.run(
        [sys.executable, "-m", "maopd.cli", "eval", "score", str(records), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert "viewer.html is a symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert victim.read_text() == "theirs"


def test_a_built_directory_gets_one_mode_whatever_its_library_chose(tmp_path):
    def build(staging):
        (staging / "sub").mkdir(mode=0o700)
        (staging / "sub" / "state.pt").write_text("x")
        os.chmod(staging / "sub" / "state.pt", 0o600)

    built = build_directory_atomically(tmp_path / "step_1", build)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [built, built / "sub", built / "sub" / "state.pt"]}
    assert modes == {"step_1": DIRECTORY_MODE, "sub": DIRECTORY_MODE, "state.pt": FILE_MODE}
