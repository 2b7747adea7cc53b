"""findings.md and findings.html: the summary of what the run establishes (``summary``), the table of
every finding with its legend, the re-ask twins beside their originals, how each finding is built and
the datasets it covers, then each finding's cells."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from ..tables import markdown
from .framework import BY_CONSTRUCTION, NOT_RUN, TOO_FEW, VERDICTS, Resampling
from .summary import numbers, summarize, summary_html, summary_markdown

# --- rendering ------------------------------------------------------------------------------------


def _interval_text(entry: Mapping[str, Any]) -> str:
    return "-" if entry.get("effect") is None else numbers(entry)


def _cells_text(entry: Mapping[str, Any]) -> str:
    counts = entry["cell_verdicts"]
    parts = [f"{counts[v]} {v}" for v in (*VERDICTS, BY_CONSTRUCTION) if counts.get(v)]
    out = ", ".join(parts) if parts else "-"
    outside = sum(not c.get("in_scope", True) for c in entry["cells"])
    return f"{out} (+{outside} out of scope)" if outside else out


def _survives_text(value: bool | None) -> str:
    return {True: "yes", False: "no", None: "n/a"}[value]


def _note(e: Mapping[str, Any]) -> str:
    """A finding's note in the table: what it is the twin or control of, whether it survives, where
    its verdict comes from, then the entry's own note (or, where it did not run, why). A finding that
    cannot fail says so by its verdict; its ``description`` is findings.json's."""
    parts = []
    if "twin_of" in e:
        parts.append(f"re-ask twin of {e['twin_of']}; survives: {_survives_text(e.get('survives'))}")
    if "control_of" in e:
        parts.append(f"control of {e['control_of']}; survives: {_survives_text(e.get('survives'))}")
    if e.get("overall") == "cells":
        parts.append("verdict from its cells")
    parts.append(e["reason"] if e["status"] != "run" else e.get("note") or "")
    return "; ".join(t for t in parts if t)


def _ci(confidence: float) -> str:
    """The interval's column label at ``report.confidence``: ``[95% CI]``."""
    return f"[{100 * confidence:g}% CI]"


def summary_frame(entries: Sequence[Mapping[str, Any]], confidence: float = 0.95) -> pl.DataFrame:
    """One row per finding: finding, source, effect [CI], expected, verdict, construction, cells, note."""
    effect = f"effect {_ci(confidence)}"
    rows = [
        {
            "finding": e["id"],
            "source": e["source"],
            effect: _interval_text(e),
            "expected": e["expected"],
            "verdict": e["verdict"],
            "construction": e.get("construction", ""),
            "cells": _cells_text(e),
            "note": _note(e),
        }
        for e in entries
    ]
    columns = ("finding", "source", effect, "expected", "verdict", "construction", "cells", "note")
    return pl.DataFrame(rows, schema={k: pl.String for k in columns})


