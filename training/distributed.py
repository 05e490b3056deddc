"""Data-parallel training steps across the processes ``torchrun`` starts (one per GPU).

A step on W processes computes exactly what one process computes on the whole batch:

* **Rollouts.** Every rank draws the same B questions from its identically seeded loader and
  keeps ``questions[rank::W]``, with their dataset indices as group keys. A trajectory's tokens
  depend only on (rollout seed, group key, g), so the union of the ranks' batches is the
  single-process batch.
* **Advantages.** GRPO groups are per question and OPD is per token, so each rank computes the
  advantages of its own questions exactly as one process would.
* **Loss.** A minibatch's loss is ``Σ token losses / D`` with D its denominator (tokens for
  ``token-mean``, sequences for the ``seq-mean`` modes). Each rank all-reduces its local D into
  the global D and scales its micro-batch losses by ``local share / global D``; the ranks'
  gradients then **sum** to the gradient of the global loss.
* **Gradients.** Replicated models (``distributed.fsdp: false``) all-reduce every ``.grad`` with
  SUM after the micro-batches of a minibatch, before clipping: one reduction per optimizer step,
  and no wrapper around the model (DDP would reduce after every micro-batch unless told not to,
  and averages, which our global scaling would then have to undo). FSDP2 reduce-scatters during
  backward; its divide factor is set to 1, so it sums too. Clipping then sees the same global
  gradient on every rank (FSDP2's ``clip_grad_norm_`` reduces the norm over the shards).

Minibatches are drawn over each rank's local rows: each rank permutes its own rows with the
step's seed and splits them into ``optim.minibatches`` parts; minibatch k of the step is the
union of the ranks' part k. With ``optim.minibatches: 1`` the whole step equals the
single-process step up to float rounding (tested on 2 gloo processes); with more minibatches
the partition of rows differs from one process's (the same rows, grouped otherwise).

FSDP2 runs collectives inside every forward, so all ranks must run the same number of forwards:
a rank with fewer micro-batches in a minibatch runs extra ones whose loss is multiplied by 0, and
rollouts run on gathered full weights (``generation_weights``), so that ranks may call
``generate`` different numbers of times. The FSDP2 root is a ``PolicyScorer`` around the model:
``score_tokens`` calls the base model and the output head, never the model's own forward, so
only a module whose forward *is* the scoring gathers the embeddings, final norm and head.

Only rank 0 writes checkpoints, metrics and samples; every rank loads the same checkpoint.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist

from maopd.base.config import ConfigError, check_fields, checked
from maopd.training.token_scoring import TokenBatch, score_tokens


@dataclass
class DistributedConfig:
    """How processes launched by ``torchrun`` share a step; one plain process ignores it.

    ``fsdp``: shard parameters, gradients and AdamW states across ranks with FSDP2
    (``fully_shard`` per decoder layer), for models whose fp32 weights and optimizer states do not
    fit one device; otherwise every rank holds the whole model (fine for small models).
    ``mixed_precision`` and ``cpu_offload`` are FSDP2 options: forward/backward in bf16 on fp32
    master weights (gradients reduced in fp32), and sharded state kept in host memory (CUDA only).
    """

    fsdp: bool = checked(
        False,
        help="Shard parameters, gradients and AdamW states across the ranks with FSDP2, for a model whose fp32 "
        "weights and optimizer states do not fit one device; false: every rank holds the whole model.",
    )
    mixed_precision: Literal["none", "bfloat16"] = checked(
        "none",
        help="bfloat16: FSDP2 runs forward and backward in bf16 on fp32 master weights, reducing gradients in fp32; "
        "none: no mixed precision. Needs fsdp.",
    )
    cpu_offload: bool = checked(False, help="Keep the sharded state in host memory (FSDP2, CUDA only). Needs fsdp.")
    backend: Literal["auto", "nccl", "gloo"] = checked(
        "auto", help="The torch.distributed backend: nccl, gloo, or auto (nccl on CUDA, else gloo)."
    )
    timeout_s: int = checked(
        1800, ge=1, help="How long, in seconds, a collective waits for a missing rank before the run fails."
    )

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.fsdp and self.mixed_precision != "none":
            raise ConfigError("mixed_precision: needs distributed.fsdp: true (without FSDP set model.dtype instead)")
        if not self.fsdp and self.cpu_offload:
            raise ConfigError("cpu_offload: needs distributed.fsdp: true")


@dataclass(frozen=True)
class DistributedContext:
    """This process's place among the ranks (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> DistributedContext:
        """torchrun's variables; one process (rank 0 of 1) when they are absent."""
        values = {}
        for name, default in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0)):
            raw = environ.get(name, str(default))
            try:
                values[name] = int(raw)
            except ValueError as exc:
                raise ValueError(f"environment variable {name}={raw!r} is not an integer") from exc
        context = cls(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"])
        if context.world_size < 1 or not 0 <= context.rank < context.world_size:
            raise ValueError(f"RANK={context.rank} and WORLD_SIZE={context.world_size} are inconsistent")
        return context

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        """Whether a process group is up (collectives are no-ops otherwise)."""
        return dist.is_available() and dist.is_initialized()

    def shard(self, items: Sequence[Any]) -> list[Any]:
        """This rank's share of ``items``: every ``world_size``-th one from ``rank``."""
        return list(items[self.rank :: self.world_size])

    def sum(self, value: float) -> float:
        if not self.active:
            return float(value)
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=_collective_device())
        dist.all_reduce(tensor)
        return float(tensor.item())

    def max(self, value: int) -> int:
        if not self.active:
            return int(value)
        tensor = torch.tensor([int(value)], dtype=torch.int64, device=_collective_device())
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def mean_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Each metric averaged over the ranks that report it (a rank may lack a role), except
        sequence counts, which add up."""
        if not self.active:
            return metrics
        gathered: list[dict[str, float]] = [{} for _ in range(self.world_size)]
        dist.all_gather_object(gathered, metrics)
        merged = {}
        for name in dict.fromkeys(name for row in gathered for name in row):
            values = [row[name] for row in gathered if name in row]
            merged[name] = float(np.sum(values) if name.endswith("/sequences") else np.mean(values))
        return merged

    def sum_gradients(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        """All-reduce (SUM) every gradient of a replicated model; a missing one counts as 0."""
        if not self.active:
            return
        for parameter in parameters:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
            dist.all_reduce(parameter.grad)

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def close(self) -> None:
        if self.active:
            dist.destroy_process_group()


def _collective_device() -> torch.device:
    """NCCL reduces CUDA tensors only; gloo CPU ones."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def start(config: DistributedConfig, device: torch.device) -> tuple[DistributedContext, torch.device]:
    """Join the process group torchrun set up (if any); each rank takes the GPU of its local rank."""
    context = DistributedContext.from_env()
    launched = "RANK" in os.environ and "MASTER_ADDR" in os.environ
    if config.fsdp and not launched:
        raise ConfigError(
            "distributed.fsdp: launch with torchrun (torchrun --nproc_per_node N ...), also for a single GPU"
        )
    if not launched or (context.world_size == 1 and not config.fsdp):
        return context, device
    if device.type == "cuda":
        torch.cuda.set_device(context.local_rank)
        device = torch.device("cuda", context.local_rank)
    elif config.cpu_offload:
        raise ConfigError("distributed.cpu_offload: FSDP2 offloading needs CUDA devices")
    backend = config.backend if config.backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timedelta(seconds=config.timeout_s))
    return context, device


