"""Bootstrap confidence intervals over queries, and the verdict a finding reads from one.

Queries are the sampling unit: ``paired_difference`` resamples whole queries, keeping each query's
two values together (a paired bootstrap), and ``mean_interval`` resamples one column. Resampling is
``scipy.stats.bootstrap`` (BCa by default), seeded, so the same inputs and seed give the same
interval. Degenerate inputs never raise and never return a silent NaN interval without a reason:

* no query: effect, lo and hi are NaN (``reason`` says so);
* one query: the effect is its value, lo and hi are NaN (no sampling variation to measure);
* all values (differences) identical, up to rounding: the interval is ``[d, d]`` (every resample
  has mean d);
* BCa undefined on a skewed small sample (scipy returns NaN): the percentile interval is used.

A pair with a NaN on either side (a query where a value does not apply) is dropped and counted in
``reason``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["Effect", "paired_difference", "mean_interval", "verdict"]

# Values per resampling batch: bounds memory at paper scale (thousands of queries x 10^4 resamples).
_BATCH_VALUES = 10_000_000


@dataclass(frozen=True)
class Effect:
    """A mean (or mean difference) over ``n`` queries and its bootstrap confidence interval [lo, hi].

    ``method`` is how the interval was computed (``BCa``, ``percentile``, ``degenerate`` for
    identical values, ``none`` when there is no interval); ``reason`` says why an interval is
    degenerate, missing or computed on fewer queries than given, and is empty otherwise.
    """

    effect: float
    lo: float
    hi: float
    n: int
    method: str = ""
    reason: str = ""


def _as_column(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one value per query (1-D), got shape {arr.shape}")
    return arr


def _interval(
    samples: tuple[np.ndarray, ...],
    statistic,
    n_resamples: int,
    seed: int,
    confidence: float,
    method: str,
    dropped: int,
) -> Effect:
    values = samples[0] - samples[1] if len(samples) == 2 else samples[0]
    n = len(values)
    note = f"{dropped} {'query' if dropped == 1 else 'queries'} with a NaN value dropped" if dropped else ""

    def reason(text: str) -> str:
        return "; ".join(t for t in (text, note) if t)

    if n == 0:
        nan = float("nan")
        return Effect(nan, nan, nan, 0, "none", reason("no queries"))
    point = float(np.mean(values))
    if n == 1:
        return Effect(point, float("nan"), float("nan"), 1, "none", reason("one query: no interval"))
    # Equal up to rounding (x + 1 - x is not exactly 1 everywhere): BCa would divide by ~0.
    if np.ptp(values) <= 1e-12 * max(1.0, float(np.max(np.abs(values)))):
        return Effect(point, point, point, n, "degenerate", reason("all values equal: no sampling variation"))

    batch = max(1, _BATCH_VALUES // n)
    for attempt in dict.fromkeys((method, "percentile")):
        with warnings.catch_warnings():
            # BCa on a small skewed sample warns and returns NaN; the percentile retry covers it.
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            result = stats.bootstrap(
                samples,
                statistic,
                n_resamples=n_resamples,
                batch=batch,
                vectorized=True,
                paired=len(samples) == 2,
                confidence_level=confidence,
                method=attempt,
                rng=np.random.default_rng(seed),
            )
        lo, hi = (float(v) for v in result.confidence_interval)
        if math.isfinite(lo) and math.isfinite(hi):
            return Effect(point, lo, hi, n, attempt, note)
    return Effect(point, float("nan"), float("nan"), n, "none", reason("bootstrap interval undefined"))


def _mean_difference(a, b, axis=-1):
    return np.mean(a - b, axis=axis)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def paired_difference(a, b, n_resamples: int, seed: int, confidence: float = 0.95, method: str = "BCa") -> Effect:
    """Mean of ``a - b`` over queries with a paired bootstrap interval (queries resampled with replacement).

    ``a`` and ``b`` hold one value per query, aligned by position (e.g. has_answer of two contexts).
    ``method`` is scipy's (``BCa``, ``percentile`` or ``basic``).
    """
    a, b = _as_column(a, "a"), _as_column(b, "b")
    if len(a) != len(b):
        raise ValueError(f"paired columns differ in length: {len(a)} vs {len(b)} queries")
    keep = ~(np.isnan(a) | np.isnan(b))
    return _interval((a[keep], b[keep]), _mean_difference, n_resamples, seed, confidence, method, int((~keep).sum()))


def mean_interval(x, n_resamples: int, seed: int, confidence: float = 0.95, method: str = "BCa") -> Effect:
    """Mean of one per-query column with a bootstrap interval (a table cell's interval)."""
    x = _as_column(x, "x")
    keep = ~np.isnan(x)
    return _interval((x[keep],), _mean, n_resamples, seed, confidence, method, int((~keep).sum()))


def verdict(effect: Effect, expected_sign: int = +1) -> str:
    """'holds' when the interval lies entirely on the expected side of 0, 'reversed' when entirely on
    the other side, 'inconclusive' when it contains 0 or is missing (NaN)."""
    if expected_sign not in (1, -1):
        raise ValueError(f"expected_sign must be +1 or -1, got {expected_sign!r}")
    lo, hi = effect.lo, effect.hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "inconclusive"
    if lo > 0:
        side = 1
    elif hi < 0:
        side = -1
    else:
        return "inconclusive"
    return "holds" if side == expected_sign else "reversed"
