"""Retrieval runs scored by every judge, and whether a judge's metric predicts the LLM's RAG answer.

A *judge* is one set of qrels of a dataset: the human passages, or an LLM's gold set among the pool
C (the configured retriever's top-k) or U (C and the human passages), as the ``qrels`` rule writes
them (every pooled passage judged: 1 gold, 0 not). A run is any ranking of corpus passages per query:
a configured retriever's (``run.parquet``) or a TREC run file.

Metrics go through ``ir_measures``: NDCG@k and Recall@k by trec_eval's C code (pytrec_eval), where a
passage the judge never saw counts as not relevant; the same with ``judged_only=True`` (trec_eval's
``-J``: unjudged passages dropped before the cutoff, the *condensed list*); and Judged@k, the share
of the top k that the judge saw. Human annotations judge only their own passages, so Judged@k and
the condensed variants are left empty for them (a condensed list of only relevant passages would
score 1 whenever one is retrieved).

The agreement of a judge with RAG: for every (query, run), the judge's metric of the run's top-k
and whether the LLM answered correctly with that top-k (``correct``). Per query: the AUC (the
probability that a correct (query, run) has a higher metric than an incorrect one, ties counting
half: the Mann-Whitney statistic) and the point-biserial correlation (Pearson's r of the metric
with correctness); intervals resample queries, each carrying all its runs. Across runs: Kendall's
tau-b between the runs ordered by mean metric and by RAG accuracy (with two runs it can only be
-1, 0 or 1: not meaningful, and the table says so). Intervals are percentiles of query resamples
drawn as multiplicities (``query_weights``); a resample where a statistic is undefined (one answer
class only) is left out and counted.

``python -m llm_utility.report.runs score-run --qrels <qrels> <run>`` scores a run file against
qrels files without the workflow (see ``main``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from scipy import stats

from .bootstrap import Effect, mean_interval

HUMAN = "human"
POOLS = ("C", "U")
METRICS = ("ndcg", "recall")


@dataclass(frozen=True)
class Judge:
    """One set of qrels: ``relevant`` and ``judged`` passages per query (``judged`` None: only the
    relevant passages were judged, as with human annotations). ``llm`` is None for human qrels;
    ``pool`` is ``human``, ``C`` or ``U``."""

    llm: str | None
    pool: str
    relevant: Mapping[str, set[str]]
    judged: Mapping[str, set[str]] | None

    @property
    def label(self) -> str:
        return "Human" if self.llm is None else f"{self.llm} ({self.pool})"


def judge_from_qrels(path: str, llm: str | None = None, pool: str | None = None) -> Judge:
    """A judge from a TREC qrels file (every line judged; relevance > 0 relevant)."""
    from ..data.trec import read_qrels

    judged, relevant = read_qrels(path)
    return Judge(llm or Path(path).stem, pool or "qrels", relevant, {q: set(p) for q, p in judged.items()})


def human_judge(queries: pl.DataFrame) -> Judge:
    """The human passages of a queries table as a judge (only they are judged)."""
    relevant = {str(q): set(h) for q, h in queries.select("qid", "human_pids").iter_rows()}
    return Judge(None, HUMAN, relevant, None)


def per_query_metrics(ranked: Mapping[str, Sequence[str]], judge: Judge, k: int, qids: Sequence[str]) -> pl.DataFrame:
    """qid, relevant (how many), ndcg, recall, judged, ndcg_condensed, recall_condensed (shares, at
    cutoff ``k``) of ``ranked`` under ``judge``, one row per query of ``qids`` in that order. A query
    the run does not rank, or without a relevant passage, scores 0; judged and the condensed
    variants are null for a judge without ``judged`` passages."""
    import ir_measures
    from ir_measures import Judged, R, nDCG

    if k < 1:
        raise ValueError(f"run metrics need a cutoff k >= 1, got {k}")
    qrels: dict[str, dict[str, int]] = {}
    for qid in qids:
        relevant = judge.relevant.get(qid, set())
        pool = (judge.judged or {}).get(qid, set()) | relevant
        if pool:
            qrels[qid] = {pid: int(pid in relevant) for pid in pool}
    # trec_eval orders by score and breaks ties by docid: strictly decreasing scores keep the rank order.
    run = {}
    for qid in qids:
        pids = list(dict.fromkeys(ranked.get(qid, ())))
        if pids:
            run[qid] = {pid: float(len(pids) - i) for i, pid in enumerate(pids)}
    plain = [nDCG @ k, R @ k]
    condensed = [nDCG(judged_only=True) @ k, R(judged_only=True) @ k]
    measures = plain + (condensed if judge.judged is not None else [])
    values: dict[tuple[str, Any], float] = {}
    if run and qrels:
        for m in ir_measures.pytrec_eval.iter_calc(measures, qrels, run):
            values[(m.query_id, m.measure)] = float(m.value)
        if judge.judged is not None:
            for m in ir_measures.judged.iter_calc([Judged @ k], qrels, run):
                values[(m.query_id, m.measure)] = float(m.value)
    names = {
        "ndcg": nDCG @ k,
        "recall": R @ k,
        "ndcg_condensed": condensed[0],
        "recall_condensed": condensed[1],
        "judged": Judged @ k,
    }
    rows = []
    for qid in qids:
        row: dict[str, Any] = {"qid": qid, "relevant": len(judge.relevant.get(qid, ()))}
        for column, measure in names.items():
            if judge.judged is None and column not in ("ndcg", "recall"):
                row[column] = None
            else:
                row[column] = values.get((qid, measure), 0.0)
        rows.append(row)
    schema = {"qid": pl.String, "relevant": pl.Int64} | {c: pl.Float64 for c in names}
    return pl.DataFrame(rows, schema=schema, orient="row").select(
        "qid", "relevant", "ndcg", "recall", "judged", "ndcg_condensed", "recall_condensed"
    )


def resampling(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The bootstrap's keyword arguments from the ``report`` config's (resamples, bootstrap_seed,
    confidence)."""
    return {
        "n_resamples": int(settings["resamples"]),
        "seed": int(settings["bootstrap_seed"]),
        "confidence": float(settings["confidence"]),
    }


