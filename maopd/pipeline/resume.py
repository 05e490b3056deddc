"""Which parts of a run directory the main job resumes, and which another config made.

A run directory's stages resume only under the config that made them (``maopd.base.run_dir``); a
changed config is refused, naming the differing keys, unless ``fresh`` starts the changed stages
(and what depends on them) over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maopd.base.config import config_diff, to_record
from maopd.base.run_dir import Conflicts, UnreadableRecordError, changes_since, holds_anything, read_record
from maopd.pipeline.config import PipelineConfig, ptx_data_path, stage_config, stage_dir

PIPELINE_RECORD = "pipeline.yaml"


def check_run_dir(config: PipelineConfig, base_model: Path, fresh: bool = False) -> list[Path]:
    """What ``config.run_dir`` already holds that another config made, checked before any work.

    Identity is per stage: ``<stage dir>/config.yaml`` must equal the stage config this pipeline
    would train (the run directory's own location excepted); the evaluation's records must come
    from the same ``eval`` and ``base_model`` settings and from unchanged stages; the PPO-ptx data
    from the same ``ptx_source``. A stage or variant not yet trained (its directory holds nothing) is
    no conflict, so adding variants to a finished run is fine; one whose config record is missing or
    unreadable is, and so are PPO-ptx data and evaluation records whose settings ``pipeline.yaml``
    does not hold. With differences, raise ``ConfigError`` naming every differing key, or with
    ``fresh`` return the paths to delete so that the changed stages (and what depends on them:
    Stage II on Stage I, the evaluation on every stage) start over.
    """
    run_dir = Path(config.run_dir)
    record = run_dir / PIPELINE_RECORD
    try:
        saved: dict[str, Any] = read_record(record) or {}
    except UnreadableRecordError:
        saved = {}  # nothing it records can be trusted: whatever depends on it below is a conflict
    old_root = str(Path(saved["run_dir"])) if isinstance(saved.get("run_dir"), str) else str(run_dir)
    conflicts = Conflicts(run_dir)
    ptx = ptx_data_path(config)
    if ptx.is_file() and "ptx_source" not in saved:
        conflicts.add(ptx, [f"ptx_source: not recorded in {record}, so {ptx.name} cannot be checked"])
    elif ptx.is_file() and saved["ptx_source"] != config.ptx_source:
        conflicts.add(ptx, [f"ptx_source: {saved['ptx_source']!r} -> {config.ptx_source!r}"])
    stage1 = stage_dir(config, "stage1", "full")
    for stage, variant in config.stage_runs():
        directory = stage_dir(config, stage, variant)
        if not holds_anything(directory):
            continue  # not trained yet
        teacher = stage1 if stage == "stage2" else None
        wanted = stage_config(config, stage, variant, base_model, teacher)
        changed = changes_since(wanted, directory, ignore=("run_dir",), relocated=(old_root, str(run_dir)))
        upstream = (stage == "stage2" and stage1 in conflicts.stale) or ptx in conflicts.stale
        conflicts.add(directory, [f"{directory.name}.{line}" for line in changed], upstream)
    if (run_dir / "eval" / "records.jsonl").is_file():
        new = to_record(config)
        changed = []
        for section in ("eval", "base_model"):
            if isinstance(saved.get(section), dict):
                changed += [f"{section}.{line}" for line in config_diff(saved[section], new[section])]
            else:  # missing, damaged, or in a pipeline.yaml that cannot be read
                changed.append(f"{section}: not recorded in {record}, so the evaluation cannot be checked")
        conflicts.add(run_dir / "eval", changed, upstream_changed=bool(conflicts.stale))
    return conflicts.resolve(fresh)
