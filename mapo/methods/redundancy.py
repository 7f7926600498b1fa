"""COMPEER redundancy reweighting: shrink the reward of a response that repeats the others.

A response that repeats the other responses of its group at the same turn (s_in) or its own
dialogue so far (s_hist) has its reward shrunk (or, for a negative reward, deepened), more so
the longer the responses are. The similarity function is injected (e.g. cosine of sentence
embeddings), so this module needs no model; `mapo.methods.compeer` applies it to rolled-out
groups as the `reward.redundancy` option.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Similarity = Callable[[Sequence[str], Sequence[str]], "np.ndarray | Sequence[Sequence[float]]"]


@dataclass
class TurnRedundancy:
    """Reweighted rewards of one group at one turn, with what went into them (for logging).

    `s_in` / `s_hist` are the mean cosines as measured; the penalty uses them
    floored at 0 (a response unlike the others is simply not redundant).
    """

    rewards: list[float]
    s_in: list[float]
    s_hist: list[float]
    tau: float


def length_coefficient(mean_length: float, a: float = 0.1, b: float = 20.0) -> float:
    """tau = 1 / (1 + exp(-a (L - b))): short responses are barely penalised."""
    z = -a * (mean_length - b)
    return 0.0 if z > 700 else 1.0 / (1.0 + math.exp(z))  # exp overflows past ~709


def _similarities(similarity: Similarity, a: Sequence[str], b: Sequence[str], what: str) -> np.ndarray:
    m = np.asarray(similarity(a, b), dtype=float)
    if m.shape != (len(a), len(b)):
        raise ValueError(f"similarity({what}) returned shape {m.shape}, expected ({len(a)}, {len(b)})")
    if not np.all(np.isfinite(m)) or np.any(np.abs(m) > 1.0 + 1e-6):
        raise ValueError(f"similarity({what}) must return finite cosines in [-1, 1]; got min {m.min()}, max {m.max()}")
    return np.clip(m, -1.0, 1.0)


def redundancy_reweight(
    responses: Sequence[str],
    histories: Sequence[Sequence[str]],
    lengths: Sequence[float],
    rewards: Sequence[float],
    similarity: Similarity,
    a: float = 0.1,
    b: float = 20.0,
) -> TurnRedundancy:
    """COMPEER reweighting of one group's responses at one turn.

    responses[i] is trajectory i's response, histories[i] its dialogue's earlier
    utterances, lengths[i] the response length in tokens, rewards[i] its reward.
    f_i = (1 + tau s_in_i)(1 + tau s_hist_i); r~ = r / f for r >= 0 and r * f for
    r < 0, so redundancy never helps. s_in is 0 for a lone response (N = 1),
    s_hist 0 for an empty history.
    """
    n = len(responses)
    if n == 0:
        raise ValueError("redundancy_reweight: no responses")
    for name, seq in (("histories", histories), ("lengths", lengths), ("rewards", rewards)):
        if len(seq) != n:
            raise ValueError(f"redundancy_reweight: {len(seq)} {name} for {n} responses")
    for i, h in enumerate(histories):
        if isinstance(h, str):
            raise ValueError(f"redundancy_reweight: histories[{i}] is one string; expected a list of utterances")
    r = np.asarray(rewards, dtype=float)
    length = np.asarray(lengths, dtype=float)
    if not np.all(np.isfinite(r)):
        raise ValueError(f"redundancy_reweight: non-finite reward in {list(r)}")
    if not np.all(np.isfinite(length)) or np.any(length < 0):
        raise ValueError(f"redundancy_reweight: lengths must be finite and >= 0, got {list(length)}")
    if not (math.isfinite(a) and a > 0 and math.isfinite(b)):
        raise ValueError(f"redundancy_reweight: need a > 0 and finite b, got a={a!r}, b={b!r}")

    s_in = np.zeros(n)
    if n > 1:
        within = _similarities(similarity, responses, responses, "responses, responses")
        s_in = (within.sum(axis=1) - np.diag(within)) / (n - 1)

    # One call for every history utterance; each response reads its own dialogue's columns.
    flat = [u for h in histories for u in h]
    s_hist = np.zeros(n)
    if flat:
        cross = _similarities(similarity, responses, flat, "responses, histories")
        start = 0
        for i, h in enumerate(histories):
            if h:
                s_hist[i] = cross[i, start : start + len(h)].mean()
            start += len(h)

    tau = length_coefficient(float(length.mean()), a, b)
    factor = (1.0 + tau * np.maximum(s_in, 0.0)) * (1.0 + tau * np.maximum(s_hist, 0.0))
    reweighted = np.where(r >= 0, r / factor, r * factor)
    return TurnRedundancy(
        rewards=[float(x) for x in reweighted],
        s_in=[float(x) for x in s_in],
        s_hist=[float(x) for x in s_hist],
        tau=tau,
    )


@dataclass
class GroupRedundancy:
    """`TurnRedundancy` for a whole group, laid out [trajectory][turn]; `tau` per turn index."""

    rewards: list[list[float]]
    s_in: list[list[float]]
    s_hist: list[list[float]]
    tau: list[float]


def redundancy_reweight_group(
    responses: Sequence[Sequence[str]],
    user_messages: Sequence[Sequence[str]],
    lengths: Sequence[Sequence[float]],
    rewards: Sequence[Sequence[float]],
    similarity: Similarity,
    a: float = 0.1,
    b: float = 20.0,
) -> GroupRedundancy:
    """Reweight a whole group turn by turn; every input is laid out [trajectory][turn].

    At turn t the group is the trajectories that reached t, and a response's
    history is its dialogue before it: u_1, a_1, ..., a_{t-1}, u_t.
    """
    n = len(responses)
    if n == 0:
        raise ValueError("redundancy_reweight_group: empty group")
    for name, seq in (("user_messages", user_messages), ("lengths", lengths), ("rewards", rewards)):
        if len(seq) != n:
            raise ValueError(f"redundancy_reweight_group: {len(seq)} {name} lists for {n} trajectories")
        for i in range(n):
            if len(seq[i]) != len(responses[i]):
                raise ValueError(
                    f"redundancy_reweight_group: trajectory {i} has {len(responses[i])} responses but {len(seq[i])} {name}"
                )
    out = GroupRedundancy([[] for _ in range(n)], [[] for _ in range(n)], [[] for _ in range(n)], [])
    for t in range(max(len(resp) for resp in responses)):
        present = [i for i in range(n) if len(responses[i]) > t]
        histories = [
            [u for k in range(t) for u in (user_messages[i][k], responses[i][k])] + [user_messages[i][t]] for i in present
        ]
        result = redundancy_reweight(
            [responses[i][t] for i in present],
            histories,
            [lengths[i][t] for i in present],
            [rewards[i][t] for i in present],
            similarity,
            a,
            b,
        )
        for k, i in enumerate(present):
            out.rewards[i].append(result.rewards[k])
            out.s_in[i].append(result.s_in[k])
            out.s_hist[i].append(result.s_hist[k])
        out.tau.append(result.tau)
    return out
