"""Batched team rollouts with token-exact records: G trajectories for each of B questions.

Every round gathers the pending call of every agent scheduled in every live trajectory (the
Leaders of some trajectories, the Searchers of a wave in others, Answerers elsewhere) into one
batched ``generate``. The result is a ``TeamBatch``: one ``CallSequence`` per model call (per
candidate, for the Answerer) holding

* the token ids the model saw and produced, in order: the prompt, each turn's generated ids, and
  between turns the environment-inserted ids (end of turn, ``<information>`` passages, feedback,
  the next generation prompt);
* ``response_mask``: 1 exactly on the ids the policy sampled, 0 on prompts, inserted ids, the
  end-of-turn tokens we append, and (after padding) padding;
* ``old_logprobs``: the sampling log-probs (π_old) of the sampled ids, 0 elsewhere.

Multi-turn calls grow by appending: ``ids + generated + turn_continuation_ids(new messages)``.
What the model generated is never decoded and re-encoded for training (``maopd.agents.chat_tokens``).
Decoded text only goes to the environment, which parses the action.

Seeds: the sample of a call's t-th turn uses a seed derived from (rollout seed, question position,
trajectory within the group, call id, t), so a trajectory's records do not depend on which other
trajectories share its batch.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from maopd.agents.chat_tokens import prompt_ids, turn_continuation_ids
from maopd.agents.token_policy import TokenPolicy
from maopd.envs import team
from maopd.envs.datasets import Question
from maopd.envs.policy import AgentOutput, Policy
from maopd.envs.records import WorkflowRecord
from maopd.envs.search_env import SearchEnv
from maopd.training.token_scoring import TokenBatch, pad_batch


@dataclass
class CallSequence:
    """One training sequence: a model call (or one Answerer candidate) with exact masks."""

    group: int  # question position b in the batch
    trajectory: int  # trajectory index within the group, g
    role: str
    agent: str
    call_id: str
    candidate: int  # Answerer candidate j; 0 for the other roles
    input_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    old_logprobs: list[float] = field(default_factory=list)
    turns: int = 0
    finish_reasons: list[str] = field(default_factory=list)

    def extend(self, ids: Sequence[int], generated: bool, logprobs: Sequence[float] | None = None) -> None:
        self.input_ids.extend(int(i) for i in ids)
        self.response_mask.extend([int(generated)] * len(ids))
        self.old_logprobs.extend(logprobs if generated else [0.0] * len(ids))

    @property
    def num_generated(self) -> int:
        return sum(self.response_mask)


@dataclass
class TeamBatch:
    """The rollouts of one training step: B questions × G trajectories, and every call's tokens."""

    questions: list[Question]
    group_size: int
    sequences: list[CallSequence]
    records: list[list[WorkflowRecord]]  # records[b][g]: the workflow record of trajectory (b, g)

    def record(self, group: int, trajectory: int) -> WorkflowRecord:
        return self.records[group][trajectory]

    def role_ids(self) -> torch.Tensor:
        return torch.tensor([team.role_id(s.role) for s in self.sequences], dtype=torch.long)

    def token_batch(self, pad_id: int) -> TokenBatch:
        """Right-padded ids, attention mask and response mask of every sequence, in order."""
        return pad_batch([s.input_ids for s in self.sequences], [s.response_mask for s in self.sequences], pad_id)

    def select_groups(self, groups: Sequence[int]) -> TeamBatch:
        """The batch of the given questions only, renumbered 0, 1, … in the order given."""
        position = {b: new for new, b in enumerate(groups)}
        sequences = [replace(s, group=position[s.group]) for s in self.sequences if s.group in position]
        sequences.sort(key=lambda s: (s.group, s.trajectory))
        return TeamBatch(
            [self.questions[b] for b in groups], self.group_size, sequences, [self.records[b] for b in groups]
        )

    def informative_groups(self) -> list[int]:
        """The questions whose G trajectories do not all reach the same R_EM. The others give every
        outcome-based advantage exactly 0 (DAPO's dynamic sampling drops them)."""
        return [b for b, row in enumerate(self.records) if len({r.rewards.em for r in row}) > 1]

    def old_logprobs(self) -> torch.Tensor:
        """π_old log-probs aligned with ``token_batch`` (right padding, 0 off the response mask)."""
        width = max(len(s.input_ids) for s in self.sequences)
        out = torch.zeros(len(self.sequences), width)
        for row, s in enumerate(self.sequences):
            out[row, : len(s.old_logprobs)] = torch.tensor(s.old_logprobs)
        return out


def concat_batches(batches: Sequence[TeamBatch]) -> TeamBatch:
    """One batch holding the questions of ``batches`` in order (all with the same group size)."""
    if len({b.group_size for b in batches}) != 1:
        raise ValueError("concat_batches needs batches with the same group size")
    if len(batches) == 1:  # the usual step: nothing to renumber
        return batches[0]
    sequences, offset = [], 0
    for batch in batches:
        sequences += [replace(s, group=s.group + offset) for s in batch.sequences]
        offset += len(batch.questions)
    return TeamBatch(
        [q for b in batches for q in b.questions],
        batches[0].group_size,
        sequences,
        [row for b in batches for row in b.records],
    )


