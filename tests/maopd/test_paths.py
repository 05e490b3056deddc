"""resolve_inside: config paths cannot make a run write outside its run directory; no command writes
over one of its own inputs."""

import os
from pathlib import Path

import pytest

from maopd.base.paths import OverwritesInputError, PathOutsideRunError, refuse_overwriting_inputs, resolve_inside


@pytest.mark.parametrize("path", ["ckpt", "logs/run.jsonl", "./a/../b", "a/b/../../c"])
def test_relative_paths_inside_resolve_under_the_run(tmp_path, path):
    resolved = resolve_inside(tmp_path, path, field="trainer.checkpoint_dir")
    assert resolved.is_relative_to(tmp_path.resolve())
    assert resolved == (tmp_path / path).resolve()


@pytest.mark.parametrize("path", ["..", "../sibling", "a/../../x", "/etc/passwd", "~/.bashrc", "ckpt/../../.."])
def test_escaping_paths_are_refused_naming_the_field(tmp_path, path):
    with pytest.raises(PathOutsideRunError, match=r"^trainer\.log_file: .*outside the run directory"):
        resolve_inside(tmp_path / "run", path, field="trainer.log_file")


def test_symlinks_pointing_out_are_refused(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    outside.mkdir()
    os.symlink(outside, run / "link")
    with pytest.raises(PathOutsideRunError, match="eval.output"):
        resolve_inside(run, "link/file.json", field="eval.output")


def test_explicit_permission_allows_outside(tmp_path):
    assert resolve_inside(tmp_path / "run", "../shared", allow_outside=True) == (tmp_path / "shared").resolve()


@pytest.mark.parametrize(("path", "message"), [("", "empty"), ("  ", "empty"), ("a\x00b", "NUL")])
def test_empty_and_nul_paths_are_refused_even_when_allowed(tmp_path, path, message):
    with pytest.raises(PathOutsideRunError, match=f"out_dir: .*{message}"):
        resolve_inside(tmp_path, path, field="out_dir", allow_outside=True)


def test_the_run_directory_itself_is_inside(tmp_path):
    assert resolve_inside(tmp_path, ".") == tmp_path.resolve()


@pytest.mark.parametrize("spelling", ["same", "relative", "symlink", "hard link"])
def test_an_output_that_is_an_input_is_refused_however_it_is_spelled(tmp_path, monkeypatch, spelling):
    source = tmp_path / "pool.jsonl"
    source.write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    out = {"same": source, "relative": Path("pool.jsonl"), "symlink": tmp_path / "link", "hard link": tmp_path / "hard"}
    if spelling == "symlink":
        out[spelling].symlink_to(source)
    if spelling == "hard link":
        os.link(source, out[spelling])
    with pytest.raises(OverwritesInputError, match=f"--out {out[spelling]} is --dataset {source}"):
        refuse_overwriting_inputs([("--dataset", source)], [("--out", out[spelling])])
    refuse_overwriting_inputs([("--dataset", source)], [("--out", tmp_path / "other.jsonl"), ("--corpus", None)])


def test_an_input_inside_a_directory_the_command_fills_is_refused(tmp_path):
    corpus = tmp_path / "index" / "corpus.jsonl"
    with pytest.raises(OverwritesInputError, match="--corpus .* lies in --out"):
        refuse_overwriting_inputs([("--corpus", corpus)], [], filled=[("--out", tmp_path / "index")])
    refuse_overwriting_inputs([("--corpus", corpus)], [], filled=[("--out", tmp_path / "elsewhere")])
