"""The paper's headline findings, tested on whatever datasets and LLMs the config runs.

Each finding is a small function of the tables' inputs (``FindingInputs``: the workflow's files,
already read and keyed as the report jobs key them) that returns one entry (a plain dict, written
to ``findings.json``):

- ``id``, ``claim`` (what the paper says), ``source`` (the table or figure it is read from),
  ``unit`` and ``expected`` (the side of ``null`` on which the claim holds, ``>`` or ``<``);
- ``status``: ``run``, or ``not run`` with the ``reason`` (its inputs are not configured);
- ``cells``: one row per dataset and LLM (and pair or method, where the finding has several), each
  with ``effect``, ``lo``, ``hi`` (the bootstrap interval over queries), ``n`` (queries),
  ``interval`` (how it was computed: ``BCa``, ``percentile``, ``degenerate``, ``none``), ``verdict``
  and ``note``;
- ``effect``, ``lo``, ``hi``, ``n``, ``verdict`` for the finding as a whole, and ``overall`` saying
  how: ``pooled`` (every cell's queries together, queries of a dataset resampled as clusters that
  carry all their cells' values, so one interval covers all LLMs) or ``cells`` (for statistics
  whose scale differs between LLMs, e.g. perplexity: holds when every cell holds, reversed when
  every cell is reversed, inconclusive otherwise).

A verdict is ``holds`` when the interval lies entirely on the claimed side of ``null``,
``reversed`` when entirely on the other side, ``inconclusive`` when it contains ``null`` or is
missing (``bootstrap.verdict``), or when it rests on fewer than ``min_queries`` queries (a bootstrap
over a handful of values only knows those values: its interval is too narrow to trust). Small query
sets give wide intervals: that is the honest answer.

Intervals come from ``report.bootstrap`` (``scipy.stats.bootstrap``, seeded): per-query quantities
(correct answers, per-query NDCG) as paired differences, set-level statistics (the paper's F1, a
pooled share, a mean perplexity over passages) as statistics recomputed on resampled queries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import polars as pl

from ..metrics import ranking_metrics_per_query, set_metrics_per_query
from .analysis import HUMAN, TABLE1_CONTEXTS
from .judgments import _gold_of, _selected_of, _unparsed_of
from .bootstrap import (
    Effect,
    f1_of_means,
    f1_of_sums,
    mean_interval,
    paired_difference,
    ratio,
    ratio_interval,
    scaled,
    statistic_interval,
    verdict,
)

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


def _correct(frame: pl.DataFrame) -> pl.DataFrame:
    """qid, value (100 x correct) of a one-row-per-query answers frame."""
    return frame.select(pl.col("qid").cast(pl.String), (100.0 * pl.col("correct").cast(pl.Float64)).alias("value"))


def _paired(a: pl.DataFrame, b: pl.DataFrame, qids: Sequence[str] | None = None) -> pl.DataFrame:
    """qid, a, b: two (qid, value) frames on their common queries (optionally only ``qids``), in a's order."""
    joined = a.rename({"value": "a"}).join(b.rename({"value": "b"}), on="qid", how="inner", maintain_order="left")
    if qids is not None:
        joined = joined.filter(pl.col("qid").is_in(list(qids)))
    return joined


def _known_qids(known: pl.DataFrame, flag: bool) -> set[str]:
    return set(known.filter(pl.col("known") == flag)["qid"].cast(pl.String).to_list())


# --- building an entry ----------------------------------------------------------------------------


def _number(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 4)


def _cell(keys: Mapping[str, Any], effect: Effect, claim: Claim) -> dict[str, Any]:
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


def _entry(claim: Claim, cells: list[dict[str, Any]], pooled: Effect | None, rs: Resampling, note: str = "") -> dict[str, Any]:
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
        overall = _too_few(_cell({}, pooled, claim), rs)
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


class _Differences:
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


