"""Retrieval hints say what to run: the pyserini install line, the BM25 build command, one name
(pyserini) for the Lucene index in both `index build --kind` and `retriever.kind`."""

import sys

import pytest

from maopd.cli import main


def test_pyserini_index_build_without_pyserini_gives_the_install_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyserini", None)  # as if not installed
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "1", "contents": "\\"A\\"\\nSome text."}\n')
    for kind in ("pyserini", "lucene"):
        assert main(["index", "build", "--kind", kind, "--corpus", str(corpus), "--out", str(tmp_path / "idx")]) == 2
        assert "pip install -e '.[pyserini]'" in capsys.readouterr().err


def test_pyserini_retriever_without_pyserini_gives_the_install_command(tmp_path, monkeypatch):
    from maopd.envs.retrieval.factory import RetrieverConfig, build_retriever

    monkeypatch.setitem(sys.modules, "pyserini", None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[pyserini\]'"):
        build_retriever(RetrieverConfig(kind="pyserini", index_dir=str(tmp_path)), None)


def test_a_missing_bm25_index_names_the_bm25_build_command(tmp_path):
    from maopd.envs.retrieval.bm25 import BM25Retriever
    from maopd.envs.synthwiki import load_default_world

    with pytest.raises(FileNotFoundError, match="maopd index build --kind bm25"):
        BM25Retriever.load(tmp_path, load_default_world().corpus)
