"""Rendering the analysis frames as CSV (tidy, plain numbers), Markdown and LaTeX tables, each with a
legend of the notation it uses (``report.notation``: bold only where a method could have lost, the
marks ``ub``, ``ng`` and ``tie`` where it could not).

Markdown goes through pandas' ``to_markdown`` (tabulate) and LaTeX through pandas' Styler ``to_latex``
(booktabs rules; the dataset blocks use ``\\multirow``, so the document needs ``booktabs`` and ``multirow``).
Every file is written atomically.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

import pandas as pd
import polars as pl

from ..io import atomic_path, write_text
from .analysis import ANSWER_BLOCK, TABLE1_COLUMNS, matrices_long
from .notation import (
    MISSING,
    NOT_GENUINE,
    NOT_GENUINE_SHARE,
    UPPER_BOUND,
    GroupedTable,
    Legend,
    Value,
    cell_text,
    comparison_marks,
    interval_text,  # noqa: F401  (re-exported: the tables' interval in small type)
)

# The paper's column headers, for the LaTeX rendering.
TABLE1_TEX_HEADERS = {
    "None": "None",
    "C": r"$\mathcal{C}$",
    "U": r"$U$",
    "Human": "Human",
    "G(C)": r"$\mathcal{G}_{q}$ ($\mathcal{C}$)",
    "G(U)": r"$\mathcal{G}_{q}$ ($U$)",
}
_TEX_SPECIAL = re.compile(r"([&%$#_{}~^\\])")
_TEX_REPLACE = {"~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain ``text`` (a dataset or model name)."""
    return _TEX_SPECIAL.sub(lambda m: _TEX_REPLACE.get(m.group(1), "\\" + m.group(1)), text)


def write_csv(df: pl.DataFrame, path: str | os.PathLike) -> None:
    """Write ``df`` as CSV atomically."""
    with atomic_path(path) as tmp:
        df.write_csv(tmp)


# --- pages: each table's Markdown, and the same as HTML for the report -----------------------------------

_PAGE_STYLE = (
    "body{font-family:sans-serif;font-size:14px;margin:1em;max-width:100em}"
    "table{border-collapse:collapse;margin-bottom:1.5em}th,td{padding:3px 8px;border-bottom:1px solid #ddd}"
    "th{background:#f3f3f3}li{margin-bottom:2px}code{background:#f3f3f3;padding:0 2px}"
)
# The inline tags a table page uses (intervals, marks); every other "<" is text, e.g. "<dataset>".
_KEPT_TAGS = re.compile(r"&lt;(/?)(sub|sup)&gt;")


def _inline_html(text: str) -> str:
    import html

    text = _KEPT_TAGS.sub(r"<\1\2>", html.escape(text, quote=False))
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)


