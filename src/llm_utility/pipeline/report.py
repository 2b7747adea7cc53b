"""Jobs of the report stage: each table and figure from the files its rule declares.

Inputs come keyed (``llm_utility.workflow.keyed_inputs``): ``answers`` maps (dataset, llm, context)
to an answers file, ``gold`` maps (dataset, llm, candidates) to a gold set, ``queries`` maps a dataset
to its queries. Datasets and LLMs appear in the order of the keys.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from ..io import read_table
from ..report.notation import GroupedTable, Value
from ..schemas import GOLD_SCHEMA, QUERIES_SCHEMA

_log = logging.getLogger("llm_utility")


def read_answers(answers: Mapping[tuple[str, str, str], str]) -> dict[tuple[str, str], dict[str, pl.DataFrame]]:
    """{(dataset, llm): {context: answers}} from keyed answer files."""
    out: dict[tuple[str, str], dict[str, pl.DataFrame]] = {}
    for (dataset, llm, context), path in answers.items():
        out.setdefault((dataset, llm), {})[context] = read_table(path)
    return out


def read_gold(gold: Mapping[tuple[str, str, str], str]) -> dict[tuple[str, str, str], pl.DataFrame]:
    return {key: read_table(path, GOLD_SCHEMA) for key, path in gold.items()}


def read_queries(queries: Mapping[str, str]) -> dict[str, pl.DataFrame]:
    return {d: read_table(path, QUERIES_SCHEMA) for d, path in queries.items()}


def _unique(values) -> list:
    return list(dict.fromkeys(values))


def table1_job(
    *,
    answers,
    gold,
    queries,
    csv: str,
    md: str,
    tex: str,
    intervals: Mapping[str, Any] | None = None,
    reask: bool = False,
) -> None:
    """Table 1: percent correct with None, C, U, Human, G(C), G(U) per dataset and LLM, and with
    ``reask`` the same columns re-asked (a second block); with ``intervals`` (the ``report``
    config: resamples, bootstrap_seed, confidence), each cell's bootstrap interval too (columns lo,
    hi)."""
    from ..report.analysis import ANSWER_BLOCK, REASK_BLOCK, table1, table1_intervals
    from ..report.tables import join_intervals, write_table1

    frames = read_answers(answers)
    blocks = (ANSWER_BLOCK, REASK_BLOCK) if reask else (ANSWER_BLOCK,)
    table = table1(frames, read_gold(gold), read_queries(queries), blocks)
    if intervals:
        bounds = table1_intervals(frames, **_resampling(intervals), blocks=blocks)
        table = join_intervals(table, bounds, ["block", "dataset", "llm", "column"])
    write_table1(table, csv, md, tex, intervals)


def _resampling(intervals: Mapping[str, Any]) -> dict[str, Any]:
    """The bootstrap arguments of ``report.bootstrap`` from the ``report`` config section."""
    from ..report.findings import Resampling

    return Resampling.from_config(intervals).kwargs()


def _with_selection_intervals(scores, judgments, gold, intervals, known=None):
    from ..report.judgments import selection_intervals
    from ..report.tables import join_intervals

    if not intervals:
        return scores
    bounds = selection_intervals(judgments, gold, **_resampling(intervals), known=known)
    return join_intervals(scores, bounds, ["dataset", "llm", "method"])


def _with_known_split_intervals(split, answers, known, baseline, intervals):
    from ..report.judgments import known_split_intervals
    from ..report.tables import join_intervals

    if not intervals:
        return split
    return join_intervals(
        split, known_split_intervals(answers, known, baseline, **_resampling(intervals)), ["dataset", "llm", "source"]
    )


def empty_answers_job(*, answers, csv: str, md: str, log=_log) -> None:
    """Share of empty outputs per (dataset, LLM, context), beside Table 1."""
    from ..report.analysis import empty_answers
    from ..report.tables import write_simple_table

    table = empty_answers(read_answers(answers))
    write_simple_table(
        table,
        csv,
        md,
        title="Empty answers",
        intro="How often each LLM answered with nothing, per dataset and context. A model that says nothing scores "
        "0 everywhere: read Table 1 beside this.",
        glossary=(
            (
                "context",
                "the passages the LLM answered with: none (no passage), single (each passage of U alone), topk (C), "
                "union (U), human, gold_C_from_<llm> / gold_U_from_<llm> (that LLM's gold set among C / U)",
            ),
            ("calls, empty", "answers in that context; those empty or only whitespace"),
            ("empty_pct", "empty / calls (%)"),
        ),
        missing="no call in that context",
    )
    worst = table.sort("empty_pct", descending=True).head(1)
    if worst.height:
        log.info("most empty outputs: %s", worst.to_dicts()[0])


def topk_figure_job(*, answers, style: Mapping[str, Any], png: str, pdf: str) -> None:
    """Figure 1 left: percent correct without passages and with the same top-k, per LLM."""
    from ..report.analysis import topk_gain
    from ..report.figures import plot_topk

    plot_topk(topk_gain(read_answers(answers)), png, pdf, style=style)


def transfer_figure_job(
    *, answers, llms, candidates: str, style: Mapping[str, Any], png: str, pdf: str, csv: str
) -> None:
    """Transfer heatmaps (Figures 1 right, 2, 8): rows = whose gold set, columns = answering LLM."""
    from ..report.analysis import transfer_matrix
    from ..report.figures import plot_transfer
    from ..report.tables import write_transfer_csv

    frames = read_answers(answers)
    datasets = _unique(d for d, _ in frames)
    matrices = {d: transfer_matrix(frames, llms, d, candidates) for d in datasets}
    plot_transfer(
        matrices, png, pdf, title=f"Gold utilitarian passages ({candidates} candidates) across LLMs", style=style
    )
    write_transfer_csv(matrices, csv, candidates=candidates)


def overlap_figure_job(*, gold, queries, llms, style: Mapping[str, Any], png: str, pdf: str, csv: str) -> None:
    """Figure 3: average overlap between LLMs' gold sets (U) and with the human passages."""
    from ..report.analysis import gold_overlap
    from ..report.figures import plot_overlap
    from ..report.tables import write_overlap_csv

    gold_sets, q = read_gold(gold), read_queries(queries)
    matrices = {d: gold_overlap(gold_sets, q, llms, d, "U") for d in q}
    plot_overlap(matrices, png, pdf, title="Average overlap of gold utilitarian passages (U)", style=style)
    write_overlap_csv(matrices, csv)


