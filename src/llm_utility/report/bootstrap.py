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

__all__ = [
    "Effect",
    "paired_difference",
    "mean_interval",
    "statistic_interval",
    "ratio_interval",
    "stratified_interval",
    "ratio",
    "f1_of_means",
    "f1_of_sums",
    "verdict",
    "scaled",
]

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

    found = _scipy_interval(samples, statistic, n_resamples, seed, confidence, method)
    if found is not None:
        lo, hi, used = found
        return Effect(point, lo, hi, n, used, note)
    return Effect(point, float("nan"), float("nan"), n, "none", reason("bootstrap interval undefined"))


def _scipy_interval(samples, statistic, n_resamples, seed, confidence, method):
    """(lo, hi, method) from ``scipy.stats.bootstrap`` on paired per-query columns, retrying with the
    percentile method where BCa is undefined; None when no finite interval comes out."""
    n = len(samples[0])
    batch = max(1, _BATCH_VALUES // (n * len(samples)))
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
                paired=len(samples) > 1,
                confidence_level=confidence,
                method=attempt,
                rng=np.random.default_rng(seed),
            )
        lo, hi = (float(v) for v in result.confidence_interval)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi, attempt
    return None


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


# --- set-level statistics ---------------------------------------------------------------------------
# A statistic that is not a mean of per-query values (F1 as the harmonic mean of averaged precision and
# recall, a share of passages pooled over queries) is bootstrapped whole: the queries (rows of the
# columns) are resampled together and the statistic recomputed on each resample. The statistics below
# are vectorized over scipy's resample axis.


def statistic_interval(
    samples, statistic, n_resamples: int, seed: int, confidence: float = 0.95, method: str = "BCa"
) -> Effect:
    """``statistic(*samples, axis=-1)`` over per-query columns, with a bootstrap interval that resamples
    queries, each query's values in every column kept together (scipy's paired resampling).

    ``samples`` is a sequence of equally long 1-D columns, one value per query each. Rows with a NaN in
    any column are dropped (counted in ``reason``). Degenerate cases follow ``paired_difference``: no
    row gives NaN, one row no interval, identical rows (or a statistic that every resample gives the
    same value) the point interval.
    """
    cols = [_as_column(s, f"samples[{i}]") for i, s in enumerate(samples)]
    if not cols:
        raise ValueError("statistic_interval needs at least one column")
    if len({len(c) for c in cols}) != 1:
        raise ValueError(f"paired columns differ in length: {[len(c) for c in cols]} queries")
    keep = ~np.any([np.isnan(c) for c in cols], axis=0)
    dropped = int((~keep).sum())
    cols = [c[keep] for c in cols]
    n = len(cols[0])
    note = f"{dropped} {'query' if dropped == 1 else 'queries'} with a NaN value dropped" if dropped else ""

    def reason(text: str) -> str:
        return "; ".join(t for t in (text, note) if t)

    nan = float("nan")
    if n == 0:
        return Effect(nan, nan, nan, 0, "none", reason("no queries"))
    point = float(statistic(*cols, axis=-1))
    if not math.isfinite(point):
        return Effect(nan, nan, nan, n, "none", reason("statistic undefined on these queries (e.g. an empty group)"))
    if n == 1:
        return Effect(point, nan, nan, 1, "none", reason("one query: no interval"))
    rows = np.stack(cols)
    if all(np.ptp(r) <= 1e-12 * max(1.0, float(np.max(np.abs(r)))) for r in rows):
        return Effect(point, point, point, n, "degenerate", reason("all values equal: no sampling variation"))
    found = _scipy_interval(tuple(cols), statistic, n_resamples, seed, confidence, method)
    if found is None:
        return Effect(point, nan, nan, n, "none", reason("bootstrap interval undefined"))
    lo, hi, used = found
    if abs(hi - lo) <= 1e-12 * max(1.0, abs(point)):
        return Effect(point, lo, hi, n, "degenerate", reason("every resample gives the same value"))
    return Effect(point, lo, hi, n, used, note)


