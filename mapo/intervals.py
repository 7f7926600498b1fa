"""Confidence intervals (pure numpy, no scipy): the ablation's paired differences, the blind
ratings' shares and the knowledge probe's AUC.

- `t_interval`: mean ± t(level, n - 1) · s / √n over independent values (the seeds). Student's
  t quantile is exact: the CDF of t with integer degrees of freedom is a finite trigonometric
  series (Abramowitz & Stegun 26.7.3-4), inverted by bisection.
- `clopper_pearson`: the exact binomial interval for a proportion (k successes in n trials): the
  p whose upper / lower binomial tail equals (1 - level) / 2, found by bisection on the exact
  tail sum (log-space terms, so n in the thousands is fine). Never narrower than the level says.
- `cluster_bootstrap`: a percentile interval for the pooled mean of clustered values (dialogues
  within seeds): each resample draws the seeds with replacement, then the dialogues of every
  drawn seed with replacement, so the spread between seeds is kept, not averaged away as a plain
  per-dialogue interval would. Seeded: the same input gives the same interval.
- `two_sample_bootstrap`: a percentile interval for any statistic of two independent samples
  (an AUC of true against false items): each resample redraws each sample from itself, at its
  own size, so the two stay as many as they were. Seeded likewise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

LEVEL = 0.95
RESAMPLES = 4000
BOOTSTRAP_SEED = 0


def _finite(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float)


def t_two_sided_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with `df` (a positive integer) degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 0:  # sin θ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ...), df/2 terms
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= cos2 * (2 * k - 1) / (2 * k)
            total += term
        return sin * total
    if df == 1:
        return 2 * theta / math.pi
    # odd: 2/π (θ + sin θ cos θ (1 + 2/3 cos²θ + 2·4/(3·5) cos⁴θ + ...)), (df - 1)/2 terms
    term, total = 1.0, 1.0
    for k in range(1, (df - 1) // 2):
        term *= cos2 * (2 * k) / (2 * k + 1)
        total += term
    return 2 / math.pi * (theta + sin * math.cos(theta) * total)


@lru_cache(maxsize=256)
def t_quantile(level: float, df: int) -> float:
    """The t with P(|T| <= t) = level (e.g. 0.95 and df = 4: 2.776), by bisection."""
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    high = 1.0
    while t_two_sided_cdf(high, df) < level:
        high *= 2
    low = 0.0
    while high - low > 1e-13 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if t_two_sided_cdf(middle, df) < level else (low, middle)
    return (low + high) / 2


def t_interval(values: Sequence[float | None], level: float = LEVEL) -> dict[str, Any]:
    """Mean, sample std, n and the t interval [low, high] of the finite values (None and NaN left
    out); fewer than two values have no interval (low = high = None)."""
    a = _finite(values)
    found: dict[str, Any] = {"mean": None, "std": None, "n": int(a.size), "low": None, "high": None,
                             "values": list(values)}
    if a.size:
        found["mean"] = float(a.mean())
    if a.size > 1:
        found["std"] = float(a.std(ddof=1))
        half = t_quantile(level, a.size - 1) * found["std"] / math.sqrt(a.size)
        found["low"], found["high"] = found["mean"] - half, found["mean"] + half
    return found


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed exactly (terms in log space)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p) + (n - i) * math.log1p(-p)
            for i in range(k + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(x - top) for x in logs))


def _bisect(f: Any, target: float) -> float:
    """The p in [0, 1] with f(p) = target for an increasing f."""
    low, high = 0.0, 1.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if f(middle) < target else (low, middle)
    return (low + high) / 2


def clopper_pearson(successes: int, trials: int, level: float = LEVEL) -> tuple[float | None, float | None]:
    """The exact (Clopper-Pearson) interval for a binomial proportion; (None, None) without trials.
    E.g. 5 of 10 at 95 %: (0.1871, 0.8129); 0 of 10: (0, 1 - 0.025^(1/10) = 0.3085)."""
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return None, None
    tail = (1 - level) / 2
    # lower: P(X >= k | p) = tail, increasing in p; upper: P(X <= k | p) = tail, decreasing in p
    low = 0.0 if successes == 0 else _bisect(lambda p: 1 - binomial_cdf(successes - 1, trials, p), tail)
    high = 1.0 if successes == trials else _bisect(lambda p: -binomial_cdf(successes, trials, p), -tail)
    return low, high


def cluster_bootstrap(
    clusters: Sequence[Sequence[float | None]],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float | None, float | None]:
    """Percentile interval of the pooled mean (every value weighs the same) under a two-stage
    bootstrap: clusters with replacement, then values within each drawn cluster with replacement.
    Needs at least two non-empty clusters; else (None, None)."""
    kept = [c for c in (_finite(values) for values in clusters) if c.size]
    if len(kept) < 2:
        return None, None
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(kept), size=(resamples, len(kept)))
    sums = np.zeros(resamples)
    counts = np.zeros(resamples)
    for slot in range(len(kept)):  # a cluster drawn twice gets two independent inner resamples
        for index, values in enumerate(kept):
            chosen = picks[:, slot] == index
            drawn = int(chosen.sum())
            if drawn:
                inner = values[rng.integers(0, values.size, size=(drawn, values.size))]
                sums[chosen] += inner.sum(axis=1)
                counts[chosen] += values.size
    return _percentile_interval(sums / counts, level)


def two_sample_bootstrap(
    first: Sequence[float] | np.ndarray,
    second: Sequence[float] | np.ndarray,
    statistic: Callable[[np.ndarray, np.ndarray], float],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float | None, float | None]:
    """Percentile interval of `statistic(first, second)` when each sample is redrawn with
    replacement from itself at its own size; (None, None) when either is empty."""
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if not a.size or not b.size:
        return None, None
    rng = np.random.default_rng(seed)
    values = [statistic(a[rng.integers(0, a.size, a.size)], b[rng.integers(0, b.size, b.size)]) for _ in range(resamples)]
    return _percentile_interval(np.asarray(values), level)


def _percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """The central `level` share of bootstrap `values`."""
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)
