"""``maopd world build`` and ``maopd world demos``: write a SynthWiki world or demonstrations."""

from __future__ import annotations

from maopd.base.arguments import bounded_float, positive_int, seed_int
from maopd.envs.workflows import workflow_names


def register(subparsers) -> None:
    world = subparsers.add_parser("world", help="build the SynthWiki world or scripted-team demonstrations")
    commands = world.add_subparsers(dest="world_command", required=True, metavar="WORLD_COMMAND")

    build = commands.add_parser(
        "build", help="write a SynthWiki world (corpus + train/dev/test questions) to a directory"
    )
    build.add_argument("--seed", type=seed_int, default=0)
    build.add_argument("--size", default="small", help="size preset: tiny, small or large")
    build.add_argument("--out", required=True, help="output directory")
    build.set_defaults(func=_build)

    demos = commands.add_parser("demos", help="write demonstrations (one chat per model call) of a scripted team")
    demos.add_argument("--seed", type=seed_int, default=0)
    demos.add_argument("--size", default="small")
    demos.add_argument("--split", default="train", choices=["train", "dev", "test"])
    demos.add_argument("--workflow", default="hierarchical", choices=workflow_names())
    demos.add_argument("--team", default="expert", choices=["expert", "noisy"])
    demos.add_argument(
        "--noise", type=bounded_float(0, 1), default=0.1, help="every noisy-team knob (a probability), for --team noisy"
    )
    demos.add_argument("--limit", type=positive_int, default=None, help="use the first LIMIT questions of the split")
    demos.add_argument("--all", action="store_true", help="keep failed episodes too (default: successes only)")
    demos.add_argument("--out", required=True, help="output JSONL file")
    demos.set_defaults(func=_demos)


def _build(args) -> int:
    from maopd.base.errors import UserError
    from maopd.envs.synthwiki.world import SIZES, write_world

    if args.size not in SIZES:
        raise UserError(f"--size {args.size!r} is unknown; expected one of {sorted(SIZES)}")
    out = write_world(args.out, args.seed, args.size, progress=True)
    print(f"wrote the SynthWiki world (seed {args.seed}, size {args.size}) to {out}")
    return 0


def _demos(args) -> int:
    from maopd.agents.expert_team import expert_team
    from maopd.agents.noisy_team import NoiseConfig, NoisyTeam
    from maopd.envs.retrieval.bm25 import BM25Retriever
    from maopd.envs.synthwiki.demos import demonstrations, write_demonstrations
    from maopd.envs.synthwiki.world import load_default_world

    world = load_default_world(args.seed, args.size)
    questions = world.splits[args.split][: args.limit]
    team = expert_team() if args.team == "expert" else NoisyTeam(NoiseConfig.uniform(args.noise), args.seed)
    rows = demonstrations(args.workflow, team, BM25Retriever(world.corpus), questions, successful_only=not args.all)
    count = write_demonstrations(rows, args.out)
    print(f"wrote {count} demonstrations from {len(questions)} {args.split} questions to {args.out}")
    return 0