def _table_html(lines: Sequence[str]) -> str:
    """A Markdown pipe table (header, alignment row, rows) as an HTML table, keeping its alignment."""

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    align = ["right" if a.endswith(":") and not a.startswith(":") else "left" for a in cells(lines[1])]
    head = "".join(f"<th style='text-align:{a}'>{_inline_html(c)}</th>" for c, a in zip(cells(lines[0]), align))
    rows = "".join(
        "<tr>"
        + "".join(f"<td style='text-align:{a}'>{_inline_html(c)}</td>" for c, a in zip(cells(line), align))
        + "</tr>"
        for line in lines[2:]
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def page_html(text: str) -> str:
    """A table page's Markdown (headings, paragraphs, the legend's list, pipe tables: what this module
    writes) as a standalone HTML page, which the Snakemake report shows inline."""
    import html

    lines = text.splitlines()
    title = next((line.lstrip("# ") for line in lines if line.startswith("#")), "Table")
    body: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            body.append(_table_html(lines[i:j]))
            i = j
            continue
        if line.startswith("- "):
            j = i
            while j < len(lines) and lines[j].startswith("- "):
                j += 1
            body.append("<ul>" + "".join(f"<li>{_inline_html(item[2:])}</li>" for item in lines[i:j]) + "</ul>")
            i = j
            continue
        heading = re.match(r"^(#{1,4}) (.*)$", line)
        if heading:
            level = len(heading.group(1))
            body.append(f"<h{level}>{_inline_html(heading.group(2))}</h{level}>")
        elif line.strip():
            body.append(f"<p>{_inline_html(line)}</p>")
        i += 1
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_PAGE_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_page(text: str, md_path: str | os.PathLike) -> None:
    """Write a table page as Markdown to ``md_path`` and, beside it (``.html``), as HTML."""
    write_text(text, md_path)
    write_text(page_html(text), os.fspath(md_path).removesuffix(".md") + ".html")


# --- Table 1 -----------------------------------------------------------------------------------------

TABLE1_TITLE = "Table 1: answer generation with each set of passages (correct answers, %)"
TABLE1_INTRO = (
    "Share of the dataset's queries each LLM (rows) answers correctly given each set of passages (columns): "
    "has_answer for questions, the right verdict for claims. One table per dataset, with its number of queries."
)
TABLE1_GLOSSARY = (
    ("None", "no passage"),
    ("C", "the candidates: the retriever's top-k"),
    ("U", "C together with the human passages the retriever missed"),
    ("Human", "the human-annotated passages"),
    (
        "G(C), G(U)",
        "the LLM's own gold utilitarian passages among C / U: those with which it answers correctly alone "
        "and not with no passage",
    ),
)
TABLE1_REASK = (
    "re-ask",
    "a block headed '<dataset>, re-ask' answers every column again with a paraphrased instruction and the "
    "passages in reverse order; the gold sets and their sizes stay those of the answer prompt",
)
TABLE1_UPPER_BOUND = (
    "upper bound by construction: G(C) and G(U) are selected on these same queries' answers (a one-passage "
    "set replays the call that selected it, an empty set the correct no-passage answer of a known query), so "
    "the column is built to win and is never bold; in a re-ask block they are answered anew, can lose, and "
    "are ranked"
)
TABLE1_SIZE = (
    "after Human, G(C), G(U): the average number of passages per query in that set, over all queries of the "
    "dataset (an empty set counts 0)"
)


def table1_legend(df: pl.DataFrame, intervals: Mapping[str, Any] | None = None) -> Legend:
    """Table 1's legend, before its cells are formatted (they fill in ``used``)."""
    reask = "block" in df.columns and (df["block"] != ANSWER_BLOCK).any()
    return Legend(
        glossary=TABLE1_GLOSSARY + ((TABLE1_REASK,) if reask else ()),
        compared="the columns of one row (one LLM)",
        upper_bound=TABLE1_UPPER_BOUND,
        size=TABLE1_SIZE,
        missing="no answers for that column",
        intervals=intervals,
    )


def table1_blocks(df: pl.DataFrame, markup: str = "md", legend: Legend | None = None) -> dict[str, pd.DataFrame]:
    """Table 1's wide layout: one frame of formatted cells per dataset, rows = LLM; the re-ask
    block's (``block`` column ``reask``) follow, one per dataset, named ``"<dataset>, re-ask"``.

    A cell reads ``"70.46 (3.0)"`` (percent correct, then the average set size where there is one),
    followed by its interval in small type when ``df`` has ``lo``/``hi`` columns. Each row is one
    comparison (``comparison_marks``): its best is bold (``**..**`` for ``markup="md"``,
    ``\\textbf{..}`` for ``"tex"``, nothing for ``"plain"``), except the answer block's G(C) and G(U),
    upper bounds by construction, marked ``ub`` instead. ``legend`` collects the notation used.
    """
    used = legend.used if legend is not None else set()
    if "block" not in df.columns:
        df = df.with_columns(block=pl.lit(ANSWER_BLOCK))
    if "lo" not in df.columns:
        df = df.with_columns(lo=pl.lit(None, pl.Float64), hi=pl.lit(None, pl.Float64))
    blocks: dict[str, pd.DataFrame] = {}
    for (block, dataset), part in df.group_by("block", "dataset", maintain_order=True):
        name = dataset if block == ANSWER_BLOCK else f"{dataset}, re-ask"
        cells: dict[str, dict[str, str]] = {}
        for (llm,), row in part.group_by("llm", maintain_order=True):
            columns = row["column"].to_list()
            excluded = [UPPER_BOUND if block == ANSWER_BLOCK and c.startswith("G(") else "" for c in columns]
            marks = comparison_marks(row["correct"].to_list(), "max", excluded)
            for column, mark, value, size, lo, hi in zip(
                columns, marks, *(row[c].to_list() for c in ("correct", "avg_size", "lo", "hi"))
            ):
                cells.setdefault(llm, {})[column] = cell_text(value, mark, markup, lo, hi, size, used)
        wide = pd.DataFrame.from_dict(cells, orient="index")
        wide = wide.reindex(columns=[c for c in TABLE1_COLUMNS if c in wide.columns])
        if wide.isna().any().any():
            used.add(MISSING)
        blocks[name] = wide.fillna("-")
    return blocks


def _queries_of(df: pl.DataFrame) -> dict[str, int]:
    """Each dataset's number of queries (Table 1's ``n_queries``), for the block headings."""
    if "n_queries" not in df.columns:
        return {}
    return {
        d: int(n) for d, n in df.group_by("dataset", maintain_order=True).agg(pl.col("n_queries").max()).iter_rows()
    }


def table1_markdown(df: pl.DataFrame, intervals: Mapping[str, Any] | None = None) -> str:
    """Table 1 as Markdown: its title, a legend of its notation, and a table per dataset (then per
    dataset re-asked), each headed with its number of queries."""
    legend = table1_legend(df, intervals)
    queries = _queries_of(df)
    parts = []
    for name, block in table1_blocks(df, "md", legend).items():
        # disable_numparse keeps "30.00" from being reprinted as "30".
        md = block.rename_axis("LLM").to_markdown(colalign=["left"] + ["right"] * block.shape[1], disable_numparse=True)
        n = queries.get(name.removesuffix(", re-ask"))
        parts.append(f"### {name}" + (f" ({n} queries)" if n is not None else "") + f"\n\n{md}\n")
    head = f"## {TABLE1_TITLE}\n\n{TABLE1_INTRO}\n\n" + (legend.markdown() + "\n" if parts else "")
    return head + "\n".join(parts)


def table1_latex(df: pl.DataFrame, intervals: Mapping[str, Any] | None = None) -> str:
    """Table 1 as a LaTeX ``tabular``: dataset blocks (``\\multirow``) of LLM rows, best per LLM bold,
    headed by its legend as comment lines."""
    legend = table1_legend(df, intervals)
    blocks = {latex_escape(d): b.rename(index=latex_escape) for d, b in table1_blocks(df, "tex", legend).items()}
    if not blocks:
        return ""
    wide = pd.concat(blocks)
    wide.columns = pd.Index([TABLE1_TEX_HEADERS[c] for c in wide.columns], name="Generator")
    # The columns' name lands in the header cell above the LLM names, keeping one header row.
    return _latex(wide, TABLE1_TITLE, legend)


def _latex(wide: pd.DataFrame, title: str, legend: Legend) -> str:
    """A wide table in LaTeX (booktabs, a rule between row blocks), under its title and legend as comments."""
    tex = wide.style.to_latex(
        hrules=True,
        clines="skip-last;data",
        multirow_align="t",
        column_format="l" * wide.index.nlevels + "r" * wide.shape[1],
    )
    # A block separator right before the bottom rule would double it.
    tex = re.sub(r"\\cline\{[0-9-]+\}\n(?=\\bottomrule)", "", tex)
    return f"% {title}\n{legend.latex()}{tex}"


def write_table1(
    df: pl.DataFrame,
    csv_path: str | os.PathLike,
    md_path: str | os.PathLike,
    tex_path: str | os.PathLike,
    intervals: Mapping[str, Any] | None = None,
) -> None:
    """Write Table 1 (the frame from ``analysis.table1``): tidy CSV, Markdown and LaTeX, the last two
    with a legend (``intervals``: the bootstrap settings the legend names)."""
    write_csv(df, csv_path)
    write_page(table1_markdown(df, intervals), md_path)
    write_text(table1_latex(df, intervals), tex_path)


def write_transfer_csv(
    matrices: Mapping[str, pl.DataFrame], path: str | os.PathLike, candidates: str | None = None
) -> None:
    """Write transfer matrices (``analysis.transfer_matrix``, keyed by dataset) as one tidy CSV.

    Columns: dataset, [candidates,] gold_from (whose gold set), llm (the answering LLM), correct (%).
    """
    long = matrices_long(matrices, "correct").rename({"row": "gold_from", "column": "llm"})
    if candidates is not None:
        long = long.select("dataset", pl.lit(candidates).alias("candidates"), pl.exclude("dataset"))
    write_csv(long, path)


def write_overlap_csv(matrices: Mapping[str, pl.DataFrame], path: str | os.PathLike) -> None:
    """Write overlap matrices (``analysis.gold_overlap``, keyed by dataset) as one tidy CSV.

    Columns: dataset, set_a, set_b, avg_overlap (passages per query; set_a == set_b gives the size).
    """
    write_csv(matrices_long(matrices, "avg_overlap").rename({"row": "set_a", "column": "set_b"}), path)


# --- plain tables --------------------------------------------------------------------------------------


def markdown(df: pl.DataFrame, floatfmt: str = ".2f") -> str:
    """A tidy frame as one Markdown table (nulls shown as ``n/a``)."""
    frame = df.to_pandas()
    # tabulate's missingval applies to None only, not to the NaN pandas turns nulls into.
    frame = frame.astype(object).where(frame.notna(), None)
    return frame.to_markdown(index=False, floatfmt=floatfmt, missingval="n/a") + "\n"


def simple_markdown(
    df: pl.DataFrame,
    *,
    title: str,
    intro: str = "",
    glossary: Sequence[tuple[str, str]] = (),
    missing: str = "not defined here",
    floatfmt: str = ".2f",
) -> str:
    """A tidy frame as a Markdown page: its ``title``, ``intro``, a legend (the ``glossary`` of its
    columns, and ``n/a`` where a value is missing) and the table."""
    legend = Legend(glossary=glossary, missing=missing, missing_term="n/a")
    if any(df[c].null_count() or (df[c].dtype.is_float() and df[c].is_nan().any()) for c in df.columns):
        legend.used.add(MISSING)
    head = f"## {title}\n\n" + (f"{intro}\n\n" if intro else "")
    return head + (legend.markdown() + "\n" if not df.is_empty() else "") + markdown(df, floatfmt)


def with_legend(page: str, glossary: Sequence[tuple[str, str]]) -> str:
    """A Markdown page with a legend of ``glossary`` (term, meaning) inserted before its first
    table's heading (``### ``), or at its end where it has none."""
    legend = Legend(glossary=glossary).markdown()
    head, sep, rest = page.partition("\n### ")
    return f"{head}\n{legend}{sep}{rest}" if sep else f"{page}\n{legend}"


def write_simple_table(df: pl.DataFrame, csv_path: str | os.PathLike, md_path: str | os.PathLike, **page) -> None:
    """Write a tidy frame as CSV, and as one Markdown table; with ``page`` (``simple_markdown``'s
    title, intro, glossary...), headed by a title and a legend."""
    write_csv(df, csv_path)
    write_page(simple_markdown(df, **page) if page else markdown(df), md_path)


# --- grouped tables (Tables 2 to 5, 7 and 8) -----------------------------------------------------------


def _values(values: Sequence[Value | tuple]) -> list[Value]:
    return [v if isinstance(v, Value) else Value(*v) for v in values]


def _failure_share(part: pl.DataFrame, failures: Sequence[str]) -> list[float | None]:
    """Per row, the sum of its ``failures`` shares: null where the row has none of them (a row that
    is no judgment, e.g. the retriever's top-k)."""
    present = [c for c in failures if c in part.columns]
    if not present:
        return [None] * part.height
    shares = [pl.col(c).fill_nan(None) for c in present]
    total = pl.when(pl.any_horizontal(s.is_not_null() for s in shares)).then(pl.sum_horizontal(shares))
    return part.select(total.alias("share"))["share"].to_list()


def grouped_cells(
    df: pl.DataFrame,
    compare: Sequence[str],
    values: Sequence[Value | tuple],
    markup: str = "md",
    legend: Legend | None = None,
) -> list[dict[str, str]]:
    """Each row's formatted cell per value column (keyed by the column): the rows sharing
    ``compare``'s values are one comparison per column (``comparison_marks``: bold, or the marks
    ``ng`` and ``tie``); each value is followed by its interval where ``df`` has
    ``<column>_lo``/``<column>_hi``. ``legend`` collects the notation used."""
    used = legend.used if legend is not None else set()
    cells: list[dict[str, str]] = [{} for _ in range(df.height)]
    indexed = df.with_row_index("_row")
    for _, part in indexed.group_by(list(compare), maintain_order=True):
        rows = part["_row"].to_list()
        for value in _values(values):
            shown = part[value.column].fill_nan(None).to_list()
            excluded = [
                NOT_GENUINE if share is not None and share >= NOT_GENUINE_SHARE else ""
                for share in _failure_share(part, value.failures)
            ]
            marks = comparison_marks(shown, value.best, excluded)
            has_bounds = f"{value.column}_lo" in part.columns
            bounds = (
                part.select(f"{value.column}_lo", f"{value.column}_hi").iter_rows()
                if has_bounds
                else repeat((None, None))
            )
            for row, v, mark, (lo, hi) in zip(rows, shown, marks, bounds):
                cells[row][value.column] = cell_text(v, mark, markup, lo, hi, used=used)
    return cells


def grouped_blocks(
    df: pl.DataFrame,
    *,
    group: str,
    index: Sequence[str],
    across: str,
    values: Sequence[Value | tuple],
    markup: str = "md",
    legend: Legend | None = None,
) -> dict[str, pd.DataFrame]:
    """The paper's layout of a tidy frame: one block of formatted cells per ``group`` value (e.g. an
    LLM), rows = the ``index`` columns (e.g. method), columns = each value column for each value of
    ``across`` (e.g. ``F1 NQ``, ``F1 HotpotQA``, then ``Acc NQ``...).

    ``values`` lists ``Value``s (or (column, header, best) tuples): the cells of one column of a
    block are one comparison (``grouped_cells``), as the paper marks the best method per LLM. Nulls
    print as ``-``."""
    values = _values(values)
    used = legend.used if legend is not None else set()
    cells = grouped_cells(df, [group, across], values, markup, legend)
    blocks: dict[str, pd.DataFrame] = {}
    indexed = df.with_row_index("_row")
    for (name,), part in indexed.group_by(group, maintain_order=True):
        wide: dict[tuple, dict[str, str]] = {}
        for value in values:
            for (key,), sub in part.group_by(across, maintain_order=True):
                header = f"{value.header} {key}" if key != name else value.header
                for row, keys in zip(sub["_row"].to_list(), sub.select(index).iter_rows()):
                    wide.setdefault(keys, {})[header] = cells[row][value.column]
        frame = pd.DataFrame.from_dict(wide, orient="index")
        if frame.isna().any().any():
            used.add(MISSING)
        frame = frame.fillna("-")
        frame.index = (
            pd.MultiIndex.from_tuples(frame.index, names=list(index)) if len(index) > 1 else [r[0] for r in frame.index]
        )
        blocks[str(name)] = frame
    return blocks


def dataset_blocks(
    df: pl.DataFrame, layout: GroupedTable, markup: str = "md", legend: Legend | None = None
) -> dict[str, dict[str, pd.DataFrame]]:
    """The Markdown layout of a grouped table: per dataset, one frame per section of ``layout`` (one
    named "" without sections), rows ``layout.md_rows`` as columns, then the values' headers."""
    values = _values(layout.values)
    rows = layout.rows()
    cells = grouped_cells(df, [layout.group, layout.across], values, markup, legend)
    sections = layout.sections or (("", tuple(v.column for v in values)),)
    headers = {v.column: v.header for v in values}
    blocks: dict[str, dict[str, pd.DataFrame]] = {}
    indexed = df.with_row_index("_row")
    for (dataset,), part in indexed.group_by("dataset", maintain_order=True):
        keys = part.select(rows).to_pandas()
        for heading, columns in sections:
            texts = pd.DataFrame(
                [{headers[c]: cells[r][c] for c in columns} for r in part["_row"].to_list()], index=keys.index
            )
            blocks.setdefault(str(dataset), {})[heading] = pd.concat([keys, texts], axis=1)
    return blocks


def _judged_queries(df: pl.DataFrame, dataset: str, counts: Sequence[str]) -> str:
    """`` (n judged queries)`` for a dataset's heading: each row's sum of ``counts``, a range where
    the rows differ; empty without them."""
    if not counts or not set(counts) <= set(df.columns):
        return ""
    totals = df.filter(pl.col("dataset") == dataset).select(pl.sum_horizontal(counts))[:, 0].drop_nulls()
    if totals.is_empty():
        return ""
    low, high = int(totals.min()), int(totals.max())
    n = str(low) if low == high else f"{low} to {high}"
    return f" ({n} judged {'query' if n == '1' else 'queries'})"


def grouped_markdown(
    df: pl.DataFrame, layout: GroupedTable, intervals: Mapping[str, Any] | None = None, intro: str = ""
) -> str:
    """A grouped table as Markdown: title, ``intro`` (default: the layout's), legend, then a table per
    dataset (and section)."""
    legend = layout.legend(intervals)
    body = []
    for dataset, sections in dataset_blocks(df, layout, "md", legend).items():
        body.append(f"### {dataset}{_judged_queries(df, dataset, layout.counts)}\n")
        for heading, frame in sections.items():
            n_keys = len(layout.rows())
            md = frame.to_markdown(
                index=False,
                colalign=["left"] * n_keys + ["right"] * (frame.shape[1] - n_keys),
                disable_numparse=True,
            )
            body.append((f"#### {heading}\n\n" if heading else "") + f"{md}\n")
    parts = [f"## {layout.title}\n", f"{intro or layout.intro}\n"]
    if df.is_empty():
        parts.append("(no rows: nothing configured for this table)\n")
    else:
        parts.append(legend.markdown())
    return "\n".join(parts + body)


def grouped_latex(df: pl.DataFrame, layout: GroupedTable, intervals: Mapping[str, Any] | None = None) -> str:
    """A grouped table as a LaTeX ``tabular`` in the paper's layout (``grouped_blocks``), headed by
    its title and legend as comment lines."""
    legend = layout.legend(intervals)
    tex_blocks = {
        latex_escape(k): v
        for k, v in grouped_blocks(
            df,
            group=layout.group,
            index=list(layout.index),
            across=layout.across,
            values=layout.values,
            markup="tex",
            legend=legend,
        ).items()
    }
    if not tex_blocks:
        return f"% {layout.title}: no rows\n"
    wide = pd.concat(tex_blocks)
    wide.columns = [latex_escape(c) for c in wide.columns]
    wide.index = wide.index.map(
        lambda idx: tuple(latex_escape(str(i)) for i in (idx if isinstance(idx, tuple) else (idx,)))
    )
    return _latex(wide, layout.title, legend)


def write_grouped_table(
    df: pl.DataFrame,
    csv_path: str | os.PathLike,
    md_path: str | os.PathLike,
    tex_path: str | os.PathLike,
    layout: GroupedTable,
    *,
    intervals: Mapping[str, Any] | None = None,
    intro: str = "",
) -> None:
    """Write a tidy frame as CSV, Markdown (``grouped_markdown``: a table per dataset) and LaTeX
    (``grouped_latex``: the paper's layout), both with a legend; ``intro`` replaces the layout's
    (a table with nothing to compare says why)."""
    write_csv(df, csv_path)
    write_page(grouped_markdown(df, layout, intervals, intro), md_path)
    write_text(grouped_latex(df, layout, intervals), tex_path)


def join_intervals(df: pl.DataFrame, intervals: pl.DataFrame, on: Sequence[str]) -> pl.DataFrame:
    """``df`` with the interval columns of ``intervals`` joined on ``on``, each bound pair placed right
    after its value: ``v_lo``/``v_hi`` after ``v``, and plain ``lo``/``hi`` after ``correct`` (Table 1)."""
    joined = df.join(intervals, on=list(on), how="left", maintain_order="left")
    order: list[str] = []
    for column in df.columns:
        order.append(column)
        pair = ("lo", "hi") if column == "correct" and "lo" in intervals.columns else (f"{column}_lo", f"{column}_hi")
        order += [c for c in pair if c in intervals.columns and c not in on]
    return joined.select(order + [c for c in joined.columns if c not in order])
