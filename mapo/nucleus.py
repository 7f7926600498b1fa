"""Top-p (nucleus) sampling's distribution, as the trainer computes it (`rollout.top_p`).

The rule (vLLM's top-p and transformers' agree with it up to ties): sort the
ids by probability; an id is in the nucleus when the probability of the ids ranked
before it is below top_p (so the most likely id always is, and the id that crosses
top_p too); ids as likely as the last one kept are kept as well (a threshold on the
probability, so the set does not depend on how ties are ordered). The policy samples
from softmax(logits / T) restricted to that set and renormalised, so that is the
probability pi_old and pi_theta use: log p(y) - log p(nucleus), and -inf for an id
outside the nucleus (probability 0).
"""

from __future__ import annotations

import torch

ROWS_PER_CHUNK = 256  # rows sorted at once: bounds the sort's memory on a 49k vocabulary


@torch.no_grad()
def nucleus_mask(scaled_logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Bool tensor of `scaled_logits`' shape [..., vocab]: True for the ids in each row's nucleus."""
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    rows = scaled_logits.reshape(-1, scaled_logits.shape[-1])
    thresholds = []
    for chunk in rows.split(ROWS_PER_CHUNK):
        ranked = torch.sort(chunk.double(), dim=-1, descending=True).values
        probs = torch.softmax(ranked, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs
        kept = (before < top_p).sum(dim=-1, keepdim=True)  # >= 1
        thresholds.append(ranked.gather(-1, kept - 1).to(chunk.dtype))
    threshold = torch.cat(thresholds).reshape(*scaled_logits.shape[:-1], 1) if thresholds else scaled_logits[..., :1]
    return scaled_logits >= threshold


def nucleus_logprobs(scaled_logits: torch.Tensor, ids: torch.Tensor, top_p: float) -> torch.Tensor:
    """log p(ids) under softmax(scaled_logits) restricted to the nucleus and renormalised; -inf
    for an id outside it. Differentiable in the logits (the choice of the set is not)."""
    picked = scaled_logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    if top_p >= 1.0:
        return picked - torch.logsumexp(scaled_logits, dim=-1)
    keep = nucleus_mask(scaled_logits.detach(), top_p)
    inside = keep.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    logp = picked - torch.logsumexp(scaled_logits.masked_fill(~keep, float("-inf")), dim=-1)
    return torch.where(inside, logp, torch.full_like(logp, float("-inf")))
