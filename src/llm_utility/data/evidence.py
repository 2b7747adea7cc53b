"""The tables every benchmark loader returns, before human passages are mapped onto a corpus.

``SOURCE_QUERIES_SCHEMA``: qid, question, answers (for MS MARCO: its long answers, before extraction),
task. ``EVIDENCE_SCHEMA``: one row per distinct human annotation of a query (a KILT provenance span, a
2Wiki supporting sentence, an MS MARCO selected passage or qrel), with whatever locates it: a Wikipedia
page id and paragraph/character span (KILT), a title and a text (2Wiki), a text (MS MARCO QnA), or the
corpus passage id itself (MS MARCO passage-ranking qrels). ``ref`` names
the annotation inside its query (``o0p1`` = output 0, provenance 1) so coverage reports can point
at it.
"""

from __future__ import annotations

import polars as pl

from ..schemas import EVIDENCE_SCHEMA, SOURCE_QUERIES_SCHEMA

EVIDENCE_FIELDS = tuple(EVIDENCE_SCHEMA)


def evidence_frame(rows: list[dict]) -> pl.DataFrame:
    """Rows (dicts with any subset of the evidence fields) as an EVIDENCE_SCHEMA table."""
    full = [{f: r.get(f) for f in EVIDENCE_FIELDS} for r in rows]
    return pl.DataFrame(full, schema=EVIDENCE_SCHEMA, orient="row") if full else pl.DataFrame(schema=EVIDENCE_SCHEMA)


def queries_frame(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SOURCE_QUERIES_SCHEMA, orient="row")


def distinct(values) -> list[str]:
    """Distinct non-empty stripped strings, first occurrence first."""
    out: dict[str, None] = {}
    for v in values:
        if isinstance(v, str) and v.strip():
            out.setdefault(v.strip(), None)
    return list(out)
