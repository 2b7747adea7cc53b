"""The findings' framework: the inputs a finding reads, the resampling settings, and how cells and
entries are built from bootstrap effects (see ``llm_utility.report.findings`` for an entry's fields
and what a verdict means)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ..bootstrap import Effect, paired_difference, ratio_interval, scaled, verdict

Keyed = Mapping[Any, pl.DataFrame]
NOT_RUN = "not run"
VERDICTS = ("holds", "reversed", "inconclusive")


@dataclass(frozen=True)
class Resampling:
    """How every interval is computed: ``n_resamples`` bootstrap resamples, ``seed``, ``confidence``;
    and ``min_queries``, the fewest queries a finding's verdict may rest on."""

    n_resamples: int
    seed: int
    confidence: float = 0.95
    min_queries: int = 10  # findings only: fewer queries give an interval but no verdict

    @classmethod
    def from_config(cls, report: Mapping[str, Any]) -> Resampling:
        """From the validated ``report`` config section (resamples, bootstrap_seed, confidence and,
        where given, min_queries)."""
        return cls(
            int(report["resamples"]),
            int(report["bootstrap_seed"]),
            float(report["confidence"]),
            int(report.get("min_queries", cls.min_queries)),
        )

    def kwargs(self) -> dict[str, Any]:
        return {"n_resamples": self.n_resamples, "seed": self.seed, "confidence": self.confidence}


@dataclass
class FindingInputs:
    """The workflow's files a finding reads, already read; every mapping may be empty (not configured).

    ``answers`` (dataset, llm, context) -> answers (qid, pids, output, correct); ``known`` (dataset,
    llm) -> (qid, known); ``gold`` (dataset, llm, candidates) -> (qid, pid); ``queries`` dataset ->
    queries; ``perplexity`` (dataset, llm) -> (qid, pid, in_gold, ppl_passage, ppl_query_passage);
    ``judgments`` / ``rankings`` (dataset, llm, method) -> judgments (qid, pid, selected, parsed) /
    rankings (qid, pid, rank, ...). ``llms`` is the configured order, ``families`` maps an LLM to its
    ``llms.<name>.family`` (None where unset), ``k`` is the ranking cutoff (``rankings.k``).
    """

    llms: Sequence[str]
    answers: Keyed = field(default_factory=dict)
    known: Keyed = field(default_factory=dict)
    gold: Keyed = field(default_factory=dict)
    queries: Keyed = field(default_factory=dict)
    perplexity: Keyed = field(default_factory=dict)
    judgments: Keyed = field(default_factory=dict)
    rankings: Keyed = field(default_factory=dict)
    families: Mapping[str, str | None] = field(default_factory=dict)
    k: int = 5

    @property
    def datasets(self) -> list[str]:
        keys = [*self.queries, *(k[0] for k in self.answers), *(k[0] for k in self.judgments), *(k[0] for k in self.perplexity)]
        return list(dict.fromkeys(keys))


class NotRun(Exception):
    """A finding's inputs are not configured; the message says which."""


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    source: str
    unit: str
    expected: int = +1  # +1: effect > null; -1: effect < null
    null: float = 0.0


# --- per-query columns ----------------------------------------------------------------------------


def correct_values(frame: pl.DataFrame) -> pl.DataFrame:
    """qid, value (100 x correct) of a one-row-per-query answers frame."""
    return frame.select(pl.col("qid").cast(pl.String), (100.0 * pl.col("correct").cast(pl.Float64)).alias("value"))


def paired(a: pl.DataFrame, b: pl.DataFrame, qids: Sequence[str] | None = None) -> pl.DataFrame:
    """qid, a, b: two (qid, value) frames on their common queries (optionally only ``qids``), in a's order."""
    joined = a.rename({"value": "a"}).join(b.rename({"value": "b"}), on="qid", how="inner", maintain_order="left")
    if qids is not None:
        joined = joined.filter(pl.col("qid").is_in(list(qids)))
    return joined


def known_qids(known: pl.DataFrame, flag: bool) -> set[str]:
    return set(known.filter(pl.col("known") == flag)["qid"].cast(pl.String).to_list())


# --- building an entry ----------------------------------------------------------------------------


def _number(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 4)


def make_cell(keys: Mapping[str, Any], effect: Effect, claim: Claim) -> dict[str, Any]:
    return {
        **keys,
        "effect": _number(effect.effect),
        "lo": _number(effect.lo),
        "hi": _number(effect.hi),
        "n": effect.n,
        "interval": effect.method,
        "verdict": verdict(scaled(effect, 1.0, -claim.null), claim.expected),
        "note": effect.reason,
    }


