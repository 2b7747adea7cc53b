"""Paper Table 6: dataset statistics (queries, human passages per query, corpus and its size, coverage).

Columns of ``table6`` (the CSV): ``dataset``, ``queries``, ``human_per_query`` (human passages per
query, averaged over all queries; the paper's "#Qrels/q"), ``corpus``, ``corpus_passages`` (the
paper's "#Corpus"), ``coverage`` (% of the dataset's human annotations mapped onto corpus passages,
from ``human_coverage.json``; empty for datasets that name their passages directly), ``unmapped``
(annotations that map to no passage). The Markdown and LaTeX files show the paper's layout: one
column per dataset, one row per statistic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import polars as pl

from .notation import Legend
from .tables import latex_escape

TABLE6_ROWS = {
    "queries": "#Queries",
    "human_per_query": "#Qrels/q",
    "corpus": "Corpus",
    "corpus_passages": "#Corpus",
    "coverage": "Coverage (%)",
}


def table6(
    datasets: Sequence[str],
    corpora: Sequence[str],
    queries: Sequence[pl.DataFrame],
    corpus_sizes: Sequence[int],
    coverage: Mapping[str, Mapping],
) -> pl.DataFrame:
    rows = []
    for name, corpus, q, size in zip(datasets, corpora, queries, corpus_sizes, strict=True):
        report = coverage.get(name)
        rows.append(
            {
                "dataset": name,
                "queries": q.height,
                "human_per_query": round(float(q["human_pids"].list.len().mean()), 2) if q.height else None,
                "corpus": corpus,
                "corpus_passages": size,
                "coverage": None if not report or report["coverage"] is None else round(100 * report["coverage"], 2),
                "unmapped": report["unmapped"] if report else None,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "dataset": pl.String,
            "queries": pl.Int64,
            "human_per_query": pl.Float64,
            "corpus": pl.String,
            "corpus_passages": pl.Int64,
            "coverage": pl.Float64,
            "unmapped": pl.Int64,
        },
        orient="row",
    )


def _size(n: int) -> str:
    """Corpus sizes as the paper prints them: 32M, 8.8M; small corpora in full."""
    if n >= 10_000_000:
        return f"{n / 1e6:.0f}M"
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n:,}"


def _wide(df: pl.DataFrame) -> pd.DataFrame:
    cells = {}
    for r in df.iter_rows(named=True):
        cells[r["dataset"]] = {
            TABLE6_ROWS["queries"]: f"{r['queries']:,}",
            TABLE6_ROWS["human_per_query"]: "-" if r["human_per_query"] is None else f"{r['human_per_query']:.2f}",
            TABLE6_ROWS["corpus"]: r["corpus"],
            TABLE6_ROWS["corpus_passages"]: _size(r["corpus_passages"]),
            TABLE6_ROWS["coverage"]: "-" if r["coverage"] is None else f"{r['coverage']:.2f}",
        }
    return pd.DataFrame(cells).reindex(list(TABLE6_ROWS.values()))


TABLE6_TITLE = "Table 6: the datasets"
TABLE6_GLOSSARY = (
    ("#Queries", "the dataset's queries"),
    ("#Qrels/q", "human-annotated passages per query, averaged over all queries"),
    ("Corpus, #Corpus", "the corpus the passages come from, and its number of passages (M: millions)"),
    ("Coverage (%)", "share of the benchmark's human annotations that map onto a corpus passage"),
    ("-", "not applicable: the dataset names its human passages by passage id (no mapping), or has no query"),
)


def table6_markdown(df: pl.DataFrame) -> str:
    """Table 6 as Markdown: title, legend, then the paper's layout (one column per dataset)."""
    wide = _wide(df)
    table = wide.to_markdown(colalign=["left"] + ["right"] * wide.shape[1], disable_numparse=True)
    return f"## {TABLE6_TITLE}\n\n{Legend(glossary=TABLE6_GLOSSARY).markdown()}\n{table}\n"


def table6_latex(df: pl.DataFrame) -> str:
    wide = _wide(df)
    wide.columns = [latex_escape(c) for c in wide.columns]
    wide = wide.map(latex_escape)
    wide.index = [latex_escape(i) for i in wide.index]
    return wide.style.to_latex(hrules=True, column_format="l" + "r" * wide.shape[1])
