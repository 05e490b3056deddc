"""The stage trainer: team rollouts → role rewards → token advantages → PPO minibatch updates.

One ``Trainer.train_step`` is one training step of the paper (B questions, G trajectories each):

1. draw B training questions from the seeded ``QuestionLoader`` (its state is checkpointed);
2. roll out G team trajectories per question with the current policy (``TeamRolloutCollector``);
   every model call becomes a token-exact sequence with π_old log-probs (with dynamic sampling,
   more rounds of questions until B of them have trajectories that disagree on R_EM);
3. read the role rewards from the workflow records (``training.rollout_rewards``): R_EM, R_L
   (Eq. 6), c_ij, R_S (or, for the Prompted Critic, 0.3·R_EM + 0.5·R_judge + 0.2·b_S);
4. score the sequences a loss reads with the frozen models the config uses: the Teacher (OPD, Eq. 5,
   on Searcher tokens) and the KL reference π_T (the KL-in-reward penalty on Leader and Answerer
   tokens), one model when they are the same;
5. build the token advantages with ``team_token_advantages`` (Eq. 1, 5, 7);
6. for each of ``optim.minibatches`` minibatches (``optim.epochs`` passes): re-score the tokens
   with gradients, ``ppo_loss``, backward (accumulated over micro-batches), clip, AdamW step.

The Trainer loads the policy, the Teacher and the KL reference with ``training.model_loading``. ``train_stage(config)``
runs the steps, logs, writes samples and checkpoints. Stage I and Stage II
and every variant are the same code; ``training.config`` says how they differ.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from agents.hf_policy import HFPolicy
from agents.sampling import SamplingConfig
from envs.actions import SEARCHER
from envs.datasets import Question
from envs.search_env import SearchEnv
from envs.workflows import env_module
from maopd.base.config import ConfigError, to_record
from maopd.base.run_dir import check_resume, owning, write_record
from training import distributed
from training.advantages import PPOBatch, team_token_advantages
from training.checkpoint import (
    capture_rng_state,
    latest_checkpoint,
    load_trainer_state,
    restore_rng_state,
    save_checkpoint,
)
from training.config import TrainConfig
from training.critic import PromptedCritic
from training.divergence import searcher_divergence_metrics
from training.losses import NonFiniteError, PPOLossTerms, ppo_loss, ppo_role_metrics
from training.model_loading import load_frozen_models, load_policy_model, resolve_device
from training.nonfinite import save_nonfinite_step, step_tensors
from training.ptx import PtxData
from training.rollout import TeamBatch, TeamRolloutCollector, concat_batches
from training.rollout_rewards import record_rewards, rollout_metrics
from training.run_logging import MetricsLogger, truncate_metrics
from training.sft import sft_batch
from training.teacher import FrozenScores
from training.token_scoring import TokenBatch


class TrainingStopped(RuntimeError):
    """A step hit a non-finite loss, advantage or gradient. No checkpoint or metrics of it were
    written; its inputs were saved under ``RUN_DIR/nonfinite/`` for inspection."""


# --------------------------------------------------------------------------- data


class QuestionLoader:
    """Seeded epochs over the training questions; ``state_dict`` makes resuming exact."""

    def __init__(self, questions: Sequence[Question], batch_size: int, seed: int):
        if not questions:
            raise ValueError("the training split has no questions")
        self.questions = list(questions)
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.position = 0

    def _order(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.questions))

    def next_batch(self) -> tuple[list[Question], list[int]]:
        """B questions and their dataset indices (the indices seed their trajectories)."""
        indices: list[int] = []
        order = self._order()
        while len(indices) < self.batch_size:
            if self.position == len(self.questions):
                self.epoch, self.position = self.epoch + 1, 0
                order = self._order()
            indices.append(int(order[self.position]))
            self.position += 1
        return [self.questions[i] for i in indices], indices

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self.seed = state["epoch"], state["position"], state["seed"]


def world_report_gold(corpus: str | None) -> Callable[[str, str], bool] | None:
    """Gold correctness of a report on the embedded SynthWiki world, which the environments play
    when no ``corpus`` is given: it states the answer of its sub-question. None on another corpus."""
    if corpus is not None:
        return None
    from envs.synthwiki import load_default_world
    from envs.synthwiki.knowledge import Knowledge, report_states_answer

    knowledge = Knowledge(document.text for document in load_default_world().corpus.documents)
    return functools.partial(report_states_answer, knowledge=knowledge)


def env_factory(config: TrainConfig) -> Callable[[], SearchEnv]:
    module = env_module(config.workflow)
    return lambda: module.env(config=replace(config.env))


# --------------------------------------------------------------------------- micro-batches


def _rows(tokens: TokenBatch, rows: torch.Tensor, trim: bool) -> tuple[TokenBatch, int]:
    """The given rows of a right-padded batch, cut to their longest row unless ``trim`` is off."""
    width = int(tokens.attention_mask[rows].sum(dim=-1).max()) if trim else tokens.input_ids.shape[1]
    return TokenBatch(
        tokens.input_ids[rows, :width], tokens.attention_mask[rows, :width], tokens.response_mask[rows, :width]
    ), width


def _denominator(mode: str, mask: torch.Tensor) -> float:
    """What ``loss_agg_mode`` divides by, so that micro-batch losses add up to the minibatch's."""
    if mode == "token-mean":
        return float(mask.sum())
    return float(mask.any(dim=-1).sum())  # the seq-mean modes average over sequences


