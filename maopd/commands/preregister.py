"""``maopd preregister``: the pre-registration of the report on the current testbed
(``maopd.study.preregistration``), written before the first RL run on it."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    command = subparsers.add_parser(
        "preregister",
        help="write the pre-registration of the report on the current testbed (before any RL on it)",
        description=(
            "Fix the testbed (its hash), the gates measured on dev (GATES, from `maopd tune gates`), the runs, "
            "the seeds, the statistics, the verdict rules and the claims, in OUT/preregistration.json."
        ),
    )
    command.add_argument(
        "--gates",
        required=True,
        help="recipe_gates.json of `maopd tune recipe-gates` over the registered seeds' π_0 (or one gates.json)",
    )
    command.add_argument("--out", required=True, help="output directory")
    command.set_defaults(func=_preregister)


def _preregister(args) -> int:
    from maopd.base.errors import UserError
    from maopd.evaluation.provenance import git_commit
    from maopd.study.preregistration import write_preregistration

    gates = Path(args.gates)
    if not gates.is_file():
        raise UserError(
            f"--gates {gates} does not exist; run `maopd tune gates --model DIR --out DIR` on each π_0 and "
            "`maopd tune recipe-gates` over them first"
        )
    path = write_preregistration(gates, Path(args.out), git_commit(short=True))
    print(f"pre-registration written to {path}")
    return 0
