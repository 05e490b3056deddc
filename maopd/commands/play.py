"""``maopd play``: run one episode of the default world with a scripted team and print its transcript."""

from __future__ import annotations

import json

from maopd.base.arguments import bounded_int, seed_int
from maopd.envs.search_env import MAX_SEARCHERS
from maopd.envs.workflows import workflow_names


def register(subparsers) -> None:
    play = subparsers.add_parser("play", help="run one episode with the scripted team and print the transcript")
    play.add_argument("--workflow", choices=workflow_names(), default="hierarchical")
    play.add_argument("--seed", type=seed_int, default=0, help="picks the question")
    play.add_argument(
        "--question-index", type=bounded_int(0), default=None, help="play this question instead of a seeded one"
    )
    play.add_argument("--num-searchers", type=bounded_int(1, MAX_SEARCHERS), default=3)
    play.add_argument("--split", default="dev", help="split of the default world")
    play.add_argument(
        "--team",
        choices=["expert", "generic"],
        default="expert",
        help="the SynthWiki expert team, or the world-agnostic scripted team",
    )
    play.add_argument("--json", action="store_true", help="also print the workflow record as JSON")
    play.set_defaults(func=_play)


def _play(args) -> int:
    from maopd.agents.expert_team import expert_team
    from maopd.agents.scripted import scripted_team
    from maopd.envs.episode import run_episode
    from maopd.envs.workflows import env_module

    # only the hierarchy has Searcher slots
    slots = {"num_searchers": args.num_searchers} if args.workflow == "hierarchical" else {}
    env = env_module(args.workflow).env(render_mode="ansi", split=args.split, **slots)
    team = expert_team() if args.team == "expert" else scripted_team()
    options = None if args.question_index is None else {"question_index": args.question_index}
    record = run_episode(env, team, seed=args.seed, options=options)
    print(env.render())
    if args.json:
        print(json.dumps(record.to_json(), indent=2, ensure_ascii=False))
    return 0
