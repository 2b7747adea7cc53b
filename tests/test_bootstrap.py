import math

import numpy as np
import pytest
from scipy import stats

from llm_utility.report import bootstrap
from llm_utility.report.bootstrap import Effect, mean_interval, paired_difference, verdict

RNG = np.random.default_rng(7)
# Per-query has_answer of two contexts: 0/1 values, as the findings use them.
BASE = RNG.integers(0, 2, 60).astype(float)


def test_identical_columns_are_inconclusive():
    e = paired_difference(BASE, BASE.copy(), n_resamples=500, seed=1)
    assert (e.effect, e.lo, e.hi, e.n) == (0.0, 0.0, 0.0, 60)
    assert e.lo <= 0 <= e.hi
    assert verdict(e) == "inconclusive"


def test_unrelated_columns_interval_crosses_zero():
    other = np.roll(BASE, 1)  # same mean, paired with noise
    e = paired_difference(BASE, other, n_resamples=1000, seed=1)
    assert e.method == "BCa"
    assert e.lo < 0 < e.hi
    assert verdict(e) == "inconclusive"


def test_always_better_holds_and_reversed():
    better = BASE + RNG.uniform(0.5, 1.5, BASE.size)  # better on every query, by varying amounts
    e = paired_difference(better, BASE, n_resamples=1000, seed=1)
    assert 0 < e.lo < e.effect < e.hi
    assert verdict(e) == "holds"
    assert verdict(e, expected_sign=-1) == "reversed"
    flipped = paired_difference(BASE, better, n_resamples=1000, seed=1)
    assert flipped.effect == pytest.approx(-e.effect)
    assert verdict(flipped) == "reversed"
    assert verdict(flipped, expected_sign=-1) == "holds"


def test_constant_nonzero_difference_is_a_point_interval():
    e = paired_difference(np.ones(10), np.zeros(10), n_resamples=500, seed=1)
    assert (e.effect, e.lo, e.hi, e.method) == (1.0, 1.0, 1.0, "degenerate")
    assert verdict(e) == "holds"


def test_same_seed_same_interval_other_seed_differs():
    a, b = BASE, np.roll(BASE, 3)
    first = paired_difference(a, b, n_resamples=400, seed=11)
    assert paired_difference(a, b, n_resamples=400, seed=11) == first
    assert paired_difference(a, b, n_resamples=400, seed=12) != first


def test_paired_resampling_uses_the_pairs():
    # a - b lies in [1, 1.01] on every query while a and b vary widely: resampling pairs keeps the
    # interval inside [1, 1.01]; resampling a and b independently would not.
    x = RNG.normal(0, 5, 40)
    e = paired_difference(x + 1 + RNG.uniform(0, 0.01, 40), x, n_resamples=500, seed=1)
    assert e.method == "BCa"
    assert 1.0 <= e.lo < e.hi <= 1.01


def test_too_few_queries_give_no_interval():
    none = paired_difference([], [], n_resamples=100, seed=1)
    assert math.isnan(none.effect) and math.isnan(none.lo) and none.n == 0
    assert "no queries" in none.reason and verdict(none) == "inconclusive"
    one = paired_difference([1.0], [0.0], n_resamples=100, seed=1)
    assert one.effect == 1.0 and math.isnan(one.lo) and math.isnan(one.hi) and one.n == 1
    assert "one query" in one.reason and verdict(one) == "inconclusive"


def test_nan_pairs_are_dropped_with_a_reason():
    e = paired_difference([1.0, 2.0, np.nan, 3.0], [0.0, 0.0, 0.0, np.nan], n_resamples=200, seed=1)
    assert e.n == 2 and e.effect == 1.5 and "2 queries with a NaN value dropped" in e.reason


def test_mismatched_columns_raise():
    with pytest.raises(ValueError, match="3 vs 2"):
        paired_difference([1, 2, 3], [1, 2], n_resamples=100, seed=1)


