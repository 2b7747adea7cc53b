"""Perplexity of human passages (paper Figure 4, top): per LLM, of its human passages inside and
outside its gold set, alone and after their query."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from ..schemas import PERPLEXITY_SCHEMA
from .answers import Candidates


def perplexity(logprobs: Sequence[float]) -> float:
    """exp of the mean negative log-probability; NaN for no token."""
    return math.exp(-sum(logprobs) / len(logprobs)) if logprobs else math.nan


def perplexity_rows(
    dataset: str,
    queries: pl.DataFrame,
    cands: Candidates,
    gold: pl.DataFrame,
    gen: Any,
    calls: Any,
    spec: Mapping[str, Any],
) -> pl.DataFrame:
    """The LLM's perplexity of each human passage of the queries whose gold set (U) is not empty,
    alone (``{title} {text}`` after the BOS token) and after its query (``{question} {title}
    {text}``), with whether the passage is in the LLM's gold set. ``gen`` and ``calls`` are the
    loaded model and its generation-store session."""
    gold_pairs = set(gold.select("qid", "pid").iter_rows())
    with_gold = set(gold["qid"].to_list())
    keys = [
        (qid, pid, question)
        for qid, question in queries.select("qid", "question").iter_rows()
        if qid in with_gold
        for pid in cands.human[qid]
    ]
    texts = [f"{cands.passages[pid].title} {cands.passages[pid].text}" for _, pid, _ in keys]
    pairs = [("", t) for t in texts] + [("", f"{question} {t}") for (_, _, question), t in zip(keys, texts)]
    labels = [f"dataset {dataset}, query {qid}, perplexity of {pid}" for qid, pid, _ in keys] * 2
    gen.check_fits([t for _, t in pairs], labels, reserve=1)
    logprobs = calls.score(gen, pairs, batch_size=spec["batch_size"], desc=f"{gen.slug} {dataset} perplexity")
    n = len(keys)
    rows = [
        (qid, pid, (qid, pid) in gold_pairs, perplexity(logprobs[i]), perplexity(logprobs[n + i]))
        for i, (qid, pid, _) in enumerate(keys)
    ]
    return pl.DataFrame(rows, schema=PERPLEXITY_SCHEMA, orient="row")