# --------------------------------------------------------------------------- the trainer


class Trainer:
    """Holds the policy, optimizer, data and frozen models of one stage, and runs its steps."""

    def __init__(self, config: TrainConfig, checkpoint: str | Path | None = None):
        config.validate()
        self.config = config
        random.seed(config.seed)
        np.random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.dist, self.device = distributed.start(config.distributed, resolve_device(config.model.device))
        if config.rollout.batch_size < self.dist.world_size:
            raise ConfigError(
                f"rollout.batch_size: {config.rollout.batch_size} questions cannot be shared "
                f"by {self.dist.world_size} ranks (each needs at least one)"
            )
        model_path = Path(checkpoint) if checkpoint is not None else None
        self.model, self.tokenizer = load_policy_model(config.model, self.device, model_path)
        if self.tokenizer.pad_token_id is None:
            raise ValueError("the policy's tokenizer has no pad token")
        if config.model.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.scorer = distributed.PolicyScorer(self.model)  # the forward of PPO re-scoring
        if config.distributed.fsdp:
            distributed.shard_model(self.scorer, config.distributed, self.device)
        sampling = SamplingConfig(
            temperature=config.rollout.temperature,
            top_p=config.rollout.top_p,
            max_new_tokens=config.rollout.max_new_tokens,
            max_input_tokens=config.rollout.max_input_tokens,
        )
        self.policy = HFPolicy(
            self.model,
            self.tokenizer,
            sampling,
            seed=config.seed,
            max_batch_size=config.rollout.generation_batch_size,
            engine=config.rollout.decode_engine,
            compile=config.rollout.decode_compile,
        )
        self.frozen = load_frozen_models(config, self.tokenizer, self.device)
        self.critic = (
            PromptedCritic(self.policy, config.critic, world_report_gold(config.env.corpus))
            if config.searcher_reward == "critic"
            else None
        )
        self.make_env = env_factory(config)
        questions = self.make_env().questions[config.rollout.first_question :][: config.rollout.max_questions]
        self.loader = QuestionLoader(questions, config.rollout.batch_size, config.seed)
        self.collector = TeamRolloutCollector(self.make_env, self.policy)
        ptx = config.ptx
        unweighted = [role for role, weight in config.ppo.role_loss_weights.items() if weight == 0]
        self.ptx = PtxData(ptx.data, self.tokenizer, ptx.seq_len, ptx.batch_size, unweighted) if ptx.coef > 0 else None
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=config.optim.lr,
            betas=tuple(config.optim.betas),
            weight_decay=config.optim.weight_decay,
        )
        self.step = 0
        self.last_batch: TeamBatch | None = None
        # what the running step has built so far ("rollout", "rewards", "ppo"), for save_nonfinite
        self.step_inputs: dict[str, Any] = {}
        if checkpoint is not None:
            self.load_state(load_trainer_state(checkpoint))

    # ----- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "optimizer": distributed.optimizer_state(self.scorer, self.optimizer),
            "loader": self.loader.state_dict(),
            "rng": capture_rng_state(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
        distributed.load_optimizer_state(self.scorer, self.optimizer, state["optimizer"])
        self.loader.load_state_dict(state["loader"])
        restore_rng_state(state["rng"])

    def save(self, run_dir: str | Path | None = None) -> Path | None:
        """Every rank calls it (FSDP gathers weights and optimizer state); rank 0 writes and
        returns the checkpoint, the others return None once it is written."""
        weights = distributed.full_model_state(self.scorer)
        state = self.state_dict()
        saved = None
        if self.dist.is_main:
            model = self.model if weights is None else _GatheredWeights(self.model, weights)
            saved = save_checkpoint(
                run_dir or self.config.run_dir,
                self.step,
                model,
                self.tokenizer,
                state,
                self.config,
                self.config.checkpoint.keep_last,
            )
        self.dist.barrier()
        return saved

    def _seed_for(self, purpose: int, sampling_round: int = 0) -> int:
        """A seed for this step's rollouts (0) or minibatch order (1), from the run seed alone."""
        # round 0 adds nothing to the entropy: a step's first round draws the same trajectories
        # whether dynamic sampling is on or off, so turning it on changes only the extra rounds
        entropy = [self.config.seed, self.step, purpose] + ([sampling_round] if sampling_round else [])
        state = np.random.SeedSequence(entropy)
        return int(state.generate_state(1, dtype=np.uint64)[0] >> np.uint64(33))

    # ----- one step ----------------------------------------------------------------------
    def _collect_round(self, sampling_round: int) -> TeamBatch:
        """This rank's share of B fresh questions, with their dataset indices as group keys
        (so the ranks' batches together are the single-process batch)."""
        questions, indices = self.loader.next_batch()
        self.model.eval()
        with distributed.generation_weights(self.scorer):
            return self.collector.collect(
                self.dist.shard(questions),
                self.config.rollout.group_size,
                seed=self._seed_for(0, sampling_round),
                group_keys=self.dist.shard(indices),
            )

    def collect(self) -> tuple[TeamBatch, dict[str, float]]:
        """The step's rollouts, and how many of their questions carry an outcome signal.

        With ``rollout.dynamic_sampling_rounds`` it keeps drawing rounds of B questions until B
        informative ones (``TeamBatch.informative_groups``) are found on all ranks together or
        the rounds run out, then trains on the informative ones only (at most this rank's share of
        B). A rank that found none keeps its first round, so that no rank has an empty batch.
        """
        rollout = self.config.rollout
        rounds: list[TeamBatch] = []
        found = 0
        for sampling_round in range(1 + rollout.dynamic_sampling_rounds):
            rounds.append(self._collect_round(sampling_round))
            found += int(self.dist.sum(len(rounds[-1].informative_groups())))
            if found >= rollout.batch_size:
                break
        self.policy.release_cache()  # the decode engine's KV cache and stored prefixes are not needed during the update
        batch = concat_batches(rounds)
        informative = batch.informative_groups()
        em = [r["rewards"]["em"] for row in batch.records for r in row]
        stats = {
            "rollout/rounds": float(len(rounds)),
            "rollout/informative_fraction": len(informative) / len(batch.questions),
            "rollout/em_all_rounds": float(np.mean(em)),
        }
        if rollout.dynamic_sampling_rounds:
            batch = batch.select_groups(informative[: len(rounds[0].questions)]) if informative else rounds[0]
        return batch, stats

    def prepare(self, batch: TeamBatch) -> tuple[PPOBatch, dict[str, float]]:
        """Rewards, Teacher scores and token advantages of a rollout batch."""
        tokens = batch.token_batch(self.tokenizer.pad_token_id)
        role_ids = batch.role_ids()
        old_logprobs = batch.old_logprobs()
        rewards = record_rewards(batch)
        self.step_inputs["rewards"] = rewards
        metrics = rollout_metrics(batch, rewards)
        if self.critic is not None:
            with distributed.generation_weights(self.scorer):
                rewards["searcher"] = self.critic.searcher_rewards(batch.records)
            metrics.update(self.critic.last_metrics)
            metrics["reward/searcher_critic"] = float(rewards["searcher"].mean())
        frozen = FrozenScores()
        if self.frozen.teacher is not None or self.frozen.reference is not None:
            started = time.perf_counter()
            frozen = self.frozen.score(
                tokens,
                role_ids,
                kl_in_reward=self.config.advantage.kl_in_reward_coef > 0,
                kl_loss=self.config.ppo.kl_loss_coef > 0,
                share_keys=[s.group for s in batch.sequences],
            )
            metrics["time/teacher_s"] = time.perf_counter() - started
        if frozen.teacher is not None:
            metrics.update(
                searcher_divergence_metrics(
                    tokens.input_ids,
                    tokens.response_mask,
                    role_ids,
                    old_logprobs,
                    frozen.teacher,
                    frozen.teacher_rows,
                    lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
                )
            )
        group_size = batch.group_size
        advantages = team_token_advantages(
            role_ids=role_ids,
            traj_index=torch.tensor([s.group * group_size + s.trajectory for s in batch.sequences]),
            candidate_index=torch.tensor([s.candidate for s in batch.sequences]),
            response_mask=tokens.response_mask,
            old_logprobs=old_logprobs,
            teacher_logprobs=frozen.teacher,
            reference_logprobs=frozen.reference,
            leader_rewards=rewards["leader"],
            answerer_rewards=rewards["answerer"],
            searcher_rewards=rewards["searcher"],
            final_em=rewards["em"],
            solver_rewards=rewards["solver"],
            candidate_mask=rewards["candidate_mask"],
            config=self.config.advantage,
        )
        ppo_batch = PPOBatch(
            tokens, role_ids, old_logprobs, frozen.teacher, advantages, frozen.reference, frozen.reference_rows
        )
        return ppo_batch, metrics

    def _micro_loss(self, batch: PPOBatch, rows: torch.Tensor) -> tuple[PPOLossTerms, dict]:
        """PPO loss of some rows, re-scored with gradients under the current parameters."""
        ppo = self.config.ppo
        tokens, width = _rows(batch.tokens, rows, trim=ppo.loss_agg_mode != "seq-mean-token-sum-norm")
        with torch.enable_grad():
            logprobs, entropy = self.scorer(
                tokens.to(self.device), self.config.rollout.temperature, with_entropy=ppo.entropy_coef > 0
            )
            reference = batch.reference_logprobs
            tensors = {
                "logprobs": logprobs,
                "old_logprobs": batch.old_logprobs[rows, :width].to(self.device),
                "advantages": batch.advantages.token_advantages[rows, :width].to(self.device),
                "loss_mask": tokens.response_mask.to(self.device),
                "role_ids": batch.role_ids[rows].to(self.device),
                "entropy": entropy,
                "ref_logprobs": reference[rows, :width].to(self.device) if reference is not None else None,
                "ref_rows": batch.reference_rows[rows] if reference is not None else None,
            }
            terms = ppo_loss(
                tensors["logprobs"],
                tensors["old_logprobs"],
                tensors["advantages"],
                tensors["loss_mask"],
                tensors["role_ids"],
                ppo,
                entropy=tensors["entropy"],
                ref_logprobs=tensors["ref_logprobs"] if ppo.kl_loss_coef > 0 else None,
            )
        return terms, tensors

    def update(self, batch: PPOBatch) -> dict[str, float]:
        """``optim.epochs`` passes of ``optim.minibatches`` AdamW steps over the batch.

        Under torchrun each rank splits its own rows and the loss is scaled by the minibatch's
        global denominator, so the ranks' summed gradients are the whole minibatch's gradient
        (``training.distributed``).
        """
        optim, mode = self.config.optim, self.config.ppo.loss_agg_mode
        self.model.train()
        generator = torch.Generator().manual_seed(self._seed_for(1))
        losses, policy_losses, entropies, grad_norms, ptx_losses = [], [], [], [], []
        role_metrics: dict[str, list[float]] = {}
        lengths = batch.tokens.attention_mask.sum(dim=-1)
        for _epoch in range(optim.epochs):
            order = torch.randperm(batch.num_sequences, generator=generator)
            # tensor_split: exactly `minibatches` parts on every rank, empty ones included
            for minibatch in torch.tensor_split(order, optim.minibatches):
                if self.dist.sum(len(minibatch)) == 0:
                    continue
                # Micro-batches of similar lengths: a 1,500-token Searcher call padded next to
                # 200-token Answerer calls would multiply the compute. The gradient is the same sum.
                minibatch = minibatch[torch.argsort(lengths[minibatch], descending=True, stable=True)]
                self.optimizer.zero_grad(set_to_none=True)
                total = max(self.dist.sum(_denominator(mode, batch.tokens.response_mask[minibatch])), 1.0)
                micro_batches = [(rows, 1.0) for rows in minibatch.split(optim.micro_batch_size)]
                # FSDP2 ranks must run equally many forwards: pad with 0-weighted micro-batches
                micro_batches += [(order[:1], 0.0)] * (self.dist.max(len(micro_batches)) - len(micro_batches))
                minibatch_loss = 0.0
                for rows, weight in micro_batches:
                    terms, tensors = self._micro_loss(batch, rows)
                    share = weight * _denominator(mode, tensors["loss_mask"]) / total
                    (terms.loss * share).backward()
                    if not weight:
                        continue
                    minibatch_loss += float(terms.loss.detach()) * share
                    policy_losses.append(float(terms.policy_loss.detach()))
                    if terms.entropy is not None:
                        entropies.append(float(terms.entropy.detach()))
                    metrics = ppo_role_metrics(
                        tensors["role_ids"],
                        tensors["loss_mask"],
                        tensors["logprobs"],
                        tensors["old_logprobs"],
                        tensors["advantages"],
                        terms,
                        ref_logprobs=tensors["ref_logprobs"],
                        ref_rows=tensors["ref_rows"],
                        entropy=tensors["entropy"],
                    )
                    for name, value in metrics.items():
                        role_metrics.setdefault(name, []).append(value)
                if self.ptx is not None:
                    # scored through self.scorer like the PPO tokens, so FSDP and the device apply
                    tokens = sft_batch(self.ptx.sample(generator), self.tokenizer.pad_token_id).to(self.device)
                    logprobs, _ = self.scorer(tokens, 1.0, with_entropy=False)
                    ptx_loss = -logprobs[tokens.response_mask.bool()].mean()
                    # every rank adds its own examples; the gradient sum over ranks is their mean
                    (self.config.ptx.coef / self.dist.world_size * ptx_loss).backward()
                    ptx_losses.append(float(ptx_loss.detach()))
                if not distributed.is_sharded(self.scorer):
                    self.dist.sum_gradients(self.model.parameters())
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), optim.grad_clip)
                if not torch.isfinite(grad_norm):
                    raise NonFiniteError("gradient norm", ("all",), 1)
                self.optimizer.step()
                # a non-finite parameter would give NaN logits in the next rollout and checkpoint
                bad = sum(int((~torch.isfinite(p.detach())).sum()) for p in self.model.parameters())
                if bad:
                    raise NonFiniteError("parameters after the optimizer step", ("all",), bad)
                losses.append(self.dist.sum(minibatch_loss))
                grad_norms.append(float(grad_norm))
        self.model.eval()
        metrics = {
            "loss/total": float(np.mean(losses)),
            "loss/policy": float(np.mean(policy_losses)),
            "optim/grad_norm": float(np.mean(grad_norms)),
            "optim/grad_norm_max": float(np.max(grad_norms)),
            "optim/lr": optim.lr,
            "optim/updates": float(len(losses)),
        }
        if entropies:
            metrics["loss/entropy"] = float(np.mean(entropies))
        if ptx_losses:
            metrics["loss/ptx"] = float(np.mean(ptx_losses))
        metrics.update({name: float(np.mean(values)) for name, values in role_metrics.items()})
        return metrics

    def train_step(self) -> dict[str, float]:
        """One training step; returns its metrics. Raises ``NonFiniteError`` on NaN/inf."""
        started = time.perf_counter()
        self.step_inputs = {}
        batch, sampling_metrics = self.collect()
        self.step_inputs["rollout"] = batch
        rollout_s = time.perf_counter() - started
        ppo_batch, metrics = self.prepare(batch)
        metrics.update(sampling_metrics)
        self.step_inputs["ppo"] = ppo_batch
        update_started = time.perf_counter()
        metrics.update(self.update(ppo_batch))
        searcher_tokens = (ppo_batch.role_ids == SEARCHER)[:, None] & ppo_batch.tokens.response_mask
        metrics["searcher/token_advantage_abs"] = (
            float(ppo_batch.advantages.token_advantages[searcher_tokens].abs().mean()) if searcher_tokens.any() else 0.0
        )
        self.step += 1
        self.last_batch = batch
        metrics["time/rollout_s"] = rollout_s
        metrics["time/update_s"] = time.perf_counter() - update_started
        metrics["time/step_s"] = time.perf_counter() - started
        return self.dist.mean_metrics(metrics)

    def save_nonfinite(self, run_dir: str | Path, error: Exception) -> Path:
        """Save the failed step's inputs under ``run_dir/nonfinite/``; returns the ``.pt`` path."""
        rollout = self.step_inputs.get("rollout")
        tensors = step_tensors(
            rollout, self.step_inputs.get("rewards"), self.step_inputs.get("ppo"), self.tokenizer.pad_token_id
        )
        return save_nonfinite_step(
            run_dir,
            self.step + 1,
            error,
            tensors,
            records=rollout.records if rollout is not None else None,
            questions=[q.question for q in rollout.questions] if rollout is not None else [],
        )

    def sample_records(self) -> list[dict[str, Any]]:
        """The first ``logging.num_samples`` trajectories of the last step."""
        if self.last_batch is None:
            return []
        records = [r for row in self.last_batch.records for r in row]
        return [{"step": self.step, **r} for r in records[: self.config.logging.num_samples]]


