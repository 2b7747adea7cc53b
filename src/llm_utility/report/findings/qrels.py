"""Beyond the paper: do an LLM's own qrels predict its RAG accuracy better than human qrels?

For each (dataset, LLM): every run's top-k (the configured retriever's, BM25's, any run file) is
answered with by the LLM (``correct``: the topk answer, or the ``run_<run>`` one), and scored by two
judges: the LLM's own gold set among U (its qrels_U) and the human passages. On the LLM's unknown
queries (known ones have an empty gold set by definition, so its qrels say nothing there), each
judge's per-(query, run) NDCG@k is ranked against correctness: the AUC (Mann-Whitney, ties half).
A cell's effect is AUC(own U qrels) minus AUC(human), both on the same (query, run) pairs, with a
paired bootstrap that resamples queries (each carrying all its runs and both judges).

The finding as a whole is the mean of the cells' differences (every (dataset, LLM) weighs the
same), with a percentile interval from resampling each dataset's queries, the LLMs of a dataset on
the same draw.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import polars as pl

from ..bootstrap import Effect
from ..runs import percentile_effect, query_weights, weighted_auc
from .framework import Claim, Finding, FindingInputs, Resampling, make_cell, make_entry, not_run

# Whether the comparison can fail by how its quantities are built (the framework's construction
# labels): partly.
CONSTRUCTION_REASON = (
    "the U qrels mark a passage relevant when the same LLM answered the same query correctly with that "
    "passage alone (single-passage calls); the RAG answer is a different call (the run's whole top-k "
    "in one prompt), so the association can fail (other passages distract, order matters), but a "
    "top-k holding a gold passage holds one the LLM already answered correctly with, which human "
    "qrels do not share. Against the LLM qrels: a run's passages outside U are unjudged and count as "
    "not relevant"
)
CLAIM = Claim(
    id="llm_qrels_predict_rag",
    claim=(
        "An LLM's own qrels (its gold set among U) predict its RAG accuracy with a run's top-k better "
        "than the human qrels (beyond the paper; eRAG's question, per LLM)"
    ),
    source="tables/qrels_agreement",
    unit="AUC of per-(query, run) NDCG@k for correct answers, own U qrels minus human, unknown queries",
    construction="partly_built_in",
    construction_reason=CONSTRUCTION_REASON,
)


def _matrices(
    pairs: pl.DataFrame, runs: list[str], qids: list[str] | None
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(qids, own NDCG, human NDCG, correct): query x run matrices of the queries every run was
    answered with and both judges scored (only ``qids`` when given)."""

    def wide(frame: pl.DataFrame, value: str) -> pl.DataFrame:
        return frame.pivot(on="run", index="qid", values=value).select("qid", *runs).drop_nulls()

    own, human = (wide(pairs.filter(pl.col("judge") == j), "ndcg") for j in ("own", "human"))
    correct = wide(pairs.filter(pl.col("judge") == "own"), "correct")
    joined = own.join(human, on="qid", suffix="__human").join(
        correct, on="qid", suffix="__correct", maintain_order="left"
    )
    if qids is not None:
        joined = joined.filter(pl.col("qid").is_in(qids))
    return (
        joined["qid"].to_list(),
        joined.select(runs).to_numpy().astype(float),
        joined.select([f"{r}__human" for r in runs]).to_numpy().astype(float),
        joined.select([f"{r}__correct" for r in runs]).to_numpy().astype(float),
    )


