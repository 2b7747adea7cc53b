"""The explorer: the examples behind the numbers, one row per (query, passage of U).

After the tables, a researcher reads examples: why does this passage help one LLM and not another?
``explorer_table`` joins, for one dataset, what the workflow already wrote about each candidate
passage of each query:

- the query (question, gold answers) and the passage (rank in C or human-only, title, text);
- per LLM, its answer with no passage and with this passage alone, and whether each is correct
  (the ``none`` and ``single`` answer contexts);
- per LLM, the passage's marks: in G(C), in G(U), the judgment methods that selected it, its rank
  under each ranking method;
- across LLMs: which LLMs it is useful to (in their G(U)), and whether they disagree ("useful to
  one LLM only").

Inputs are the workflow's tables, already read (as in ``report.analysis``):
``candidates`` (``CANDIDATES_SCHEMA``: qid, pid, rank, in_C, human, title, text), ``queries``
(qid, question, answers), ``answers[llm][context]`` for the contexts ``none`` and ``single``,
``gold[(llm, "C" | "U")]`` (qid, pid), ``judgments[(llm, method)]`` (qid, pid, selected, ...) and
``rankings[(llm, method)]`` (qid, pid, rank, ...). Judgments and rankings cover the judged queries
only (``judgments.max_queries``); a passage of another query has no mark there.

The table's size is bounded by ``max_queries`` (the first queries of the dataset, in its order): at
paper scale a dataset of thousands of queries times 20+ passages would make an HTML page of hundreds
of MB, so the explorer shows a sample.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import polars as pl

Frames = Mapping[tuple[str, str], pl.DataFrame]


def _key(*parts: str) -> str:
    return " ".join(parts)


def explorer_table(
    candidates: pl.DataFrame,
    queries: pl.DataFrame,
    answers: Mapping[str, Mapping[str, pl.DataFrame]],
    gold: Frames,
    judgments: Frames,
    rankings: Frames,
    llms: Sequence[str],
    max_queries: int | None = None,
) -> pl.DataFrame:
    """One row per (query, passage of U), in query order then rank (human-only passages last)."""
    order = queries.select("qid").with_row_index("query_order")
    if max_queries is not None:
        order = order.head(max_queries)
    rows = (
        candidates.join(order, on="qid", how="inner")
        .join(queries.select("qid", "question", "answers"), on="qid", how="left")
        .sort("query_order", pl.col("rank").fill_null(1 << 30), "pid")
        .select("qid", "question", "answers", "pid", "rank", "in_C", "human", "title", "text")
    )
    for llm in llms:
        none = answers[llm]["none"].select(
            "qid", pl.col("output").alias(_key(llm, "none")), pl.col("correct").alias(_key(llm, "none correct"))
        )
        single = (
            answers[llm]["single"]
            .filter(pl.col("pids").list.len() == 1)
            .select(
                "qid",
                pl.col("pids").list.first().alias("pid"),
                pl.col("output").alias(_key(llm, "passage")),
                pl.col("correct").alias(_key(llm, "passage correct")),
            )
            .unique(["qid", "pid"], keep="first")
        )
        rows = rows.join(none, on="qid", how="left").join(single, on=["qid", "pid"], how="left")
        for cands in ("C", "U"):
            marks = (
                gold[(llm, cands)]
                .select("qid", "pid")
                .unique()
                .with_columns(pl.lit(True).alias(_key(llm, f"G({cands})")))
            )
            rows = rows.join(marks, on=["qid", "pid"], how="left").with_columns(
                pl.col(_key(llm, f"G({cands})")).fill_null(False)
            )
        selected = [
            frame.filter(pl.col("selected")).select("qid", "pid", pl.lit(method).alias("method"))
            for (owner, method), frame in judgments.items()
            if owner == llm
        ]
        selected_by = (
            pl.concat(selected)
            .group_by("qid", "pid")
            .agg(pl.col("method").sort().str.join(", ").alias(_key(llm, "selected by")))
            if selected
            else pl.DataFrame(schema={"qid": pl.String, "pid": pl.String, _key(llm, "selected by"): pl.String})
        )
        ranked = [
            frame.select("qid", "pid", pl.format("{} {}", pl.lit(method), pl.col("rank")).alias("mark"))
            for (owner, method), frame in rankings.items()
            if owner == llm
        ]
        ranks = (
            pl.concat(ranked).group_by("qid", "pid").agg(pl.col("mark").sort().str.join(", ").alias(_key(llm, "ranks")))
            if ranked
            else pl.DataFrame(schema={"qid": pl.String, "pid": pl.String, _key(llm, "ranks"): pl.String})
        )
        rows = rows.join(selected_by, on=["qid", "pid"], how="left").join(ranks, on=["qid", "pid"], how="left")
    useful = pl.concat_list(
        [pl.when(pl.col(_key(llm, "G(U)"))).then(pl.lit(llm)).otherwise(None) for llm in llms]
    ).list.drop_nulls()
    rows = rows.with_columns(useful.alias("useful to"))
    n = len(llms)
    return rows.with_columns(
        pl.when(pl.col("useful to").list.len() == 0)
        .then(pl.lit("useful to none"))
        .when(pl.col("useful to").list.len() == n)
        .then(pl.lit("useful to all" if n > 1 else "useful"))
        .when(pl.col("useful to").list.len() == 1)
        .then(pl.format("useful to {} only", pl.col("useful to").list.first()))
        .otherwise(pl.format("useful to {}", pl.col("useful to").list.join(", ")))
        .alias("agreement"),
        pl.col("useful to").list.join(", "),
    )


def _mark(ok: pl.Expr, text: pl.Expr) -> pl.Expr:
    return (
        pl.when(ok.is_null())
        .then(pl.lit(""))
        .otherwise(pl.format("{} {}", pl.when(ok).then(pl.lit("✓")).otherwise(pl.lit("✗")), text))
    )


def explorer_display(table: pl.DataFrame, llms: Sequence[str]) -> pl.DataFrame:
    """The explorer as it is shown: one text column per question, answer and mark, so that the
    page's search and per-column filters read them ("✓"/"✗" for correct/wrong answers; "useful to
    <llm> only" for a passage that helps one LLM alone)."""
    columns = [
        pl.col("question"),
        pl.col("answers").list.join(" | ").alias("gold answers"),
        pl.when(pl.col("in_C")).then(pl.format("C #{}", pl.col("rank"))).otherwise(pl.lit("U only")).alias("passage"),
        pl.when(pl.col("human")).then(pl.lit("human")).otherwise(pl.lit("")).alias("human"),
        pl.col("agreement"),
    ]
    for llm in llms:
        columns += [
            _mark(pl.col(_key(llm, "none correct")), pl.col(_key(llm, "none"))).alias(f"{llm}: no passage"),
            _mark(pl.col(_key(llm, "passage correct")), pl.col(_key(llm, "passage"))).alias(f"{llm}: this passage"),
            pl.concat_str(
                [
                    pl.when(pl.col(_key(llm, "G(C)"))).then(pl.lit("G(C) ")).otherwise(pl.lit("")),
                    pl.when(pl.col(_key(llm, "G(U)"))).then(pl.lit("G(U) ")).otherwise(pl.lit("")),
                    pl.when(pl.col(_key(llm, "selected by")).is_not_null())
                    .then(pl.format("selected: {} ", pl.col(_key(llm, "selected by"))))
                    .otherwise(pl.lit("")),
                    pl.when(pl.col(_key(llm, "ranks")).is_not_null())
                    .then(pl.format("ranks: {}", pl.col(_key(llm, "ranks"))))
                    .otherwise(pl.lit("")),
                ]
            )
            .str.strip_chars()
            .alias(f"{llm}: marks"),
        ]
    columns.append(pl.format("{}: {}", pl.col("title"), pl.col("text")).alias("text"))
    return table.select(columns)


