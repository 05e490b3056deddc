"""The typed config of one training stage, and how stage and variant presets combine with it.

A run is fully described by a ``TrainConfig`` (saved as ``RUN_DIR/config.yaml`` at start, seed
included). Values come in layers, each overriding the one before:

1. the dataclass defaults below;
2. ``STAGE_SETTINGS[stage]``: what Stage I and Stage II differ in (workflow, Searcher signal,
   Teacher, KL-in-reward);
3. ``VARIANT_SETTINGS[variant]``: the paper's Table 3 ablations and the Prompted Critic baseline,
   each a handful of field values, so variants share every line of trainer code;
4. the YAML file (``configs/*.yaml``);
5. ``key=value`` overrides from the command line or ``OPDConfig``.

Because a file overrides a variant, preset files leave the fields variants control
(``advantage.searcher_signal``, ``advantage.kl_in_reward_coef``, ``teacher.source``,
``teacher.reference``, ``ppo.role_loss_weights``, ``searcher_reward``) to the stage and variant layers.

Stages and variants are presets over the per-role map of learning signals (``advantage.<role>_signal``,
``maopd.training.advantages.AdvantageConfig.roles``): each sets entries of the map by name, and what
the trainer loads follows from what the chosen estimators declare (``TrainConfig.signal_needs``),
never from their names.
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from maopd.agents.tiny_model import TinyModelConfig
from maopd.agents.vllm_policy import VLLM_HEAD_SIZES, vllm_python
from maopd.base.config import (
    ConfigError,
    ConfigLayer,
    apply_overrides,
    check_fields,
    check_partial,
    checked,
    current_names,
    defaults_dict,
    field_like,
    from_dict,
    read_yaml_mapping,
    seed_field,
    set_dotted,
    shown,
)
from maopd.base.limits import BATCH, GROUP, NEW_TOKENS, VOCABULARY
from maopd.envs.cascade_search_v1 import raw_env as CascadeEnv
from maopd.envs.hierarchical_search_v1 import raw_env as HierarchyEnv
from maopd.envs.policy import SamplingSettings
from maopd.envs.search_env import SearchEnvConfig
from maopd.envs.single_search_v1 import raw_env as SingleEnv
from maopd.envs.workflows import check_workflow, env_module, workflow_roles
from maopd.training.advantages import ADVANTAGE_ESTIMATORS, AdvantageConfig, outcome_argument
from maopd.training.distributed import DistributedConfig
from maopd.training.losses import PPOLossConfig
from maopd.training.signals import Needs

# "single": not a stage of the paper's method but the Search-R1-style baseline it is compared
# with, one solver trained with GRPO on its outcome (envs/single_search_v1.py); a stage name,
# so that one layer of settings makes it and `maopd train --config` trains it like the others.
Stage = Literal["stage1", "stage2", "single"]
STAGE_WORKFLOWS = {"stage1": "cascade", "stage2": "hierarchical", "single": "single"}
Variant = Literal["full", "outcome_searcher_rl", "base_model_teacher", "no_searcher_supervision", "prompted_critic"]


@dataclass
class ModelConfig:
    """The initial policy π_0: a local Hugging Face model directory, or ``"tiny"``.

    ``"tiny"`` builds a random Qwen3 of ``tiny`` size over a tokenizer trained in-process on the
    default world (deterministic: the same settings give the same model and vocabulary), for
    tests and CPU demos.
    """

    path: str = checked(
        "tiny",
        help="π_0: tiny (a random tiny Qwen3 built in-process), a local model directory, a run directory or "
        "checkpoint, or a Hugging Face hub id.",
    )
    tiny: TinyModelConfig = checked(
        default_factory=TinyModelConfig, help="The tiny model's architecture and seed (path: tiny)."
    )
    tiny_vocab_size: int = checked(
        1200,
        ge=1,
        **VOCABULARY.constraint(),
        help="The vocabulary size of the tokenizer trained for the tiny model (path: tiny).",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = checked(
        "float32", help="The dtype of the policy's weights, and of the frozen Teacher and KL reference."
    )
    device: str = checked(
        "auto", help="The device the trainer runs on: auto (cuda when available, else cpu) or a torch device name."
    )
    gradient_checkpointing: bool = checked(
        False,
        help="Recompute each block's activations in backward instead of storing them: less memory, more compute. "
        "Applies to the PPO re-scoring forward, not to generation.",
    )


@dataclass
class TeacherConfig:
    """The frozen models of Stage II: the Teacher, whose log-probs are the Searchers' OPD signal
    (Eq. 5), and the reference of the KL terms (the Leader/Answerer KL-in-reward, the KL loss).

    ``source``, the Teacher: ``checkpoint``, the saved policy at ``path`` (a Stage I run
    directory, one of its checkpoints, or a model directory); ``base_model``: π_0 itself ("w/
    base-model teacher"); ``none``: no Teacher. ``reference``, the KL reference: ``checkpoint``,
    the model at ``path`` (π_T, the paper's reference in every Table 3 variant), or ``base_model``.
    When both name the same model it is loaded once and scores each row once.
    """

    source: Literal["none", "checkpoint", "base_model"] = checked(
        "none",
        help="The Teacher, whose log-probs are the Searchers' OPD signal: checkpoint (the model at path), "
        "base_model (π_0 itself, 'w/ base-model teacher') or none.",
    )
    path: str | None = checked(
        None,
        help="The model that checkpoint names, for the Teacher or the KL reference: a Stage I run directory, one "
        "of its checkpoints, or a model directory.",
    )
    reference: Literal["checkpoint", "base_model"] = checked(
        "checkpoint",
        help="The reference of the KL terms (the Leader/Answerer KL-in-reward, the KL loss): checkpoint (the model "
        "at path, π_T) or base_model (π_0).",
    )


@dataclass
class VLLMEngineConfig:
    """``rollout.engine: vllm``: how the engine's worker runs (``maopd.agents.vllm_policy.VLLMPolicy``).

    ``engine_args`` add to or override ``vllm.LLM``'s arguments (``gpu_memory_utilization``,
    ``tensor_parallel_size``, ...); ``worker_env`` sets the worker's environment, e.g.
    ``CUDA_VISIBLE_DEVICES: "1"`` to run the engine on a GPU of its own, or
    ``VLLM_CPU_KVCACHE_SPACE`` (GiB) on a CPU. ``sync_tolerance``: the largest |engine − trainer|
    log-prob the probe after each weight sync may show (null: by ``model.dtype``, see
    ``maopd.training.rollout_engine.SYNC_TOLERANCE``).
    """

    engine_args: dict[str, Any] = checked(
        default_factory=dict,
        help="Arguments added to or overriding vllm.LLM's (gpu_memory_utilization, tensor_parallel_size, ...).",
    )
    worker_env: dict[str, str] = checked(
        default_factory=dict,
        help="The environment of the engine's worker process, e.g. CUDA_VISIBLE_DEVICES: '1' to run the engine on "
        "a GPU of its own, or VLLM_CPU_KVCACHE_SPACE (GiB) on a CPU.",
    )
    sync_tolerance: float | None = checked(
        None,
        gt=0,
        null="by model.dtype",
        help="The largest |engine − trainer| log-prob gap the check after each weight sync accepts; null: by "
        "model.dtype (maopd.training.rollout_engine.SYNC_TOLERANCE).",
    )

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class RolloutConfig:
    batch_size: int = checked(32, ge=1, **BATCH.constraint(), help="Questions per step (B).")
    group_size: int = checked(
        5, ge=1, **GROUP.constraint(), help="Trajectories per question (G): the group Eq. 1 normalises over."
    )
    temperature: float = field_like(
        SamplingSettings,
        "temperature",
        1.0,
        help="The rollouts' sampling temperature; at 1 they sample the policy's whole distribution, so what PPO "
        "re-scores is what was sampled.",
    )
    top_p: float = field_like(
        SamplingSettings,
        "top_p",
        1.0,
        help="The rollouts' nucleus sampling; at 1 they sample the policy's whole distribution, so what PPO "
        "re-scores is what was sampled.",
    )
    max_new_tokens: int = field_like(SamplingSettings, "max_new_tokens")
    max_input_tokens: int = field_like(SamplingSettings, "max_input_tokens")
    generation_batch_size: int = checked(
        64,
        ge=1,
        **BATCH.constraint(),
        help="Rows per batched generate call (the KV-cache slots of the continuous engine).",
    )
    engine: Literal["continuous", "chunked", "vllm"] = checked(
        "continuous",
        help="What generates every model call of the rollouts: continuous (slots refilled as rows finish) or "
        "chunked (fixed chunks of rows that shrink as rows finish) decode in the trainer's process; vllm: a vLLM "
        "engine in a worker process (settings in rollout.vllm).",
    )
    decode_compile: str | None = checked(
        None,
        help="A torch.compile mode for the continuous engine's decode step (reduce-overhead on GPU: CUDA graphs); "
        "null: eager.",
    )
    vllm: VLLMEngineConfig = checked(
        default_factory=VLLMEngineConfig, help="How the vLLM engine's worker runs (engine: vllm)."
    )
    max_questions: int | None = checked(
        None, ge=1, null="every question", help="Train on the first N questions of the split only."
    )
    first_question: int = checked(
        0, ge=0, help="Skip the first N questions of the split (e.g. those π_0's demonstrations were made from)."
    )
    dynamic_sampling_rounds: int = checked(
        0,
        ge=0,
        help="DAPO's dynamic sampling: up to N more rounds of B questions per step, until B questions whose G "
        "trajectories disagree on R_EM are found; only those are trained on (0: off).",
    )

    RENAMED: ClassVar[dict[str, str]] = {"decode_engine": "engine"}

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class OptimConfig:
    lr: float = checked(1e-6, gt=0, help="AdamW's learning rate.")
    weight_decay: float = checked(0.0, ge=0, help="AdamW's weight decay.")
    betas: tuple[float, float] = checked(
        (0.9, 0.999), help="AdamW's decay rates of its moment estimates, each in [0, 1)."
    )
    grad_clip: float = checked(1.0, gt=0, help="The gradient norm each optimizer step clips to.")
    minibatches: int = checked(5, ge=1, help="PPO minibatch updates (optimizer steps) per epoch over a step's batch.")
    epochs: int = checked(1, ge=1, help="PPO passes over a step's batch.")
    micro_batch_size: int = checked(
        8,
        ge=1,
        **BATCH.constraint(),
        help="Sequences per forward and backward pass; a minibatch's gradients accumulate over them.",
    )

    def __post_init__(self) -> None:
        check_fields(self)
        if len(self.betas) != 2 or not all(0 <= beta < 1 for beta in self.betas):
            got = shown(list(self.betas))
            raise ConfigError(f"betas: must be two numbers in [0, 1) (Adam's decay rates), got {got}")


@dataclass
class CriticConfig:
    """The Prompted Critic's Searcher reward 0.3·R_EM + 0.5·R_judge + 0.2·b_S."""

    em_weight: float = checked(0.3, help="The weight of the team outcome R_EM in the critic's Searcher reward.")
    judge_weight: float = checked(
        0.5, help="The weight of R_judge, 1 when the judge calls the Searcher's report useful, else 0."
    )
    bonus_weight: float = checked(0.2, help="The weight of the Searcher's bonus b_S.")
    max_new_tokens: int = checked(
        16,
        ge=1,
        **NEW_TOKENS.constraint(),
        help="The most tokens the judge (the current policy, greedy) writes per verdict.",
    )


@dataclass
class PtxConfig:
    """PPO-ptx (Ouyang et al., 2022, Eq. 2): γ · the negative log-likelihood of fixed examples
    added to every PPO minibatch, so that the RL update does not erode what π_0 learned from them
    (``maopd.training.ptx``)."""

    coef: float = checked(
        0.0, ge=0, note="0 is off", help="γ, the weight of the examples' negative log-likelihood; 0 turns PPO-ptx off."
    )
    data: str | None = checked(
        None,
        help='The examples: a .jsonl file of {"text": ...} or {"messages": [...], "role": ...} lines. Needed when '
        "coef > 0 (the pipeline writes π_0's own when unset).",
    )
    batch_size: int = checked(4, ge=1, **BATCH.constraint(), help="Examples drawn per PPO minibatch.")
    seq_len: int = checked(1536, ge=2, help="Text is cut into windows of this many tokens; longer chats are skipped.")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class CheckpointConfig:
    every: int = checked(100, ge=1, help="Save a checkpoint every N steps, and at the last step.")
    keep_last: int = checked(3, ge=1, help="Keep only the newest N checkpoints.")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass
class LoggingConfig:
    every: int = checked(
        1, ge=1, help="Write a metrics row (and the TensorBoard and W&B scalars) every N steps, and at the last step."
    )
    sample_every: int = checked(10, ge=0, help="Write sample trajectories every N steps (0: never).")
    num_samples: int = checked(2, ge=0, help="Full workflow records per sample file.")
    keep_samples: int = checked(0, ge=0, help="Keep only the newest N sample files (0: keep all).")
    tensorboard: bool = checked(
        True, help="Write TensorBoard events under RUN_DIR/tb/ (needs the tensorboard package)."
    )
    wandb: bool = checked(
        False,
        help="Log to Weights & Biases too, under RUN_DIR/wandb/ (needs the logging extra); a resumed run logs to "
        "the W&B run it started.",
    )
    wandb_project: str = checked("multiagent-opd", help="The W&B project the run logs to.")
    progress: bool = checked(True, help="Show a progress bar of the steps.")

    def __post_init__(self) -> None:
        check_fields(self)
        # a requested logger that is missing is refused before any work, never skipped in silence
        for name, package in (("tensorboard", "tensorboard"), ("wandb", "wandb")):
            if getattr(self, name) and importlib.util.find_spec(package) is None:
                raise ConfigError(
                    f"logging.{name}: the {package} package is not installed; install the logging extra "
                    f"(pip install -e '.[logging]' in the clone) or set logging.{name}=false"
                )


@dataclass
class TrainConfig:
    stage: Stage = checked(
        "stage2",
        help="What is trained: stage1 (Stage I, the cascade), stage2 (Stage II, the hierarchy) or single (the "
        "single-agent Search-R1-style baseline); it picks the workflow and the stage's settings.",
    )
    variant: Variant = checked(
        "full",
        help="The Stage II variant: full (MultiAgent-OPD), the Table 3 ablations outcome_searcher_rl, "
        "base_model_teacher and no_searcher_supervision, or the prompted_critic baseline.",
    )
    workflow: str | None = checked(
        None,
        null="the stage's",
        record_default=False,
        help="The workflow trained, any registered one (maopd.envs.workflows), with the stage's settings; null: "
        "the stage's own (stage1 cascade, stage2 hierarchical, single single).",
    )
    seed: int = seed_field(help="Seeds the run: the question order, the rollouts and the PPO minibatch order.")
    steps: int = checked(500, ge=1, help="Training steps; each collects rollouts and updates the policy.")
    run_dir: str = checked(
        "runs/default",
        help="The directory the run writes (config, metrics, samples, checkpoints) and resumes from.",
    )
    searcher_reward: Literal["env", "critic"] = checked(
        "env",
        help="The Searcher reward R_S: env (the environment's, 0.9·R_EM + 0.1·b_S) or critic (the Prompted Critic's, "
        "see critic).",
    )
    model: ModelConfig = checked(default_factory=ModelConfig, help="The initial policy π_0.")
    teacher: TeacherConfig = checked(default_factory=TeacherConfig, help="The frozen Teacher and KL reference.")
    env: SearchEnvConfig = checked(
        default_factory=SearchEnvConfig, help="The environments: budgets, team size, corpus, questions, retriever."
    )
    rollout: RolloutConfig = checked(default_factory=RolloutConfig, help="What each step collects, and how.")
    advantage: AdvantageConfig = checked(default_factory=AdvantageConfig, help="How token advantages are built.")
    ppo: PPOLossConfig = checked(default_factory=PPOLossConfig, help="The PPO loss.")
    optim: OptimConfig = checked(default_factory=OptimConfig, help="The optimizer and the PPO update's batches.")
    critic: CriticConfig = checked(
        default_factory=CriticConfig, help="The Prompted Critic's Searcher reward (searcher_reward: critic)."
    )
    ptx: PtxConfig = checked(default_factory=PtxConfig, help="PPO-ptx, off by default.")
    checkpoint: CheckpointConfig = checked(
        default_factory=CheckpointConfig, help="When checkpoints are saved, and how many are kept."
    )
    logging: LoggingConfig = checked(default_factory=LoggingConfig, help="What the run logs, and how often.")
    distributed: DistributedConfig = checked(
        default_factory=DistributedConfig,
        help="How processes launched by torchrun share a step; one process ignores it.",
    )

    @property
    def trained_workflow(self) -> str:
        """The workflow the run trains (``maopd.envs.workflows``): ``workflow``, else the stage's."""
        return self.workflow or STAGE_WORKFLOWS[self.stage]

    def signal_needs(self) -> dict[str, Needs]:
        """What the estimator of each role of the trained workflow declared it needs."""
        return {role: self.advantage.needs(role) for role in workflow_roles(self.trained_workflow)}

    @property
    def teacher_roles(self) -> tuple[str, ...]:
        """The roles whose estimator reads the Teacher: the Teacher is loaded for them and scores their rows."""
        return tuple(role for role, needs in self.signal_needs().items() if needs.teacher)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """The checks across fields (each section checks its own in ``__post_init__``); run when
        the config is built, and again by the trainer on a config changed since."""
        check_fields(self)
        if not str(self.run_dir).strip():
            raise ConfigError("run_dir: is empty; name the directory the run writes to")
        if self.ptx.coef > 0 and not self.ptx.data:
            raise ConfigError("ptx.data: ptx.coef > 0 needs a .jsonl file of examples (maopd.training.ptx)")
        if self.workflow is not None:
            try:
                check_workflow(self.workflow)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        min_steps = env_module(self.trained_workflow).raw_env.min_steps  # its roles are registered now
        roles = workflow_roles(self.trained_workflow)
        unknown = sorted(set(self.advantage.role_signals) - set(roles))
        if unknown:
            raise ConfigError(
                f"advantage.role_signals.{unknown[0]}: the {self.trained_workflow} workflow has no such role; its "
                f"roles are {', '.join(roles)}"
            )
        if self.env.max_steps is not None and self.env.max_steps < min_steps:
            raise ConfigError(
                f"env.max_steps: must be at least {min_steps} for the {self.trained_workflow} workflow, "
                f"got {self.env.max_steps}"
            )
        if self.stage == "stage1" and self.variant != "full":
            raise ConfigError(f"variant: {self.variant!r} is a Stage II variant; Stage I has only 'full'")
        if self.stage == "single":
            self._validate_single()
        if self.rollout.engine == "vllm":
            self._validate_vllm()
        has_teacher = self.teacher.source != "none"
        if self.teacher_roles and not has_teacher:
            role = self.teacher_roles[0]
            raise ConfigError(
                f"teacher.source: advantage.{role}_signal {self.advantage.roles[role]!r} needs a Teacher "
                "('checkpoint' or 'base_model')"
            )
        if self.advantage.kl_in_reward_coef > 0 and not has_teacher:
            raise ConfigError(
                "advantage.kl_in_reward_coef: the KL penalty needs a Teacher; set it to 0 or set teacher.source"
            )
        if self.ppo.kl_loss_coef > 0 and not has_teacher:
            raise ConfigError("ppo.kl_loss_coef: the KL loss needs a Teacher; set it to 0 or set teacher.source")
        if self.teacher.source == "checkpoint" and not self.teacher.path:
            raise ConfigError("teacher.path: teacher.source 'checkpoint' needs the Stage I run or model directory")
        has_kl = self.advantage.kl_in_reward_coef > 0 or self.ppo.kl_loss_coef > 0
        if has_kl and self.teacher.reference == "checkpoint" and not self.teacher.path:
            raise ConfigError(
                "teacher.path: teacher.reference 'checkpoint' (the KL reference π_T) needs the Stage I run or "
                "model directory; or set teacher.reference: base_model"
            )
        self._validate_critic()

    def _validate_critic(self) -> None:
        """The Prompted Critic replaces R_S, so some role's estimator must read R_S (``searcher_rewards``)."""
        if self.searcher_reward != "critic":
            return
        outcomes = {outcome_argument(role, needs) for role, needs in self.signal_needs().items()}
        if "searcher_rewards" not in outcomes:
            readers = sorted(
                name
                for name, estimator in ADVANTAGE_ESTIMATORS.items()
                if outcome_argument("searcher", estimator.needs) == "searcher_rewards"
            )
            raise ConfigError(
                "advantage.searcher_signal: searcher_reward 'critic' replaces R_S, which no role's estimator reads; "
                f"choose one that reads it: {readers}"
            )

    def _validate_vllm(self) -> None:
        """What the vLLM rollout engine needs, checked before any work."""
        if vllm_python() is None:
            raise ConfigError("rollout.engine: 'vllm' needs the vLLM venv; create it with `bash scripts/setup_vllm.sh`")
        if self.rollout.decode_compile is not None:
            raise ConfigError("rollout.decode_compile: compiles the continuous engine's decode step; set it to null")
        # vLLM records the log-prob after top-p truncation, which PPO's re-score of π_old does not see
        if self.rollout.top_p < 1:
            raise ConfigError("rollout.top_p: engine 'vllm' records log-probs after top-p truncation; set top_p=1")
        if self.distributed.fsdp:
            raise ConfigError(
                "distributed.fsdp: rollout.engine 'vllm' serves one trainer process; set fsdp=false or another engine"
            )
        if self.model.path == "tiny" and self.model.tiny.head_dim not in VLLM_HEAD_SIZES:
            raise ConfigError(
                f"model.tiny.head_dim: vLLM's attention takes head sizes {list(VLLM_HEAD_SIZES)}, "
                f"got {self.model.tiny.head_dim}; set model.tiny.head_dim=32"
            )

    def _validate_single(self) -> None:
        """The single agent trains on its outcome alone: no Teacher exists for it, and it has no
        Searchers for a Searcher signal or critic to reach."""
        if self.variant != "full":
            raise ConfigError(f"variant: {self.variant!r} is a Stage II variant; stage 'single' has only 'full'")
        if self.teacher.source != "none":
            raise ConfigError(
                "teacher.source: stage 'single' has no Teacher (GRPO on the outcome only); set it to none"
            )
        if self.advantage.kl_in_reward_coef > 0:
            raise ConfigError(
                "advantage.kl_in_reward_coef: stage 'single' has no KL-in-reward (no Teacher); set it to 0"
            )
        if self.ppo.kl_loss_coef > 0:
            raise ConfigError("ppo.kl_loss_coef: stage 'single' has no KL reference (no Teacher); set it to 0")
        if self.searcher_reward != "env":
            raise ConfigError("searcher_reward: stage 'single' has no Searchers to critique; set it to env")


# What the two stages differ in (paper, "Stage I" and "Stage II"); the Leader and the Answerer keep
# the map's default, grpo (Eq. 1 on their own rewards), in every stage and variant.
STAGE_SETTINGS: dict[str, dict[str, Any]] = {
    "stage1": {
        "advantage.searcher_signal": "grpo_rs",  # R_S = 0.9·R_EM + 0.1·b_S, Eq. 1
        "advantage.kl_in_reward_coef": 0.0,  # there is no Teacher yet
        "teacher.source": "none",
        "env.max_steps": CascadeEnv.default_max_steps,  # 5
        "env.num_candidates": 5,
    },
    "stage2": {
        "advantage.searcher_signal": "opd",  # Eq. 5
        "teacher.source": "checkpoint",  # the frozen Stage-I policy
        "env.max_steps": HierarchyEnv.default_max_steps,  # 12; env.max_rounds keeps its default, 5
        "env.num_candidates": 5,
    },
    "single": {
        # no Searcher: the signal is never read (the solver's is the map's default, grpo, Eq. 1 on its
        # outcome); set all the same, as it has been in every record of the stage
        "advantage.searcher_signal": "none",
        "advantage.kl_in_reward_coef": 0.0,  # no Teacher
        "teacher.source": "none",
        "env.max_steps": SingleEnv.default_max_steps,  # 5, the cascade's: up to 4 searches, then an answer
    },
}

# Table 3 and the Prompted Critic baseline: only the Searcher's entry of the map and its Teacher change.
VARIANT_SETTINGS: dict[str, dict[str, Any]] = {
    "full": {},
    # Searchers get Eq. 1 on R_EM instead of OPD; the Leader and Answerer keep their objectives,
    # KL-in-reward toward the Stage-I π_T included (Table 3: "All variants retain the Leader and
    # Answerer objectives"), so the Teacher stays, scoring Leader and Answerer rows only.
    "outcome_searcher_rl": {"advantage.searcher_signal": "grpo_final_em"},
    # π_0 is the Teacher of the Searchers' OPD; π_T stays the Leader/Answerer KL reference
    # (teacher.reference keeps its default, the Stage I checkpoint)
    "base_model_teacher": {"teacher.source": "base_model"},
    # Searcher policy/entropy/KL losses are zero; their tokens stay in the loss denominator, and
    # PPO-ptx (an option) leaves Searcher calls out: no term gives Searcher tokens gradient.
    "no_searcher_supervision": {
        "advantage.searcher_signal": "none",
        "ppo.role_loss_weights": {"searcher": 0.0},
    },
    "prompted_critic": {"advantage.searcher_signal": "grpo_rs", "searcher_reward": "critic"},
}


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` merged in, recursing into nested mappings."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "role_loss_weights":
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def apply_settings(data: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each dotted ``a.b.c`` key of ``settings`` set to its (already typed) value."""
    data = copy.deepcopy(data)
    for key, value in settings.items():
        set_dotted(data, key, copy.deepcopy(value))
    return data


def config_layers(data: dict[str, Any] | None = None, overrides: list[str] | None = None) -> list[ConfigLayer]:
    """The layers of a ``TrainConfig``, lowest first: the defaults, the stage's and the variant's
    settings, ``data`` (a parsed YAML file) and ``overrides`` (``a.b=value``). ``build_config``
    lays them over each other; ``maopd config show --explain`` names the last one holding a key."""
    user = current_names(TrainConfig, apply_overrides(data or {}, overrides or []))
    defaults = defaults_dict(TrainConfig)
    head = check_partial(TrainConfig, {k: user.get(k, defaults[k]) for k in ("stage", "variant")}, "")
    return [
        ConfigLayer("default", defaults),
        ConfigLayer(f"stage settings of {head['stage']}", apply_settings({}, STAGE_SETTINGS[head["stage"]])),
        ConfigLayer(f"variant settings of {head['variant']}", apply_settings({}, VARIANT_SETTINGS[head["variant"]])),
        ConfigLayer("file", current_names(TrainConfig, data or {})),
        ConfigLayer("command line", current_names(TrainConfig, apply_overrides({}, overrides or []))),
    ]


def build_config(data: dict[str, Any] | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Defaults < stage < variant < ``data`` (a parsed YAML file) < ``overrides`` (``a.b=value``)."""
    defaults, stage, variant, *_ = config_layers(data, overrides)
    layered = deep_merge(deep_merge(defaults.values, stage.values), variant.values)
    # the file and the overrides as one mapping: an override sets a key inside the file's mappings
    user = current_names(TrainConfig, apply_overrides(data or {}, overrides or []))
    return from_dict(TrainConfig, deep_merge(layered, user))


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> TrainConfig:
    """A ``TrainConfig`` from a YAML file (or only defaults when ``path`` is None) plus overrides."""
    return build_config(read_yaml_mapping(path), overrides)
