"""Token draws from a batch of logits in numpy, with the log-prob the trainer computes."""

from __future__ import annotations

import numpy as np

BLOCK = 256  # ids per block of the two-level sampler


def draw(logits: np.ndarray, temperature: float, top_p: float, uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One token per row of `logits` [m, vocab] and its log-prob under the distribution it was drawn
    from: softmax(logits / temperature), restricted to the nucleus and renormalised when top_p < 1
    (mapo.nucleus states the rule); temperature 0: the argmax, with its log-prob under softmax(logits).
    `uniforms` [m]: one draw from U[0, 1) per row (each row's own generator, so a row's token does not
    depend on the other rows).

    Inverse-CDF sampling in two levels (blocks of BLOCK ids, then ids within the chosen
    block), so no cumulative sum runs over the whole vocabulary: float32 throughout
    except the sums, every row at once.
    """
    m, vocab = logits.shape
    rows = np.arange(m)
    if temperature == 0:  # greedy: the most likely id, with its log-prob under softmax(logits)
        tokens = logits.argmax(axis=1)
        z = logits.astype(np.float64)
        top64 = z.max(axis=1)
        log_total = top64 + np.log(np.exp(z - top64[:, None]).sum(axis=1))
        return tokens, z[rows, tokens] - log_total
    top = logits.max(axis=1, keepdims=True)
    weights = np.subtract(logits, top, dtype=np.float32)
    weights *= np.float32(1.0 / temperature)
    np.exp(weights, out=weights)  # unnormalised probabilities, the largest exactly 1
    if top_p < 1.0:
        weights = _nucleus(weights, top_p)
    pad = -vocab % BLOCK
    padded = np.pad(weights, ((0, 0), (0, pad))) if pad else weights
    blocks = padded.reshape(m, -1, BLOCK)
    ends = np.cumsum(blocks.sum(axis=2, dtype=np.float64), axis=1)
    target = np.asarray(uniforms, dtype=np.float64) * ends[:, -1]
    chosen = np.minimum((ends < target[:, None]).sum(axis=1), ends.shape[1] - 1)
    before = np.where(chosen > 0, ends[rows, np.maximum(chosen - 1, 0)], 0.0)
    inside = np.cumsum(blocks[rows, chosen], axis=1, dtype=np.float64)  # [m, BLOCK]
    j = np.minimum((inside <= (target - before)[:, None]).sum(axis=1), BLOCK - 1)
    tokens = np.minimum(chosen * BLOCK + j, vocab - 1)
    # the log-prob of the distribution drawn from: the tempered softmax, renormalised over the
    # nucleus when top_p < 1 (`ends[:, -1]` sums the weights left after the cut); the trainer's
    # pi_old is the same quantity (mapo.nucleus), so the importance weight compares like with like
    scaled = (logits[rows, tokens] - top[:, 0]).astype(np.float64) / temperature
    return tokens, scaled - np.log(ends[:, -1])


def _nucleus(weights: np.ndarray, top_p: float) -> np.ndarray:
    """Zero every id outside the nucleus of each row (mapo.nucleus.nucleus_mask's rule, in numpy)."""
    ranked = -np.sort(-weights, axis=1).astype(np.float64)
    before = (np.cumsum(ranked, axis=1) - ranked) / ranked.sum(axis=1, keepdims=True)
    kept = (before < top_p).sum(axis=1)  # at least 1: nothing comes before the most likely id
    threshold = ranked[np.arange(len(ranked)), kept - 1].astype(np.float32)
    return np.where(weights >= threshold[:, None], weights, np.float32(0.0))