# --- the judgment benchmark ----------------------------------------------------------------------


def _read_keyed(files: Mapping[Any, str]) -> dict[Any, pl.DataFrame]:
    return {key: read_table(path) for key, path in files.items()}


def _read_known(known: Mapping[tuple[str, str], str]) -> dict[tuple[str, str], pl.DataFrame]:
    return {key: read_table(path).select("qid", "known") for key, path in known.items()}


# The shares of outputs that are no judgment, beside each metric (such an output counts as a failure in
# it; the shares say how much of it is parsing and prompt copying), and the genuine share.
_OUTCOME_GLOSSARY = (
    (
        "unparsed %",
        "share of the metric's queries (named in parentheses) with an output that did not parse (pointwise: one of "
        "its outputs); it selects nothing: a miss for P, R and F1, never a correct rejection for Acc",
    ),
    (
        "echo %",
        "the same for an output that repeats its prompt (its output format, example, an acknowledgement, a passage "
        "or the instruction)",
    ),
    (
        "genuine %",
        "share of the judged queries whose every output is a judgment of the model's own (genuine, unparsed and "
        "echo sum to 100)",
    ),
)
_NONEMPTY, _EMPTY = ("unparsed_nonempty", "echo_nonempty"), ("unparsed_empty", "echo_empty")
_SELECTION_VALUES = (
    Value("f1", "F1", "max", _NONEMPTY),
    Value("unparsed_nonempty", "unparsed % (F1)"),
    Value("echo_nonempty", "echo % (F1)"),
    Value("accuracy_empty", "Acc (empty gold)", "max", _EMPTY),
    Value("unparsed_empty", "unparsed % (Acc)"),
    Value("echo_empty", "echo % (Acc)"),
    Value("genuine", "genuine %"),
)
_SELECTION_GLOSSARY = (
    (
        "F1",
        "harmonic mean of the averaged precision and recall, over the judged queries whose gold set G(C) is not empty",
    ),
    ("Acc (empty gold)", "share of the judged queries with an empty gold set where the method selected nothing"),
) + _OUTCOME_GLOSSARY
_BY_METHOD = "the methods of one LLM in one column"
_NO_QUERY = "no judged query of that kind (e.g. none with an empty gold set)"

