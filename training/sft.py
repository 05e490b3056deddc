"""Supervised fine-tuning on demonstration chats, formatted exactly like RL rollouts.

A demonstration is one model call's final chat (system prompt, task, then alternating assistant
outputs and environment-inserted user messages; see ``maopd.envs.synthwiki.demos``). ``encode_call``
turns it into token ids the way ``maopd.training.rollout`` builds a rollout's ids, with the same
``maopd.agents.chat_tokens`` functions:

* the first prompt is ``prompt_ids(messages before the first output)``;
* each output is appended as the encoding of its own text, with loss mask 1;
* after an output, the environment's messages are appended as ``turn_continuation_ids``
  (end of turn, the new user messages, the next generation prompt), with loss mask 0.

What an output's target ends with follows how the sampler stops (``maopd.agents.sampling``): an output
that ends with a closing action tag (``</search>``) is cut there at rollout time, so its target
ends at the tag and the end-of-turn token after it is an environment token (mask 0), as in
rollouts. An output without a closing tag (a misformatted one) can only end with the EOS
token, so its target ends with ``<|im_end|>`` (mask 1).

``train_sft`` is a plain loop: AdamW, linear warm-up then cosine decay, gradient clipping, loss =
mean negative log-likelihood over the masked (assistant) tokens of a batch, computed with
``maopd.training.token_scoring.score_tokens`` so the lm head only runs where there is a target.
Batches group calls of similar length (less padding) and everything is drawn from one seeded
generator, so the same seed, data and model give the same weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from maopd.agents.chat_tokens import encode_text, end_of_turn_id, prompt_ids, turn_continuation_ids
from maopd.base.atomic import write_file_atomically
from maopd.envs.actions import STOP_STRINGS
from maopd.training.token_scoring import TokenBatch, pad_batch, score_tokens


@dataclass
class SFTExample:
    """One model call as a training sequence; ``loss_mask`` is 1 on the model's own tokens."""

    input_ids: list[int]
    loss_mask: list[int]
    role: str = ""

    def __len__(self) -> int:
        return len(self.input_ids)


def output_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """The ids a policy must generate to write ``text``: closed by a stop tag, else by EOS."""
    ids = encode_text(tokenizer, text)
    if not text.endswith(STOP_STRINGS):
        ids.append(end_of_turn_id(tokenizer))
    return ids


def encode_call(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict[str, str]], role: str = "") -> SFTExample:
    """Token ids and loss mask of one call's chat, which must end with an assistant output."""
    messages = list(messages)
    outputs = [i for i, message in enumerate(messages) if message.get("role") == "assistant"]
    if not outputs or outputs[-1] != len(messages) - 1:
        raise ValueError("a demonstration call must end with an assistant message")
    if outputs[0] == 0:
        raise ValueError("a demonstration call must start with a prompt before its first output")
    example = SFTExample(prompt_ids(tokenizer, messages[: outputs[0]]), [], role)
    example.loss_mask = [0] * len(example.input_ids)
    for index, position in enumerate(outputs):
        generated = output_ids(tokenizer, messages[position]["content"])
        example.input_ids += generated
        example.loss_mask += [1] * len(generated)
        if index + 1 < len(outputs):
            new_messages = messages[position + 1 : outputs[index + 1]]
            continuation = turn_continuation_ids(tokenizer, generated, new_messages, messages[:position])
            example.input_ids += continuation
            example.loss_mask += [0] * len(continuation)
    return example


@dataclass
class TrainingSchedule:
    epochs: int = 1
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_fraction: float = 0.05
    weight_decay: float = 0.01
    batch_size: int = 16
    grad_clip: float = 1.0
    seed: int = 0


def learning_rate_factor(step: int, total_steps: int, warmup_fraction: float, min_ratio: float) -> float:
    """Linear warm-up to 1, then cosine decay to ``min_ratio`` at ``total_steps``."""
    warmup = max(1, round(total_steps * warmup_fraction))
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


# Steps between two saves of a resumable training: a few minutes of a π_0 build on one thread.
SAVE_EVERY = 500