# --------------------------------------------------------------------------- FSDP2


class PolicyScorer(torch.nn.Module):
    """``score_tokens`` of ``model`` as a forward: (log-probs, entropy or None), both [N, T]."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: TokenBatch, temperature: float, with_entropy: bool):
        scores = score_tokens(self.model, batch, temperature, with_entropy=with_entropy)
        return scores.logprobs, scores.entropy


def shard_model(model: torch.nn.Module, config: DistributedConfig, device: torch.device) -> torch.nn.Module:
    """``fully_shard`` each transformer block, then the root (a ``PolicyScorer``: it holds the
    embeddings, final norm and head)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    precision = MixedPrecisionPolicy()
    if config.mixed_precision == "bfloat16":
        precision = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    options: dict[str, Any] = {"mp_policy": precision}
    if config.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    policy = model.model if isinstance(model, PolicyScorer) else model
    block_names = set(getattr(policy, "_no_split_modules", None) or ())
    blocks = [m for m in policy.modules() if type(m).__name__ in block_names]
    if not blocks:
        raise ValueError(
            f"distributed.fsdp: {type(policy).__name__} names no transformer blocks (_no_split_modules) to shard"
        )
    for block in blocks:
        fully_shard(block, **options)
    fully_shard(model, **options)
    for unit in [*blocks, model]:  # these setters do not recurse
        unit.set_gradient_divide_factor(1.0)  # sum over ranks: the loss is already scaled globally
        unit.set_force_sum_reduction_for_comms(True)  # plain SUM (gloo has no pre-multiplied sum)
    # FSDP2 sets itself up on the first forward, which must enter through the root; rollouts
    # would otherwise enter through a block first.
    with torch.no_grad():
        model(
            TokenBatch(
                torch.zeros(1, 2, dtype=torch.long, device=device),
                torch.ones(1, 2, device=device),
                torch.tensor([[False, True]], device=device),
            ),
            1.0,
            False,
        )
    model.reshard()  # the root keeps its weights gathered after a forward; the optimizer needs the shards
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


@contextlib.contextmanager
def generation_weights(model: torch.nn.Module) -> Iterator[None]:
    """Hold an FSDP2 model's full weights so forwards run locally (no collectives) inside.

    Rollouts call ``generate`` a data-dependent number of times per rank; inside this context
    that is safe. A replicated model needs nothing.
    """
    if not is_sharded(model):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    model.set_reshard_after_forward(False)
    for module in modules:
        module.unshard()
    try:
        yield
    finally:
        model.set_reshard_after_forward(True)
        for module in modules:
            module.reshard()


def full_model_state(scorer: PolicyScorer) -> dict[str, torch.Tensor] | None:
    """The policy's whole state dict on CPU for saving (rank 0; other ranks get an empty dict),
    or None for a replicated model (it saves its own parameters). Every rank must call it."""
    if not is_sharded(scorer):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(scorer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    # A tied weight (Qwen's lm_head = embed_tokens) is saved once, under its first name, as
    # save_pretrained does for an unsharded model.
    first_names: dict[int, str] = {}
    tied = [
        name
        for name, parameter in scorer.model.named_parameters(remove_duplicate=False)
        if first_names.setdefault(id(parameter), name) != name
    ]
    return {
        name: tensor for name, tensor in ((k.removeprefix("model."), v) for k, v in state.items()) if name not in tied
    }


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state to checkpoint: gathered in full (keyed by parameter name) under FSDP2."""
    if not is_sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Inverse of ``optimizer_state``; under FSDP2 each rank keeps its shard of the full state."""
    if not is_sharded(model):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