def _interval_columns(name: str, effect: Effect) -> dict[str, float | None]:
    def pct(x: float) -> float | None:
        return None if x is None or not np.isfinite(x) else round(100 * x, 2)

    return {name: pct(effect.effect), f"{name}_lo": pct(effect.lo), f"{name}_hi": pct(effect.hi)}


def run_table(
    scored: pl.DataFrame, k: int, pool_runs: Mapping[str, str], bootstrap: Mapping[str, Any] | None
) -> pl.DataFrame:
    """The run table: per (dataset, run, judge), on the queries with a relevant passage for that
    judge, mean NDCG@k and Recall@k (%, with bootstrap intervals over queries when ``bootstrap``),
    Judged@k and the condensed-list NDCG@k and Recall@k (%). ``scored`` is ``score_runs``' frame;
    ``pool_runs`` names each dataset's configured retriever (its top-k is the pool C); ``bootstrap``
    is the ``report`` config's resamples, bootstrap_seed and confidence."""
    rows = []
    for (dataset, run, llm, pool), part in scored.group_by("dataset", "run", "llm", "pool", maintain_order=True):
        part = part.filter(pl.col("relevant") > 0)
        row: dict[str, Any] = {
            "dataset": dataset,
            "run": run,
            "pool_run": pool_runs.get(dataset) == run,
            "judge": "Human" if llm is None else llm,
            "pool": pool,
            "queries": part.height,
        }
        for metric in METRICS:
            values = part[metric].to_numpy()
            if bootstrap is not None:
                row |= _interval_columns(f"{metric}@{k}", mean_interval(values, **resampling(bootstrap)))
            else:
                row[f"{metric}@{k}"] = round(100 * float(values.mean()), 2) if len(values) else None
        for column in ("judged", "ndcg_condensed", "recall_condensed"):
            values = part[column].drop_nulls()
            name = {"judged": f"judged@{k}"}.get(column, f"{column.split('_')[0]}@{k}_condensed")
            row[name] = round(100 * float(values.mean()), 2) if len(values) else None
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def score_runs(
    runs: Mapping[tuple[str, str], Mapping[str, Sequence[str]]],
    judges: Mapping[str, Sequence[Judge]],
    qids: Mapping[str, Sequence[str]],
    k: int,
) -> pl.DataFrame:
    """Per-query metrics of every run under every judge of its dataset: dataset, run, llm (null for
    human), pool, then ``per_query_metrics``' columns."""
    parts = []
    for (dataset, run), ranked in runs.items():
        for judge in judges.get(dataset, ()):
            frame = per_query_metrics(ranked, judge, k, qids[dataset])
            parts.append(
                frame.with_columns(
                    dataset=pl.lit(dataset),
                    run=pl.lit(run),
                    llm=pl.lit(judge.llm, dtype=pl.String),
                    pool=pl.lit(judge.pool),
                )
            )
    if not parts:
        return pl.DataFrame(
            schema={"dataset": pl.String, "run": pl.String, "llm": pl.String, "pool": pl.String, "qid": pl.String}
        )
    return pl.concat(parts).select("dataset", "run", "llm", "pool", pl.exclude("dataset", "run", "llm", "pool"))


