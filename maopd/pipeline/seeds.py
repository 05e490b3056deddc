"""The main job once per training seed, all seeds at once, then the report pooled over them."""

from __future__ import annotations

import os
from pathlib import Path

from maopd.base.atomic import open_for_append
from maopd.base.config import ConfigError, save_yaml
from maopd.base.lock import handed_down_fds
from maopd.base.run_dir import owning, write_record
from maopd.pipeline.config import PipelineConfig, run_labels
from maopd.pipeline.job import pipeline_comparisons
from maopd.pipeline.resume import PIPELINE_RECORD, check_run_dir


def seed_dir(config: PipelineConfig, seed: int) -> Path:
    return Path(config.run_dir) / f"seed_{seed}"


def seed_config(config: PipelineConfig, seed: int) -> PipelineConfig:
    """The job of one training seed: its seed, its directory, its π_0 (``pi0_per_seed``) and its
    evaluation seed. Each seed samples its evaluation with its own seed: the base model's workflows,
    which no training seed changes, are then new samples in every seed rather than copies."""
    from dataclasses import replace

    return replace(
        config,
        seed=seed,
        base_model=config.pi0_for_seed(seed),
        run_dir=str(seed_dir(config, seed)),
        eval=replace(config.eval, seed=config.eval.seed + seed),
    )


def run_seeds(config: PipelineConfig, seeds: list[int], fresh: bool = False) -> dict:
    """The job once per training seed, all seeds at once with one torch thread each (one process
    per seed, ``<run_dir>/seed_<s>``, its output in ``seed_<s>.log``; with ``pi0_per_seed``, each
    from its own π_0), then the report pooled over
    them in ``<run_dir>/report`` (``maopd.evaluation.seed_report``). Each seed resumes like the job. The
    run directory and the seeds' directories are held for the whole run; the seeds' processes
    work under that hold (``maopd.base.lock``)."""
    if len(set(seeds)) != len(seeds) or not seeds:
        raise ConfigError(f"--seeds: give distinct seeds, got {seeds}")
    with owning(config.run_dir, *(seed_dir(config, seed) for seed in seeds)):
        return _run_held(config, seeds, fresh)


def _run_held(config: PipelineConfig, seeds: list[int], fresh: bool) -> dict:
    import subprocess
    import sys

    from maopd.evaluation.seed_report import write_report
    from maopd.training.base_model import base_model_dir

    configs = {seed: seed_config(config, seed) for seed in seeds}
    for one_seed in configs.values():  # every seed's directory is checked before any work
        check_run_dir(one_seed, base_model_dir(one_seed.base_model), fresh)
    run_dir = Path(config.run_dir)
    write_record(config, run_dir, PIPELINE_RECORD)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    logs = {seed: run_dir / f"seed_{seed}.log" for seed in seeds}
    jobs = {}
    for seed, one_seed in configs.items():
        config_file = run_dir / f"seed_{seed}.yaml"
        save_yaml(one_seed, config_file)
        command = [
            sys.executable,
            "-m",
            "maopd.cli",
            "train",
            "--preset",
            str(config_file),
            *(["--fresh"] if fresh else []),
        ]
        log = open_for_append(logs[seed], start_empty=True)
        # the seed jobs work under this process's locks on their directories: pass the locked descriptors
        job = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=environment, pass_fds=handed_down_fds()
        )
        jobs[seed] = (job, log)
        print(f"seed {seed}: {' '.join(command)} > {logs[seed]}")
    failed = []
    for seed, (process, log) in jobs.items():
        if process.wait() != 0:
            failed.append(seed)
        log.close()
    if failed:
        raise RuntimeError(f"seed(s) {failed} failed; see {', '.join(str(logs[s]) for s in failed)}")
    runs = [Path(c.run_dir) for c in configs.values()]
    report = write_report(runs, pipeline_comparisons(config), run_dir / "report", run_labels(config))
    print(f"report over seeds {seeds} in {run_dir / 'report'}")
    return report