def _too_few(item: dict[str, Any], rs: Resampling) -> dict[str, Any]:
    """No verdict from fewer than ``rs.min_queries`` queries: a bootstrap interval over a handful of
    values is too narrow to trust (it only knows the values it saw)."""
    if item["verdict"] in ("holds", "reversed") and item["n"] < rs.min_queries:
        note = f"fewer than {rs.min_queries} queries (report.min_queries): no verdict"
        return {**item, "verdict": "inconclusive", "note": "; ".join(t for t in (note, item["note"]) if t)}
    return item


def make_entry(claim: Claim, cells: list[dict[str, Any]], pooled: Effect | None, rs: Resampling, note: str = "") -> dict[str, Any]:
    cells = [_too_few(c, rs) for c in cells]
    entry: dict[str, Any] = {
        "id": claim.id,
        "claim": claim.claim,
        "source": claim.source,
        "unit": claim.unit,
        "expected": f"{'>' if claim.expected > 0 else '<'} {claim.null:g}",
    }
    counts = {v: sum(c["verdict"] == v for c in cells) for v in VERDICTS}
    if pooled is not None:
        overall = _too_few(make_cell({}, pooled, claim), rs)
        entry |= {"status": "run", "reason": note, "overall": "pooled", **{k: overall[k] for k in ("effect", "lo", "hi", "n", "interval", "verdict")}}
        entry["note"] = overall["note"]
    else:
        if counts["holds"] == len(cells):
            consensus = "holds"
        elif counts["reversed"] == len(cells):
            consensus = "reversed"
        else:
            consensus = "inconclusive"
        entry |= {"status": "run", "reason": note, "overall": "cells", "effect": None, "lo": None, "hi": None,
                  "n": sum(c["n"] for c in cells), "interval": "none", "verdict": consensus, "note": ""}
    entry["cell_verdicts"] = counts
    entry["cells"] = cells
    return entry


def not_run(claim: Claim, reason: str) -> dict[str, Any]:
    """The entry of a finding whose inputs are not configured."""
    return {
        "id": claim.id,
        "claim": claim.claim,
        "source": claim.source,
        "unit": claim.unit,
        "expected": f"{'>' if claim.expected > 0 else '<'} {claim.null:g}",
        "status": NOT_RUN,
        "reason": reason,
        "overall": None,
        "effect": None,
        "lo": None,
        "hi": None,
        "n": 0,
        "interval": "none",
        "verdict": NOT_RUN,
        "note": "",
        "cell_verdicts": dict.fromkeys(VERDICTS, 0),
        "cells": [],
    }


class PooledDifferences:
    """Collects per-query differences of several cells and pools them: per (dataset, query), the sum
    of its differences over the cells and how many cells it counts in (a ratio estimator, so the
    pooled effect is the mean over every (cell, query) and resampling keeps a query's cells together)."""

    def __init__(self) -> None:
        self.parts: list[pl.DataFrame] = []

    def add(self, dataset: str, qids: Sequence[str], values: np.ndarray) -> None:
        if len(qids):
            self.parts.append(pl.DataFrame({"dataset": dataset, "qid": list(qids), "d": np.asarray(values, float)}))

    def pooled(self, rs: Resampling) -> Effect | None:
        if not self.parts:
            return None
        units = pl.concat(self.parts).group_by("dataset", "qid", maintain_order=True).agg(s=pl.col("d").sum(), c=pl.len())
        return ratio_interval(units["s"].to_numpy(), units["c"].to_numpy().astype(float), **rs.kwargs())


def difference_entry(
    claim: Claim,
    pairs: list[tuple[dict[str, Any], str, pl.DataFrame]],
    rs: Resampling,
    empty_reason: str,
) -> dict[str, Any]:
    """An entry from per-query paired values: ``pairs`` holds (cell keys, dataset, frame qid/a/b)."""
    if not pairs:
        return not_run(claim, empty_reason)
    pool = PooledDifferences()
    cells = []
    for keys, dataset, frame in pairs:
        a, b = frame["a"].to_numpy(), frame["b"].to_numpy()
        cells.append(make_cell(keys, paired_difference(a, b, **rs.kwargs()), claim))
        pool.add(dataset, frame["qid"].to_list(), a - b)
    return make_entry(claim, cells, pool.pooled(rs), rs)