# --- agreement with RAG -----------------------------------------------------------------------------


def auc(values, correct, axis: int = -1):
    """Mann-Whitney AUC of ``values`` for separating ``correct`` (1) from incorrect (0) along
    ``axis`` (ties half); NaN where one class is absent. Vectorized over leading axes."""
    values, correct = np.asarray(values, float), np.asarray(correct, float)
    ranks = stats.rankdata(values, axis=axis)
    n1 = np.sum(correct, axis=axis)
    n0 = correct.shape[axis] - n1
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.sum(ranks * correct, axis=axis) - n1 * (n1 + 1) / 2) / (n1 * n0)


def point_biserial(values, correct, axis: int = -1):
    """Pearson's r of ``values`` with the 0/1 ``correct`` along ``axis``; NaN where either is constant."""
    values, correct = np.asarray(values, float), np.asarray(correct, float)
    dv = values - values.mean(axis=axis, keepdims=True)
    dc = correct - correct.mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(dv * dc, axis=axis) / np.sqrt(np.sum(dv * dv, axis=axis) * np.sum(dc * dc, axis=axis))


def kendall_tau_b(x, y, axis: int = -1):
    """Kendall's tau-b of two orderings of the same items along ``axis`` (scipy's definition),
    vectorized over leading axes; NaN where either ordering is all ties."""
    x, y = np.moveaxis(np.asarray(x, float), axis, -1), np.moveaxis(np.asarray(y, float), axis, -1)
    pairs = list(combinations(range(x.shape[-1]), 2))
    if not pairs:
        return np.full(x.shape[:-1], np.nan)
    i, j = (np.array(p) for p in zip(*pairs))
    sx, sy = np.sign(x[..., i] - x[..., j]), np.sign(y[..., i] - y[..., j])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(sx * sy, axis=-1) / np.sqrt(np.sum(sx != 0, axis=-1) * np.sum(sy != 0, axis=-1))


