"""Utility rankings of C (paper Section 3.3.2): from a verbalized ranking's parsed order, or from
per-passage scores (likelihood, Eq. 7; attention, Eq. 6), into one table shape.

A ranking table has one row per candidate of every ranked query: qid, pid, rank (1 = most useful),
score (higher = more useful; the method's own scale), parsed (whether the model's output or score
could be read; when not, the ranking is the retrieval order).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import polars as pl

RANKING_METHODS = ("retriever", "listwise", "listwise_pa", "likelihood", "attention")
RANKINGS_SCHEMA = {"qid": pl.String, "pid": pl.String, "rank": pl.Int32, "score": pl.Float64, "parsed": pl.Boolean}


def ranking_method(name: str) -> str:
    if name not in RANKING_METHODS:
        raise ValueError(f"unknown ranking method {name!r}; valid: {', '.join(RANKING_METHODS)}")
    return name


def from_scores(pools: Mapping[str, Sequence[str]], scores: Mapping[str, Sequence[float]], parsed: Mapping[str, bool]) -> pl.DataFrame:
    """Rank each query's ``pools`` (retrieval order) by ``scores``, highest first; ties and NaN
    scores keep retrieval order (a query whose scores are all equal keeps the retriever's ranking)."""
    rows = []
    for qid, pids in pools.items():
        values = list(scores[qid])
        key = [(-(v if not math.isnan(v) else -math.inf), i) for i, v in enumerate(values)]
        order = sorted(range(len(pids)), key=lambda i: key[i])
        rows += [(qid, pids[i], r, values[i], parsed[qid]) for r, i in enumerate(order, start=1)]
    return pl.DataFrame(rows, schema=RANKINGS_SCHEMA, orient="row")


def from_orders(pools: Mapping[str, Sequence[str]], orders: Mapping[str, Sequence[int]], parsed: Mapping[str, bool]) -> pl.DataFrame:
    """Rankings from 1-based positions into each query's pool (a permutation, as
    ``method.parsing.parse_ranking`` returns); score = k - rank + 1."""
    rows = []
    for qid, pids in pools.items():
        order = list(orders[qid])
        k = len(order)
        rows += [(qid, pids[i - 1], r, float(k - r + 1), parsed[qid]) for r, i in enumerate(order, start=1)]
    return pl.DataFrame(rows, schema=RANKINGS_SCHEMA, orient="row")


def passage_spans(prompt: str, rendered: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """Character spans of each rendered passage in ``prompt``, found in order (a passage that
    repeats an earlier one's text is found after it)."""
    spans, start = [], 0
    for text in rendered:
        at = prompt.find(text, start)
        if at < 0:
            raise ValueError(f"passage text not found in the prompt: {text[:60]!r}")
        spans.append((at, at + len(text)))
        start = at + len(text)
    return tuple(spans)


def likelihood_score(logprobs: Sequence[float], normalization: str) -> float:
    """log P(answer | q, d) from the answer's token log-probabilities: their sum (the paper's
    product of probabilities, in log space) or their mean (``normalization="mean"``); NaN when the
    answer has no token."""
    if not logprobs:
        return math.nan
    total = float(sum(logprobs))
    return total / len(logprobs) if normalization == "mean" else total


def perplexity(logprobs: Sequence[float]) -> float:
    """exp of the mean negative log-probability; NaN for no token."""
    return math.exp(-sum(logprobs) / len(logprobs)) if logprobs else math.nan
