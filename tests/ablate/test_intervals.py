"""The study's statistics with known inputs: exact t quantiles, interval coverage, the cluster
bootstrap against a planted difference, pairing by dialogue and missing values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mapo.intervals import binomial_cdf, clopper_pearson, t_two_sided_cdf
from mapo.lab.ablate import AblationPlan, cluster_bootstrap, paired_dialogue_rows, t_interval, t_quantile, training_metrics


def test_t_quantiles_match_the_published_table():
    # two-sided 95 %: Student's table (df 1, 2, 4, 9, 30) and the normal limit
    for df, expected in ((1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (30, 2.042), (1000, 1.962)):
        assert t_quantile(0.95, df) == pytest.approx(expected, abs=5e-4)
    assert t_quantile(0.99, 4) == pytest.approx(4.604, abs=5e-4)
    for t in (0.1, 1.0, 3.0):  # df 2 has a closed form: P(|T| <= t) = t / sqrt(2 + t^2)
        assert t_two_sided_cdf(t, 2) == pytest.approx(t / math.sqrt(2 + t * t), rel=1e-12)
    with pytest.raises(ValueError, match="positive integer"):
        t_two_sided_cdf(1.0, 0)
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
        t_quantile(1.0, 3)


def test_the_t_interval_over_five_seeds_covers_the_true_mean_95_percent_of_the_time():
    rng = np.random.default_rng(11)
    true_mean, trials = 3.0, 4000
    covered = 0
    for _ in range(trials):
        found = t_interval(list(rng.normal(true_mean, 2.0, size=5)))
        covered += found["low"] <= true_mean <= found["high"]
    assert 0.94 <= covered / trials <= 0.96  # with the normal 1.96 instead of t(4) it would be about 0.88


def test_the_t_interval_leaves_out_missing_values_and_needs_two():
    found = t_interval([1.0, None, 2.0, float("nan"), 3.0])
    assert found["n"] == 3 and found["mean"] == 2.0 and found["std"] == 1.0
    assert found["low"] == pytest.approx(2.0 - 4.302652729749464 / math.sqrt(3))
    one = t_interval([5.0, None])
    assert one["mean"] == 5.0 and one["low"] is None and one["high"] is None
    assert t_interval([])["mean"] is None


def test_clopper_pearson_matches_closed_forms_and_published_values():
    # k = 0 and k = n have closed forms: (0, 1 - (α/2)^(1/n)) and ((α/2)^(1/n), 1)
    assert clopper_pearson(0, 10) == (0.0, pytest.approx(1 - 0.025 ** 0.1, abs=1e-12))
    assert clopper_pearson(10, 10) == (pytest.approx(0.025 ** 0.1, abs=1e-12), 1.0)
    # beta quantiles (scipy.stats.beta.ppf(0.025, k, n-k+1), ppf(0.975, k+1, n-k)), e.g. 5 of 10: 0.1871-0.8129
    for k, n, low, high in ((5, 10, 0.18708602844739855, 0.8129139715526015),
                            (5, 11, 0.16748809406371123, 0.7662064023406547),
                            (37, 100, 0.2755665796145515, 0.47235164055168316)):
        assert clopper_pearson(k, n) == (pytest.approx(low, abs=1e-9), pytest.approx(high, abs=1e-9))
    assert clopper_pearson(0, 0) == (None, None)
    with pytest.raises(ValueError, match="successes <= trials"):
        clopper_pearson(4, 3)


def test_clopper_pearson_covers_at_least_the_level():
    """Exact means conservative: for every p the coverage is at least 95 % (here n = 12, the size of a
    small rating study), computed exactly from the binomial probabilities, not simulated."""
    n = 12
    bounds = [clopper_pearson(k, n) for k in range(n + 1)]
    for p in np.linspace(0.01, 0.99, 99):
        coverage = sum(binomial_cdf(k, n, p) - binomial_cdf(k - 1, n, p)
                       for k, (low, high) in enumerate(bounds) if low <= p <= high)
        assert coverage >= 0.95 - 1e-9, (p, coverage)
    assert binomial_cdf(3, 10, 0.5) == pytest.approx(176 / 1024)


def _clusters(rng, planted, seeds=5, dialogues=24, between=0.5, within=1.0):
    return [list(planted + rng.normal(0, between) + rng.normal(0, within, size=dialogues)) for _ in range(seeds)]


def test_the_cluster_bootstrap_finds_a_planted_difference_and_is_deterministic():
    rng = np.random.default_rng(3)
    planted = _clusters(rng, 2.0)
    low, high = cluster_bootstrap(planted)
    assert 0 < low < 2.0 < high
    assert cluster_bootstrap(planted) == (low, high)  # seeded: the same input, the same interval
    null_low, null_high = cluster_bootstrap(_clusters(rng, 0.0))
    assert null_low < 0 < null_high


def test_the_cluster_bootstrap_keeps_the_spread_between_seeds():
    # each seed's dialogues agree with each other but the seeds disagree: a per-dialogue interval
    # would claim a precise mean; resampling seeds first does not
    rng = np.random.default_rng(5)
    clusters = [list(offset + rng.normal(0, 0.1, size=24)) for offset in (6.0, -4.0, 3.0, -5.0, 1.0)]
    pooled = np.concatenate([np.asarray(c) for c in clusters])
    naive = 2 * 1.98 * pooled.std(ddof=1) / math.sqrt(pooled.size)
    low, high = cluster_bootstrap(clusters)
    assert high - low > 3 * naive and low < 0 < high


def test_the_cluster_bootstrap_needs_two_seeds_with_values():
    assert cluster_bootstrap([[1.0, 2.0, 3.0]]) == (None, None)
    assert cluster_bootstrap([[1.0, 2.0], [None, float("nan")], []]) == (None, None)
    low, high = cluster_bootstrap([[1.0, None, 2.0], [2.0, 3.0]])
    assert 1.0 <= low <= high <= 3.0


def test_pairing_by_dialogue_recovers_a_planted_difference_and_skips_what_is_missing():
    rng = np.random.default_rng(8)
    plan = AblationPlan(variants=["mapo-idr", "grpo-idr"], seeds=[0, 1, 2, 3, 4])
    per_dialogue = {}
    for seed in plan.seeds:
        mapo = {f"card-{k}#{s}": float(rng.normal(30, 5)) for k in range(12) for s in range(2)}
        grpo = {key: value - 3.0 + float(rng.normal(0, 1)) for key, value in mapo.items()}
        per_dialogue[f"mapo-idr-s{seed}"] = {k: {"epmq": v, "hack_echo": 0.1} for k, v in mapo.items()}
        per_dialogue[f"grpo-idr-s{seed}"] = {k: {"epmq": v, "hack_echo": 0.3} for k, v in grpo.items()}
    per_dialogue["grpo-idr-s0"].pop("card-0#0")  # a dialogue the variant lacks
    per_dialogue["grpo-idr-s1"]["card-1#1"]["epmq"] = None  # a dialogue without a score
    del per_dialogue["grpo-idr-s4"]  # a seed not run yet
    metrics = [("epmq", "EPM-Q"), ("hack_echo", "echo")]
    (row,) = paired_dialogue_rows(per_dialogue, plan, metrics=metrics)
    epmq = row["epmq"]
    assert epmq["n"] == 4 * 24 - 2 and epmq["seeds"] == 4
    assert epmq["mean"] == pytest.approx(-3.0, abs=0.3) and epmq["low"] < -3.0 < epmq["high"] < 0
    assert epmq["worse"] > 0.9
    echo = row["hack_echo"]  # lower is better: more echo is worse
    assert echo["mean"] == pytest.approx(0.2) and echo["worse"] == 1.0 and echo["n"] == 4 * 24 - 1


def test_training_metrics_give_the_flatness_of_the_last_steps_and_the_share_cut():
    rows = [{"step": k + 1, "reward_mean": r, "grad_norm": 1.0, "truncated_fraction": c}
            for k, (r, c) in enumerate(zip([0.0, 1.0, 2.0, 3.0, 3.5, 3.5, 4.0, 3.0, 3.5], [0.1, 0.2] * 4 + [0.3]))]
    got = training_metrics(rows)
    assert got["reward_flatness"] == pytest.approx(3.5 - 10.0 / 3)  # last 3 (4, 3, 3.5) minus the 3 before
    assert got["truncated_pct"] == pytest.approx(100 * (0.1 * 4 + 0.2 * 4 + 0.3) / 9)
    assert training_metrics(rows[:5])["reward_flatness"] is None  # under 6 steps
    assert training_metrics([{"step": 1, "reward_mean": 0.0}])["truncated_pct"] is None