def query_weights(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """Bootstrap resamples of ``n`` queries as multiplicities (resamples x n: how often each query is
    drawn), so a statistic over fixed values is re-weighted rather than recomputed on copies."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1 / n), size=n_resamples).astype(float)


def weighted_auc(scores: np.ndarray, correct: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The Mann-Whitney AUC (ties half) of fixed ``scores`` for the 0/1 ``correct`` (1-D, n items)
    under each row of ``weights`` (resamples x n: how often a resample draws each item); NaN where a
    row weighs one class only. Sorting once serves every row, so a bootstrap is a few array sums."""
    order = np.argsort(scores, kind="stable")
    s, c, w = scores[order], correct[order].astype(bool), weights[:, order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])  # tie groups in ascending score
    pos = np.add.reduceat(np.where(c, w, 0.0), starts, axis=1)
    neg = np.add.reduceat(np.where(c, 0.0, w), starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg  # negative weight strictly below each group
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(pos * (below + 0.5 * neg), axis=1) / (pos.sum(axis=1) * neg.sum(axis=1))


def weighted_pearson(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Pearson's r of fixed ``x`` and ``y`` (1-D) under each row of ``weights``; NaN where either is
    constant on the drawn items."""
    total = weights.sum(axis=1, keepdims=True)
    dx, dy = x - (weights @ x)[:, None] / total, y - (weights @ y)[:, None] / total
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(weights * dx * dy, axis=1) / np.sqrt(
            np.sum(weights * dx * dx, axis=1) * np.sum(weights * dy * dy, axis=1)
        )


def percentile_effect(point: float, draws: np.ndarray, n: int, confidence: float, note: str = "") -> Effect:
    """An ``Effect`` with the percentile interval of the finite ``draws`` (resamples where the
    statistic is undefined, e.g. one answer class only, are left out and counted in the reason)."""
    nan = float("nan")
    finite = draws[np.isfinite(draws)]
    skipped = len(draws) - len(finite)
    reason = "; ".join(
        t for t in (note, f"{skipped} of {len(draws)} resamples undefined, left out" if skipped else "") if t
    )
    if not np.isfinite(point):
        return Effect(
            nan,
            nan,
            nan,
            n,
            "none",
            "; ".join(
                t for t in ("undefined on these queries (one answer class only, or a constant metric)", note) if t
            ),
        )
    if n < 2 or len(finite) < 2:
        return Effect(point, nan, nan, n, "none", reason or "too few queries for an interval")
    alpha = (1 - confidence) / 2
    lo, hi = (float(v) for v in np.quantile(finite, [alpha, 1 - alpha]))
    if hi - lo <= 1e-12 * max(1.0, abs(point)):
        return Effect(
            point, lo, hi, n, "degenerate", "; ".join(t for t in (reason, "every resample gives the same value") if t)
        )
    return Effect(point, lo, hi, n, "percentile", reason)


def matrices(pairs: pl.DataFrame, metric: str, runs: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(qids, metric values, correctness): query x run matrices of the queries answered with every run."""
    wide_v = pairs.pivot(on="run", index="qid", values=metric).drop_nulls()
    wide_c = pairs.pivot(on="run", index="qid", values="correct").drop_nulls()
    joined = wide_v.join(wide_c, on="qid", suffix="__correct", maintain_order="left")
    qids = joined["qid"].to_list()
    values = joined.select(list(runs)).to_numpy().astype(float)
    correct = joined.select([f"{r}__correct" for r in runs]).to_numpy().astype(float)
    return qids, values, correct


def agreement_cells(values: np.ndarray, correct: np.ndarray, bootstrap: Mapping[str, Any]) -> dict[str, Effect]:
    """AUC, point-biserial r (over every (query, run)) and Kendall's tau-b (of the runs' mean metric
    against their RAG accuracy) of query x run matrices, with percentile intervals that resample
    queries, each with all its runs (tau: only with three runs or more)."""
    n, n_runs = values.shape
    x, c = values.reshape(-1), correct.reshape(-1)  # row-major: query, then run
    weights = query_weights(max(n, 1), int(bootstrap["n_resamples"]), int(bootstrap["seed"]))
    if n == 0:
        weights = weights[:, :0]
    items = np.repeat(weights, n_runs, axis=1)
    ones = np.ones((1, n * n_runs))
    confidence = float(bootstrap["confidence"])
    out = {
        "auc": percentile_effect(
            float(weighted_auc(x, c, ones)[0]) if n else float("nan"),
            weighted_auc(x, c, items) if n else np.array([]),
            n,
            confidence,
        ),
        "point_biserial": percentile_effect(
            float(weighted_pearson(x, c, ones)[0]) if n else float("nan"),
            weighted_pearson(x, c, items) if n else np.array([]),
            n,
            confidence,
        ),
    }
    tau = float(kendall_tau_b(values.mean(axis=0), correct.mean(axis=0))) if n else float("nan")
    if n_runs >= 3:
        with np.errstate(invalid="ignore", divide="ignore"):
            total = weights.sum(axis=1, keepdims=True)
            draws = kendall_tau_b((weights @ values) / total, (weights @ correct) / total)
        out["kendall_tau"] = percentile_effect(tau, draws, n, confidence)
    else:
        out["kendall_tau"] = Effect(
            tau, float("nan"), float("nan"), n, "none", f"{n_runs} runs: tau is -1, 0 or 1, not meaningful"
        )
    return out


def rag_pairs(scored: pl.DataFrame, answers: Mapping[tuple[str, str, str], pl.DataFrame]) -> pl.DataFrame:
    """scored's rows joined with the LLM's answer with each run's top-k: dataset, run, answer_llm,
    judge llm, pool, qid, the metrics, correct. ``answers`` maps (dataset, llm, run) to the answers
    (qid, correct) with that run's top-k."""
    parts = [
        frame.select(pl.col("qid").cast(pl.String), pl.col("correct").cast(pl.Float64)).with_columns(
            dataset=pl.lit(dataset), answer_llm=pl.lit(llm), run=pl.lit(run)
        )
        for (dataset, llm, run), frame in answers.items()
    ]
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts).join(scored, on=["dataset", "run", "qid"], how="inner")


def agreement_table(
    pairs: pl.DataFrame,
    known: Mapping[tuple[str, str], pl.DataFrame],
    bootstrap: Mapping[str, Any],
    k: int,
) -> pl.DataFrame:
    """Per (dataset, LLM answering, judge, queries, metric): how well the judge's per-query metric
    predicts the LLM's correctness with each run's top-k (AUC, point-biserial r, intervals over
    queries) and how well the runs' mean metric orders them by RAG accuracy (Kendall's tau-b).
    ``queries`` is ``all`` or ``unknown`` (those the LLM does not answer correctly without passages,
    from ``known``). The LLM's own qrels are marked ``own``."""
    rows = []
    if pairs.is_empty():
        return pl.DataFrame()
    for (dataset, llm), part in pairs.group_by("dataset", "answer_llm", maintain_order=True):
        runs = part["run"].unique(maintain_order=True).to_list()
        flags = known.get((dataset, llm))
        unknown = None if flags is None else set(flags.filter(~pl.col("known"))["qid"].cast(pl.String).to_list())
        for (judge_llm, pool), judged in part.group_by("llm", "pool", maintain_order=True):
            for subset in ("all", "unknown"):
                if subset == "unknown" and unknown is None:
                    continue
                chosen = judged if subset == "all" else judged.filter(pl.col("qid").is_in(sorted(unknown)))
                for metric in METRICS:
                    qids, values, correct = matrices(chosen, metric, runs)
                    cells = agreement_cells(values, correct, resampling(bootstrap))
                    row = {
                        "dataset": dataset,
                        "llm": llm,
                        "judge": "Human" if judge_llm is None else judge_llm,
                        "pool": pool,
                        "own": judge_llm == llm,
                        "queries": subset,
                        "n": len(qids),
                        "runs": len(runs),
                        "metric": f"{metric}@{k}",
                    }
                    for name, effect in cells.items():
                        row |= {name: _num(effect.effect), f"{name}_lo": _num(effect.lo), f"{name}_hi": _num(effect.hi)}
                    row["note"] = "; ".join(dict.fromkeys(e.reason for e in cells.values() if e.reason))
                    rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def _num(x: float) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 4)


