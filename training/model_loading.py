"""Loading the models of a stage: the policy π_0 (a model directory, a checkpoint or the random tiny
model) and the frozen Teacher and KL reference, whose vocabulary must be the student's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from maopd.training.checkpoint import resolve_model_dir
from maopd.training.config import ModelConfig, TrainConfig
from maopd.training.teacher import FrozenModels, Teacher

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class TokenizerMismatchError(ValueError):
    """The Teacher's vocabulary differs from the student's, so OPD cannot compare them."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def build_tiny_policy(config: ModelConfig) -> tuple[torch.nn.Module, Any]:
    """The random tiny π_0 of ``model.path: tiny``: same settings, same weights and vocabulary."""
    from maopd.agents.tiny_model import build_tiny_model
    from maopd.agents.tokenizer import train_tokenizer
    from maopd.envs.synthwiki import load_default_world

    world = load_default_world()
    texts = [d.contents for d in world.corpus.documents[:400]]
    texts += [q.question for q in world.splits["train"][:200]]
    tokenizer = train_tokenizer(texts, vocab_size=config.tiny_vocab_size)
    return build_tiny_model(tokenizer, config.tiny), tokenizer


def load_policy_model(config: ModelConfig, device: torch.device, path: str | Path | None = None):
    """π_0 from ``config`` (tiny or a model directory), or the weights saved at ``path``."""
    from maopd.agents.tiny_model import load_model

    if path is None and config.path == "tiny":
        model, tokenizer = build_tiny_policy(config)
        return model.to(device=device, dtype=DTYPES[config.dtype]), tokenizer
    return load_model(model_source(path or config.path), DTYPES[config.dtype], device)


def model_source(source: str | Path) -> str | Path:
    """What ``load_model`` should load for ``source``: a local run directory, checkpoint
    (``checkpoints/step_N``) or model directory as its model directory; anything that does not
    exist locally (a Hugging Face hub id) as it is."""
    return resolve_model_dir(source) if Path(source).exists() else str(source)


def check_tokenizers_match(student: Any, teacher: Any, teacher_path: str) -> None:
    """OPD needs the Teacher to read the student's token ids as the same strings."""
    student_vocab, teacher_vocab = student.get_vocab(), teacher.get_vocab()
    if student_vocab == teacher_vocab:
        return
    differing = sorted(set(student_vocab.items()) ^ set(teacher_vocab.items()))
    example = differing[0] if differing else None
    raise TokenizerMismatchError(
        f"teacher.path {teacher_path}: the Teacher's tokenizer differs from the student's "
        f"({len(student_vocab)} vs {len(teacher_vocab)} tokens; {len(differing)} (token, id) pairs "
        f"differ, e.g. {example!r}). OPD scores log π_T(a_t|h_t) on the student's own token ids "
        f"and compares it with log π_old token by token (Eq. 5), so teacher and student need the "
        f"same vocabulary: use a Teacher trained from the same base model as the student."
    )


def frozen_sources(config: TrainConfig) -> tuple[str | None, str | None]:
    """Where the Teacher and the KL reference of a stage come from (``"checkpoint"``: ``teacher.path``;
    ``"base_model"``: π_0), None for a model nothing reads: the Teacher serves the estimators that
    declare they read it (``TrainConfig.teacher_roles``; OPD's Searchers in the paper), the reference
    the KL-in-reward and the KL loss."""
    if config.teacher.source == "none":
        return None, None
    teacher = config.teacher.source if config.teacher_roles else None
    has_kl = config.advantage.kl_in_reward_coef > 0 or config.ppo.kl_loss_coef > 0
    return teacher, config.teacher.reference if has_kl else None


def load_frozen_models(config: TrainConfig, student_tokenizer: Any, device: torch.device) -> FrozenModels:
    """The stage's Teacher and KL reference (``frozen_sources``), each distinct model loaded once."""
    sources = frozen_sources(config)
    loaded: dict[str | None, Teacher] = {}
    for source in dict.fromkeys(source for source in sources if source is not None):
        if source == "base_model":
            model, tokenizer = load_policy_model(config.model, device)
            where = f"model.path {config.model.path}"
        else:
            model, tokenizer = load_policy_model(config.model, device, config.teacher.path)
            where = str(config.teacher.path)
        check_tokenizers_match(student_tokenizer, tokenizer, where)
        loaded[source] = Teacher(model, temperature=config.rollout.temperature)
    return FrozenModels(loaded.get(sources[0]), loaded.get(sources[1]))
