"""``maopd play``: run one episode with the scripted team and print its transcript."""

from __future__ import annotations


def register(subparsers) -> None:
    play = subparsers.add_parser("play", help="run one episode with the scripted team and print the transcript")
    play.add_argument("--workflow", choices=["hierarchical", "cascade"], default="hierarchical")
    play.add_argument("--seed", type=int, default=0)
    play.add_argument("--json", action="store_true", help="also print the workflow record as JSON")
    play.set_defaults(func=_play)


def _play(args) -> int:
    raise SystemExit("maopd play: the environments are not implemented yet")