def _difference_cells(
    claim: Claim,
    pairs: list[tuple[dict[str, Any], str, pl.DataFrame]],
    rs: Resampling,
    empty_reason: str,
) -> dict[str, Any]:
    """An entry from per-query paired values: ``pairs`` holds (cell keys, dataset, frame qid/a/b)."""
    if not pairs:
        return not_run(claim, empty_reason)
    pool = _Differences()
    cells = []
    for keys, dataset, frame in pairs:
        a, b = frame["a"].to_numpy(), frame["b"].to_numpy()
        cells.append(_cell(keys, paired_difference(a, b, **rs.kwargs()), claim))
        pool.add(dataset, frame["qid"].to_list(), a - b)
    return _entry(claim, cells, pool.pooled(rs), rs)


# --- Table 1: the hierarchy, pair by pair ---------------------------------------------------------

TABLE1_PAIRS = [("G(U)", "G(C)"), ("G(C)", "Human"), ("Human", "U"), ("U", "C"), ("C", "None")]


def _table1_claim(better: str, worse: str) -> Claim:
    slug = {"G(U)": "gu", "G(C)": "gc", "Human": "human", "U": "u", "C": "c", "None": "none"}
    text = f"{better} answers more queries correctly than {worse} (Table 1: G(U) > G(C) > Human >= U > C > None)"
    if (better, worse) == ("Human", "U"):
        text = "Human passages answer at least as many queries as U (Table 1: Human >= U; holds means strictly more, inconclusive does not contradict it)"
    return Claim(
        id=f"table1_{slug[better]}_over_{slug[worse]}",
        claim=text,
        source="Table 1 (tables/table1_rag)",
        unit=f"correct answers (%), {better} minus {worse}, paired per query",
    )


def table1_hierarchy(inputs: FindingInputs, rs: Resampling) -> list[dict[str, Any]]:
    """Table 1's hierarchy G(U) > G(C) > Human >= U > C > None, one entry per adjacent pair."""
    entries = []
    for better, worse in TABLE1_PAIRS:
        claim = _table1_claim(better, worse)
        pairs = []
        for dataset in inputs.datasets:
            for llm in inputs.llms:
                ctx_a, ctx_b = (TABLE1_CONTEXTS[c].format(llm=llm) for c in (better, worse))
                a, b = inputs.answers.get((dataset, llm, ctx_a)), inputs.answers.get((dataset, llm, ctx_b))
                if a is None or b is None:
                    continue
                pairs.append(({"dataset": dataset, "llm": llm}, dataset, _paired(_correct(a), _correct(b))))
        entries.append(_difference_cells(claim, pairs, rs, f"no answers with both {better} and {worse} passages configured"))
    return entries


# --- transfer: own gold set vs other LLMs' gold sets and vs Human ---------------------------------

_FIGURE_OF = {"U": "Figure 2 (figures/fig2_transfer_U; Figure 1 right for one dataset)", "C": "Figure 8 (figures/fig8_transfer_C)"}


def _transfer_claim(candidates: str, control: bool) -> Claim:
    if control:
        return Claim(
            id=f"own_gold_beats_others_{candidates}_unknown_both",
            claim=f"Gold sets ({candidates}) are not transferable, on the queries unknown to both LLMs of a pair "
            "(a control beyond the paper: on an LLM's known queries its empty gold set replays its own correct "
            "no-passage answer, which builds part of the own-gold advantage in)",
            source=f"tables/transfer_unknown_both_{candidates} (control of {_FIGURE_OF[candidates].split(' (')[0]})",
            unit="correct answers (%), own gold set minus the other LLM's, paired per query",
        )
    return Claim(
        id=f"own_gold_beats_others_{candidates}",
        claim=f"Gold sets ({candidates}) are not transferable: each LLM answers best with its own gold set (transfer diagonal)",
        source=_FIGURE_OF[candidates],
        unit="correct answers (%), own gold set minus another LLM's, paired per query",
    )