def length_grouped_batches(lengths: Sequence[int], batch_size: int, generator: torch.Generator) -> list[list[int]]:
    """A seeded epoch order: shuffle, sort within windows of 32 batches by length, shuffle batches.

    Sorting only within windows keeps batches random while cutting most of the padding.
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    window = batch_size * 32
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffled]


def language_model_windows(texts: Sequence[str], tokenizer: PreTrainedTokenizerBase, length: int) -> list[SFTExample]:
    """``texts`` separated by the pad (``<|endoftext|>``) token and cut into windows of ``length``
    tokens, with the loss on every token but the first (a shorter tail is dropped)."""
    stream: list[int] = []
    for text in texts:
        stream += tokenizer.encode(text) + [tokenizer.pad_token_id]
    windows = [stream[start : start + length] for start in range(0, len(stream) - length + 1, length)]
    return [SFTExample(window, [0] + [1] * (length - 1), "pretraining") for window in windows]


def sft_batch(examples: Sequence[SFTExample], pad_id: int) -> TokenBatch:
    """``examples`` as one right-padded batch whose response mask is their loss mask."""
    return pad_batch([e.input_ids for e in examples], [e.loss_mask for e in examples], pad_id)


def sft_loss(model: torch.nn.Module, examples: Sequence[SFTExample], pad_id: int) -> torch.Tensor:
    """Mean negative log-likelihood of the masked tokens of ``examples`` (one padded batch)."""
    scores = score_tokens(model, sft_batch(examples, pad_id))
    return -scores.logprobs[scores.mask].mean()


def train_sft(
    model: torch.nn.Module,
    examples: Sequence[SFTExample],
    schedule: TrainingSchedule,
    pad_id: int,
    progress: bool = True,
    desc: str = "sft",
    resume_file: Path | None = None,
    save_every: int | None = None,
) -> list[float]:
    """Fine-tune ``model`` in place on ``examples``; returns the loss of every step.

    With ``resume_file``, the training state (weights, optimizer, schedule, losses so far) is saved
    there every ``save_every`` steps (``SAVE_EVERY`` by default), and a run that finds the file goes
    on from its step: the batch order is drawn from the seed up front, so the resumed run trains
    exactly as one that was never stopped (on the same machine and thread count). The file is
    removed at the end."""
    if not examples:
        raise ValueError("train_sft needs at least one example")
    if any(sum(e.loss_mask) == 0 for e in examples):
        raise ValueError("every example needs at least one assistant token to learn from")
    generator = torch.Generator().manual_seed(schedule.seed)
    lengths = [len(e) for e in examples]
    epochs = [length_grouped_batches(lengths, schedule.batch_size, generator) for _ in range(schedule.epochs)]
    total = sum(len(batches) for batches in epochs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=schedule.lr, weight_decay=schedule.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: learning_rate_factor(step, total, schedule.warmup_fraction, schedule.min_lr_ratio),
    )
    losses = resume_training(resume_file, total, model, optimizer, scheduler)
    model.train()
    order = [batch for batches in epochs for batch in batches]
    with tqdm(total=total, initial=len(losses), desc=desc, unit="step", disable=not progress) as bar:
        for batch in order[len(losses) :]:
            loss = sft_loss(model, [examples[i] for i in batch], pad_id)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            bar.update()
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            if resume_file is not None and len(losses) % (save_every or SAVE_EVERY) == 0 and len(losses) < total:
                save_training(resume_file, total, model, optimizer, scheduler, losses)
    model.eval()
    if resume_file is not None:
        resume_file.unlink(missing_ok=True)
    return losses


def save_training(path: Path, total: int, model, optimizer, scheduler, losses: list[float]) -> None:
    """The state ``train_sft`` resumes from, written atomically."""
    state = {
        "total_steps": total,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "losses": losses,
    }
    write_file_atomically(path, lambda out: torch.save(state, out))


def resume_training(path: Path | None, total: int, model, optimizer, scheduler) -> list[float]:
    """The losses of the steps a saved state at ``path`` already took, with that state loaded into
    ``model``, ``optimizer`` and ``scheduler``; [] when there is none. A state of another length
    of training is refused: it was saved by another config."""
    if path is None or not path.is_file():
        return []
    state = torch.load(path, weights_only=True)
    if state["total_steps"] != total:
        raise ValueError(
            f"{path}: a training state of {state['total_steps']} steps, not this run's {total}; remove it to start over"
        )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return list(state["losses"])
