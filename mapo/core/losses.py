"""Training sequences and the clipped policy-gradient loss (DESIGN.md section 2).

A trajectory trains as ONE packed sequence: the whole dialogue once, every token of
reply t carrying A_t; user, system and padding tokens (and replies whose advantage
is None) carry no loss. `per_turn_sequences` builds the equivalent one-sequence-per-turn
layout (for the benchmark and the equivalence test). A dialogue whose replies were sampled
from contexts of their own (a history window, `Turn.context_ids`) trains each reply as its
own sequence, on exactly those ids (`training_sequences` picks the layout).

Loss = -sum over trained tokens of min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A),
divided by the number of trained tokens of the whole (mini)batch, so micro-batches
summed give exactly the token-mean; plus beta * KL (k3 estimator) to the reference.
`policy_loss` computes it from log-prob tensors and a mask alone; the forward passes that
give them are the update's (mapo.core.update.batch_loss). Nothing here runs a model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mapo.core.types import Trajectory, Turn
from mapo.engines.importance import truncated_importance_weights


@dataclass
class LossSpec:
    """The objective's knobs (the trainer's `loss` config section)."""

    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_beta: float = 0.0
    # truncated importance sampling: a rollout engine (vllm, or hf's generate) samples with its
    # own numerics, a behaviour policy b; each token's loss is weighted by min(pi_old / b, tis_cap)
    tis_cap: float = 2.0

    def __post_init__(self) -> None:
        for name in ("eps_low", "eps_high", "kl_beta"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"loss.{name} must be a finite number >= 0, got {value}")
        if self.eps_low >= 1:
            raise ValueError(f"loss.eps_low must be < 1 (the ratio floor is 1 - eps_low), got {self.eps_low}")
        if not math.isfinite(self.tis_cap) or self.tis_cap < 1:
            raise ValueError(f"loss.tis_cap must be a finite number >= 1, got {self.tis_cap}")


@dataclass
class TrainSequence:
    """Token ids with, per position, whether it is trained, its advantage and its old log-prob."""

    input_ids: list[int]
    trained: list[bool]
    advantages: list[float]
    old_logprobs: list[float]
    # the sampler's log-probs (the rollout engine's: vllm's, generate's); old_logprobs
    # are then the trainer's own, and the loss is importance-weighted by min(old / behaviour, cap)
    behaviour_logprobs: list[float] | None = None

    @property
    def n_trained(self) -> int:
        return sum(self.trained)


def check_reply_ids(trajectory: Trajectory) -> None:
    """Every turn's sampled ids sit verbatim at their recorded place in the dialogue's ids (or follow
    the turn's own context)."""
    for turn in trajectory.turns:
        if turn.context_ids is not None:
            placed = len(turn.context_ids) == turn.prompt_length
        else:
            start, stop = turn.prompt_length, turn.prompt_length + len(turn.response_ids)
            placed = trajectory.token_ids[start:stop] == turn.response_ids
        if not placed or len(turn.old_logprobs) != len(turn.response_ids):
            raise AssertionError(
                f"trajectory {trajectory.scenario_id}#{trajectory.sample_index}, turn {turn.index}: "
                "the trained ids are not the sampled ids"
            )


def _sequence(trajectory: Trajectory, advantages: Sequence[float | None], turns: Sequence[int]) -> TrainSequence:
    """The dialogue's ids up to the end of the last of `turns`, those turns' replies trained."""
    last = trajectory.turns[turns[-1]]
    length = last.prompt_length + len(last.response_ids)
    seq = TrainSequence(trajectory.token_ids[:length], [False] * length, [0.0] * length, [0.0] * length)
    for k in turns:
        turn = trajectory.turns[k]
        for j, logprob in enumerate(turn.old_logprobs):
            p = turn.prompt_length + j
            seq.trained[p] = True
            seq.advantages[p] = float(advantages[k])
            seq.old_logprobs[p] = float(logprob)
    return seq


def _trained_turns(trajectory: Trajectory, advantages: Sequence[float | None]) -> list[int]:
    if len(advantages) != len(trajectory.turns):
        raise ValueError(
            f"trajectory {trajectory.scenario_id}#{trajectory.sample_index}: {len(advantages)} advantages "
            f"for {len(trajectory.turns)} turns"
        )
    check_reply_ids(trajectory)
    return [k for k, a in enumerate(advantages) if a is not None and trajectory.turns[k].response_ids]


def packed_sequence(trajectory: Trajectory, advantages: Sequence[float | None]) -> TrainSequence | None:
    """The whole dialogue as one sequence (cut after the last trained reply); None if nothing trains."""
    turns = _trained_turns(trajectory, advantages)
    if any(trajectory.turns[k].context_ids is not None for k in turns):
        raise ValueError(f"trajectory {trajectory.scenario_id}#{trajectory.sample_index}: its replies were sampled "
                         "from contexts of their own (a history window) and cannot be packed; use training_sequences")
    return _sequence(trajectory, advantages, turns) if turns else None


def _own_context_sequence(turn: Turn, advantage: float) -> TrainSequence:
    """One reply after the context it was sampled from, the reply trained."""
    context, n = list(turn.context_ids or []), len(turn.response_ids)
    return TrainSequence(context + turn.response_ids, [False] * len(context) + [True] * n,
                         [0.0] * len(context) + [float(advantage)] * n, [0.0] * len(context) + [float(x) for x in turn.old_logprobs])


def training_sequences(trajectory: Trajectory, advantages: Sequence[float | None]) -> list[TrainSequence]:
    """What a trajectory trains as: one packed sequence, or one per trained reply when the replies
    had contexts of their own."""
    turns = _trained_turns(trajectory, advantages)
    if any(trajectory.turns[k].context_ids is not None for k in turns):
        return [_own_context_sequence(trajectory.turns[k], float(advantages[k])) for k in turns]  # type: ignore[arg-type]
    return [_sequence(trajectory, advantages, turns)] if turns else []


def per_turn_sequences(trajectory: Trajectory, advantages: Sequence[float | None]) -> list[TrainSequence]:
    """One sequence per trained turn: the dialogue up to that reply, only that reply trained."""
    return [_sequence(trajectory, advantages, [k]) for k in _trained_turns(trajectory, advantages)]


@dataclass
class Batch:
    """Right-padded tensors [B, L] of a list of TrainSequences."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    trained: torch.Tensor  # bool
    advantages: torch.Tensor
    old_logprobs: torch.Tensor
    behaviour_logprobs: torch.Tensor  # = old_logprobs for sequences sampled by the trainer's model

    def to(self, device: torch.device) -> Batch:
        """The same batch on `device` (itself when already there)."""
        return Batch(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))


def collate(sequences: Sequence[TrainSequence], pad_id: int) -> Batch:
    width = max(len(s.input_ids) for s in sequences)
    shape = (len(sequences), width)
    batch = Batch(
        input_ids=torch.full(shape, pad_id, dtype=torch.long),
        attention_mask=torch.zeros(shape, dtype=torch.long),
        trained=torch.zeros(shape, dtype=torch.bool),
        advantages=torch.zeros(shape, dtype=torch.float32),
        old_logprobs=torch.zeros(shape, dtype=torch.float32),
        behaviour_logprobs=torch.zeros(shape, dtype=torch.float32),
    )
    for row, s in enumerate(sequences):
        n = len(s.input_ids)
        batch.input_ids[row, :n] = torch.tensor(s.input_ids, dtype=torch.long)
        batch.attention_mask[row, :n] = 1
        batch.trained[row, :n] = torch.tensor(s.trained, dtype=torch.bool)
        batch.advantages[row, :n] = torch.tensor(s.advantages, dtype=torch.float32)
        batch.old_logprobs[row, :n] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        behaviour = s.old_logprobs if s.behaviour_logprobs is None else s.behaviour_logprobs
        batch.behaviour_logprobs[row, :n] = torch.tensor(behaviour, dtype=torch.float32)
    return batch


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token loss -min(rho A, clip(rho) A) and whether the clipped branch was taken."""
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate exp(d) - d - 1 with d = ref - logp (>= 0, unbiased)."""
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


@dataclass
class LossTerms:
    """One micro-batch's contribution (already divided by the batch's trained-token count)."""

    loss: torch.Tensor
    sums: dict[str, float]  # token sums of pg_loss, clipped, kl, kl_old, entropy, ratio
    # with importance weighting: (pi_old, behaviour) log-probs of the trained tokens, for the TIS statistics
    old_and_behaviour: tuple[np.ndarray, np.ndarray] | None = None


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    spec: LossSpec,
    total_tokens: int,
    behaviour_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> LossTerms:
    """The clipped-surrogate loss of one micro-batch from its log-probs, normalised by `total_tokens`
    (the trained tokens of the whole batch, so micro-batches sum to the token-mean).

    Every tensor has the shape of `mask` (a bool tensor, True at the trained tokens); only those
    positions are read, selected before any arithmetic, so values elsewhere never enter the graph.
    `logprobs` (pi_theta, with gradient) and `old_logprobs` (pi_old) are log-probs of the sampled
    ids under the distribution the sampler drew from (temperature, nucleus: mapo.nucleus); a token
    outside a nucleus (-inf in either) trains nothing.

    `behaviour_logprobs`: the sampler's own, when it was not the trainer's model (mapo.engines.importance):
    each token's loss is weighted by min(pi_old / behaviour, spec.tis_cap), a constant.
    `ref_logprobs`: the reference policy's, needed when spec.kl_beta > 0 (the k3 KL penalty).
    `entropy`: per-token entropies, summed for logging only.
    """
    if total_tokens <= 0:
        raise ValueError(f"total_tokens must be > 0, got {total_tokens}")
    if spec.kl_beta > 0 and ref_logprobs is None:
        raise ValueError(f"loss.kl_beta={spec.kl_beta} needs the reference policy's log-probs (ref_logprobs)")
    logp_t = logprobs[mask]
    old = old_logprobs[mask].to(logp_t.dtype)
    adv = advantages[mask].to(logp_t.dtype)
    old_and_behaviour = None
    if behaviour_logprobs is not None:
        behaviour = behaviour_logprobs[mask]
        old_and_behaviour = (old.detach().cpu().double().numpy(), behaviour.detach().cpu().double().numpy())
    # finite stand-ins (ratio 1) for ids outside a nucleus keep the arithmetic and its gradient finite
    inside = torch.isfinite(logp_t) & torch.isfinite(old)
    if not bool(inside.all()):
        logp_t = torch.where(inside, logp_t, torch.zeros_like(logp_t))
        old = torch.where(inside, old, torch.zeros_like(old))
    per_token, clipped = clipped_surrogate(logp_t, old, adv, spec.eps_low, spec.eps_high)
    per_token = per_token * inside
    if old_and_behaviour is not None:
        weights = truncated_importance_weights(*old_and_behaviour, cap=spec.tis_cap)
        per_token = per_token * torch.as_tensor(weights, dtype=per_token.dtype, device=per_token.device)
    pg_sum = per_token.sum()
    loss_sum = pg_sum
    kl_sum = 0.0
    if spec.kl_beta > 0:
        kl = kl_k3(logp_t, ref_logprobs[mask].detach().to(logp_t.dtype))
        loss_sum = loss_sum + spec.kl_beta * kl.sum()
        kl_sum = float(kl.detach().sum())
    with torch.no_grad():
        sums = {
            "pg_loss": float(pg_sum),
            "clipped": float(clipped.sum()),
            "kl": kl_sum,
            "kl_old": float(kl_k3(logp_t, old).sum()),
            "entropy": float(entropy[mask].sum()) if entropy is not None else 0.0,
            "ratio": float(torch.exp(logp_t - old).sum()),
        }
    return LossTerms(loss_sum / total_tokens, sums, old_and_behaviour)