def own_gold_beats_others(inputs: FindingInputs, rs: Resampling, candidates: str, control: bool = False) -> dict[str, Any]:
    """Each LLM with its own gold set vs with every other LLM's (cells: dataset, llm, gold_from); with
    ``control``, only on the queries unknown to both LLMs of the cell."""
    claim = _transfer_claim(candidates, control)
    if len(inputs.llms) < 2:
        return not_run(claim, "needs at least two LLMs (config llms)")
    if control and not inputs.known:
        return not_run(claim, "no known flags (known.parquet) among the inputs")
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            own = inputs.answers.get((dataset, llm, f"gold_{candidates}_from_{llm}"))
            if own is None:
                continue
            for source in inputs.llms:
                other = inputs.answers.get((dataset, llm, f"gold_{candidates}_from_{source}"))
                if source == llm or other is None:
                    continue
                qids = None
                if control:
                    kl, ks = inputs.known.get((dataset, llm)), inputs.known.get((dataset, source))
                    if kl is None or ks is None:
                        continue
                    qids = sorted(_known_qids(kl, False) & _known_qids(ks, False))
                frame = _paired(_correct(own), _correct(other), qids)
                pairs.append(({"dataset": dataset, "llm": llm, "gold_from": source}, dataset, frame))
    return _difference_cells(claim, pairs, rs, f"no transfer answers (gold_{candidates}_from_<llm>) configured")


