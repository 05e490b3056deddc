"""``maopd eval``: convert datasets, build manifests, run workflows and score records."""

from __future__ import annotations

from pathlib import Path

from maopd.base.arguments import bounded_int, limited_int, positive_int, seed_int
from maopd.base.limits import BATCH, INPUT_TOKENS, NEW_TOKENS
from maopd.envs.policy import SamplingSettings
from maopd.envs.workflows import workflow_names


def register(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="evaluation protocol: datasets, manifests, runs, scoring")
    commands = parser.add_subparsers(dest="eval_command", required=True, metavar="SUBCOMMAND")

    convert = commands.add_parser("convert", help="convert a raw dataset file to FlashRAG JSONL")
    convert.add_argument("input", help="raw dataset file (JSON Lines or a JSON array)")
    convert.add_argument("output", help="FlashRAG JSONL file to write")
    convert.add_argument(
        "--format",
        required=True,
        help="raw format: flashrag, hotpotqa, 2wiki, musique, popqa, bamboogle-decomposed, dpr-nq",
    )
    convert.add_argument("--corpus", help="also write the rows' paragraphs, deduplicated, as a corpus JSONL")
    convert.set_defaults(func=_reporting_errors(_convert))

    corpus = commands.add_parser("corpus", help="pool the paragraphs of raw dataset files into one corpus")
    corpus.add_argument("inputs", nargs="+", metavar="PATH:FORMAT", help="raw dataset files with their formats")
    corpus.add_argument("--out", required=True, help="corpus JSONL (Search-R1 format), deduplicated by title + text")
    corpus.set_defaults(func=_corpus)

    manifest = commands.add_parser("manifest", help="sample a fixed test manifest (paper Appendix A)")
    manifest.add_argument(
        "--dataset",
        action="append",
        required=True,
        metavar="NAME=PATH[:FORMAT]",
        help="a test pool; FORMAT defaults to flashrag (repeatable)",
    )
    manifest.add_argument(
        "--count",
        action="append",
        default=[],
        metavar="NAME=N",
        help="questions to sample from NAME (default: the paper's count, or the whole pool)",
    )
    manifest.add_argument(
        "--training",
        action="append",
        default=[],
        metavar="PATH[:FORMAT]",
        help="training questions whose normalized text must not appear in the manifest",
    )
    manifest.add_argument("--seed", type=seed_int, default=None, help="sampling seed (default 20260728)")
    manifest.add_argument("--out", required=True, help="manifest JSONL; the removal report goes to OUT.report.json")
    manifest.set_defaults(func=_reporting_errors(_manifest))

    run = commands.add_parser("run", help="run k workflows per manifest question and save scored records")
    run.add_argument("--manifest", required=True)
    run.add_argument("--corpus", help="corpus JSONL for the in-process retriever (BM25); default: the embedded world")
    run.add_argument("--workflow", choices=workflow_names(), default="hierarchical")
    run.add_argument(
        "--policy",
        type=_team_policy,
        default="scripted",
        metavar="{scripted,scripted-noisy-answerer,checkpoint} | package.module:Class | path/to/file.py:Class",
        help="the team: a rule-based one, 'checkpoint' (every role played by the model in --model), or your own "
        "policy class, built with no arguments (docs/policies.md)",
    )
    run.add_argument(
        "--role",
        action="append",
        default=[],
        type=_role_policy,
        metavar="ROLE=package.module:Class|ROLE=path/to/file.py:Class",
        help="play one role (leader, searcher, answerer or solver) with your own policy class instead of "
        "--policy's (repeatable)",
    )
    run.add_argument(
        "--model",
        help="for --policy checkpoint: a Hugging Face hub id (e.g. Qwen/Qwen3-0.6B), a model "
        "directory, a run directory or RUN/checkpoints/step_N; with --backend openai, the served model name",
    )
    run.add_argument(
        "--backend",
        choices=["hf", "vllm", "openai"],
        default="hf",
        help="hf: transformers in this process (default); vllm: the vLLM venv (scripts/setup_vllm.sh); "
        "openai: an OpenAI-compatible server at --base-url",
    )
    run.add_argument("--device", default="cpu", help="torch device for --backend hf, e.g. cuda or cuda:1 (default cpu)")
    run.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="model weights' dtype for the hf and vllm backends (default float32)",
    )
    run.add_argument(
        "--max-new-tokens",
        type=limited_int(NEW_TOKENS),
        default=SamplingSettings.max_new_tokens,
        help="tokens generated per turn at most (default %(default)s)",
    )
    run.add_argument(
        "--max-input-tokens",
        type=limited_int(INPUT_TOKENS),
        default=SamplingSettings.max_input_tokens,
        help="prompt tokens per turn at most (default %(default)s)",
    )
    run.add_argument("--base-url", help="--backend openai: the server's base URL, e.g. http://127.0.0.1:8000/v1")
    run.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="--backend openai: the environment variable holding the API key (default OPENAI_API_KEY)",
    )
    run.add_argument(
        "--retriever-config",
        metavar="YAML",
        help="a RetrieverConfig file (docs/retrieval.md): kind bm25|dense|pyserini|http, index_dir, url, ... "
        "(default: in-process BM25 over --corpus or the embedded world)",
    )
    run.add_argument(
        "--retriever-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="RetrieverConfig override, e.g. --retriever-set kind=http --retriever-set url=http://host:8000 "
        "(repeatable)",
    )
    run.add_argument("--temperature", type=float, default=SamplingSettings.temperature)
    run.add_argument("--top-p", type=float, default=SamplingSettings.top_p)
    run.add_argument(
        "--method",
        help="method name in the records (default: <policy>-<workflow>; <model>-<workflow> for --policy checkpoint)",
    )
    run.add_argument("--attempts", type=positive_int, default=4)
    run.add_argument("--batch-size", type=limited_int(BATCH), default=8)
    run.add_argument("--seed", type=seed_int, default=0)
    run.add_argument(
        "--out",
        required=True,
        help="records JSONL; appended to and resumed under the same settings only (recorded in OUT.settings.json)",
    )
    run.set_defaults(func=_reporting_errors(_run))

    score = commands.add_parser("score", help="tables, plot and JSON summary from scored records")
    score.add_argument("records", nargs="+", help="records JSONL files (docs/evaluation.md)")
    score.add_argument(
        "--compare",
        nargs=2,
        action="append",
        default=[],
        metavar=("A", "B"),
        help="paired differences A - B (repeatable)",
    )
    score.add_argument("--out", default="eval_report", help="directory for summary.json, tables, plot, viewer")
    score.add_argument("--draws", type=bounded_int(1, 1_000_000), default=None, help="bootstrap draws (default 4000)")
    score.add_argument("--seed", type=seed_int, default=None, help="bootstrap seed (default 20260912)")
    score.add_argument("--viewer-questions", type=bounded_int(0), default=50, help="questions in the trajectory viewer")
    score.set_defaults(func=_reporting_errors(_score))

    matrix = commands.add_parser(
        "matrix", help="both intervals (question bootstrap, t over seeds) from a score matrix file"
    )
    matrix.add_argument(
        "matrix", help="a score matrix JSON (docs/evaluation.md), e.g. a seed report's score_matrix.json"
    )
    matrix.add_argument(
        "--compare",
        nargs=2,
        action="append",
        default=[],
        metavar=("A", "B"),
        help="the difference A - B (repeatable); without it, every system's accuracy",
    )
    matrix.add_argument(
        "--expect",
        choices=["higher", "lower"],
        help="the expected direction of every A - B (A higher or lower than B): adds the verdict",
    )
    matrix.add_argument(
        "--gates-failed", action="store_true", help="a precondition of the test failed: every verdict is 'not tested'"
    )
    matrix.add_argument(
        "--metric",
        choices=["avg", "pass", "all"],
        default="avg",
        help="over each seed's k attempts: avg@k (default), pass@k (one correct) or k/k (all correct)",
    )
    matrix.add_argument("--draws", type=bounded_int(1, 1_000_000), default=None, help="bootstrap draws (default 4000)")
    matrix.add_argument("--seed", type=seed_int, default=None, help="bootstrap seed (default 20260912)")
    matrix.add_argument("--out", help="also write every figure, unrounded, to this JSON file")
    matrix.set_defaults(func=_reporting_errors(_matrix))