def construction_frame(entries: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """One row per finding: how its quantities are built (construction and why) and its scope: the
    paper's datasets the claim covers and the configured datasets pooled (and shown only)."""
    rows = []
    for e in entries:
        scope = e.get("paper_datasets", "all")
        rows.append(
            {
                "finding": e["id"],
                "construction": e.get("construction", ""),
                "why": e.get("construction_reason", ""),
                "paper's datasets": scope if isinstance(scope, str) else ", ".join(scope),
                "pooled": ", ".join(e.get("datasets", [])) or "-",
                "shown, out of scope": ", ".join(e.get("datasets_out_of_scope", [])) or "-",
            }
        )
    columns = ("finding", "construction", "why", "paper's datasets", "pooled", "shown, out of scope")
    return pl.DataFrame(rows, schema={k: pl.String for k in columns})


def reask_frame(entries: Sequence[Mapping[str, Any]], confidence: float = 0.95) -> pl.DataFrame:
    """Each finding with a re-ask twin beside its twin: effect [CI] and verdict of both, and whether
    the original's effect survives the re-ask."""
    by_id = {e["id"]: e for e in entries}
    original, reask = f"original {_ci(confidence)}", f"re-ask {_ci(confidence)}"
    rows = []
    for e in entries:
        twin = by_id.get(e.get("reask_twin", ""))
        if twin is None:
            continue
        rows.append(
            {
                "finding": e["id"],
                "construction": e.get("construction", ""),
                original: _interval_text(e),
                "original verdict": e["verdict"],
                reask: _interval_text(twin),
                "re-ask verdict": twin["verdict"]
                if twin["status"] == "run"
                else f"{twin['verdict']} ({twin['reason']})",
                "survives": _survives_text(twin.get("survives")),
            }
        )
    columns = (
        "finding",
        "construction",
        original,
        "original verdict",
        reask,
        "re-ask verdict",
        "survives",
    )
    return pl.DataFrame(rows, schema={k: pl.String for k in columns})


_CELL_FIELDS = (
    "effect",
    "lo",
    "hi",
    "n",
    "interval",
    "verdict",
    "note",
    "in_scope",
    "comparison",
    "known_left_out",
    "parse",
)
_PARSE_COLUMN = "genuine/unparsed/echo %"


def _parse_text(parse: Mapping[str, Mapping[str, float]] | None) -> str | None:
    """A judgment cell's parse shares as one cell: ``listwise_pa 33/0/67; pointwise_pa 100/0/0``."""
    if not parse:
        return None
    return "; ".join(f"{label} {s['genuine']:.0f}/{s['unparsed']:.0f}/{s['echo']:.0f}" for label, s in parse.items())


def cells_frame(entry: Mapping[str, Any]) -> pl.DataFrame:
    """A finding's cells as a frame: its keys, then effect, lo, hi, n, verdict, in_scope, the
    comparison a cell used (where a finding chooses one), the parse shares of the judgments a
    judgment finding's cell compares, note."""
    if not entry["cells"]:
        return pl.DataFrame()
    parses = [_parse_text(c.get("parse")) for c in entry["cells"]]
    frame = pl.DataFrame(
        [{k: v for k, v in c.items() if k != "parse"} for c in entry["cells"]], infer_schema_length=None
    )
    if any(p is not None for p in parses):
        frame = frame.with_columns(pl.Series(_PARSE_COLUMN, parses, dtype=pl.String))
    keys = [c for c in frame.columns if c not in (*_CELL_FIELDS, _PARSE_COLUMN)]
    extra = [c for c in ("in_scope", "known_left_out", "comparison", _PARSE_COLUMN) if c in frame.columns]
    return frame.select(*keys, "effect", "lo", "hi", "n", "verdict", *extra, "note")


def _legend(rs: Resampling) -> tuple[str, list[tuple[str, str]], str]:
    """The table's legend: what a row gives, one line per verdict, then the other columns."""
    head = (
        f"Each finding's effect with its {100 * rs.confidence:g}% bootstrap interval over queries ({rs.n_resamples} "
        f"resamples, seed {rs.seed}), pooled over the datasets in the claim's scope, each weighted equally. Verdicts:"
    )
    verdicts = [
        ("holds", "the interval lies entirely on the claimed side of `expected` (inside its band)"),
        ("reversed", "it lies entirely on the other side (outside the band)"),
        ("inconclusive", "it contains `expected` (straddles an edge of the band), or there is none"),
        (TOO_FEW, f"fewer than {rs.min_queries} queries (report.min_queries): shown, not judged"),
        (BY_CONSTRUCTION, "how the compared quantities are built fixes the sign: described, not tested"),
        (NOT_RUN, "inputs not configured, or no dataset in the claim's scope (the note says which)"),
    ]
    tail = (
        "`partly_built_in`: part of the effect is built in (a gold set replays the call that selected it); read it "
        "beside its re-ask twin `<id>_reask`. `survives`: the twin or control holds where the finding holds (n/a: "
        "it does not hold, or the twin did not run). `cells`: the per-dataset/LLM verdicts, listed below. "
        "Non-genuine outputs did not parse or repeated the prompt (an echo)."
    )
    return head, verdicts, tail


_REASK_HEAD = (
    "Each finding with a built-in part beside its twin on the re-ask answers: the same contexts answered again under "
    "a paraphrased instruction, passages in reverse order, gold sets and known flags unchanged, so no evaluated call "
    "is the one that selected its passages."
)


def findings_markdown(entries: Sequence[Mapping[str, Any]], rs: Resampling, llms: Sequence[str] = ()) -> str:
    """findings.md: what the run establishes (the summary), the table of every finding with its
    legend, the re-ask twins beside their originals, how each finding is built and which datasets it
    covers, then each finding's cells. ``llms`` are named in the summary."""
    head, verdicts, tail = _legend(rs)
    parts = [
        "# Findings\n",
        "## What this run establishes\n",
        summary_markdown(summarize(entries, min_queries=rs.min_queries, llms=llms)),
        "## Every finding\n",
        head + "\n\n" + "\n".join(f"- `{v}`: {text}." for v, text in verdicts) + "\n\n" + tail + "\n",
        markdown(summary_frame(entries, rs.confidence)),
    ]
    reask = reask_frame(entries, rs.confidence)
    if reask.height:
        parts += ["## Re-ask control\n\n" + _REASK_HEAD + "\n", markdown(reask)]
    parts.append("## How each finding is built, and the datasets it covers\n")
    parts.append(markdown(construction_frame(entries)))
    for e in entries:
        if not e["cells"]:
            continue
        parts.append(
            f"## {e['id']}\n\n{e['claim']}. Unit: {e['unit']}; expected {e['expected']}. Read from {e['source']}. "
            f"Construction: {e.get('construction', '')}"
            f"{': ' + e['construction_reason'] if e.get('construction_reason') else ''}.\n"
        )
        parts.append(markdown(cells_frame(e), floatfmt=".1f"))
    return "\n".join(parts)


def findings_html(entries: Sequence[Mapping[str, Any]], rs: Resampling, llms: Sequence[str] = ()) -> str:
    """findings.html: the same as findings.md, as a page the Snakemake report shows inline."""
    import html

    def table(frame: pl.DataFrame) -> str:
        return frame.to_pandas().to_html(
            index=False, na_rep="n/a", float_format=lambda x: f"{x:.1f}", border=0, classes="findings"
        )

    def text(line: str) -> str:
        """Escaped, with `code` spans."""
        pieces = html.escape(line).split("`")
        return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))

    head, verdicts, tail = _legend(rs)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Findings</title><style>"
        "body{font-family:sans-serif;font-size:14px;margin:1em}table{border-collapse:collapse;margin-bottom:1.5em}"
        "th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left}th{background:#f3f3f3}"
        "p,ul{max-width:60em}"
        "</style></head><body>",
        "<h1>Findings</h1>",
        "<h2>What this run establishes</h2>",
        summary_html(summarize(entries, min_queries=rs.min_queries, llms=llms)),
        "<h2>Every finding</h2>",
        f"<p>{text(head)}</p><ul>"
        + "".join(f"<li><code>{html.escape(v)}</code>: {text(t)}.</li>" for v, t in verdicts)
        + f"</ul><p>{text(tail)}</p>",
        table(summary_frame(entries, rs.confidence)),
    ]
    reask = reask_frame(entries, rs.confidence)
    if reask.height:
        parts += ["<h2>Re-ask control</h2>", f"<p>{text(_REASK_HEAD)}</p>", table(reask)]
    parts += ["<h2>How each finding is built, and the datasets it covers</h2>", table(construction_frame(entries))]
    for e in entries:
        if e["cells"]:
            parts.append(
                f"<h2>{html.escape(e['id'])}</h2><p>{html.escape(e['claim'])}. Unit: {html.escape(e['unit'])}; "
                f"expected {html.escape(e['expected'])}. Read from {html.escape(e['source'])}. "
                f"Construction: {html.escape(e.get('construction', ''))}.</p>"
            )
            parts.append(table(cells_frame(e)))
    parts.append("</body></html>\n")
    return "\n".join(parts)