def _call_seed(seed: int, group_key: int, trajectory: int, call_id: str, turn: int) -> int:
    state = np.random.SeedSequence([seed, group_key, trajectory, zlib.crc32(call_id.encode()), turn])
    return int(state.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


@dataclass
class _OpenCall:
    sequence: CallSequence
    num_messages: int  # messages in the history the model last saw (before its answer)
    last_generated: list[int]


class TeamRolloutCollector:
    """Runs team rollouts with a token-level policy (``HFPolicy``, ``VLLMPolicy``) for the trained roles.

    ``fixed_policies`` maps roles to other policies (scripted, remote) that play those roles
    without being trained; their calls produce no ``CallSequence``.
    """

    def __init__(
        self,
        make_env: Callable[[], SearchEnv],
        policy: TokenPolicy,
        fixed_policies: Mapping[str, Policy] | None = None,
    ):
        self.make_env = make_env
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.fixed_policies = dict(fixed_policies or {})

    def collect(
        self, questions: Sequence[Question], group_size: int, seed: int, group_keys: Sequence[int] | None = None
    ) -> TeamBatch:
        """``group_keys`` (default: positions) identify questions in seeds; pass dataset indices
        to make a question's trajectories independent of the batch it is drawn in."""
        if group_size < 1 or not questions:
            raise ValueError("collect needs at least one question and group_size >= 1")
        group_keys = list(range(len(questions))) if group_keys is None else list(group_keys)
        envs = []
        for b, question in enumerate(questions):
            for g in range(group_size):
                env = self.make_env()
                env.reset(seed=_call_seed(seed, group_keys[b], g, "reset", 0) % 2**31, options={"question": question})
                envs.append(env)

        open_calls: dict[tuple[int, str], _OpenCall] = {}
        sequences: list[CallSequence] = []
        while pending := [(i, agent) for i, env in enumerate(envs) for agent in env.acting_agents()]:
            turns = {(i, agent): envs[i].turn(agent) for i, agent in pending}
            outputs: dict[tuple[int, str], AgentOutput] = {}
            trained = [key for key in pending if turns[key].role not in self.fixed_policies]
            for role, fixed in self.fixed_policies.items():
                keys = [key for key in pending if turns[key].role == role]
                if keys:
                    outputs.update(zip(keys, fixed.act([turns[key] for key in keys])))
            if trained:
                outputs.update(self._generate(trained, turns, open_calls, sequences, seed, group_size, group_keys))
            for i, agent in pending:
                envs[i].step(outputs[(i, agent)])

        records = []
        for b in range(len(questions)):
            row = []
            for g in range(group_size):
                env = envs[b * group_size + g]
                while env.agents:
                    env.step(None)
                row.append(env.record)
            records.append(row)
        # Canonical order: by question, then trajectory, then call start (the sort is stable), so
        # the order does not depend on how trajectories interleaved in the batch.
        sequences.sort(key=lambda s: (s.group, s.trajectory))
        return TeamBatch(list(questions), group_size, sequences, records)

    def _generate(self, keys, turns, open_calls, sequences, seed, group_size, group_keys) -> dict:
        prompts, seeds, counts, calls = [], [], [], []
        for i, agent in keys:
            turn = turns[(i, agent)]
            b, g = divmod(i, group_size)
            call = open_calls.get((i, turn.call_id))
            if call is None:
                sequence = CallSequence(b, g, turn.role, agent, turn.call_id, 0)
                sequence.extend(prompt_ids(self.tokenizer, turn.messages), generated=False)
                call = _OpenCall(sequence, len(turn.messages), [])
                open_calls[(i, turn.call_id)] = call
            else:
                history = list(turn.messages[: call.num_messages])
                if turn.messages[call.num_messages]["role"] != "assistant":
                    raise RuntimeError(f"{turn.call_id}: the history does not continue the previous turn")
                new_messages = turn.messages[call.num_messages + 1 :]
                continuation = turn_continuation_ids(self.tokenizer, call.last_generated, new_messages, history)
                call.sequence.extend(continuation, generated=False)
                call.num_messages = len(turn.messages)
            prompts.append(list(call.sequence.input_ids))
            seeds.append(_call_seed(seed, group_keys[b], g, turn.call_id, call.sequence.turns))
            counts.append(turn.num_candidates)
            calls.append(call)

        results = self.policy.generate(prompts, counts, seeds)
        outputs = {}
        for key, prompt, call, candidates in zip(keys, prompts, calls, results):
            texts = [self.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in candidates]
            outputs[key] = AgentOutput(
                texts, input_tokens=len(prompt), output_tokens=sum(len(c.token_ids) for c in candidates)
            )
            sequence = call.sequence
            if len(candidates) == 1:
                sequence.extend(candidates[0].token_ids, True, candidates[0].logprobs)
                sequence.turns += 1
                sequence.finish_reasons.append(candidates[0].finish_reason)
                call.last_generated = list(candidates[0].token_ids)
                if sequence.turns == 1:
                    sequences.append(sequence)
            else:
                for j, candidate in enumerate(candidates):
                    branch = CallSequence(
                        sequence.group, sequence.trajectory, sequence.role, sequence.agent, sequence.call_id, j
                    )
                    branch.extend(prompt, generated=False)
                    branch.extend(candidate.token_ids, True, candidate.logprobs)
                    branch.turns = 1
                    branch.finish_reasons.append(candidate.finish_reason)
                    sequences.append(branch)
        return outputs