def with_control(main: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Mark ``control`` as the control of ``main`` and say whether ``main``'s conclusion survives it:
    true when both hold, false when main holds and the control does not, null when main does not hold."""
    survives = None
    if main["verdict"] == "holds" and control["status"] == "run":
        survives = control["verdict"] == "holds"
    return {**control, "control_of": main["id"], "survives": survives}


def own_gold_beats_human(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    claim = Claim(
        id="own_gold_beats_human",
        claim="Each LLM answers better with its own gold set (U) than with the human-annotated passages",
        source=_FIGURE_OF["U"],
        unit="correct answers (%), own gold set (U) minus Human, paired per query",
    )
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            own, human = inputs.answers.get((dataset, llm, f"gold_U_from_{llm}")), inputs.answers.get((dataset, llm, "human"))
            if own is not None and human is not None:
                pairs.append(({"dataset": dataset, "llm": llm}, dataset, _paired(_correct(own), _correct(human))))
    return _difference_cells(claim, pairs, rs, "no answers with the own gold set (U) and the human passages configured")


# --- Figure 3: human passages in gold sets, same-family overlap -----------------------------------


def human_share_in_gold(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Share of human passages that are in the LLM's gold set (U), pooled over the queries that have
    human passages; the paper reads 'about half', tested here as 'not all' (share < 100%)."""
    claim = Claim(
        id="human_share_in_gold",
        claim="Not all human-annotated passages are gold utilitarian passages for an LLM (paper: about half are)",
        source="Figure 3 (figures/fig3_overlap: the Human column against each LLM's diagonal)",
        unit="% of human passages inside the LLM's gold set (U), pooled over queries",
        expected=-1,
        null=100.0,
    )
    cells = []
    units = []
    for dataset in inputs.datasets:
        q = inputs.queries.get(dataset)
        if q is None:
            continue
        human = q.select(pl.col("qid").cast(pl.String), pl.col("human_pids").list.unique().alias("human")).filter(pl.col("human").list.len() > 0)
        for llm in inputs.llms:
            gold = inputs.gold.get((dataset, llm, "U"))
            if gold is None:
                continue
            gold_sets = _gold_of(gold, human["qid"].to_list())
            inside = np.array([len(set(h) & gold_sets[qid]) for qid, h in human.iter_rows()], float)
            total = human["human"].list.len().to_numpy().astype(float)
            cells.append(_cell({"dataset": dataset, "llm": llm}, ratio_interval(100 * inside, total, **rs.kwargs()), claim))
            units.append(pl.DataFrame({"dataset": dataset, "qid": human["qid"], "inside": 100 * inside, "total": total}))
    if not cells:
        return not_run(claim, "no gold sets (U) and queries configured")
    pooled = pl.concat(units).group_by("dataset", "qid", maintain_order=True).agg(pl.col("inside").sum(), pl.col("total").sum())
    return _entry(claim, cells, ratio_interval(pooled["inside"].to_numpy(), pooled["total"].to_numpy(), **rs.kwargs()), rs)


def same_family_overlap(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Gold sets (U) of LLMs of one family share more passages per query than those of LLMs of
    different families (``llms.<name>.family``). Per query: mean overlap of same-family pairs minus
    mean overlap of cross-family pairs, paired per query."""
    claim = Claim(
        id="same_family_overlap",
        claim="LLMs of the same family have more overlapping gold utilitarian passages than LLMs of different families",
        source="Figure 3 (figures/fig3_overlap)",
        unit="passages shared per query, same-family pairs minus cross-family pairs, paired per query",
    )
    families = {llm: inputs.families.get(llm) for llm in inputs.llms if inputs.families.get(llm)}
    if not families:
        return not_run(claim, "no LLM has a family (config llms.<name>.family)")
    same = [(a, b) for a, b in combinations(families, 2) if families[a] == families[b]]
    cross = [(a, b) for a, b in combinations(families, 2) if families[a] != families[b]]
    if not same:
        return not_run(claim, f"no two LLMs share a family (llms.<name>.family: {families})")
    if not cross:
        return not_run(claim, f"every LLM with a family is of the same one (llms.<name>.family: {families})")
    pairs = []
    for dataset in inputs.datasets:
        q = inputs.queries.get(dataset)
        if q is None or any((dataset, llm, "U") not in inputs.gold for llm in families):
            continue
        qids = q["qid"].cast(pl.String).to_list()
        sets = {llm: _gold_of(inputs.gold[(dataset, llm, "U")], qids) for llm in families}

        def mean_overlap(group: list[tuple[str, str]]) -> np.ndarray:
            return np.array([np.mean([len(sets[a][qid] & sets[b][qid]) for a, b in group]) for qid in qids], float)

        frame = pl.DataFrame({"qid": qids, "a": mean_overlap(same), "b": mean_overlap(cross)})
        pairs.append(({"dataset": dataset, "same_pairs": len(same), "cross_pairs": len(cross)}, dataset, frame))
    return _difference_cells(claim, pairs, rs, "no gold sets (U) of the LLMs with a family configured")


# --- Figure 4: perplexity, known queries with human passages ---------------------------------------


def _difference_of_means(sum_g, n_g, sum_h, n_h, axis=-1):
    return ratio(sum_g, n_g, axis=axis) - ratio(sum_h, n_h, axis=axis)


def gold_lower_perplexity(inputs: FindingInputs, rs: Resampling, measure: str) -> dict[str, Any]:
    """Human passages inside the LLM's gold set (G) have lower perplexity than those outside (H): the
    difference of the two mean perplexities over passages, queries resampled (each carries its G and
    H passages). Per LLM only: perplexities of different LLMs are on different scales."""
    what = {"ppl_passage": "the passage alone", "ppl_query_passage": "the query followed by the passage"}[measure]
    claim = Claim(
        id=f"gold_lower_perplexity{'_query' if measure == 'ppl_query_passage' else ''}",
        claim=f"An LLM's perplexity of {what} is lower for human passages inside its gold set than outside it",
        source="Figure 4 top (figures/fig4_perplexity)",
        unit="mean perplexity of gold (G) minus non-gold (H) human passages",
        expected=-1,
    )
    if not inputs.perplexity:
        return not_run(claim, "the perplexity stage is not among the inputs")
    cells = []
    for (dataset, llm), table in inputs.perplexity.items():
        per_query = (
            table.group_by("qid", maintain_order=True)
            .agg(
                sum_g=pl.col(measure).filter(pl.col("in_gold")).sum(),
                n_g=pl.col("in_gold").sum(),
                sum_h=pl.col(measure).filter(~pl.col("in_gold")).sum(),
                n_h=(~pl.col("in_gold")).sum(),
            )
            .with_columns(pl.exclude("qid").cast(pl.Float64))
        )
        note = ""
        if per_query["n_g"].sum() == 0 or per_query["n_h"].sum() == 0:
            note = "no human passage inside the gold set" if per_query["n_g"].sum() == 0 else "every human passage is inside the gold set"
        cols = [per_query[c].to_numpy() for c in ("sum_g", "n_g", "sum_h", "n_h")]
        effect = statistic_interval(cols, _difference_of_means, **rs.kwargs())
        cell = _cell({"dataset": dataset, "llm": llm}, effect, claim)
        if note:
            cell["note"] = "; ".join(t for t in (note, cell["note"]) if t)
        cells.append(cell)
    return _entry(claim, cells, None, rs)


def known_lose_with_human(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """On its known queries (answered correctly with no passage), an LLM given the human passages
    answers fewer correctly than with none."""
    claim = Claim(
        id="known_lose_with_human",
        claim="On known queries, human-annotated passages lower accuracy compared with no passage",
        source="Figure 4 bottom (figures/fig4_perplexity)",
        unit="correct answers (%) on known queries, Human minus None, paired per query",
        expected=-1,
    )
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            human, none, known = (
                inputs.answers.get((dataset, llm, "human")),
                inputs.answers.get((dataset, llm, "none")),
                inputs.known.get((dataset, llm)),
            )
            if human is None or none is None or known is None:
                continue
            qids = sorted(_known_qids(known, True))
            pairs.append(({"dataset": dataset, "llm": llm}, dataset, _paired(_correct(human), _correct(none), qids)))
    return _difference_cells(claim, pairs, rs, "no answers with human and no passages, or no known flags, configured")


# --- judgments: listwise vs pointwise, over-selection, attention vs retriever ---------------------

SELECTION_PAIRS = [("listwise", "pointwise"), ("listwise_pa", "pointwise_pa")]


def _precision_recall(table: pl.DataFrame, gold: pl.DataFrame) -> pl.DataFrame:
    """qid, precision, recall (x100) of a judgments table on the judged queries with a non-empty gold set."""
    qids, selected = _selected_of(table)
    per_query = set_metrics_per_query(selected, _gold_of(gold, qids))
    return per_query.filter(pl.col("n_gold") > 0).select("qid", pl.col("precision") * 100, pl.col("recall") * 100)


def _f1_difference(pa, ra, pb, rb, axis=-1):
    return f1_of_means(pa, ra, axis=axis) - f1_of_means(pb, rb, axis=axis)


def _pooled_f1_difference(pa, ra, pb, rb, count, axis=-1):
    return f1_of_sums(pa, ra, count, axis=axis) - f1_of_sums(pb, rb, count, axis=axis)


def listwise_beats_pointwise(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Listwise selection has a higher F1 than pointwise (with and without the pseudo-answer), F1 being
    the paper's harmonic mean of averaged precision and recall over queries with a non-empty gold set
    (C); the F1 difference is recomputed on queries resampled (each carries both methods' P and R)."""
    claim = Claim(
        id="listwise_beats_pointwise",
        claim="Listwise utility selection has a higher F1 than pointwise selection",
        source="Table 2 (tables/table2_selection)",
        unit="F1 (%), listwise minus pointwise (F1 of averaged P and R, queries resampled)",
    )
    cells, units = [], []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            gold = inputs.gold.get((dataset, llm, "C"))
            for lw, pw in SELECTION_PAIRS:
                a, b = inputs.judgments.get((dataset, llm, lw)), inputs.judgments.get((dataset, llm, pw))
                if gold is None or a is None or b is None:
                    continue
                joined = _precision_recall(a, gold).join(_precision_recall(b, gold), on="qid", suffix="_b", maintain_order="left")
                cols = [joined[c].to_numpy() for c in ("precision", "recall", "precision_b", "recall_b")]
                effect = statistic_interval(cols, _f1_difference, **rs.kwargs())
                cells.append(_cell({"dataset": dataset, "llm": llm, "pair": f"{lw} vs {pw}"}, effect, claim))
                units.append(joined.with_columns(dataset=pl.lit(dataset)))
    if not cells:
        return not_run(claim, "needs a listwise and a pointwise method of one kind in judgments.methods (listwise/pointwise or listwise_pa/pointwise_pa)")
    pooled = (
        pl.concat(units)
        .group_by("dataset", "qid", maintain_order=True)
        .agg(pl.col("precision", "recall", "precision_b", "recall_b").sum(), count=pl.len())
    )
    cols = [pooled[c].to_numpy().astype(float) for c in ("precision", "recall", "precision_b", "recall_b", "count")]
    return _entry(claim, cells, statistic_interval(cols, _pooled_f1_difference, **rs.kwargs()), rs)


def known_overselection(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """On its known queries (nothing can help, the gold set is empty) an LLM still selects passages:
    the share of judged known queries where a method did not reject all passages (selected at least
    one, or gave an output that did not parse, which is never a rejection), tested against 50%."""
    claim = Claim(
        id="known_overselection",
        claim="LLMs fail to reject all passages on known queries: most judged known queries get passages selected",
        source="Table 2 (Acc on empty gold) and Table 8 (tables/table2_selection, table8_known_rejection)",
        unit="% of judged known queries where the method did not reject all passages (selected one or more, or its output did not parse)",
        null=50.0,
    )
    cells, units = [], []
    for (dataset, llm, method), table in inputs.judgments.items():
        known = inputs.known.get((dataset, llm))
        if known is None:
            continue
        qids, selected = _selected_of(table)
        unparsed = _unparsed_of(table)
        known_q = _known_qids(known, True)
        chosen = [q for q in qids if q in known_q]
        values = np.array([100.0 * (bool(selected[q]) or q in unparsed) for q in chosen], float)
        effect = mean_interval(values, **rs.kwargs())
        cells.append(_cell({"dataset": dataset, "llm": llm, "method": method}, effect, claim))
        units.append(pl.DataFrame({"dataset": dataset, "qid": chosen, "d": values}, schema_overrides={"qid": pl.String, "d": pl.Float64}))
    if not cells:
        return not_run(claim, "no judgments (judgments.methods) with known flags configured")
    pool = pl.concat(units).group_by("dataset", "qid", maintain_order=True).agg(s=pl.col("d").sum(), c=pl.len())
    return _entry(claim, cells, ratio_interval(pool["s"].to_numpy(), pool["c"].to_numpy().astype(float), **rs.kwargs()), rs)


def attention_below_retriever(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """Attention rankings have a lower NDCG@k than the retriever's order (per query, gold set C)."""
    claim = Claim(
        id="attention_below_retriever",
        claim="Attention-based utility ranks below the retriever's own order",
        source="Table 4 (tables/table4_ranking)",
        unit=f"NDCG@{inputs.k} (%), attention minus retriever, paired per query (non-empty gold C)",
        expected=-1,
    )
    pairs = []
    for dataset in inputs.datasets:
        for llm in inputs.llms:
            att, ret, gold = (
                inputs.rankings.get((dataset, llm, "attention")),
                inputs.rankings.get((dataset, llm, "retriever")),
                inputs.gold.get((dataset, llm, "C")),
            )
            if att is None or ret is None or gold is None:
                continue
            scores = []
            for table in (att, ret):
                ranked = dict(table.sort(["qid", "rank"]).group_by("qid", maintain_order=True).agg(pl.col("pid")).iter_rows())
                per_query = ranking_metrics_per_query(ranked, _gold_of(gold, list(ranked)), k=inputs.k)
                scores.append(per_query.select("qid", value=100 * pl.col("ndcg")))
            pairs.append(({"dataset": dataset, "llm": llm}, dataset, _paired(*scores)))
    return _difference_cells(claim, pairs, rs, "needs the attention and retriever rankings (rankings.methods) and gold sets (C)")


# --- all of them ----------------------------------------------------------------------------------

def all_findings(inputs: FindingInputs, rs: Resampling) -> list[dict[str, Any]]:
    """Every finding, in the paper's order: Table 1's hierarchy, transfer (with the unknown-both
    control), Figure 3, Figure 4, then the judgment benchmark (Tables 2, 8, 4)."""
    entries = table1_hierarchy(inputs, rs)
    for candidates in ("U", "C"):
        main = own_gold_beats_others(inputs, rs, candidates)
        entries += [main, with_control(main, own_gold_beats_others(inputs, rs, candidates, control=True))]
    entries += [
        own_gold_beats_human(inputs, rs),
        human_share_in_gold(inputs, rs),
        same_family_overlap(inputs, rs),
        gold_lower_perplexity(inputs, rs, "ppl_passage"),
        gold_lower_perplexity(inputs, rs, "ppl_query_passage"),
        known_lose_with_human(inputs, rs),
        listwise_beats_pointwise(inputs, rs),
        known_overselection(inputs, rs),
        attention_below_retriever(inputs, rs),
    ]
    return entries


# --- transfer on the queries unknown to both LLMs of a cell ---------------------------------------


def transfer_unknown_both(answers: Keyed, known: Keyed, llms: Sequence[str], dataset: str, candidates: str) -> pl.DataFrame:
    """The transfer matrix (Figures 2 / 8) next to its control on the queries unknown to both LLMs.

    One row per cell: dataset, candidates, gold_from (whose gold set, or Human), llm (the answering
    LLM), correct and n_queries (all queries: the paper's version), correct_unknown_both and
    n_unknown_both (only the queries that neither ``llm`` nor ``gold_from`` answers correctly without
    passages; for Human and the diagonal, the queries unknown to ``llm``). ``answers`` maps (dataset,
    llm, context) and ``known`` (dataset, llm) to frames.
    """
    rows = []
    for row in [*llms, HUMAN]:
        for col in llms:
            context = "human" if row == HUMAN else f"gold_{candidates}_from_{row}"
            frame = answers[(dataset, col, context)]
            unknown = _known_qids(known[(dataset, col)], False)
            if row != HUMAN:
                unknown &= _known_qids(known[(dataset, row)], False)
            control = frame.filter(pl.col("qid").is_in(sorted(unknown)))

            def pct(f: pl.DataFrame) -> float | None:
                return 100.0 * f["correct"].cast(pl.Float64).mean() if f.height else None

            rows.append((dataset, candidates, row, col, pct(frame), frame.height, pct(control), control.height))
    schema = {
        "dataset": pl.String,
        "candidates": pl.String,
        "gold_from": pl.String,
        "llm": pl.String,
        "correct": pl.Float64,
        "n_queries": pl.Int64,
        "correct_unknown_both": pl.Float64,
        "n_unknown_both": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


# --- rendering ------------------------------------------------------------------------------------


def _interval_text(entry: Mapping[str, Any]) -> str:
    if entry.get("effect") is None:
        return "-"
    if entry.get("lo") is None:
        return f"{entry['effect']:.1f} (no interval)"
    return f"{entry['effect']:.1f} [{entry['lo']:.1f}, {entry['hi']:.1f}]"


def _cells_text(entry: Mapping[str, Any]) -> str:
    counts = entry["cell_verdicts"]
    parts = [f"{counts[v]} {v}" for v in VERDICTS if counts.get(v)]
    return ", ".join(parts) if parts else "-"


def summary_frame(entries: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """One row per finding: finding, source, effect [CI], expected, verdict, cells, note."""
    rows = []
    for e in entries:
        note = e["reason"] if e["status"] == NOT_RUN else e.get("note") or ""
        if "control_of" in e:
            survives = {True: "yes", False: "no", None: "n/a (main finding does not hold)"}[e.get("survives")]
            note = "; ".join(t for t in (f"control of {e['control_of']}: survives {survives}", note) if t)
        if e.get("overall") == "cells":
            note = "; ".join(t for t in ("verdict from the cells (no pooled interval)", note) if t)
        rows.append(
            {
                "finding": e["id"],
                "source": e["source"],
                "effect [95% CI]": _interval_text(e),
                "expected": e["expected"],
                "verdict": e["verdict"],
                "cells": _cells_text(e),
                "note": note,
            }
        )
    return pl.DataFrame(rows, schema={k: pl.String for k in ("finding", "source", "effect [95% CI]", "expected", "verdict", "cells", "note")})


def cells_frame(entry: Mapping[str, Any]) -> pl.DataFrame:
    """A finding's cells as a frame: its keys, then effect, lo, hi, n, verdict, note."""
    if not entry["cells"]:
        return pl.DataFrame()
    frame = pl.DataFrame(entry["cells"], infer_schema_length=None)
    keys = [c for c in frame.columns if c not in ("effect", "lo", "hi", "n", "interval", "verdict", "note")]
    return frame.select(*keys, "effect", "lo", "hi", "n", "verdict", "note")


def findings_markdown(entries: Sequence[Mapping[str, Any]], rs: Resampling) -> str:
    """findings.md: the summary table, then each finding's cells."""
    from .tables import markdown

    head = (
        "# Findings\n\n"
        f"Each headline claim of the paper, tested on this run: the effect with its {100 * rs.confidence:g}% "
        f"bootstrap interval over queries ({rs.n_resamples} resamples, seed {rs.seed}) and a verdict: "
        "`holds` (interval entirely on the claimed side of `expected`), `reversed` (entirely on the other side), "
        "`inconclusive` (the interval contains it, or there is none), `not run` (inputs not configured). "
        "Overall values pool every dataset and LLM (queries resampled with all their cells) unless the note says "
        "the verdict comes from the cells. `cells` counts the per-dataset/LLM verdicts listed below.\n"
    )
    parts = [head, markdown(summary_frame(entries))]
    for e in entries:
        if not e["cells"]:
            continue
        parts.append(f"## {e['id']}\n\n{e['claim']}. Unit: {e['unit']}; expected {e['expected']}. Read from {e['source']}.\n")
        parts.append(markdown(cells_frame(e), floatfmt=".1f"))
    return "\n".join(parts)


def findings_html(entries: Sequence[Mapping[str, Any]], rs: Resampling) -> str:
    """findings.html: the same as findings.md, as a page the Snakemake report shows inline."""
    import html

    def table(frame: pl.DataFrame) -> str:
        return frame.to_pandas().to_html(index=False, na_rep="n/a", float_format=lambda x: f"{x:.1f}", border=0, classes="findings")

    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Findings</title><style>"
        "body{font-family:sans-serif;font-size:14px;margin:1em}table{border-collapse:collapse;margin-bottom:1.5em}"
        "th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left}th{background:#f3f3f3}</style></head><body>",
        "<h1>Findings</h1>",
        f"<p>Effects with {100 * rs.confidence:g}% bootstrap intervals over queries ({rs.n_resamples} resamples, "
        f"seed {rs.seed}); verdicts: holds / reversed / inconclusive / not run.</p>",
        table(summary_frame(entries)),
    ]
    for e in entries:
        if e["cells"]:
            parts.append(f"<h2>{html.escape(e['id'])}</h2><p>{html.escape(e['claim'])}. Unit: {html.escape(e['unit'])}; "
                         f"expected {html.escape(e['expected'])}. Read from {html.escape(e['source'])}.</p>")
            parts.append(table(cells_frame(e)))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def transfer_unknown_markdown(table: pl.DataFrame) -> str:
    """The transfer matrices per dataset: the paper's version (all queries) beside the control on the
    queries unknown to both LLMs of each cell (with how many there are)."""
    from .tables import markdown

    parts = [
        "## Transfer of gold sets, all queries vs queries unknown to both LLMs\n",
        "Rows: whose gold set (or Human); columns: the answering LLM; correct answers (%). "
        "`unknown to both`: only the queries that neither the answering LLM nor the row's LLM answers correctly "
        "without passages (Human row and diagonal: unknown to the answering LLM), with their number.\n",
    ]
    for (dataset, candidates), part in table.group_by("dataset", "candidates", maintain_order=True):
        cells = part.with_columns(
            both=pl.when(pl.col("correct_unknown_both").is_null())
            .then(pl.lit("n/a (n=0)"))
            .otherwise(pl.format("{} (n={})", pl.col("correct_unknown_both").round(1), pl.col("n_unknown_both")))
        )
        order = part["llm"].unique(maintain_order=True).to_list()
        for title, value in (("all queries (paper)", pl.col("correct").round(1).cast(pl.String)), ("unknown to both", pl.col("both"))):
            wide = cells.select("gold_from", "llm", value.alias("v")).pivot(on="llm", index="gold_from", values="v").select("gold_from", *order)
            parts.append(f"### {dataset} ({candidates} candidates): {title}\n\n{markdown(wide)}")
    if table.is_empty():
        parts.append("(no rows: fewer than one LLM configured)\n")
    return "\n".join(parts)
