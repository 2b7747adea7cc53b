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

The paper's MS MARCO-FQA (Table 6: 3,199 queries, 1.1 human passages per query, the 8.8M-passage
collection) is the passage-ranking dev set's small query set instead, ``load_msmarco_ranking_queries``:
the queries of ``queries.dev.small.tsv`` (6,980) with their ``qrels.dev.small.tsv`` judgments (7,437,
1.07 per query: the human passages, already collection ids), restricted to the factual query types,
which the QnA dev file gives (``query_type``, joined on ``query_id``: the passage-ranking queries are
the QnA queries under the same ids), with the QnA file's long answers for the extraction. About 47% of
MS MARCO's queries are of the four factual types (its paper: NUMERIC 26.1%, ENTITY 8.8%, LOCATION
6.2%, PERSON 5.8%), so about 3,270 of the 6,980, of which 3,199 keep an extracted answer in the paper.
The whole QnA dev set would give about 25,000 factual queries with answers instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import polars as pl

from llm_utility.metrics import has_answer
from llm_utility.schemas import EXTRACTION_SCHEMA

from .evidence import distinct, evidence_frame, queries_frame
from .readers import DataFormatError, as_id, display_name, iter_lines, read_json_document

NO_ANSWER = "No Answer Present."


def _column(doc: dict, key: str, name: str) -> dict:
    col = doc.get(key)
    if not isinstance(col, dict):
        raise DataFormatError(name, None, f"expected MS MARCO's columnar layout: no column {key!r}")
    return col


def _qna_rows(path: str | os.PathLike, member: str | None) -> tuple[str, dict, Iterator[tuple[str, dict]]]:
    """(display name, the document, each row as (qid, its fields)) of MS MARCO QnA's columnar JSON,
    in row order; rows without a query_id, or with one seen before, stop with an error naming them."""
    name = display_name(path, member)
    doc = read_json_document(path, member)
    if not isinstance(doc, dict):
        raise DataFormatError(name, None, "expected MS MARCO's columnar JSON object")
    queries, ids, types = (_column(doc, k, name) for k in ("query", "query_id", "query_type"))
    answers, passages = _column(doc, "answers", name), _column(doc, "passages", name)
    well_formed = doc.get("wellFormedAnswers") or {}

    def order(k: str):
        return (0, int(k)) if k.isdigit() else (1, k)

    def rows() -> Iterator[tuple[str, dict]]:
        seen: dict[str, str] = {}
        for row in sorted(queries, key=order):
            qid = as_id(ids.get(row))
            if qid is None:
                raise DataFormatError(name, None, f"row {row!r}: missing query_id")
            if qid in seen:
                raise DataFormatError(name, None, f"row {row!r}: duplicate query_id {qid} (first at row {seen[qid]!r})")
            seen[qid] = row
            extra = well_formed.get(row)
            longs = distinct(
                [a for a in (answers.get(row) or []) if a != NO_ANSWER] + (extra if isinstance(extra, list) else [])
            )
            yield (
                qid,
                {
                    "row": row,
                    "query": queries[row],
                    "type": types.get(row),
                    "longs": longs,
                    "passages": passages.get(row) or [],
                },
            )

    return name, doc, rows()


def _factual(name: str, qid: str, fields: dict, wanted: set[str]) -> bool:
    qtype = fields["type"]
    if not isinstance(qtype, str):
        raise DataFormatError(name, None, f"row {fields['row']!r} (query_id {qid}): missing query_type")
    return qtype.upper() in wanted


