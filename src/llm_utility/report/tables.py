"""Rendering the analysis frames as CSV (tidy, plain numbers), Markdown and LaTeX tables.

Markdown goes through pandas' ``to_markdown`` (tabulate) and LaTeX through pandas' Styler ``to_latex``
(booktabs rules; the dataset blocks use ``\\multirow``, so the document needs ``booktabs`` and ``multirow``).
Every file is written atomically.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from itertools import repeat

import pandas as pd
import polars as pl

from ..io import atomic_path, write_text
from .analysis import ANSWER_BLOCK, TABLE1_COLUMNS, matrices_long

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


def table1_blocks(df: pl.DataFrame, markup: str = "md") -> dict[str, pd.DataFrame]:
    """Table 1's wide layout: one frame of formatted cells per dataset, rows = LLM; the re-ask
    block's (``block`` column ``reask``) follow, one per dataset, named ``"<dataset>, re-ask"``.

    A cell reads ``"70.46 (3.0)"`` (percent correct, then the average set size where there is one),
    followed by its interval in small type when ``df`` has ``lo``/``hi`` columns. The
    best value of each row (all of them on a tie at the printed precision) is bold: ``**..**``
    for ``markup="md"``, ``\\textbf{..}`` for ``"tex"``, nothing for ``"plain"``.
    """
    bold = {"md": "**{}**", "tex": r"\textbf{{{}}}", "plain": "{}"}[markup]
    if "block" not in df.columns:
        df = df.with_columns(block=pl.lit(ANSWER_BLOCK))
    shown = df.with_columns(
        value=pl.col("correct").round(2),
        best=pl.col("correct").round(2) == pl.col("correct").round(2).max().over("block", "dataset", "llm"),
    )
    blocks: dict[str, pd.DataFrame] = {}
    for (block, dataset), part in shown.group_by("block", "dataset", maintain_order=True):
        name = dataset if block == ANSWER_BLOCK else f"{dataset}, re-ask"
        cells: dict[str, dict[str, str]] = {}
        bounds = part.select("lo", "hi").iter_rows() if "lo" in part.columns else repeat((None, None))
        for (llm, column, value, size, best), (lo, hi) in zip(
            part.select("llm", "column", "value", "avg_size", "best").iter_rows(), bounds
        ):
            text = bold.format(f"{value:.2f}") if best else f"{value:.2f}"
            if size is not None:
                text += f" ({size:.1f})"
            cells.setdefault(llm, {})[column] = text + interval_text(lo, hi, markup)
        wide = pd.DataFrame.from_dict(cells, orient="index")
        blocks[name] = wide.reindex(columns=[c for c in TABLE1_COLUMNS if c in wide.columns]).fillna("-")
    return blocks


def table1_markdown(df: pl.DataFrame) -> str:
    """Table 1 as Markdown: a heading and a table per dataset (then per dataset re-asked), best per
    LLM in bold."""
    parts = []
    for dataset, block in table1_blocks(df, "md").items():
        # disable_numparse keeps "30.00" from being reprinted as "30".
        md = block.rename_axis("LLM").to_markdown(colalign=["left"] + ["right"] * block.shape[1], disable_numparse=True)
        parts.append(f"### {dataset}\n\n{md}\n")
    return "\n".join(parts)


def table1_latex(df: pl.DataFrame) -> str:
    """Table 1 as a LaTeX ``tabular``: dataset blocks (``\\multirow``) of LLM rows, best per LLM bold."""
    blocks = {latex_escape(d): b.rename(index=latex_escape) for d, b in table1_blocks(df, "tex").items()}
    if not blocks:
        return ""
    wide = pd.concat(blocks)
    wide.columns = pd.Index([TABLE1_TEX_HEADERS[c] for c in wide.columns], name="Generator")
    # The columns' name lands in the header cell above the LLM names, keeping one header row.
    tex = wide.style.to_latex(
        hrules=True, clines="skip-last;data", multirow_align="t", column_format="ll" + "r" * wide.shape[1]
    )
    # A block separator right before the bottom rule would double it.
    return re.sub(r"\\cline\{[0-9-]+\}\n(?=\\bottomrule)", "", tex)


def write_table1(
    df: pl.DataFrame,
    csv_path: str | os.PathLike,
    md_path: str | os.PathLike,
    tex_path: str | os.PathLike,
) -> None:
    """Write Table 1 (the frame from ``analysis.table1``): tidy CSV, Markdown and LaTeX."""
    write_csv(df, csv_path)
    write_text(table1_markdown(df), md_path)
    write_text(table1_latex(df), tex_path)


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


def markdown(df: pl.DataFrame, floatfmt: str = ".2f") -> str:
    """A tidy frame as one Markdown table (nulls shown as ``n/a``)."""
    frame = df.to_pandas()
    # tabulate's missingval applies to None only, not to the NaN pandas turns nulls into.
    frame = frame.astype(object).where(frame.notna(), None)
    return frame.to_markdown(index=False, floatfmt=floatfmt, missingval="n/a") + "\n"


def write_simple_table(df: pl.DataFrame, csv_path: str | os.PathLike, md_path: str | os.PathLike) -> None:
    """Write a tidy frame as CSV and as one Markdown table."""
    write_csv(df, csv_path)
    write_text(markdown(df), md_path)


def grouped_blocks(
    df: pl.DataFrame,
    *,
    group: str,
    index: Sequence[str],
    across: str,
    values: Sequence[tuple[str, str, str]],
    markup: str = "md",
) -> dict[str, pd.DataFrame]:
    """Wide layout of a tidy frame: one block of formatted cells per ``group`` value (e.g. an LLM),
    rows = the ``index`` columns (e.g. method), columns = each value column for each value of
    ``across`` (e.g. ``F1 NQ``, ``F1 HotpotQA``, then ``Acc NQ``...).

    ``values`` lists (column, header, best) with best "max", "min" or "": the best cell of each
    column of a block (all of them on a tie at two decimals) is bold, as the paper marks the best
    method per LLM. Nulls print as ``-``. Where ``df`` has ``<column>_lo``/``<column>_hi`` columns, each
    value is followed by its interval in small type (``interval_text``).
    """
    bold = {"md": "**{}**", "tex": r"\textbf{{{}}}", "plain": "{}"}[markup]
    blocks: dict[str, pd.DataFrame] = {}
    for (name,), part in df.group_by(group, maintain_order=True):
        cells: dict[tuple, dict[str, str]] = {}
        for column, header, best in values:
            for (key,), sub in part.group_by(across, maintain_order=True):
                shown = sub[column].fill_nan(None).round(2)  # a mean over no query is "-", not "nan"
                target = None
                if best and shown.drop_nulls().len():
                    target = shown.max() if best == "max" else shown.min()
                has_bounds = f"{column}_lo" in sub.columns
                bounds = sub.select(f"{column}_lo", f"{column}_hi").iter_rows() if has_bounds else repeat((None, None))
                for row, value, (lo, hi) in zip(sub.select(index).iter_rows(), shown.to_list(), bounds):
                    text = "-" if value is None else f"{value:.2f}"
                    if value is not None and target is not None and value == target and sub.height > 1:
                        text = bold.format(text)
                    if value is not None:
                        text += interval_text(lo, hi, markup)
                    cells.setdefault(row, {})[f"{header} {key}" if key != name else header] = text
        frame = pd.DataFrame.from_dict(cells, orient="index").fillna("-")
        frame.index = (
            pd.MultiIndex.from_tuples(frame.index, names=list(index)) if len(index) > 1 else [r[0] for r in frame.index]
        )
        blocks[str(name)] = frame
    return blocks


def write_grouped_table(
    df: pl.DataFrame,
    csv_path: str | os.PathLike,
    md_path: str | os.PathLike,
    tex_path: str | os.PathLike,
    *,
    title: str,
    note: str = "",
    **layout,
) -> None:
    """Write a tidy frame as CSV, and as Markdown and LaTeX in the ``grouped_blocks`` layout."""
    write_csv(df, csv_path)
    parts = [f"## {title}\n"] + ([f"{note}\n"] if note else [])
    for name, block in grouped_blocks(df, markup="md", **layout).items():
        block = block.reset_index(names=list(layout["index"]))  # one column per index level
        md = block.to_markdown(
            index=False,
            colalign=["left"] * len(layout["index"]) + ["right"] * (block.shape[1] - len(layout["index"])),
            disable_numparse=True,
        )
        parts.append(f"### {name}\n\n{md}\n")
    if df.is_empty():
        parts.append("(no rows: nothing configured for this table)\n")
    write_text("\n".join(parts), md_path)
    tex_blocks = {latex_escape(k): v for k, v in grouped_blocks(df, markup="tex", **layout).items()}
    if not tex_blocks:
        write_text(f"% {title}: no rows\n", tex_path)
        return
    wide = pd.concat(tex_blocks)
    wide.columns = [latex_escape(c) for c in wide.columns]
    wide.index = wide.index.map(
        lambda idx: tuple(latex_escape(str(i)) for i in (idx if isinstance(idx, tuple) else (idx,)))
    )
    tex = wide.style.to_latex(
        hrules=True,
        clines="skip-last;data",
        multirow_align="t",
        column_format="l" * wide.index.nlevels + "r" * wide.shape[1],
    )
    write_text(f"% {title}\n" + re.sub(r"\\cline\{[0-9-]+\}\n(?=\\bottomrule)", "", tex), tex_path)


# --- confidence intervals in the tables -----------------------------------------------------------
_SMALL = {"md": " <sub>[{}, {}]</sub>", "tex": r" {{\scriptsize [{}, {}]}}", "plain": " [{}, {}]"}


def interval_text(lo: float | None, hi: float | None, markup: str = "md") -> str:
    """A value's interval in small type (``<sub>`` in Markdown, ``\\scriptsize`` in LaTeX), one
    decimal; empty when there is none (intervals off, or too few queries)."""
    if lo is None or hi is None or lo != lo or hi != hi:
        return ""
    return _SMALL[markup].format(f"{lo:.1f}", f"{hi:.1f}")


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
