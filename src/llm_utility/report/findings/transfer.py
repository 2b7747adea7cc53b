"""The transfer matrices (Figures 2 and 8) beside their control on the queries unknown to both LLMs
of each cell: the table and its Markdown."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from ..analysis import HUMAN
from ..tables import markdown
from .framework import Keyed, known_qids

# --- transfer on the queries unknown to both LLMs of a cell ---------------------------------------


def transfer_unknown_both(
    answers: Keyed, known: Keyed, llms: Sequence[str], dataset: str, candidates: str
) -> pl.DataFrame:
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
            unknown = known_qids(known[(dataset, col)], False)
            if row != HUMAN:
                unknown &= known_qids(known[(dataset, row)], False)
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


def transfer_unknown_markdown(table: pl.DataFrame) -> str:
    """The transfer matrices per dataset: the paper's version (all queries) beside the control on the
    queries unknown to both LLMs of each cell (with how many there are)."""
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
        for title, value in (
            ("all queries (paper)", pl.col("correct").round(1).cast(pl.String)),
            ("unknown to both", pl.col("both")),
        ):
            wide = (
                cells.select("gold_from", "llm", value.alias("v"))
                .pivot(on="llm", index="gold_from", values="v")
                .select("gold_from", *order)
            )
            parts.append(f"### {dataset} ({candidates} candidates): {title}\n\n{markdown(wide)}")
    if table.is_empty():
        parts.append("(no rows: fewer than one LLM configured)\n")
    return "\n".join(parts)