def _difference(own: np.ndarray, human: np.ndarray, correct: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUC(own) - AUC(human) over every (query, run) of query x run matrices, under each row of
    per-query ``weights`` (resamples x queries)."""
    items = np.repeat(weights, own.shape[1], axis=1)  # row-major: query, then run
    c = correct.reshape(-1)
    return weighted_auc(own.reshape(-1), c, items) - weighted_auc(human.reshape(-1), c, items)


def cell_difference(own: np.ndarray, human: np.ndarray, correct: np.ndarray, rs: Resampling) -> Effect:
    """AUC(own) - AUC(human) of one cell's query x run matrices, with a paired percentile interval:
    both AUCs on the same query resamples (a resample with one answer class only is left out)."""
    n = own.shape[0]
    point = float(_difference(own, human, correct, np.ones((1, n)))[0])
    draws = _difference(own, human, correct, query_weights(n, rs.n_resamples, rs.seed))
    return percentile_effect(point, draws, n, rs.confidence)


def pooled_difference(
    cells: list[tuple[str, list[str], np.ndarray, np.ndarray, np.ndarray]], rs: Resampling
) -> Effect | None:
    """The mean over datasets of their cells' mean AUC difference, with a percentile interval: per resample each
    dataset's queries are drawn with replacement once and every cell of the dataset (an LLM, on its
    own unknown queries among them) weighs its queries by that draw, so the LLMs of a dataset stay
    paired. ``cells`` holds (dataset, qids, own, human, correct) query x run matrices."""
    points = [
        float(_difference(o, h, c, np.ones((1, len(q))))[0]) if len(q) else float("nan") for _, q, o, h, c in cells
    ]
    defined = [cell for cell, point in zip(cells, points) if np.isfinite(point)]
    if not defined:
        return None
    # Each dataset weighs the same (the framework's pooling): the mean over datasets of the mean
    # over the dataset's cells.
    by_dataset: dict[str, list[float]] = {}
    for (dataset, *_), p in zip(cells, points):
        if np.isfinite(p):
            by_dataset.setdefault(dataset, []).append(p)
    point = float(np.mean([np.mean(v) for v in by_dataset.values()]))
    universe: dict[str, list[str]] = {}
    for dataset, qids, *_ in defined:
        universe[dataset] = list(dict.fromkeys([*universe.get(dataset, []), *qids]))
    counts = {d: query_weights(len(q), rs.n_resamples, rs.seed + i) for i, (d, q) in enumerate(universe.items())}
    draws = np.empty((rs.n_resamples, len(defined)))
    for i, (dataset, qids, own, human, correct) in enumerate(defined):
        at = {q: j for j, q in enumerate(universe[dataset])}
        draws[:, i] = _difference(own, human, correct, counts[dataset][:, [at[q] for q in qids]])
    columns = {d: [i for i, cell in enumerate(defined) if cell[0] == d] for d in universe}
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample where a cell sees one answer class skips that cell
        means = np.nanmean(np.stack([np.nanmean(draws[:, i], axis=1) for i in columns.values()], axis=1), axis=1)
    dropped = len(cells) - len(defined)
    note = f"{dropped} cell(s) without both answer classes left out" if dropped else ""
    return percentile_effect(point, means, sum(len(cell[1]) for cell in defined), rs.confidence, note)


def llm_qrels_predict_rag(inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    """The entry of ``llm_qrels_predict_rag`` from ``inputs.run_pairs`` (the runs stage's
    per-(dataset, run, LLM answering, judge, query) metrics with the LLM's correctness)."""
    return _entry(CLAIM, inputs, rs)


def _entry(claim: Claim, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
    pairs = inputs.run_pairs
    if pairs is None or pairs.is_empty():
        return not_run(claim, "no runs answered with (runs.rag off, or only the configured retriever's run)", inputs)
    cells, pooled_cells = [], []
    for (dataset, llm), part in pairs.group_by("dataset", "answer_llm", maintain_order=True):
        judged = part.filter(((pl.col("llm") == llm) & (pl.col("pool") == "U")) | (pl.col("pool") == "human"))
        judged = judged.with_columns(
            judge=pl.when(pl.col("pool") == "human").then(pl.lit("human")).otherwise(pl.lit("own"))
        )
        runs = judged["run"].unique(maintain_order=True).to_list()
        if len(runs) < 2:
            continue
        known = inputs.known.get((dataset, llm))
        unknown = None if known is None else known.filter(~pl.col("known"))["qid"].cast(pl.String).to_list()
        qids, own, human, correct = _matrices(judged, runs, unknown)
        keys = {"dataset": dataset, "llm": llm, "runs": len(runs)}
        nan = float("nan")
        effect = (
            cell_difference(own, human, correct, rs)
            if qids
            else Effect(nan, nan, nan, 0, "none", "no unknown query answered with every run")
        )
        cells.append(make_cell(keys, effect, claim))
        if inputs.in_scope(dataset, claim):
            pooled_cells.append((dataset, qids, own, human, correct))
    if not cells:
        return not_run(claim, "no dataset has two runs answered with", inputs)
    return make_entry(claim, cells, pooled_difference(pooled_cells, rs), rs, inputs=inputs)


SECTION = "Beyond the paper: an LLM's own qrels at work"
# No re-ask twin: the runs' answers are not re-asked (the construction reason says what is built in).
FINDING = Finding(CLAIM, _entry)
FINDINGS = [FINDING]
