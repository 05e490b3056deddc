"""``maopd index build`` and ``maopd retriever serve|query``."""

from __future__ import annotations

import argparse
import json
import socket
import sys

from maopd.base.arguments import bounded_int, positive_int
from maopd.base.errors import UserError
from maopd.base.network import is_loopback_host


def register(subparsers) -> None:
    index = subparsers.add_parser("index", help="build retrieval indexes").add_subparsers(
        dest="index_command", required=True
    )
    build = index.add_parser(
        "build",
        help="build a BM25, dense (faiss) or pyserini (Lucene) index from a JSONL corpus "
        "(resumable); --kind names the retriever.kind that reads it",
    )
    build.add_argument("--corpus", required=True, help='JSONL corpus, one {"id", "contents"} per line')
    build.add_argument("--out", required=True, help="index directory")
    build.add_argument(
        "--kind",
        choices=("dense", "bm25", "pyserini", "lucene"),
        default="dense",
        help="dense (default), bm25, or pyserini (a Lucene index; 'lucene' is an alias)",
    )
    build.add_argument(
        "--encoder", default="minilm", help="'minilm' (packaged all-MiniLM-L6-v2) or a local HF model dir"
    )
    build.add_argument("--prefix-style", choices=("auto", "e5", "none"), default="auto")
    build.add_argument("--index-type", choices=("flat", "hnsw", "ivfpq"), default="flat")
    build.add_argument("--batch-size", type=positive_int, default=64)
    build.add_argument("--chunk-size", type=positive_int, default=1024, help="documents per resumable chunk")
    build.set_defaults(func=_index_build)

    retriever = subparsers.add_parser("retriever", help="serve or query a retriever").add_subparsers(
        dest="retriever_command", required=True
    )
    serve = retriever.add_parser("serve", help="serve a retriever over Search-R1's POST /retrieve protocol")
    _add_retriever_args(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=bounded_int(0, 65535), default=8000)
    serve.add_argument("--max-queries", type=positive_int, default=512)
    serve.add_argument("--max-k", type=positive_int, default=100)
    serve.set_defaults(func=_serve)

    query = retriever.add_parser("query", help="run queries through a retriever and print JSON")
    _add_retriever_args(query)
    query.add_argument("queries", nargs="+")
    query.add_argument("-k", type=positive_int, default=3)
    query.set_defaults(func=_query)


def _add_retriever_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML file holding a RetrieverConfig")
    parser.add_argument("--corpus", help="JSONL corpus (needed by the bm25 and dense kinds)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="RetrieverConfig override, e.g. --set kind=dense --set index_dir=idx (repeatable)",
    )


def _load_retriever(args):
    from maopd.base.config import load_yaml
    from maopd.envs.retrieval.corpus import load_corpus
    from maopd.envs.retrieval.factory import CORPUS_KINDS, RetrieverConfig, build_retriever

    config = load_yaml(RetrieverConfig, args.config, args.overrides)
    if config.kind in CORPUS_KINDS and not args.corpus:
        raise UserError(
            f"--corpus: retriever kind {config.kind!r} searches a corpus; pass --corpus FILE.jsonl "
            "(kinds http and pyserini need none)"
        )
    corpus = load_corpus(args.corpus) if args.corpus else None
    return build_retriever(config, corpus)


def _index_build(args) -> int:
    from maopd.base.paths import refuse_overwriting_inputs
    from maopd.envs.retrieval.index_build import build_bm25_index, build_dense_index

    refuse_overwriting_inputs([("--corpus", args.corpus)], [], filled=[("--out", args.out)])
    if args.kind == "bm25":
        report = build_bm25_index(args.corpus, args.out)
    elif args.kind in ("pyserini", "lucene"):
        import time

        from maopd.envs.retrieval.corpus import CorpusError, iter_corpus
        from maopd.envs.retrieval.pyserini_adapter import build_lucene_index

        if next(iter_corpus(args.corpus), None) is None:  # missing, empty, a bad first line: named in one line
            raise CorpusError(
                f'corpus file {args.corpus} holds no documents; write one {{"id", "contents"}} JSON object per line'
            )
        start = time.perf_counter()
        try:
            build_lucene_index(args.corpus, args.out)
        except ModuleNotFoundError as exc:
            raise UserError(str(exc)) from None
        print(
            f"pyserini (Lucene) index -> {args.out} in {time.perf_counter() - start:.1f}s; "
            f"read it with retriever.kind=pyserini retriever.index_dir={args.out}"
        )
        return 0
    else:
        report = build_dense_index(
            args.corpus, args.out, args.encoder, args.prefix_style, args.index_type, args.chunk_size, args.batch_size
        )
    print(report.summary())
    return 0


def _serve(args) -> int:
    import uvicorn

    from maopd.envs.retrieval.server import ServerLimits, create_app, uvicorn_config

    retriever = _load_retriever(args)
    limits = ServerLimits(max_queries=args.max_queries, max_k=args.max_k)
    # bind before announcing anything: a port in use or a bad host is an error, not "serving on ..."
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    if not is_loopback_host(args.host):
        print(
            f"WARNING: --host {args.host} makes the server reachable from other machines; it has no "
            "authentication. Use 127.0.0.1 unless the network is trusted.",
            file=sys.stderr,
        )
    port = sock.getsockname()[1]
    print(
        f"serving {retriever.name} (corpus {retriever.fingerprint}) on http://{args.host}:{port}/retrieve", flush=True
    )
    uvicorn.Server(uvicorn_config(create_app(retriever, limits), limits)).run(sockets=[sock])
    return 0


def _query(args) -> int:
    retriever = _load_retriever(args)
    for query, passages in zip(args.queries, retriever.search(args.queries, args.k)):
        print(json.dumps({"query": query, "passages": [p.to_dict() for p in passages]}, ensure_ascii=False))
    return 0