# --- scoring a run by hand ----------------------------------------------------------------------------


def score_run_files(run: str, qrels: Sequence[str], k: int) -> pl.DataFrame:
    """A TREC run file scored against each qrels file (mean over queries with a relevant passage)."""
    from ..data.trec import read_ranked

    ranked = read_ranked(run)
    rows = []
    for path in qrels:
        judge = judge_from_qrels(path)
        qids = list(judge.relevant)
        frame = per_query_metrics(ranked, judge, k, qids).filter(pl.col("relevant") > 0)
        missing = sum(q not in ranked for q in frame["qid"])
        row = {"qrels": path, "queries": frame.height, "unranked": missing}
        names = {
            "ndcg": f"ndcg@{k}",
            "recall": f"recall@{k}",
            "judged": f"judged@{k}",
            "ndcg_condensed": f"ndcg@{k}_condensed",
            "recall_condensed": f"recall@{k}_condensed",
        }
        for column, name in names.items():
            row[name] = round(100 * float(frame[column].mean()), 2) if frame.height else None
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def main(argv: Sequence[str] | None = None) -> int:
    """``score-run --qrels FILE [--qrels FILE ...] [--k K] RUN``: print NDCG@k, Recall@k, Judged@k and
    the condensed-list scores (%) of a TREC run against each qrels file."""
    parser = argparse.ArgumentParser(prog="python -m llm_utility.report.runs", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    score = sub.add_parser("score-run", help="score a TREC run file against qrels files")
    score.add_argument("run", help="TREC run file: qid Q0 docid rank score tag")
    score.add_argument("--qrels", action="append", required=True, help="TREC qrels file (repeat for several)")
    score.add_argument("--k", type=int, default=5, help="the cutoff (default 5, the demo's top_k)")
    score.add_argument("--csv", help="also write the table to this CSV file")
    args = parser.parse_args(argv)
    from ..data.readers import DataFormatError

    try:
        table = score_run_files(args.run, args.qrels, args.k)
    except (DataFormatError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
        fmt_str_lengths=300,
        tbl_width_chars=400,
        tbl_formatting="MARKDOWN",
    ):
        print(table)
    for row in table.iter_rows(named=True):
        if row["queries"] and row["unranked"] == row["queries"]:
            print(
                f"warning: the run ranks none of the queries of {row['qrels']} (another dataset's qids?)",
                file=sys.stderr,
            )
    if args.csv:
        from ..io import atomic_path

        with atomic_path(args.csv) as tmp:
            table.write_csv(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
