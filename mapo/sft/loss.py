"""Cross-entropy over the assistant tokens of packed dialogues, token-mean over a batch."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mapo.core.losses import Batch, TrainSequence, collate
from mapo.core.update import feed_order, micro_batches
from mapo.policy import Policy


def summed_nll(policy: Policy, batch: Batch) -> torch.Tensor:
    """-sum of log p(token | its prefix) over the batch's trained positions (the replies and their end-of-turn)."""
    logp, _ = policy.token_logprobs(batch.input_ids, batch.attention_mask, batch.trained)
    positions = torch.nonzero(batch.trained.any(dim=0)).squeeze(-1)
    mask = batch.trained[:, positions].to(logp.device)
    return -logp[mask].sum()


@torch.no_grad()
def held_out_loss(policy: Policy, sequences: Sequence[TrainSequence], token_budget: int) -> float:
    """Token-mean cross-entropy of `sequences` (no gradient, eval mode)."""
    policy.model.eval()
    ordered = [sequences[i] for i in feed_order(sequences, policy.share_prompts)]
    total = sum(s.n_trained for s in ordered)
    chunks = micro_batches(ordered, token_budget, policy.share_prompts)
    nll = sum(float(summed_nll(policy, collate(chunk, policy.pad_id))) for chunk in chunks)
    return nll / total if total else float("nan")
