"""The update step: the optimizer and the clipped policy-gradient update on packed sequences.

The last step of the train step's data flow (rollout -> mapo.core.rewards -> mapo.core.advantages ->
mapo.core.losses -> here): the model's forward passes over micro-batches, the loss on their
log-probs (`mapo.core.losses.policy_loss`), gradient accumulation and the optimizer step.
Shared by the trainer, the speed benchmarks and the GPU checks, so every one of them
trains with the same optimizer settings and the same update.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import torch

from mapo.config import OptimSpec
from mapo.core.losses import Batch, LossSpec, LossTerms, TrainSequence, collate, policy_loss
from mapo.engines.importance import mismatch_stats
from mapo.policy import Policy
from mapo.prompt_sharing import fed_tokens
from mapo.runtime import release_freed_memory

log = logging.getLogger(__name__)


def make_optimizer(policy: Policy, optim: OptimSpec) -> torch.optim.Optimizer:
    """AdamW over the policy's trainable parameters with the config's lr, betas and weight decay."""
    return torch.optim.AdamW(
        policy.trainable_parameters(),
        lr=optim.lr,
        betas=tuple(optim.betas),
        weight_decay=optim.weight_decay,
    )


def feed_order(sequences: Sequence[TrainSequence], share_prompts: bool = False) -> list[int]:
    """The order the log-probs feed `sequences` in: by their ids when prompts are shared (equal and
    like prompts side by side, mapo.prompt_sharing), else by length (the least padding)."""
    if share_prompts:
        return sorted(range(len(sequences)), key=lambda i: sequences[i].input_ids)
    return sorted(range(len(sequences)), key=lambda i: len(sequences[i].input_ids))


def micro_batches(
    sequences: Sequence[TrainSequence], token_budget: int, share_prompts: bool = False
) -> list[list[TrainSequence]]:
    """Consecutive chunks whose fed tokens (padded; each shared prompt counted once with
    `share_prompts`, mapo.prompt_sharing.fed_tokens) stay within `token_budget` (>= 1 sequence)."""
    chunks: list[list[TrainSequence]] = []
    firsts: list[list[int | None]] = []  # each chunk's first trained positions, computed once a sequence
    for seq in sequences:
        first = seq.trained.index(True) if any(seq.trained) else None
        if chunks and fed_tokens([*(s.input_ids for s in chunks[-1]), seq.input_ids], [*firsts[-1], first],
                                 share_prompts) <= token_budget:
            chunks[-1].append(seq)
            firsts[-1].append(first)
        else:
            chunks.append([seq])
            firsts.append([first])
    return chunks


def step_if_finite(
    optimizer: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter], max_grad_norm: float, loss_value: float
) -> float | None:
    """Clip the accumulated gradient and take the optimizer step; returns the pre-clip norm, or None
    (gradient dropped, weights untouched) when the loss or the norm is not finite: a NaN never
    reaches the model. Shared by the RL update and SFT (mapo.sft.trainer)."""
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        log.warning("skipped an update: loss %s, gradient norm %s (not finite)", loss_value, grad_norm)
        return None
    optimizer.step()
    return grad_norm


def update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    sequences: Sequence[TrainSequence],
    optim: OptimSpec,
    loss_spec: LossSpec,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    auxiliary: Callable[[], torch.Tensor] | None = None,
    off_policy: bool = False,
    top_p: float = 1.0,
) -> dict[str, float]:
    """`optim.ppo_epochs` passes over the sequences in `optim.minibatches` optimizer steps each.

    `auxiliary`, if given, is called once per optimizer step and its loss added to the
    step's (RAPO self-distillation, mapo.methods.rapo).

    `off_policy`: the sequences' old log-probs are a rollout engine's (its behaviour policy,
    not this forward pass; the trainer sets it for every engine, `hf` included): pi_old
    becomes the model's own log-prob of the sampled ids and every token's loss is weighted
    by the truncated importance weight (mapo.engines.importance); the step's `tis_*`
    statistics are returned. With one optimizer step per update, pi_old is
    the forward pass's own (detached) log-prob; with more, one no-grad pass computes it first.

    `temperature` and `top_p` must be the ones the sequences were sampled with (the trainer passes
    its rollout spec's): pi_old and pi_theta are probabilities of that distribution (mapo.nucleus).

    Per optimizer step the loss is the token-mean over the minibatch's trained tokens
    (micro-batches accumulate gradients, each divided by that same count). A step
    whose loss or gradient is not finite is skipped, never applied.
    """
    params = policy.trainable_parameters()
    totals: Counter[str] = Counter()
    grad_norms: list[float] = []
    skipped = 0
    importance = None
    if off_policy:
        one_step = optim.ppo_epochs == 1 and min(optim.minibatches, len(sequences)) <= 1
        importance = "current" if one_step else "given"
        if not one_step:
            sequences = with_trainer_logprobs(policy, sequences, optim.micro_batch_tokens, temperature, top_p)
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    policy.model.train()
    for epoch in range(optim.ppo_epochs):
        order = rng.permutation(len(sequences)) if rng is not None and optim.minibatches > 1 else range(len(sequences))
        shuffled = [sequences[i] for i in order]
        for minibatch in np.array_split(np.arange(len(shuffled)), max(1, min(optim.minibatches, len(shuffled)))):
            picked = [shuffled[i] for i in minibatch]
            chosen = [picked[i] for i in feed_order(picked, policy.share_prompts)]
            n_tokens = sum(s.n_trained for s in chosen)
            if n_tokens == 0:
                continue
            optimizer.zero_grad(set_to_none=True)
            loss_value = 0.0
            for chunk in micro_batches(chosen, optim.micro_batch_tokens, policy.share_prompts):
                terms = batch_loss(
                    policy, collate(chunk, policy.pad_id), loss_spec, n_tokens, temperature, importance, top_p
                )
                if epoch == 0 and terms.old_and_behaviour is not None:
                    pairs.append(terms.old_and_behaviour)
                terms.loss.backward()
                loss_value += float(terms.loss.detach())
                totals.update(terms.sums)
            if auxiliary is not None:
                extra = auxiliary()
                extra.backward()
                loss_value += float(extra.detach())
            totals["tokens"] += n_tokens
            grad_norm = step_if_finite(optimizer, params, optim.max_grad_norm, loss_value)
            if grad_norm is None:
                skipped += 1
                continue
            grad_norms.append(grad_norm)
            totals["loss"] += loss_value
            totals["updates"] += 1
    policy.model.eval()
    optimizer.zero_grad(set_to_none=True)
    release_freed_memory()  # the micro-batches' activations, freed but kept by the heap
    tokens = totals["tokens"]
    per_token = {k: totals[k] / tokens if tokens else 0.0 for k in ("pg_loss", "kl", "kl_old", "entropy", "ratio")}
    mismatch = {}
    if pairs:
        old, behaviour = (np.concatenate(side) for side in zip(*pairs))
        mismatch = mismatch_stats(old, behaviour, loss_spec.tis_cap).as_metrics()
    return {
        **mismatch,
        "loss": totals["loss"] / totals["updates"] if totals["updates"] else 0.0,
        "pg_loss": per_token["pg_loss"],
        "kl": per_token["kl"],
        "kl_old": per_token["kl_old"],
        "entropy": per_token["entropy"],
        "ratio_mean": per_token["ratio"],
        "clip_fraction": totals["clipped"] / tokens if tokens else 0.0,
        "grad_norm": float(np.mean(grad_norms)) if grad_norms else 0.0,
        "grad_norm_max": max(grad_norms, default=0.0),
        "optimizer_steps": float(totals["updates"]),
        "skipped_updates": float(skipped),
        "trained_tokens": float(tokens),
    }


def batch_loss(
    policy: Policy,
    batch: Batch,
    spec: LossSpec,
    total_tokens: int,
    temperature: float = 1.0,
    importance: str | None = None,
    top_p: float = 1.0,
) -> LossTerms:
    """One micro-batch's loss (`mapo.core.losses.policy_loss`) from the policy's forward pass over it.

    `importance` corrects for a sampler that is not the trainer's model (mapo.engines.importance):
    "current" takes pi_old as the current policy (exact in the first optimizer step of an
    update, before any weight changed), "given" takes it from `batch.old_logprobs`; both weight
    each token by min(pi_old / behaviour, spec.tis_cap). With spec.kl_beta > 0 a second,
    no-grad pass gives the reference policy's log-probs.

    `temperature` and `top_p` are the sampler's: pi_theta and pi_old are probabilities of the
    distribution it drew from (mapo.nucleus).
    """
    batch = batch.to(policy.device)
    logp, entropy = policy.token_logprobs(
        batch.input_ids, batch.attention_mask, batch.trained, temperature=temperature, with_entropy=True, top_p=top_p
    )
    ref = None
    if spec.kl_beta > 0:
        with torch.no_grad(), policy.reference():
            ref, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask, batch.trained, temperature)
    columns = torch.nonzero(batch.trained.any(dim=0)).squeeze(-1)  # the positions token_logprobs returns
    old = logp.detach() if importance == "current" else batch.old_logprobs[:, columns]
    behaviour = batch.behaviour_logprobs[:, columns] if importance is not None else None
    return policy_loss(
        logp, old, batch.advantages[:, columns], batch.trained[:, columns], spec, total_tokens, behaviour, ref, entropy
    )


def with_trainer_logprobs(
    policy: Policy, sequences: Sequence[TrainSequence], token_budget: int, temperature: float, top_p: float = 1.0
) -> list[TrainSequence]:
    """The sequences with the model's own log-probs as old_logprobs and the sampler's kept as behaviour
    (-inf where top_p < 1 leaves a sampled id outside the model's nucleus)."""
    out: dict[int, TrainSequence] = {}
    policy.model.eval()
    # chunked in the update's own order so its first step sees the same batch shapes
    order = feed_order(sequences, policy.share_prompts)
    with torch.no_grad():
        for chunk in micro_batches([sequences[i] for i in order], token_budget, policy.share_prompts):
            batch = collate(chunk, policy.pad_id)
            logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask, batch.trained, temperature, top_p=top_p)
            positions = torch.nonzero(batch.trained.any(dim=0)).squeeze(-1).tolist()
            for row, seq in enumerate(chunk):
                old = [0.0] * len(seq.input_ids)
                for column, position in enumerate(positions):
                    if position < len(seq.input_ids) and seq.trained[position]:
                        old[position] = float(logp[row, column])
                out[order[len(out)]] = dataclasses.replace(seq, old_logprobs=old, behaviour_logprobs=list(seq.old_logprobs))
    return [out[i] for i in range(len(sequences))]