def stratified_interval(
    strata,
    statistic,
    n_resamples: int,
    seed: int,
    confidence: float = 0.95,
    method: str = "BCa",
    combine=None,
) -> Effect:
    """The mean over strata (datasets) of ``statistic(*columns, axis=-1)`` of each stratum, with a
    bootstrap interval that resamples rows (queries) within each stratum, every stratum weighted
    equally whatever its size (a stratified bootstrap: 12,576 queries of one dataset do not outvote
    2,837 of another).

    ``strata`` is a sequence of column tuples, one tuple per stratum, its columns of equal length
    (one value per query; a query's values in all columns resampled together). ``statistic`` is
    vectorized like ``statistic_interval``'s; it may return a trailing axis of components (e.g. one
    margin per competitor), NaN where a component does not apply to a stratum: the strata's values
    are then averaged per component ignoring NaN and ``combine`` (e.g. ``np.min`` over the last
    axis) makes the one number.

    Resampling is ``scipy.stats.bootstrap`` with one sample per stratum, resampled independently
    (``paired=False``): each sample holds its stratum's row numbers and the statistic looks the
    rows up, so a query keeps all its columns. A stratum of one query cannot vary and stays fixed;
    empty strata are left out (``reason`` says so).
    """
    tables = [
        np.stack([_as_column(c, f"strata[{j}][{i}]") for i, c in enumerate(cols)]) for j, cols in enumerate(strata)
    ]
    empty = sum(t.shape[1] == 0 for t in tables)
    tables = [t for t in tables if t.shape[1] > 0]
    notes = [f"{empty} empty {'stratum' if empty == 1 else 'strata'} left out"] if empty else []
    fixed = [t for t in tables if t.shape[1] == 1]
    varying = [t for t in tables if t.shape[1] > 1]
    if fixed:
        notes.append(f"{len(fixed)} {'stratum' if len(fixed) == 1 else 'strata'} of one query held fixed")
    n = sum(t.shape[1] for t in tables)
    nan = float("nan")

    def reason(text: str = "") -> str:
        return "; ".join(t for t in (text, *notes) if t)

    if not tables:
        return Effect(nan, nan, nan, 0, "none", reason("no queries"))

    def per_stratum(table: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        cols = table if rows is None else table[:, rows]
        value = np.asarray(statistic(*cols, axis=-1), dtype=float)
        return value

    fixed_values = [per_stratum(t) for t in fixed]

    def overall(*rows_per_stratum, axis=-1):
        values = [per_stratum(t, np.asarray(r).astype(np.intp)) for t, r in zip(varying, rows_per_stratum)]
        values = np.broadcast_arrays(*values, *fixed_values)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a component no stratum has: NaN
            mean = np.nanmean(np.stack(values), axis=0)
        return mean if combine is None else np.asarray(combine(mean), dtype=float)

    index = [np.arange(t.shape[1], dtype=float) for t in varying]
    point = float(overall(*index))
    if not math.isfinite(point):
        return Effect(nan, nan, nan, n, "none", reason("statistic undefined on these queries (e.g. an empty group)"))
    if not varying:
        return Effect(point, nan, nan, n, "none", reason("one query per stratum: no interval"))
    if all(np.all(np.ptp(t, axis=1) <= 1e-12 * max(1.0, float(np.max(np.abs(t))))) for t in varying):
        return Effect(point, point, point, n, "degenerate", reason("all values equal: no sampling variation"))
    batch = max(1, _BATCH_VALUES // max(t.size for t in varying))
    for attempt in dict.fromkeys((method, "percentile")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            result = stats.bootstrap(
                index,
                overall,
                n_resamples=n_resamples,
                batch=batch,
                vectorized=True,
                paired=False,
                confidence_level=confidence,
                method=attempt,
                rng=np.random.default_rng(seed),
            )
        lo, hi = (float(v) for v in result.confidence_interval)
        if math.isfinite(lo) and math.isfinite(hi):
            if abs(hi - lo) <= 1e-12 * max(1.0, abs(point)):
                return Effect(point, lo, hi, n, "degenerate", reason("every resample gives the same value"))
            return Effect(point, lo, hi, n, attempt, reason())
    return Effect(point, nan, nan, n, "none", reason("bootstrap interval undefined"))


def ratio(numerator, denominator, axis=-1):
    """sum(numerator) / sum(denominator): a pooled share or a mean over a varying number of items per
    query (NaN where the denominator sums to 0)."""
    den = np.sum(denominator, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den != 0, np.sum(numerator, axis=axis) / np.where(den != 0, den, 1), np.nan)


def ratio_interval(
    numerator, denominator, n_resamples: int, seed: int, confidence: float = 0.95, method: str = "BCa"
) -> Effect:
    """``ratio`` of two per-query columns with a bootstrap interval over queries (a cluster bootstrap:
    each query carries its numerator and denominator together)."""
    return statistic_interval((numerator, denominator), ratio, n_resamples, seed, confidence, method)


def _harmonic(p, r):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1), 0.0)


def f1_of_means(precision, recall, axis=-1):
    """The paper's F1: harmonic mean of the averaged per-query precision and recall (0 when both are 0)."""
    return _harmonic(np.mean(precision, axis=axis), np.mean(recall, axis=axis))


def f1_of_sums(precision_sum, recall_sum, count, axis=-1):
    """``f1_of_means`` pooled over several (dataset, LLM) cells: per query, the sums of the cells'
    precision and recall and the number of cells it counts in."""
    n = np.sum(count, axis=axis)
    return _harmonic(np.sum(precision_sum, axis=axis) / n, np.sum(recall_sum, axis=axis) / n)


def scaled(effect: Effect, factor: float, shift: float = 0.0) -> Effect:
    """``effect`` with its point and bounds mapped by ``x * factor + shift`` (e.g. shares to percent,
    or a share minus the value a claim is tested against); a negative factor swaps the bounds."""

    def f(x: float) -> float:
        return x * factor + shift

    lo, hi = (f(effect.lo), f(effect.hi)) if factor >= 0 else (f(effect.hi), f(effect.lo))
    return Effect(f(effect.effect), lo, hi, effect.n, effect.method, effect.reason)


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