def explorer_html(table: pl.DataFrame, llms: Sequence[str], title: str, **options) -> str:
    """A standalone HTML page of the explorer that works offline: itables' DataTables bundle is
    inlined (``connected=False``), with the global search and a search box per column (filter by an
    LLM's marks, or "only" in the agreement column for the passages useful to one LLM only)."""
    # Only here: the tables and figures never need itables. Its offline mode inlines the DataTables
    # bundle it ships (what `init_notebook_mode(connected=False)` shows in a notebook) once per page.
    from itables import options as itables_options
    from itables import to_html_datatable
    from itables.javascript import generate_init_offline_itables_html

    shown = explorer_display(table, llms)
    body = to_html_datatable(
        shown,
        caption=title,
        connected=False,
        column_filters="header",
        showIndex=False,
        pageLength=25,
        lengthMenu=[10, 25, 100, 500],
        classes="display compact",
        maxBytes=0,
        layout={"topStart": "pageLength", "topEnd": "search", "bottomStart": "info", "bottomEnd": "paging"},
        display_logo_when_loading=False,
        # One table per page: a fixed id, where itables draws a random one, so the same table
        # makes the same page, byte for byte.
        **{"table_id": "explorer", **options},
    )
    bundle = generate_init_offline_itables_html(itables_options.dt_bundle)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title></head>\n<body>\n{bundle}\n{body}\n</body></html>\n"
    )
