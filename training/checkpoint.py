"""Training checkpoints: written atomically, the last N kept, exact to resume from.

Layout under ``RUN_DIR/checkpoints/``::

    step_100/
        model/               Hugging Face format (config.json, model.safetensors, tokenizer files):
                             loadable by transformers' ``from_pretrained`` and by vLLM
        trainer_state.json   step, data-loader state, Python and NumPy RNG states, and the
                             structure of everything else (plain JSON, never executed)
        trainer_state.pt     only the tensors that trainer_state.json refers to (optimizer state,
                             torch RNG states), loaded with ``torch.load(weights_only=True)``
        config.yaml          the run's TrainConfig
    latest                   a text file naming the newest complete checkpoint ("step_100")

A checkpoint is assembled in a staging directory beside it and renamed into place
(``maopd.base.atomic.build_directory_atomically``); the ``latest`` pointer is replaced atomically
afterwards. A crash at any point leaves the previous checkpoint and pointer intact (at worst a
stray ``step_N.staging-<pid>-*`` directory that the next save removes, whichever step it saves).

Files can still be damaged after the fact (a full disk, a filesystem that reorders writes across a
power cut, a hand copy). ``latest_checkpoint`` therefore checks a checkpoint's structure and its
trainer state, field by field, before returning it (``checkpoint_problem``) and falls back to the
newest intact one, logging a warning that names the damaged checkpoint and what is wrong with it.
A save that fails for lack of space names the file and the space left (``NoSpaceError``) and
leaves the previous checkpoint and pointer in place.

Every path read from a run directory is contained in it (``maopd.base.paths.resolve_inside``): a
``latest`` pointer naming ``../other_run/...`` or an absolute path is treated as damage (warned
about and skipped), never followed. Nothing is written or deleted through a symbolic link: a save
refuses a ``checkpoints`` directory that is one or holds one
(``maopd.base.run_dir.refuse_symlinks``). Nothing in a checkpoint is unpickled: trainer state is JSON plus
a list of tensors that ``torch.load`` reads with ``weights_only=True``. A checkpoint in another
format (a pickled ``trainer_state.pt`` alone) is reported as damaged ("trainer_state.json is
missing"); such a run must be re-run.

Test hook: ``MAOPD_CRASH_AT=checkpoint:<step>:<phase>`` SIGKILLs the process at one of
``CRASH_PHASES`` while it saves ``step_<step>`` (tests/training/test_crash_safety.py).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import shutil
import signal
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maopd.agents.model_files import weights_problem
from maopd.base.atomic import (
    build_directory_atomically,
    remove_stale_staging,
    write_file_atomically,
    write_text_atomically,
    writing,
)
from maopd.base.paths import PathOutsideRunError, resolve_inside
from maopd.base.run_dir import CONFIG_FILE, refuse_symlinks, write_record

CHECKPOINTS = "checkpoints"
LATEST = "latest"
MODEL = "model"
TRAINER_STATE = "trainer_state.pt"
TRAINER_STATE_JSON = "trainer_state.json"
CRASH_ENV = "MAOPD_CRASH_AT"
# Where a save can be killed: after the model files, after the trainer state (both still in the
# temporary directory), after the directory is moved into place, after ``latest`` is updated.
CRASH_PHASES = ("model", "state", "moved", "pointer")

logger = logging.getLogger(__name__)


def checkpoint_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def capture_rng_state() -> dict[str, Any]:
    python = random.getstate()
    kind, keys, position, has_gauss, cached = np.random.get_state()
    state = {
        # plain lists and numbers, so that the JSON half of a checkpoint holds them
        "python": [python[0], list(python[1]), python[2]],
        "numpy": [kind, keys.tolist(), int(position), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _python_rng(saved: Any) -> tuple:
    version, internal, gauss = saved
    return version, tuple(internal), gauss


def _numpy_rng(saved: Any) -> tuple:
    kind, keys, position, has_gauss, cached = saved
    return kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_python_rng(state["python"]))
    np.random.set_state(_numpy_rng(state["numpy"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----- trainer state: JSON for the structure, a weights-only tensor file for the tensors -------
_TENSOR, _TUPLE, _ITEMS = "__tensor__", "__tuple__", "__items__"


def _encode(value: Any, tensors: list[torch.Tensor]) -> Any:
    """``value`` as JSON-compatible data; each tensor becomes ``{"__tensor__": i}`` into ``tensors``."""
    if isinstance(value, torch.Tensor):
        tensors.append(value.detach().cpu())
        return {_TENSOR: len(tensors) - 1}
    if isinstance(value, np.ndarray):
        return _encode(torch.from_numpy(value.copy()), tensors)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, tensors) for v in value]}
    if isinstance(value, list):
        return [_encode(v, tensors) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and k not in (_TENSOR, _TUPLE, _ITEMS) for k in value):
            return {k: _encode(v, tensors) for k, v in value.items()}
        return {_ITEMS: [[_encode(k, tensors), _encode(v, tensors)] for k, v in value.items()]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"trainer state: cannot store a {type(value).__name__} (JSON data and tensors only)")


class TrainerStateError(ValueError):
    """A trainer state that cannot resume a run; the message names the field and what is wrong."""


def _decode(value: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if isinstance(value, dict):
        if set(value) == {_TENSOR}:
            index = value[_TENSOR]
            if not _is_int(index) or not 0 <= index < len(tensors):
                raise TrainerStateError(f"tensor {index!r} is not one of the {len(tensors)} in {TRAINER_STATE}")
            return tensors[index]
        if set(value) == {_TUPLE}:
            return tuple(_decode(v, tensors) for v in value[_TUPLE])
        if set(value) == {_ITEMS}:
            return {_decode(k, tensors): _decode(v, tensors) for k, v in value[_ITEMS]}
        return {k: _decode(v, tensors) for k, v in value.items()}
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rng_problem(rng: Any) -> str | None:
    """What keeps ``rng`` from being restored, tried on fresh generators; None when nothing does."""
    if not isinstance(rng, dict):
        return "not a mapping"
    for name, restore in (
        ("python", lambda saved: random.Random().setstate(_python_rng(saved))),
        ("numpy", lambda saved: np.random.RandomState().set_state(_numpy_rng(saved))),
        ("torch", lambda saved: torch.Generator().set_state(saved)),
    ):
        if name not in rng:
            return f"{name} is missing"
        try:
            restore(rng[name])
        except Exception as exc:  # a fresh generator, so any failure is the saved state's
            return f"{name}: {' '.join(str(exc).split()) or type(exc).__name__}"
    cuda = rng.get("cuda", [])
    if not isinstance(cuda, list) or not all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda):
        return "cuda: not a list of byte tensors"
    return None


def _optimizer_problem(optimizer: Any) -> str | None:
    """What makes ``optimizer`` no optimizer state dict (torch's layout, parameters by index or by
    name under FSDP); None when it is one."""
    if not isinstance(optimizer, dict) or not isinstance(optimizer.get("state"), dict):
        return "state: not a mapping"
    groups = optimizer.get("param_groups")
    if not isinstance(groups, list) or not all(
        isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups
    ):
        return "param_groups: not a list of groups with their params"
    params = [p for group in groups for p in group["params"]]
    if not all(_is_int(p) or isinstance(p, str) for p in params):
        return "param_groups: a parameter is neither an index nor a name"
    unknown = set(optimizer["state"]) - set(params)
    if unknown:
        return f"state: parameters {sorted(map(str, unknown))[:3]} are in no param group"
    return None


def trainer_state_problem(state: Any, step: int | None) -> str | None:
    """What keeps a decoded trainer state from resuming the run at ``step`` (None: any step), field
    by field; None when it can."""
    if not isinstance(state, dict):
        return "not a mapping"
    for name in ("step", "optimizer", "loader", "rng"):
        if name not in state:
            return f"{name} is missing"
    if not _is_int(state["step"]) or state["step"] < 0:
        return f"step: {state['step']!r} is not a step number"
    if step is not None and state["step"] != step:
        return f"step: {state['step']} in the checkpoint of step {step}"
    loader = state["loader"]
    if not isinstance(loader, dict):
        return "loader: not a mapping"
    for name in ("epoch", "position", "seed"):
        if not _is_int(loader.get(name)) or (name != "seed" and loader[name] < 0):
            return f"loader.{name}: {loader.get(name)!r} is not a count"
    for name, problem in (("optimizer", _optimizer_problem(state["optimizer"])), ("rng", _rng_problem(state["rng"]))):
        if problem is not None:
            return f"{name}.{problem}"
    return None


def save_trainer_state(state: dict[str, Any], directory: Path, destination: Path) -> None:
    """``state`` as ``trainer_state.json`` (structure) plus ``trainer_state.pt`` (a list of tensors),
    written to ``directory``; a failed write names the file under ``destination``, where they go."""
    tensors: list[torch.Tensor] = []
    encoded = _encode(state, tensors)
    write_file_atomically(
        directory / TRAINER_STATE, lambda handle: torch.save(tensors, handle), shown=destination / TRAINER_STATE
    )
    write_text_atomically(directory / TRAINER_STATE_JSON, json.dumps(encoded), shown=destination / TRAINER_STATE_JSON)


def _crash_point(step: int, phase: str) -> None:
    """SIGKILL this process here if ``MAOPD_CRASH_AT`` asks for it: a power cut, for tests."""
    if os.environ.get(CRASH_ENV) == f"checkpoint:{step}:{phase}":
        os.kill(os.getpid(), signal.SIGKILL)


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    trainer_state: dict[str, Any],
    config: Any,
    keep_last: int,
) -> Path:
    """Write ``checkpoints/step_{step}`` atomically, point ``latest`` at it, prune old ones."""
    root = checkpoint_root(run_dir)
    refuse_symlinks(run_dir, root)  # what the save replaces and prunes must be the run's own
    remove_stale_staging(root, "step_*")  # a crash's leftover of any step, not only this one
    destination = root / f"step_{step}"

    def build(staging: Path) -> None:
        with writing(destination / MODEL):
            model.save_pretrained(staging / MODEL)
            tokenizer.save_pretrained(staging / MODEL)
        _crash_point(step, "model")
        save_trainer_state(trainer_state, staging, destination)
        with writing(destination / CONFIG_FILE):
            write_record(config, staging)
        _crash_point(step, "state")

    # without a done file, saving the same step again (e.g. algo.save after a periodic save) replaces it
    final = build_directory_atomically(destination, build)
    _crash_point(step, "moved")
    write_text_atomically(root / LATEST, final.name + "\n")
    _crash_point(step, "pointer")
    prune_checkpoints(root, keep_last)
    return final


def _step_of(path: Path) -> int:
    return int(path.name.removeprefix("step_"))


def _inside(root: Path, path: Path) -> bool:
    """Whether ``path`` (a symlink, say) stays inside ``root`` once resolved."""
    try:
        resolve_inside(root, path)
    except PathOutsideRunError:
        logger.warning("%s points outside %s; ignoring it", path, root)
        return False
    return True


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    found = [
        p for p in root.glob("step_*") if p.name[5:].isdigit() and (p / TRAINER_STATE).is_file() and _inside(root, p)
    ]
    return sorted(found, key=_step_of)


def prune_checkpoints(root: Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` checkpoints (never the one ``latest`` names)."""
    pointer = root / LATEST
    latest = pointer.read_text(encoding="utf-8").strip() if pointer.is_file() else None
    for old in list_checkpoints(root)[:-keep_last]:
        if old.name != latest:
            shutil.rmtree(old)


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """What makes a checkpoint unusable, or None when it is intact.

    Checks structure, cheaply: every file is present, ``model/config.json`` parses, each
    safetensors file is as long as its header says, ``trainer_state.pt`` is a readable archive
    with a pickle in it, and the trainer state holds every field a resume restores, each of its
    kind (``trainer_state_problem``; the tensors are mapped, not read). It does not checksum
    tensor bytes.
    """
    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():
        return "the directory does not exist"
    for name in (
        TRAINER_STATE,
        TRAINER_STATE_JSON,
        CONFIG_FILE,
        f"{MODEL}/config.json",
        f"{MODEL}/tokenizer_config.json",
    ):
        if not (checkpoint / name).is_file():
            return f"{name} is missing"
    try:
        json.loads((checkpoint / MODEL / "config.json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return f"{MODEL}/config.json: unreadable ({exc})"
    problem = weights_problem(checkpoint / MODEL)
    if problem:
        return f"{MODEL}/{problem}"
    try:
        with zipfile.ZipFile(checkpoint / TRAINER_STATE) as archive:
            if not any(name.endswith("data.pkl") for name in archive.namelist()):
                return f"{TRAINER_STATE}: no pickled state inside"
    except (zipfile.BadZipFile, OSError) as exc:
        return f"{TRAINER_STATE}: unreadable ({exc})"
    try:
        load_trainer_state(checkpoint, mmap=True)
    except TrainerStateError as exc:
        return str(exc)
    except (RuntimeError, OSError, EOFError, pickle.UnpicklingError) as exc:
        return f"{TRAINER_STATE}: unreadable ({' '.join(str(exc).split())})"
    return None


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest intact checkpoint: the one ``latest`` names, else the newest complete one.

    A damaged checkpoint is skipped with a warning naming it and what is wrong, and the
    previous one is used instead.
    """
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return None
    candidates = list_checkpoints(root)[::-1]
    pointer = root / LATEST
    if pointer.is_file():
        text = pointer.read_text(encoding="utf-8", errors="replace").strip()
        try:
            named = resolve_inside(root, text, field=f"{pointer}")
        except PathOutsideRunError as exc:
            logger.warning("checkpoint pointer %s is damaged (%s); ignoring it", pointer, exc)
        else:
            if named.parent == root.resolve() and named.name.startswith("step_"):
                named = root / named.name
                candidates = [named] + [c for c in candidates if c != named]
            else:
                logger.warning(
                    "checkpoint pointer %s is damaged (%r is not a checkpoint of %s); ignoring it", pointer, text, root
                )
    for candidate in candidates:
        problem = checkpoint_problem(candidate)
        if problem is None:
            return candidate
        logger.warning("checkpoint %s is damaged (%s); skipping it and using the previous one", candidate, problem)
    return None


def load_trainer_state(checkpoint: str | Path, mmap: bool = False) -> dict[str, Any]:
    """The state ``save_trainer_state`` wrote, checked field by field (``TrainerStateError``
    names what is wrong); nothing is unpickled (``weights_only=True``). ``mmap`` maps the tensors
    instead of reading them (a check that looks at their kinds only)."""
    checkpoint = Path(checkpoint)
    tensors = torch.load(checkpoint / TRAINER_STATE, map_location="cpu", weights_only=True, mmap=mmap)
    if not isinstance(tensors, list):
        raise TrainerStateError(
            f"{TRAINER_STATE}: not a list of tensors (a checkpoint of an older format? re-run the stage)"
        )
    try:
        encoded = json.loads((checkpoint / TRAINER_STATE_JSON).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TrainerStateError(f"{TRAINER_STATE_JSON}: unreadable ({exc})") from None
    try:
        state = _decode(encoded, tensors)
    except TrainerStateError as exc:
        raise TrainerStateError(f"{TRAINER_STATE_JSON}: {exc}") from None
    except (TypeError, ValueError) as exc:  # a malformed tuple or item list
        raise TrainerStateError(f"{TRAINER_STATE_JSON}: malformed ({exc})") from None
    named = checkpoint.name.removeprefix("step_")
    problem = trainer_state_problem(state, int(named) if named.isdigit() else None)
    if problem is not None:
        raise TrainerStateError(f"{TRAINER_STATE_JSON}: {problem}")
    return state


def resolve_model_dir(path: str | Path) -> Path:
    """A Hugging Face model directory from a run directory, a checkpoint or a model directory."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    if (path / MODEL / "config.json").is_file():
        return path / MODEL
    checkpoint = latest_checkpoint(path)
    if checkpoint is not None:
        return checkpoint / MODEL
    raise FileNotFoundError(
        f"{path}: not a model directory (no config.json), a checkpoint (no model/) or a run directory with checkpoints"
    )
