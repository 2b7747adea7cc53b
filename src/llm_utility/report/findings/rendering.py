"""findings.md and findings.html: the summary table of every finding, then each finding's cells."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from ..tables import markdown
from .framework import NOT_RUN, VERDICTS, Resampling

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