def load_msmarco_queries(
    path: str | os.PathLike,
    *,
    query_types: list[str],
    member: str | None = None,
    limit: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """Read MS MARCO QnA; return (source queries with long answers, evidence, counts of dropped queries)."""
    name, _, qna = _qna_rows(path, member)
    wanted = {t.upper() for t in query_types}
    rows, evidence = [], []
    dropped = {"query type": 0, "no answer": 0}
    for qid, fields in qna:
        if limit is not None and len(rows) >= limit:
            break

        def fail(problem: str) -> DataFormatError:
            return DataFormatError(name, None, f"row {fields['row']!r}: {problem}")

        if not _factual(name, qid, fields, wanted):
            dropped["query type"] += 1
            continue
        question = fields["query"]
        if not isinstance(question, str) or not question.strip():
            raise fail("query must be a non-empty string")
        if not fields["longs"]:
            dropped["no answer"] += 1
            continue
        psgs = fields["passages"]
        if not isinstance(psgs, list):
            raise fail("passages must be a list")
        for pi, p in enumerate(psgs):
            if not isinstance(p, dict) or not isinstance(p.get("passage_text"), str):
                raise fail(f"passages[{pi}] needs a 'passage_text' string")
            if p.get("is_selected") == 1:
                evidence.append({"qid": qid, "ref": f"p{pi}", "text": p["passage_text"]})
        rows.append((qid, question.strip(), fields["longs"], "qa"))
    if not rows:
        raise DataFormatError(name, None, f"no queries left after the filter (dropped: {dropped})")
    return queries_frame(rows), evidence_frame(evidence), dropped


def read_ranking_queries(path: str | os.PathLike, member: str | None = None) -> list[tuple[str, str]]:
    """(qid, query) of a passage-ranking queries file (``queries.dev.small.tsv``: qid<TAB>query, no header)."""
    name, out, seen = display_name(path, member), [], {}
    for lineno, line in iter_lines(path, member):
        if not line.strip():
            continue
        qid, sep, query = line.partition("\t")
        if not sep or not qid.strip().isdigit() or not query.strip():
            raise DataFormatError(name, lineno, "expected `qid<TAB>query` with a numeric qid")
        if qid in seen:
            raise DataFormatError(name, lineno, f"duplicate qid {qid} (first on line {seen[qid]})")
        seen[qid] = lineno
        out.append((qid.strip(), query.strip()))
    return out


def read_qrels(path: str | os.PathLike, member: str | None = None) -> dict[str, list[str]]:
    """Relevant passage ids per qid of a TREC qrels file (``qrels.dev.small.tsv``: qid 0 pid relevance,
    tab- or space-separated), in file order; relevance 0 is not relevant."""
    name, out = display_name(path, member), {}
    for lineno, line in iter_lines(path, member):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 4 or not fields[3].lstrip("-").isdigit():
            raise DataFormatError(
                name, lineno, "expected TREC qrels `qid iteration pid relevance` (4 fields, integer relevance)"
            )
        qid, _, pid, rel = fields
        if int(rel) > 0 and pid not in out.setdefault(qid, []):
            out[qid].append(pid)
    return out


def load_msmarco_ranking_queries(
    qna_path: str | os.PathLike,
    queries_path: str | os.PathLike,
    qrels_path: str | os.PathLike,
    *,
    query_types: list[str],
    qna_member: str | None = None,
    queries_member: str | None = None,
    qrels_member: str | None = None,
    limit: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """MS MARCO-FQA as the paper built it (module docstring): the passage-ranking queries with qrels,
    of the factual types, with QnA's long answers. Return (source queries, evidence with the qrels'
    collection pids, counts of dropped queries)."""
    ranking = read_ranking_queries(queries_path, queries_member)
    qrels = read_qrels(qrels_path, qrels_member)
    wanted_ids = {qid for qid, _ in ranking}
    qna_name, _, qna = _qna_rows(qna_path, qna_member)
    qna_by_id = {qid: fields for qid, fields in qna if qid in wanted_ids}
    wanted = {t.upper() for t in query_types}
    rows, evidence = [], []
    dropped = {"not in the QnA file": 0, "query type": 0, "no answer": 0, "no relevant passage": 0}
    for qid, query in ranking:
        if limit is not None and len(rows) >= limit:
            break
        fields = qna_by_id.get(qid)
        if fields is None:
            dropped["not in the QnA file"] += 1
        elif not _factual(qna_name, qid, fields, wanted):
            dropped["query type"] += 1
        elif not fields["longs"]:
            dropped["no answer"] += 1
        elif not qrels.get(qid):
            dropped["no relevant passage"] += 1
        else:
            rows.append((qid, query, fields["longs"], "qa"))
            evidence += [{"qid": qid, "ref": f"qrel{j}", "pid": pid} for j, pid in enumerate(qrels[qid])]
    if not rows:
        raise DataFormatError(
            display_name(queries_path, queries_member),
            None,
            f"no queries left after joining {qna_name} and the filter (dropped: {dropped}); the queries "
            "file and the QnA file must be the same split (dev), whose query ids they share",
        )
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
    return [
        (q, question, a)
        for q, question, answers in queries.select("qid", "question", "answers").iter_rows()
        for a in answers
    ]


def short_answer_table(requests: list[tuple[str, str, str]], outputs: list[str]) -> pl.DataFrame:
    rows = []
    for (qid, _, long_answer), output in zip(requests, outputs, strict=True):
        short = parse_extraction(output, long_answer)
        rows.append((qid, long_answer, output, short, short is not None))
    return pl.DataFrame(rows, schema=EXTRACTION_SCHEMA, orient="row")
