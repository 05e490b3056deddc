"""Fault injection: SIGKILL the main job's smoke pipeline at random points, resume, compare.

``maopd train --preset smoke --run-dir R`` runs the whole main job at toy size (π_0 from the cache,
Stage I, Stage II, evaluation, scoring). This script runs it once uninterrupted (the reference),
then for each of ``--points`` kill points:

1. starts the pipeline in a fresh run directory as a subprocess and SIGKILLs it at the kill point;
2. runs the same command again, uninterrupted, in the same run directory (it resumes);
3. checks that the resumed run ends identical to the reference: every ``metrics.jsonl`` row of
   each stage, the final weights of each stage (tensor for tensor), the final trainer state's
   data-loader state, the evaluation records and ``summary.json``. Wall-clock fields are excepted:
   metrics keys starting ``time/``, the records' ``duration_s`` and everything computed from it.

Kill points (the first ones are fixed, the rest random, drawn with ``--seed``):

* ``first-row``: as soon as Stage I's ``metrics.jsonl`` has its first row, before the first
  checkpoint exists;
* ``checkpoint:1:<phase>`` for each phase of ``maopd.training.checkpoint.CRASH_PHASES`` (``model``,
  ``state``, ``moved``, ``pointer``) through the ``MAOPD_CRASH_AT`` hook: inside the first
  checkpoint's save (Stage I, which saves step 1 first);
* ``checkpoint:2:<phase>`` likewise for a random phase;
* ``time:<s>``: after a uniformly random number of seconds within the reference's duration, so
  any phase can be hit (Stage I, Stage II, evaluation, scoring).

It runs ``maopd`` as a subprocess only (``python -m maopd.cli``), so it imports nothing of
``maopd`` and respects the import direction. π_0 comes from the shared cache (``MAOPD_CACHE``);
its build is not killed here (``--cache DIR`` with an empty directory makes every run build it,
which is slow). Results go to ``benchmarks/results/fault_injection/results.json``.

    OMP_NUM_THREADS=1 python benchmarks/fault_injection.py --points 20 --seed 0

To keep editing the working tree while it runs, run it from a snapshot of a commit::

    git archive HEAD | tar -x -C /tmp/snap && cd /tmp/snap && \
        MAOPD_COMMIT=$(git -C ~/repo rev-parse HEAD) OMP_NUM_THREADS=1 python benchmarks/fault_injection.py

Exit status 0 when every point ends identical to the reference, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from maopd.base.arguments import positive_int, seed_int
from maopd.base.json_files import iter_json_lines, write_json
from maopd.base.machine import machine
from maopd.evaluation.records import RecordError
from maopd.training.run_logging import read_metrics

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "fault_injection"
STAGES = ("stage1", "stage2_full")
PHASES = ("model", "state", "moved", "pointer")  # maopd.training.checkpoint.CRASH_PHASES
CRASH_ENV = "MAOPD_CRASH_AT"


def command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "maopd.cli", "train", "--preset", "smoke", "--run-dir", str(run_dir)]


def _env(crash_at: str | None = None) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.pop(CRASH_ENV, None)
    if crash_at:
        env[CRASH_ENV] = crash_at
    return env


def run(run_dir: Path, point: str | None = None, timeout: float = 900) -> dict:
    """One pipeline run; killed at ``point`` when given. Returns how it ended."""
    crash_at = point if point and point.startswith("checkpoint:") else None
    started = time.perf_counter()
    process = subprocess.Popen(
        command(run_dir), cwd=REPO, env=_env(crash_at), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    killed_by_us = False
    if point == "first-row":
        metrics = run_dir / "stage1" / "metrics.jsonl"
        while process.poll() is None and not (metrics.is_file() and metrics.read_bytes().count(b"\n") >= 1):
            time.sleep(0.005)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            killed_by_us = True
    elif point and point.startswith("time:"):
        try:
            process.wait(timeout=float(point.split(":")[1]))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            killed_by_us = True
    _, stderr = process.communicate(timeout=timeout)
    return {
        "returncode": process.returncode,
        "killed_by_us": killed_by_us,
        "seconds": round(time.perf_counter() - started, 2),
        "stderr_tail": stderr[-2000:],
    }


# ----------------------------------------------------------------------------- comparison


def _metrics(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in read_metrics(run_dir)]


def _strip_wallclock(value):
    """Drop ``duration_s`` (and what is computed from it) anywhere in a JSON value."""
    if isinstance(value, dict):
        return {k: _strip_wallclock(v) for k, v in value.items() if "duration" not in k}
    if isinstance(value, list):
        return [_strip_wallclock(v) for v in value]
    return value


def _records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    rows = [_strip_wallclock(row) for _, row in iter_json_lines(path, RecordError, "record file")]
    return sorted(
        rows, key=lambda r: json.dumps([r.get("method"), r.get("dataset"), r.get("question_id"), r.get("attempt")])
    )


def _final_checkpoint(stage_dir: Path) -> Path | None:
    pointer = stage_dir / "checkpoints" / "latest"
    return stage_dir / "checkpoints" / pointer.read_text().strip() if pointer.is_file() else None


def differences(run_dir: Path, reference: Path) -> list[str]:
    """What differs between a resumed run and the reference (empty: identical)."""
    import torch
    from safetensors.torch import load_file

    found = []
    for stage in STAGES:
        a, b = _metrics(run_dir / stage), _metrics(reference / stage)
        if a != b:
            found.append(
                f"{stage}/metrics.jsonl: steps {[r.get('step') for r in a]} vs {[r.get('step') for r in b]}"
                + ("" if [r.get("step") for r in a] != [r.get("step") for r in b] else ", values differ")
            )
        ca, cb = _final_checkpoint(run_dir / stage), _final_checkpoint(reference / stage)
        if ca is None or cb is None or ca.name != cb.name:
            found.append(f"{stage}: final checkpoint {ca and ca.name} vs {cb and cb.name}")
            continue
        wa, wb = load_file(ca / "model" / "model.safetensors"), load_file(cb / "model" / "model.safetensors")
        if wa.keys() != wb.keys() or not all(torch.equal(wa[k], wb[k]) for k in wa):
            found.append(f"{stage}: final weights differ")
        sa = json.loads((ca / "trainer_state.json").read_text())
        sb = json.loads((cb / "trainer_state.json").read_text())
        if sa.get("loader") != sb.get("loader") or sa.get("step") != sb.get("step"):
            found.append(f"{stage}: trainer state (step, loader) differs")
        kept_a = sorted(p.name for p in (run_dir / stage / "checkpoints").glob("step_*"))
        kept_b = sorted(p.name for p in (reference / stage / "checkpoints").glob("step_*"))
        if kept_a != kept_b:
            found.append(f"{stage}: checkpoints on disk {kept_a} vs {kept_b}")
    ra, rb = _records(run_dir / "eval" / "records.jsonl"), _records(reference / "eval" / "records.jsonl")
    if ra != rb:
        found.append(
            f"eval/records.jsonl: {len(ra)} records vs {len(rb)}" + (", contents differ" if len(ra) == len(rb) else "")
        )
    summary_a, summary_b = run_dir / "eval" / "summary.json", reference / "eval" / "summary.json"
    if not summary_a.is_file():
        found.append("eval/summary.json missing")
    elif _strip_wallclock(json.loads(summary_a.read_text())) != _strip_wallclock(json.loads(summary_b.read_text())):
        found.append("eval/summary.json differs")
    return found


def kill_points(count: int, seed: int, reference_s: float) -> list[str]:
    rng = random.Random(seed)
    fixed = ["first-row"] + [f"checkpoint:1:{phase}" for phase in PHASES] + [f"checkpoint:2:{rng.choice(PHASES)}"]
    points = fixed[:count]
    while len(points) < count:
        points.append(f"time:{rng.uniform(0.5, reference_s):.2f}")
    return points


def _git_commit() -> str:
    if os.environ.get("MAOPD_COMMIT"):  # running from an exported snapshot, which has no .git
        return os.environ["MAOPD_COMMIT"]
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=positive_int, default=20, help="number of kill points (default 20)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of the random kill points")
    parser.add_argument("--work", help="where the run directories go (default: a temporary directory, removed)")
    parser.add_argument("--cache", help="MAOPD_CACHE for the runs (default: the shared cache)")
    parser.add_argument("--out", default=str(RESULTS / "results.json"), help="the results JSON")
    args = parser.parse_args(argv)
    if args.cache:
        os.environ["MAOPD_CACHE"] = args.cache
    commit = _git_commit()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="maopd-fault-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    reference = work / "reference"
    shutil.rmtree(reference, ignore_errors=True)
    ref = run(reference)
    if ref["returncode"] != 0:
        print(f"the reference run failed:\n{ref['stderr_tail']}", file=sys.stderr)
        return 1
    print(f"reference: {ref['seconds']} s", flush=True)

    results = []
    for index, point in enumerate(kill_points(args.points, args.seed, ref["seconds"])):
        run_dir = work / f"point_{index:02d}"
        shutil.rmtree(run_dir, ignore_errors=True)
        killed = run(run_dir, point)
        resumed = run(run_dir)
        problems = (
            differences(run_dir, reference)
            if resumed["returncode"] == 0
            else [f"resumed run failed ({resumed['returncode']}): {resumed['stderr_tail'][-500:]}"]
        )
        hit = killed["returncode"] == -signal.SIGKILL
        results.append(
            {
                "point": point,
                "killed": hit,
                "killed_run": {k: killed[k] for k in ("returncode", "seconds")},
                "resumed_run": {k: resumed[k] for k in ("returncode", "seconds")},
                "identical": not problems,
                "differences": problems,
            }
        )
        print(
            f"[{index + 1}/{args.points}] {point}: {'killed' if hit else 'finished before the kill'}, "
            f"{'identical' if not problems else 'DIFFERENT: ' + '; '.join(problems)}",
            flush=True,
        )
        if not problems:
            shutil.rmtree(run_dir, ignore_errors=True)

    report = {
        "command": "OMP_NUM_THREADS=1 python benchmarks/fault_injection.py " + " ".join(argv or sys.argv[1:]),
        "pipeline_command": "python -m maopd.cli train --preset smoke --run-dir RUN_DIR",
        "commit": commit,
        "machine": machine(),
        "reference_seconds": ref["seconds"],
        "total_seconds": round(time.time() - started, 1),
        "points": len(results),
        "killed": sum(r["killed"] for r in results),
        "identical": sum(r["identical"] for r in results),
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report, indent=2)
    print(f"{report['identical']}/{report['points']} identical ({report['killed']} killed); wrote {out}")
    if not args.work and report["identical"] == report["points"]:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report["identical"] == report["points"] else 1


if __name__ == "__main__":
    sys.exit(main())
