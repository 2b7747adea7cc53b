"""MS MARCO QnA v2.1 dev (``dev_v2.1.json[.gz]``) into MS MARCO-FQA, and its entity-answer extraction.

The file is one JSON object of parallel columns keyed by a row number::

    {"query": {"0": "what is the capital of peru"}, "query_id": {"0": 1102432},
     "query_type": {"0": "LOCATION"}, "answers": {"0": ["The capital of Peru is Lima."]},
     "wellFormedAnswers": {"0": "[]"},
     "passages": {"0": [{"is_selected": 1, "passage_text": "...", "url": "..."}, ...]}}

The paper's factual filter keeps query types LOCATION, NUMERIC, PERSON and ENTITY (``query_types``)
and queries with an answer (``"No Answer Present."`` is none). The long answers (``answers`` and
list-valued ``wellFormedAnswers``) go to an LLM that extracts a short entity answer (paper Figure 7;
prompt ``extract_answer`` in config/prompts.yaml); ``parse_extraction`` keeps an extraction only when
it is non-empty, not NONE, and occurs in its long answer (DPR has_answer), so the short answer is a
span of what the annotators wrote. Human passages are the ``is_selected`` passages; their texts are
mapped to MS MARCO passage-collection ids by ``mapping.map_by_text``.
"""

from __future__ import annotations

import os
import re

import polars as pl

from llm_utility.metrics import has_answer

from .evidence import distinct, evidence_frame, queries_frame
from .readers import DataFormatError, as_id, display_name, read_json_document

NO_ANSWER = "No Answer Present."
EXTRACTION_SCHEMA = {
    "qid": pl.String,
    "long_answer": pl.String,
    "output": pl.String,
    "short_answer": pl.String,
    "kept": pl.Boolean,
}


def _column(doc: dict, key: str, name: str) -> dict:
    col = doc.get(key)
    if not isinstance(col, dict):
        raise DataFormatError(name, None, f"expected MS MARCO's columnar layout: no column {key!r}")
    return col


def load_msmarco_queries(
    path: str | os.PathLike,
    *,
    query_types: list[str],
    member: str | None = None,
    limit: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """Read MS MARCO QnA; return (source queries with long answers, evidence, counts of dropped queries)."""
    name = display_name(path, member)
    doc = read_json_document(path, member)
    if not isinstance(doc, dict):
        raise DataFormatError(name, None, "expected MS MARCO's columnar JSON object")
    queries, ids, types = (_column(doc, k, name) for k in ("query", "query_id", "query_type"))
    answers, passages = _column(doc, "answers", name), _column(doc, "passages", name)
    well_formed = doc.get("wellFormedAnswers") or {}
    wanted = {t.upper() for t in query_types}
    rows, evidence, seen = [], [], {}
    dropped = {"query type": 0, "no answer": 0}

    def order(k: str):
        return (0, int(k)) if k.isdigit() else (1, k)

    for row in sorted(queries, key=order):
        if limit is not None and len(rows) >= limit:
            break

        def fail(problem: str) -> DataFormatError:
            return DataFormatError(name, None, f"row {row!r}: {problem}")

        qid = as_id(ids.get(row))
        if qid is None:
            raise fail("missing query_id")
        if qid in seen:
            raise fail(f"duplicate query_id {qid} (first at row {seen[qid]!r})")
        seen[qid] = row
        qtype = types.get(row)
        if not isinstance(qtype, str):
            raise fail("missing query_type")
        if qtype.upper() not in wanted:
            dropped["query type"] += 1
            continue
        question = queries[row]
        if not isinstance(question, str) or not question.strip():
            raise fail("query must be a non-empty string")
        extra = well_formed.get(row)
        longs = distinct([a for a in (answers.get(row) or []) if a != NO_ANSWER] + (extra if isinstance(extra, list) else []))
        if not longs:
            dropped["no answer"] += 1
            continue
        psgs = passages.get(row) or []
        if not isinstance(psgs, list):
            raise fail("passages must be a list")
        for pi, p in enumerate(psgs):
            if not isinstance(p, dict) or not isinstance(p.get("passage_text"), str):
                raise fail(f"passages[{pi}] needs a 'passage_text' string")
            if p.get("is_selected") == 1:
                evidence.append({"qid": qid, "ref": f"p{pi}", "text": p["passage_text"]})
        rows.append((qid, question.strip(), longs, "qa"))
    if not rows:
        raise DataFormatError(name, None, f"no queries left after the filter (dropped: {dropped})")
    return queries_frame(rows), evidence_frame(evidence), dropped


_QUOTES = "\"'“”‘’`"


def parse_extraction(output: str, long_answer: str) -> str | None:
    """The short answer in an extraction ``output``, or None (NONE, empty, or not in the long answer)."""
    line = next((ln for ln in output.strip().splitlines() if ln.strip()), "")
    line = re.sub(r"^(short answer|answer)\s*:\s*", "", line.strip(), flags=re.I)
    short = line.strip().strip(_QUOTES).rstrip(".").strip().strip(_QUOTES).strip()
    if not short or short.upper() == "NONE":
        return None
    return short if has_answer(long_answer, [short]) else None


def extraction_requests(queries: pl.DataFrame) -> list[tuple[str, str, str]]:
    """(qid, question, long answer) for every long answer of every query."""
    return [(q, question, a) for q, question, answers in queries.select("qid", "question", "answers").iter_rows() for a in answers]


def short_answer_table(requests: list[tuple[str, str, str]], outputs: list[str]) -> pl.DataFrame:
    rows = []
    for (qid, _, long_answer), output in zip(requests, outputs, strict=True):
        short = parse_extraction(output, long_answer)
        rows.append((qid, long_answer, output, short, short is not None))
    return pl.DataFrame(rows, schema=EXTRACTION_SCHEMA, orient="row")
