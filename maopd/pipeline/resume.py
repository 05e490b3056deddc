"""Which parts of a run directory the main job resumes, and which another config made.

A run directory's stages resume only under the config that made them (``maopd.base.run_dir``); a
changed config is refused, naming the differing keys, unless ``fresh`` starts the changed stages
(and what depends on them) over.
"""

from __future__ import annotations

from pathlib import Path

from maopd.base.config import config_diff, to_record
from maopd.base.run_dir import CONFIG_FILE, Conflicts, changes_since, read_record
from maopd.pipeline.config import PipelineConfig, ptx_data_path, stage_config, stage_dir

PIPELINE_RECORD = "pipeline.yaml"


def check_run_dir(config: PipelineConfig, base_model: Path, fresh: bool = False) -> list[Path]:
    """What ``config.run_dir`` already holds that another config made, checked before any work.

    Identity is per stage: ``<stage dir>/config.yaml`` must equal the stage config this pipeline
    would train (the run directory's own location excepted); the evaluation's records must come
    from the same ``eval`` and ``base_model`` settings and from unchanged stages; the PPO-ptx data
    from the same ``ptx_source``. A stage or variant not yet trained is no conflict, so adding
    variants to a finished run is fine. With differences, raise ``ConfigError`` naming every
    differing key, or with ``fresh`` return the paths to delete so that the changed stages (and
    what depends on them: Stage II on Stage I, the evaluation on every stage) start over.
    """
    run_dir = Path(config.run_dir)
    saved = read_record(run_dir / PIPELINE_RECORD) or {}
    old_root = str(Path(saved["run_dir"])) if isinstance(saved.get("run_dir"), str) else str(run_dir)
    conflicts = Conflicts(run_dir)
    ptx = ptx_data_path(config)
    if ptx.is_file() and "ptx_source" in saved and saved["ptx_source"] != config.ptx_source:
        conflicts.add(ptx, [f"ptx_source: {saved['ptx_source']!r} -> {config.ptx_source!r}"])
    stage1 = stage_dir(config, "stage1", "full")
    for stage, variant in config.stage_runs():
        directory = stage_dir(config, stage, variant)
        if read_record(directory / CONFIG_FILE) is None:
            continue  # not trained yet
        teacher = stage1 if stage == "stage2" else None
        wanted = stage_config(config, stage, variant, base_model, teacher)
        changed = changes_since(wanted, directory, ignore=("run_dir",), relocated=(old_root, str(run_dir)))
        upstream = (stage == "stage2" and stage1 in conflicts.stale) or ptx in conflicts.stale
        conflicts.add(directory, [f"{directory.name}.{line}" for line in changed], upstream)
    if (run_dir / "eval" / "records.jsonl").is_file():
        new = to_record(config)
        changed = [
            f"{section}.{line}"
            for section in ("eval", "base_model")
            if section in saved
            for line in config_diff(saved[section], new[section])
        ]
        conflicts.add(run_dir / "eval", changed, upstream_changed=bool(conflicts.stale))
    return conflicts.resolve(fresh)