TEAM_POLICIES = ("scripted", "scripted-noisy-answerer", "checkpoint")


def _team_policy(value: str) -> str:
    """``--policy``: a built-in team's name or a policy spec (``where:Name``)."""
    import argparse

    from maopd.envs.policy_loading import SPEC_FORM, is_policy_spec

    if value in TEAM_POLICIES or is_policy_spec(value):
        return value
    raise argparse.ArgumentTypeError(f"{value!r} is neither one of {', '.join(TEAM_POLICIES)} nor {SPEC_FORM}")


def _role_policy(value: str) -> tuple[str, str]:
    """``--role ROLE=SPEC``."""
    import argparse

    from maopd.envs.policy_loading import SPEC_FORM, is_policy_spec
    from maopd.envs.workflows import workflow_roles

    roles = sorted({role for workflow in workflow_names() for role in workflow_roles(workflow)})
    role, equals, spec = value.partition("=")
    if not equals or role not in roles or not is_policy_spec(spec):
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected ROLE=SPEC, ROLE one of {', '.join(roles)}, SPEC {SPEC_FORM}"
        )
    return role, spec


def _reporting_errors(command):
    """Bad input (a malformed file, an unknown method) ends the command with its message, not a traceback."""

    def run(args) -> int:
        from maopd.base.errors import UserError

        try:
            return command(args)
        except ValueError as exc:
            raise UserError(str(exc)) from None

    return run


