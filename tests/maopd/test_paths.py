"""resolve_inside: config paths cannot make a run write outside its run directory."""

import os

import pytest

from maopd.base.paths import PathOutsideRunError, resolve_inside


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
