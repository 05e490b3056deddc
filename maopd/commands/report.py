"""``maopd report``: the report on the pre-registered testbed (``maopd.study.report``): ``save`` what a
part of the pre-registered table left in its run directory, ``build`` the report and the claims'
verdicts from the saved seeds."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("report", help="the report on the pre-registered testbed, from saved runs")
    commands = parser.add_subparsers(dest="report_command", required=True, metavar="SUBCOMMAND")
    save = commands.add_parser(
        "save",
        help="copy the seeds' configs, training metrics and evaluation records of a --seeds run to commit",
        description=(
            "After each pre-registered part: copy every seed_<s>/ of RUN_DIR (its config, job record, every stage "
            "run's config and metrics, its evaluation records without trajectories, gzipped) into OUT."
        ),
    )
    save.add_argument("--run-dir", required=True, help="the --run-dir of the pre-registered commands")
    save.add_argument("--out", required=True, help="the folder to commit (e.g. the report's runs/)")
    save.set_defaults(func=_save)
    build = commands.add_parser(
        "build",
        help="the seed report and every claim's verdict from saved seeds",
        description=(
            "Check that the saved seeds ran the pre-registered configs on the registered testbed, then write the "
            "seed report (score matrix, both intervals, curves) and claims.json / claims.md into OUT."
        ),
    )
    build.add_argument("--runs", required=True, help="the folder `maopd report save` wrote")
    build.add_argument("--preregistration", required=True, help="preregistration.json of `maopd preregister`")
    build.add_argument("--out", required=True, help="output directory")
    build.set_defaults(func=_build)


def _save(args) -> int:
    from maopd.study.report import save_runs

    saved = save_runs(Path(args.run_dir), Path(args.out))
    print(f"saved {', '.join(path.name for path in saved)} to {args.out}")
    return 0


def _build(args) -> int:
    from maopd.base.errors import UserError
    from maopd.study.report import build_report

    preregistration = Path(args.preregistration)
    if not preregistration.is_file():
        raise UserError(f"--preregistration {preregistration} does not exist; run `maopd preregister` first")
    result = build_report(Path(args.runs), preregistration, Path(args.out))
    for claim in result["claims"]:
        print(f"{claim['name']}: {claim['verdict']}")
    print(f"report and claims written to {args.out}")
    return 0