def _split_spec(spec: str, default_format: str = "flashrag") -> tuple[str, str]:
    """``PATH[:FORMAT]``: the part after the last colon is a format only if it names one."""
    from maopd.evaluation.converters import CONVERTERS

    path, _, fmt = spec.rpartition(":")
    return (path, fmt) if path and fmt in CONVERTERS else (spec, default_format)


def _convert(args) -> int:
    from maopd.base.paths import refuse_overwriting_inputs
    from maopd.envs.datasets import write_questions
    from maopd.evaluation.converters import convert, pool_corpus

    refuse_overwriting_inputs([("input", args.input)], [("output", args.output), ("--corpus", args.corpus)])
    examples = convert(args.input, args.format)
    write_questions([e.question for e in examples], args.output)
    print(f"wrote {len(examples)} questions to {args.output}")
    if args.corpus:
        corpus = pool_corpus(examples)
        corpus.write_jsonl(args.corpus)
        print(f"wrote {len(corpus)} paragraphs to {args.corpus}")
    return 0


def _corpus(args) -> int:
    from maopd.base.paths import refuse_overwriting_inputs
    from maopd.evaluation.converters import convert, pool_corpus

    specs = [_split_spec(spec) for spec in args.inputs]
    refuse_overwriting_inputs([("input", path) for path, _ in specs], [("--out", args.out)])
    examples = [e for spec in specs for e in convert(*spec)]
    corpus = pool_corpus(examples)
    corpus.write_jsonl(args.out)
    print(f"wrote {len(corpus)} paragraphs from {len(examples)} questions to {args.out}")
    return 0


def _manifest(args) -> int:
    from maopd.base.paths import refuse_overwriting_inputs
    from maopd.evaluation.converters import convert
    from maopd.evaluation.manifest import MANIFEST_SEED, PAPER_COUNTS, build_manifest, report_path, write_manifest

    datasets = {}
    for spec in args.dataset:
        name, sep, rest = spec.partition("=")
        if not sep:
            raise ValueError(f"--dataset {spec!r}: expected NAME=PATH[:FORMAT]")
        datasets[name] = _split_spec(rest)
    trainings = [_split_spec(spec) for spec in args.training]
    refuse_overwriting_inputs(
        [("--dataset", path) for path, _ in datasets.values()] + [("--training", path) for path, _ in trainings],
        [("--out", args.out), ("--out's report", report_path(args.out))],
    )
    pools = {name: [e.question for e in convert(*spec)] for name, spec in datasets.items()}
    counts = {name: min(PAPER_COUNTS.get(name, len(pool)), len(pool)) for name, pool in pools.items()}
    for spec in args.count:
        name, sep, value = spec.partition("=")
        if not sep or not value.isdigit() or name not in pools:
            raise ValueError(f"--count {spec!r}: expected NAME=N for one of {sorted(pools)}")
        counts[name] = int(value)
    training = [e.question.question for spec in trainings for e in convert(*spec)]
    manifest = build_manifest(pools, counts, MANIFEST_SEED if args.seed is None else args.seed, training)
    digest = write_manifest(manifest, args.out)
    report = manifest.report
    print(
        f"wrote {report['total']} questions to {args.out} (sha256 {digest[:16]}); removed "
        f"{len(report['removed'])} training overlaps: {report['removed_per_dataset']}"
    )
    return 0