# Tables of selection scores (``report.judgments.selection_scores``), by rule.
SELECTION_TABLES = {
    "table2": GroupedTable(
        title="Table 2: utility-based selection (F1 / Accuracy, %)",
        intro="Verbalized selection of the candidates C by each method, against the LLM's own gold set G(C), over "
        "the judged queries: F1 where the gold set is not empty, Acc where it is empty.",
        group="llm",
        index=("method",),
        across="dataset",
        values=_SELECTION_VALUES,
        glossary=_SELECTION_GLOSSARY,
        compared=_BY_METHOD,
        missing=_NO_QUERY,
        counts=("n_nonempty", "n_empty"),
    ),
    "table5": GroupedTable(
        title="Table 5: thinking in utility judgments (F1, %)",
        intro="Utility selection with thinking on and off, for the LLMs with a thinking switch, as in Table 2.",
        group="llm",
        index=("method",),
        across="dataset",
        values=_SELECTION_VALUES,
        glossary=(("(D), (T)", "pseudo-answer generated directly from the top-k / with thinking"),)
        + _SELECTION_GLOSSARY,
        compared=_BY_METHOD,
        missing=_NO_QUERY,
        counts=("n_nonempty", "n_empty"),
    ),
    "table8": GroupedTable(
        title="Table 8: known-rejection (listwise with pseudo-answer, without / with the instruction)",
        intro="Listwise selection with pseudo-answer without (listwise_pa) and with (listwise_pa_reject) the "
        "instruction to select nothing when the LLM can answer alone, over the judged queries.",
        group="dataset",
        index=("llm",),
        across="method",
        values=(
            Value("precision", "P", "", _NONEMPTY),
            Value("recall", "R", "", _NONEMPTY),
            Value("f1", "F1", "", _NONEMPTY),
            Value("unparsed_nonempty", "unparsed % (P/R/F1)"),
            Value("echo_nonempty", "echo % (P/R/F1)"),
            Value("avg_selected_unknown", "count (unknown)", "", ("unparsed_unknown", "echo_unknown")),
            Value("avg_selected_known", "count (known)", "", ("unparsed_known", "echo_known")),
            Value("unparsed_unknown", "unparsed % (unknown)"),
            Value("echo_unknown", "echo % (unknown)"),
            Value("unparsed_known", "unparsed % (known)"),
            Value("echo_known", "echo % (known)"),
            Value("avg_selected_nonempty", "count (non-empty gold)", "", _NONEMPTY),
            Value("avg_selected_empty", "count (empty gold)", "", _EMPTY),
            Value("accuracy_empty", "Acc (empty gold)", "", _EMPTY),
            Value("unparsed_empty", "unparsed % (Acc)"),
            Value("echo_empty", "echo % (Acc)"),
            Value("genuine", "genuine %"),
        ),
        glossary=(
            (
                "P, R, F1",
                "precision, recall and the harmonic mean of their averages, over queries whose gold set is "
                "not empty (%)",
            ),
            (
                "count (unknown), count (known)",
                "average number of passages selected on the queries the LLM answers wrongly / correctly with no "
                "passage (the paper's split)",
            ),
            (
                "count (non-empty gold), count (empty gold)",
                "the same by gold set, an extra split (an unknown query that no single passage helps has an empty "
                "gold set too)",
            ),
            ("Acc (empty gold)", "share of the empty-gold queries where nothing was selected (%)"),
        )
        + _OUTCOME_GLOSSARY,
        missing=_NO_QUERY,
        counts=("n_nonempty", "n_empty"),
        md_rows=("llm", "method"),
        sections=(
            ("Selection on queries with a non-empty gold set", ("precision", "recall", "f1") + _NONEMPTY),
            (
                "Passages selected on unknown and known queries (the paper's split)",
                ("avg_selected_unknown", "avg_selected_known", "unparsed_unknown", "echo_unknown")
                + ("unparsed_known", "echo_known"),
            ),
            (
                "By gold set (an extra split), and the genuine share",
                ("avg_selected_nonempty", "avg_selected_empty", "accuracy_empty") + _EMPTY + ("genuine",),
            ),
        ),
    ),
}
_OUTCOMES = ("unparsed", "echo")
_KNOWN_SPLIT_GLOSSARY = (
    ("Unk", "correct answers (%) on the judged queries the LLM answers wrongly with no passage"),
    ("Known", "the same on the judged queries it answers correctly with no passage"),
)
_BY_SOURCE = "the rows of one LLM in one column"
# A RAG table's values: correct answers on unknown and known queries, and the parse shares of what
# the row answered with.
_RAG_VALUES = (
    Value("unknown", "Unk", "max", _OUTCOMES),
    Value("known", "Known", "max", _OUTCOMES),
    Value("genuine", "genuine %"),
    Value("unparsed", "unparsed %"),
    Value("echo", "echo %"),
)
# Tables of RAG answers on the LLM's unknown and known queries against the top-k
# (``report.judgments.known_split``), by rule.
RAG_TABLES = {
    "table3": GroupedTable(
        title="Table 3: RAG with utility selections (correct %, unknown / known queries)",
        intro="Each LLM answering with the passages it selected itself against the retriever's top-k, on its "
        "unknown and known queries among the judged ones.",
        group="llm",
        index=("source",),
        across="dataset",
        values=_RAG_VALUES,
        glossary=(
            ("topk", "the retriever's top-k"),
            ("selected_<method>_from_<llm>", "the passages the LLM selected itself with that method"),
        )
        + _KNOWN_SPLIT_GLOSSARY
        + (
            (
                "genuine %, unparsed %, echo %",
                "share of the row's queries whose selection was a judgment of the model's own / did not parse / "
                "repeated its prompt; the last two select nothing, so those queries are answered with no passage",
            ),
        ),
        compared=_BY_SOURCE,
        counts=("n_unknown", "n_known"),
        missing="not a selection (the top-k row), or no judged query of that kind (e.g. no known query)",
    ),
    "table7": GroupedTable(
        title="Table 7: RAG with the top passages of utility rankings (correct %, unknown / known)",
        intro="Each LLM answering with the top passages of its own utility rankings against the retriever's top-k, "
        "on its unknown and known queries among the judged ones.",
        group="llm",
        index=("source",),
        across="dataset",
        values=_RAG_VALUES,
        glossary=(
            ("topk", "the retriever's top-k"),
            ("reranked_<method>_top<n>", "the top n passages of the LLM's own ranking by that method"),
        )
        + _KNOWN_SPLIT_GLOSSARY
        + (
            (
                "genuine %, unparsed %, echo %",
                "share of the row's queries whose ranking was a judgment of the model's own / did not parse / "
                "repeated its prompt; the last two keep the retriever's order",
            ),
        ),
        compared=_BY_SOURCE,
        counts=("n_unknown", "n_known"),
        missing="not a ranking (the top-k row), or no judged query of that kind (e.g. no known query)",
        not_genuine="An unparsed or echoed ranking keeps the retriever's order: such a row answers with the "
        "retriever's top passages.",
    ),
}