def test_mean_interval():
    e = mean_interval(BASE, n_resamples=1000, seed=3)
    assert e.effect == pytest.approx(BASE.mean())
    assert e.lo < e.effect < e.hi and 0 <= e.lo and e.hi <= 1
    flat = mean_interval(np.full(5, 0.25), n_resamples=100, seed=3)
    assert (flat.lo, flat.hi) == (0.25, 0.25)


def test_bca_nan_falls_back_to_percentile(monkeypatch):
    real = stats.bootstrap

    def bca_undefined(*args, method, **kwargs):
        result = real(*args, method=method, **kwargs)
        if method == "BCa":
            result.confidence_interval = type(result.confidence_interval)(np.nan, np.nan)
        return result

    monkeypatch.setattr(bootstrap.stats, "bootstrap", bca_undefined)
    e = paired_difference(BASE, np.roll(BASE, 1), n_resamples=300, seed=1)
    assert e.method == "percentile" and math.isfinite(e.lo) and math.isfinite(e.hi)


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0.1, 0.3, "holds"),
        (-0.3, -0.1, "reversed"),
        (-0.1, 0.1, "inconclusive"),
        (0.0, 0.2, "inconclusive"),
        (0.0, 0.0, "inconclusive"),
        (math.nan, math.nan, "inconclusive"),
    ],
)
def test_verdict(lo, hi, expected):
    assert verdict(Effect(effect=0.0, lo=lo, hi=hi, n=10)) == expected


def test_verdict_rejects_a_bad_sign():
    with pytest.raises(ValueError, match="expected_sign"):
        verdict(Effect(0.1, 0.05, 0.2, 10), expected_sign=2)


def test_stratified_interval_weights_strata_equally_and_resamples_within_them():
    """The pooled effect is the mean of the strata's means (a big stratum does not outvote a small
    one), and its interval matches a stratified percentile bootstrap written out with numpy:
    resample each stratum's rows with replacement, average each stratum, average the strata."""
    rng = np.random.default_rng(3)
    big, small = rng.normal(0.0, 1.0, 1200), rng.normal(2.0, 1.0, 60)
    e = bootstrap.stratified_interval([(big,), (small,)], np.mean, n_resamples=4000, seed=1, method="percentile")
    assert e.effect == pytest.approx((big.mean() + small.mean()) / 2)
    assert abs(e.effect - np.concatenate([big, small]).mean()) > 0.8  # the query-weighted mean is ~0.1
    draws = np.random.default_rng(99)
    by_hand = [
        (big[draws.integers(0, big.size, big.size)].mean() + small[draws.integers(0, small.size, small.size)].mean())
        / 2
        for _ in range(4000)
    ]
    lo, hi = np.percentile(by_hand, [2.5, 97.5])
    assert e.method == "percentile" and e.n == big.size + small.size
    assert e.lo == pytest.approx(lo, abs=0.03) and e.hi == pytest.approx(hi, abs=0.03)
    # Its width is the small stratum's: the standard error of (mean_1 + mean_2) / 2.
    se = math.sqrt(big.var(ddof=1) / big.size + small.var(ddof=1) / small.size) / 2
    assert (e.hi - e.lo) == pytest.approx(2 * 1.96 * se, rel=0.1)


def test_stratified_interval_keeps_a_querys_columns_together_and_names_what_it_left_out():
    """A ratio statistic over two columns: rows resampled whole (sum over count stays 1 per stratum
    when every row's value equals its count); empty and one-row strata are named."""
    counts = np.array([1.0, 2.0, 3.0, 4.0])
    e = bootstrap.stratified_interval(
        [(counts, counts), (np.array([]), np.array([])), (np.array([2.0]), np.array([2.0]))],
        bootstrap.ratio,
        n_resamples=200,
        seed=1,
    )
    assert (e.effect, e.lo, e.hi) == (1.0, 1.0, 1.0) and e.method == "degenerate"
    assert "1 empty stratum left out" in e.reason and "1 stratum of one query held fixed" in e.reason
    none = bootstrap.stratified_interval([(np.array([]),)], np.mean, n_resamples=200, seed=1)
    assert math.isnan(none.effect) and none.method == "none"