def _run(args) -> int:
    from maopd.base.paths import refuse_overwriting_inputs
    from maopd.envs.policy_loading import is_policy_spec, load_policy
    from maopd.envs.retrieval.corpus import load_corpus
    from maopd.evaluation.manifest import load_manifest
    from maopd.evaluation.runner import EvalSettings, run_attempts, settings_file
    from maopd.evaluation.solvers import checkpoint_solver, debugging_policy, model_policy, team_solver, with_roles

    roles = _roles(args)
    refuse_overwriting_inputs(
        [("--manifest", args.manifest), ("--corpus", args.corpus), ("--retriever-config", args.retriever_config)],
        [("--out", args.out), ("--out's settings", settings_file(Path(args.out)))],
    )
    manifest = load_manifest(args.manifest)
    questions = [e.question for e in manifest]
    corpus = load_corpus(args.corpus) if args.corpus else None
    env_options = {}
    if args.retriever_config or args.retriever_set:
        from maopd.base.config import load_yaml
        from maopd.envs.retrieval.factory import RetrieverConfig, build_retriever

        env_options["retriever"] = build_retriever(
            load_yaml(RetrieverConfig, args.retriever_config, args.retriever_set), corpus
        )
    # each spec loaded once: a class built twice could differ (a seed drawn in its constructor)
    loaded = {spec: load_policy(spec) for spec in [args.policy, *roles.values()] if is_policy_spec(spec)}
    role_policies = {role: loaded[spec] for role, spec in roles.items()}
    if args.policy == "checkpoint":
        from maopd.agents.model_files import ModelFileError

        if not args.model:
            raise ValueError(
                "--model: --policy checkpoint needs a model: pass --model with a hub id, a model, run or "
                "checkpoint directory"
            )
        sampling = (args.temperature, args.top_p, args.max_new_tokens, args.max_input_tokens, args.device, args.dtype)
        try:
            if role_policies:  # a team of the model and your roles plays texts, one episode at a time
                model = model_policy(
                    args.model, args.backend, *sampling, base_url=args.base_url, api_key_env=args.api_key_env
                )
                policy = with_roles(model, role_policies, args.workflow)
                solve = team_solver(args.workflow, policy, corpus, questions, **env_options)
            else:
                solve = checkpoint_solver(
                    args.workflow,
                    args.model,
                    corpus,
                    questions,
                    *sampling,
                    args.backend,
                    args.base_url,
                    args.api_key_env,
                    **env_options,
                )
        except (FileNotFoundError, ModelFileError) as exc:  # a model that is missing or damaged: one line
            raise ValueError(f"--model: {exc}") from None
    else:
        team = loaded.get(args.policy) or debugging_policy(args.policy, args.seed)
        policy = with_roles(team, role_policies, args.workflow)
        solve = team_solver(args.workflow, policy, corpus, questions, **env_options)
    settings = EvalSettings(attempts=args.attempts, batch_size=args.batch_size, seed=args.seed)
    played_by = args.policy if args.policy != "checkpoint" else args.model
    method = args.method or "+".join([f"{played_by}-{args.workflow}", *(f"{r}={s}" for r, s in roles.items())])
    sources = {spec: policy.source_sha256() for spec, policy in loaded.items()}
    made_with = _made_with(args, roles, sources)
    ran = run_attempts(solve, manifest, args.out, method, settings, made_with)
    print(f"ran {ran} workflows; records in {args.out}")
    return 0


def _roles(args) -> dict[str, str]:
    """``--role``'s policies by role: each role once, and one the workflow plays."""
    from maopd.envs.workflows import workflow_roles

    roles: dict[str, str] = {}
    for role, spec in args.role:
        if role in roles:
            raise ValueError(f"--role {role}: given twice ({roles[role]}, {spec}); give each role once")
        if role not in workflow_roles(args.workflow):
            raise ValueError(
                f"--role {role}: the {args.workflow} workflow has no {role}; its roles are "
                f"{', '.join(workflow_roles(args.workflow))}"
            )
        roles[role] = spec
    return roles