class _GatheredWeights:
    """An FSDP2 model's ``save_pretrained`` over the full state dict gathered on rank 0."""

    def __init__(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]):
        self.model, self.state_dict = model, state_dict

    def save_pretrained(self, directory: str | Path) -> None:
        self.model.save_pretrained(directory, state_dict=self.state_dict)


# --------------------------------------------------------------------------- the stage loop


class StageRun:
    """One stage run in its run directory, with everything ``maopd train`` writes there.

    Opening it holds the run directory (rank 0; ``maopd.base.run_dir.owning``), checks that this
    config may run there (``check_resume``), records the config and builds the ``Trainer`` from the
    newest checkpoint, or from ``checkpoint`` when given. Each ``step()`` trains one step and writes
    its outputs at the config's settings: a ``metrics.jsonl`` row and TensorBoard scalars every
    ``logging.every`` steps, sample trajectories every ``logging.sample_every``, a checkpoint every
    ``checkpoint.every`` and at ``steps``. ``close()`` (or leaving a ``with`` block) flushes the
    loggers and lets the directory go. ``train_stage`` and ``OPDAlgorithm`` both run a stage this way.
    """

    def __init__(
        self,
        config: TrainConfig,
        resume: bool | None = None,
        check_config: bool = True,
        checkpoint: Path | None = None,
    ):
        self.config = config
        self.run_dir = Path(config.run_dir)
        self.main = distributed.DistributedContext.from_env().is_main
        self._held = contextlib.ExitStack()
        self.logger: MetricsLogger | None = None
        self.trainer: Trainer | None = None
        try:
            if self.main:  # only rank 0 writes, and holds the run directory while it does
                self._held.enter_context(owning(self.run_dir))
            checkpoint = checkpoint or latest_checkpoint(self.run_dir)
            check_resume(config, checkpoint, resume, check_config)
            if self.main:
                write_record(config, self.run_dir)
            self.trainer = Trainer(config, checkpoint)
            if self.main:
                # rows after the restored step (all of them when no checkpoint survived) are logged again
                truncate_metrics(self.run_dir, self.trainer.step)
                log = config.logging
                self.logger = MetricsLogger(
                    self.run_dir, log.tensorboard, log.wandb, log.wandb_project, to_record(config), log.keep_samples
                )
        except BaseException:
            self.close()
            raise

    def step(self) -> dict[str, float]:
        """Train one step and write its outputs; returns its metrics. A step whose loss is not
        finite writes nothing and raises ``TrainingStopped`` naming its saved inputs."""
        trainer, config, log = self.trainer, self.config, self.config.logging
        try:
            metrics = trainer.train_step()
        except NonFiniteError as exc:
            last_good = latest_checkpoint(self.run_dir)
            saved = trainer.save_nonfinite(self.run_dir, exc)
            raise TrainingStopped(
                f"step {trainer.step + 1} stopped: {exc}. Its batch is saved for inspection in {saved} "
                f"(summary: {saved.with_suffix('.json')}); no checkpoint or metrics of the step were "
                f"written. The last good checkpoint is {last_good or 'none (no checkpoint was written yet)'}."
            ) from exc
        step = trainer.step
        if self.logger is not None and (step % log.every == 0 or step == config.steps):
            self.logger.log(step, metrics)
        if self.logger is not None and log.sample_every and step % log.sample_every == 0:
            self.logger.write_samples(step, trainer.sample_records())
        if step % config.checkpoint.every == 0 or step == config.steps:
            trainer.save(self.run_dir)
        return metrics

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()
            self.logger = None
        if self.trainer is not None:
            self.trainer.dist.close()
        self._held.close()

    def __enter__(self) -> StageRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def train_stage(config: TrainConfig, resume: bool | None = None, check_config: bool = True) -> Path:
    """Run one stage to ``config.steps``; returns the run directory.

    ``resume`` and ``check_config`` decide whether the run directory is this run's
    (``maopd.base.run_dir.check_resume``): ``None`` resumes from its latest checkpoint when there
    is one, ``True`` requires one, ``False`` refuses to overwrite a run that has checkpoints;
    ``check_config=False`` is for a caller that compared the configs itself (the pipeline, which
    also allows a moved run dir). Under torchrun every rank runs it; only rank 0 writes files.
    """
    with StageRun(config, resume, check_config) as run:
        trainer = run.trainer
        progress = tqdm(
            total=config.steps,
            initial=trainer.step,
            disable=not (config.logging.progress and run.main),
            desc=f"{config.stage} {config.variant}",
            unit="step",
        )
        with progress:
            while trainer.step < config.steps:
                metrics = run.step()
                progress.update(1)
                progress.set_postfix(em=f"{metrics['reward/em']:.2f}", loss=f"{metrics['loss/total']:.4f}")
    return run.run_dir
