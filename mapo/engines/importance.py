"""Truncated importance sampling (TIS) between the rollout engine and the trainer.

An inference engine samples with its own numerics (quantised kernels, another
attention implementation), so its log-prob of a sampled token, log b(y), differs
from the trainer's log pi_old(y) on the same weights. The clipped ratio
pi_theta / pi_old is taken against the trainer's pi_old; the mismatch between
behaviour b and pi_old is corrected per token by the importance weight

    w = min(pi_old(y) / b(y), cap)

applied as a constant factor to the token's surrogate loss. Truncating at `cap`
bounds the variance a rare large ratio would bring (the bias it leaves is small
when the two policies are close, which the logged statistics show).
With top_p < 1 both are nucleus probabilities (mapo.nucleus): an id the engine drew
that lies outside the trainer's nucleus has pi_old(y) = 0, so w = 0 and the token
trains nothing; `outside_nucleus_fraction` counts them.
The `hf` engine is the trainer's model run through `generate` (KV cache, padding, on a
GPU bf16 kernels), so its b is close to pi_old, not always equal: it is corrected the
same way, and on CPU float32 w is 1 to float error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_CAP = 2.0


@dataclass(frozen=True)
class MismatchStats:
    """Behaviour-vs-old statistics over a set of sampled tokens (the trainer logs them every step)."""

    tokens: int
    weight_mean: float  # mean of the truncated weight min(ratio, cap)
    ratio_mean: float  # mean of the untruncated ratio pi_old / b (1 in expectation under b)
    ratio_max: float
    truncated_fraction: float  # share of tokens whose ratio exceeded the cap
    kl_behaviour_old: float  # KL(b || pi_old), k3 estimate on tokens drawn from b (>= 0)
    logprob_abs_diff_mean: float  # mean |log pi_old - log b|: the raw numeric gap
    # share of tokens outside the trainer's top-p nucleus (pi_old = 0, weight 0); the KL and the
    # gap above are over the other tokens
    outside_nucleus_fraction: float = 0.0

    def as_metrics(self, prefix: str = "tis_") -> dict[str, float]:
        return {f"{prefix}{name}": float(value) for name, value in vars(self).items()}


def _check(old_logprobs: np.ndarray, behaviour_logprobs: np.ndarray, cap: float) -> None:
    if old_logprobs.shape != behaviour_logprobs.shape:
        raise ValueError(
            f"importance weights: old log-probs {old_logprobs.shape} and behaviour log-probs "
            f"{behaviour_logprobs.shape} differ in shape"
        )
    if not np.isfinite(cap) or cap < 1.0:
        raise ValueError(f"loss.tis_cap must be a finite number >= 1, got {cap}")
    # pi_old may be 0 (-inf): an id outside the trainer's nucleus; the sampler drew it, so b > 0
    if behaviour_logprobs.size and not (np.isfinite(behaviour_logprobs).all() and (behaviour_logprobs <= 1e-6).all()):
        raise ValueError("importance weights: behaviour log-probs must be finite and <= 0")
    if old_logprobs.size and not ((old_logprobs < np.inf).all() and (old_logprobs <= 1e-6).all()):
        raise ValueError("importance weights: old log-probs must be finite and <= 0, or -inf (an id outside the nucleus)")


def truncated_importance_weights(old_logprobs: np.ndarray, behaviour_logprobs: np.ndarray, cap: float = DEFAULT_CAP) -> np.ndarray:
    """Per-token w = min(exp(old - behaviour), cap), same shape as the inputs (float64)."""
    old = np.asarray(old_logprobs, dtype=np.float64)
    behaviour = np.asarray(behaviour_logprobs, dtype=np.float64)
    _check(old, behaviour, cap)
    # the exponent is capped before exp so a huge gap cannot overflow to inf
    return np.exp(np.minimum(old - behaviour, np.log(cap)))


def mismatch_stats(old_logprobs: np.ndarray, behaviour_logprobs: np.ndarray, cap: float = DEFAULT_CAP) -> MismatchStats:
    """The statistics the trainer logs about w over the given tokens (all zeros for no tokens)."""
    old = np.asarray(old_logprobs, dtype=np.float64).ravel()
    behaviour = np.asarray(behaviour_logprobs, dtype=np.float64).ravel()
    _check(old, behaviour, cap)
    if old.size == 0:
        return MismatchStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    log_ratio = old - behaviour
    ratio = np.exp(np.minimum(log_ratio, 50.0))  # e^50: far beyond any cap, still finite
    inside = np.isfinite(log_ratio)
    gap = log_ratio[inside]
    return MismatchStats(
        tokens=int(old.size),
        weight_mean=float(np.minimum(ratio, cap).mean()),
        ratio_mean=float(ratio.mean()),
        ratio_max=float(ratio.max()),
        truncated_fraction=float((ratio > cap).mean()),
        kl_behaviour_old=float((ratio[inside] - 1.0 - gap).mean()) if gap.size else 0.0,
        logprob_abs_diff_mean=float(np.abs(gap).mean()) if gap.size else 0.0,
        outside_nucleus_fraction=float(1.0 - inside.mean()),
    )