def _write_grouped(
    frame: pl.DataFrame,
    layout: GroupedTable,
    csv: str,
    md: str,
    tex: str,
    intervals: Mapping[str, Any] | None,
    intro: str = "",
) -> None:
    from ..report.tables import write_grouped_table

    write_grouped_table(frame, csv, md, tex, layout, intervals=intervals, intro=intro)


def selection_table_job(
    *,
    table: str,
    judgments,
    gold,
    csv: str,
    md: str,
    tex: str,
    known=None,
    intervals: Mapping[str, Any] | None = None,
    note: str = "",
) -> None:
    """Table 2 (selection per method, LLM and dataset: F1 on queries whose gold set (C) is not empty,
    Accuracy (nothing selected) on those where it is empty, each with its unparsed share), Table 5
    (with thinking on and off) or Table 8 (known-rejection: precision, recall, F1 (non-empty gold),
    the average number of passages selected on unknown and on known queries (the paper's caption;
    ``known``: the known flags), and, as extra columns, on queries with a non-empty and an empty
    gold set, with Acc and the unparsed shares), as ``SELECTION_TABLES[table]`` lays it out;
    ``note`` replaces the table's own introduction (a table with nothing to compare says why)."""
    from ..report.judgments import selection_scores

    judged, gold_c = _read_keyed(judgments), _read_keyed(gold)
    flags = _read_known(known) if known else None
    scores = _with_selection_intervals(selection_scores(judged, gold_c, flags), judged, gold_c, intervals, flags)
    _write_grouped(scores, SELECTION_TABLES[table], csv, md, tex, intervals, note)