def _made_with(args, roles: dict[str, str], sources: dict[str, str | None]) -> dict:
    """What makes ``eval run``'s records what they are, besides the seed: a resume must give the same
    (your own policies by their spec and ``sources``, the hash of the file that defines each)."""
    from maopd.base.fingerprint import input_fingerprints
    from maopd.evaluation.runner import INPUTS

    made_with = {
        "policy": args.policy,
        "workflow": args.workflow,
        "corpus": _absolute(args.corpus),
        "retriever_config": _absolute(args.retriever_config),
        "retriever_set": args.retriever_set,
    }
    if args.policy in sources:
        made_with["policy_source_sha256"] = sources[args.policy]
    if roles:
        made_with["roles"] = {role: {"policy": spec, "source_sha256": sources[spec]} for role, spec in roles.items()}
    if args.policy == "checkpoint":
        from maopd.training.model_loading import model_source

        model = args.model if args.backend == "openai" else str(model_source(args.model))
        made_with |= {
            "model": _absolute(model) if Path(model).exists() else model,  # a run directory: its checkpoint
            "backend": args.backend,
            "base_url": args.base_url,
            "dtype": args.dtype,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "max_new_tokens": args.max_new_tokens,
            "max_input_tokens": args.max_input_tokens,
        }
    # by content, so that an input rewritten in place is noticed; a hub id or an endpoint's model has no file
    files = {
        "manifest": args.manifest,
        **{name: made_with.get(name) for name in ("corpus", "retriever_config", "model")},
    }
    made_with[INPUTS] = input_fingerprints(files)
    return made_with


def _absolute(path: str | None) -> str | None:
    return None if path is None else str(Path(path).resolve())


def _score(args) -> int:
    from maopd.base.paths import refuse_overwriting_inputs
    from maopd.evaluation.metrics import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED
    from maopd.evaluation.records import RecordError, load_records
    from maopd.evaluation.scoring import OUTPUT_FILES, score_records

    out = Path(args.out)
    refuse_overwriting_inputs(
        [("records", path) for path in args.records], [(f"--out's {name}", out / name) for name in OUTPUT_FILES]
    )
    records = load_records(args.records)
    if not records:
        raise RecordError(f"no records in {', '.join(args.records)}")
    score_records(
        records,
        [tuple(pair) for pair in args.compare],
        out,
        BOOTSTRAP_DRAWS if args.draws is None else args.draws,
        BOOTSTRAP_SEED if args.seed is None else args.seed,
        args.viewer_questions,
    )
    return 0


def _matrix(args) -> int:

    from maopd.evaluation.metrics import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, CONFIDENCE
    from maopd.evaluation.score_matrix import read_matrix
    from maopd.evaluation.seed_statistics import percent_interval, side_by_side

    if args.expect and not args.compare:
        raise ValueError("--expect: a direction needs pairs; add --compare A B")
    if args.gates_failed and not args.expect:
        raise ValueError("--gates-failed: only verdicts are 'not tested'; add --expect higher|lower")
    from maopd.base.paths import refuse_overwriting_inputs

    refuse_overwriting_inputs([("matrix", args.matrix)], [("--out", args.out)])
    matrix = read_matrix(args.matrix)
    draws = BOOTSTRAP_DRAWS if args.draws is None else args.draws
    seed = BOOTSTRAP_SEED if args.seed is None else args.seed
    pairs = [tuple(pair) for pair in args.compare] or [(name, None) for name in matrix.systems]
    results = [
        side_by_side(matrix, a, b, args.expect, not args.gates_failed, draws, seed, args.metric) for a, b in pairs
    ]
    metric = {"avg": "avg@k", "pass": "pass@k", "all": "k/k"}[args.metric]
    print(
        f"{args.matrix}: {len(matrix.questions)} questions x {matrix.attempts} attempts x {len(matrix.seeds)} "
        f"seeds x {len(matrix.systems)} systems; {100 * CONFIDENCE:.0f}% intervals of macro {metric} "
        "in percent, of differences in points"
    )
    verdicts = args.expect is not None
    print(
        "| "
        + ("A − B" if args.compare else "system")
        + " | question bootstrap | seed-level t-interval |"
        + (" verdict |" if verdicts else "")
    )
    print("|---|---|---|" + ("---|" if verdicts else ""))
    for result in results:
        name = result["a"] if result["b"] is None else f"{result['a']} − {result['b']}"
        cells = [name, percent_interval(result["question_bootstrap"]), percent_interval(result["seed_interval"])]
        print("| " + " | ".join(cells + ([result["verdict"]] if verdicts else [])) + " |")
    if args.out:
        from maopd.base.atomic import write_text_atomically
        from maopd.base.json_files import json_text

        protocol = {"bootstrap_draws": draws, "bootstrap_seed": seed, "confidence": CONFIDENCE, "metric": metric}
        document = {"matrix": args.matrix, "protocol": protocol, "results": results}
        write_text_atomically(Path(args.out), json_text(document, args.out, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {args.out}")
    return 0