def rag_table_job(
    *,
    table: str,
    answers,
    known,
    csv: str,
    md: str,
    tex: str,
    judgments=None,
    intervals: Mapping[str, Any] | None = None,
) -> None:
    """Table 3 (RAG with the LLM's own selections) or Table 7 (with the top passages of its utility
    rankings) against the top-k, on its unknown and known queries (``RAG_TABLES[table]``), with each
    row's shares of genuine, unparsed and echo outputs from ``judgments``: the selections (Table 3)
    or the LLM's own rankings (Table 7) behind the rows, keyed (dataset, llm, method); without
    them the shares are empty."""
    from ..report.judgments import known_split, with_selection_outcomes

    frames, flags = _read_keyed(answers), _read_known(known)
    split = _with_known_split_intervals(known_split(frames, flags, baseline="topk"), frames, flags, "topk", intervals)
    split = with_selection_outcomes(split, frames, _read_keyed(judgments or {}))
    _write_grouped(split, RAG_TABLES[table], csv, md, tex, intervals)


def table4_layout(k: int) -> GroupedTable:
    """Table 4's layout at the ranking cutoff ``k``."""
    return GroupedTable(
        title=f"Table 4: utility-based ranking (NDCG@{k} / Recall@{k}, %)",
        intro="Each utility ranking of the candidates C, and the retriever's own order, against the LLM's own "
        "gold set G(C), over the judged queries whose gold set is not empty.",
        group="llm",
        index=("method",),
        across="dataset",
        values=(
            Value("ndcg", f"N@{k}", "max", _OUTCOMES),
            Value("recall", f"R@{k}", "max", _OUTCOMES),
            Value("unparsed", "unparsed %"),
            Value("echo", "echo %"),
        ),
        glossary=(
            (f"N@{k}, R@{k}", f"NDCG@{k} and Recall@{k} (%)"),
            ("retriever", "the retriever's order: the baseline"),
            (
                "unparsed %, echo %",
                "share of the queries whose verbalized ranking did not parse / repeated its prompt; both keep the "
                "retriever's order",
            ),
        ),
        compared=_BY_METHOD,
        missing=_NO_QUERY,
        not_genuine="An unparsed or echoed ranking keeps the retriever's order, so such a cell scores the "
        "retriever, not the LLM.",
    )


def table4_job(
    *, rankings, gold, k: int, csv: str, md: str, tex: str, intervals: Mapping[str, Any] | None = None
) -> None:
    """Table 4: NDCG@k and Recall@k of each utility ranking against the LLM's gold set (C)."""
    from ..report.judgments import ranking_scores

    ranked, gold_c = _read_keyed(rankings), _read_keyed(gold)
    scores = ranking_scores(ranked, gold_c, k)
    if intervals:
        from ..report.judgments import ranking_intervals
        from ..report.tables import join_intervals

        scores = join_intervals(
            scores, ranking_intervals(ranked, gold_c, k, **_resampling(intervals)), ["dataset", "llm", "method"]
        )
    _write_grouped(scores, table4_layout(k), csv, md, tex, intervals)


def selection_transfer_figure_job(
    *, answers, llms, method: str, style: Mapping[str, Any], png: str, pdf: str, csv: str
) -> None:
    """Figure 9: each LLM answering with each LLM's selections (one heatmap per dataset)."""
    from ..report.analysis import matrices_long
    from ..report.figures import plot_selection_transfer
    from ..report.judgments import selection_transfer
    from ..report.tables import write_csv

    frames = _read_keyed(answers)
    datasets = _unique(d for d, _, _ in frames)
    matrices = {d: selection_transfer(frames, llms, d, method) for d in datasets}
    plot_selection_transfer(matrices, png, pdf, style, title=f"RAG with the utility selections ({method}) of each LLM")
    write_csv(matrices_long(matrices, "correct").rename({"row": "selected_from", "column": "llm"}), csv)


def perplexity_figure_job(
    *, perplexity, answers, known, style: Mapping[str, Any], png: str, pdf: str, csv: str
) -> None:
    """Figure 4: perplexity of human passages in and out of each LLM's gold set (top) and RAG with
    the human passages on unknown and known queries (bottom)."""
    from ..report.figures import plot_perplexity
    from ..report.judgments import known_split, perplexity_summary
    from ..report.tables import write_csv

    ppl = perplexity_summary(_read_keyed(perplexity))
    human = known_split(_read_keyed(answers), _read_known(known), baseline="none").filter(pl.col("source") == "human")
    plot_perplexity(ppl, human, png, pdf, style, title="Perplexity of human passages (top); RAG with them (bottom)")
    write_csv(ppl, csv)


def table6_job(
    *,
    datasets: Sequence[str],
    corpora: Sequence[str],
    queries: Sequence[str],
    passages: Sequence[str],
    coverage: Mapping[str, str],
    csv: str,
    md: str,
    tex: str,
) -> pl.DataFrame:
    """Table 6: each dataset's queries, its corpus size (Parquet metadata) and its coverage report
    (``human_coverage.json``, for the datasets whose annotations were mapped onto the corpus)."""
    from ..io import write_text
    from ..report.datasets import table6, table6_latex, table6_markdown
    from ..report.tables import write_csv, write_page

    q = [read_table(p, QUERIES_SCHEMA) for p in queries]
    sizes = [pq.ParquetFile(p).metadata.num_rows for p in passages]
    reports = {name: json.loads(open(path, encoding="utf-8").read()) for name, path in coverage.items()}
    df = table6(datasets, corpora, q, sizes, reports)
    write_csv(df, csv)
    write_page(table6_markdown(df), md)
    write_text(table6_latex(df), tex)
    return df


def explorer_job(
    *,
    dataset: str,
    candidates: str,
    queries,
    answers,
    gold,
    judgments,
    rankings,
    llms: Sequence[str],
    max_queries: int | None,
    html: str,
) -> None:
    """The explorer of one dataset (``report.explorer``): one row per (query, passage of U) of its
    first ``max_queries`` queries, as a standalone offline HTML page."""
    from ..io import write_text
    from ..report.explorer import explorer_html, explorer_table
    from ..schemas import CANDIDATES_SCHEMA

    by_llm: dict[str, dict[str, pl.DataFrame]] = {}
    for (_, llm, context), path in answers.items():
        by_llm.setdefault(llm, {})[context] = read_table(path)
    dataset_queries = read_queries(queries)[dataset]
    table = explorer_table(
        read_table(candidates, CANDIDATES_SCHEMA),
        dataset_queries,
        by_llm,
        {(llm, c): frame for (_, llm, c), frame in read_gold(gold).items()},
        # Only the columns the explorer shows (a table of an earlier run lacks later columns).
        {(llm, m): read_table(path).select("qid", "pid", "selected") for (_, llm, m), path in judgments.items()},
        {(llm, m): read_table(path).select("qid", "pid", "rank") for (_, llm, m), path in rankings.items()},
        llms,
        max_queries,
    )
    write_text(explorer_html(table, llms, dataset, total_queries=dataset_queries.height), html)
    _log.info("explorer: %s rows (%s queries) -> %s", table.height, table["qid"].n_unique(), html)
