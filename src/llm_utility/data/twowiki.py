"""2WikiMultihopQA dev (``dev.json``: one JSON array, HotpotQA's layout).

Each record::

    {"_id": "8813f87c0bdd11eba7f7acde48001122", "type": "compositional",
     "question": "Who is the mother of the director of film Polish-Russian War (Film)?",
     "context": [["Polish-Russian War (film)", ["Polish-Russian War is a 2009 Polish film ...", ...]], ...],
     "supporting_facts": [["Polish-Russian War (film)", 1], ...],
     "evidences": [["Polish-Russian War", "director", "Xawery Żuławski"], ...],
     "answer": "Małgorzata Braunek", "answer_id": "Q274304"}

Answers: ``answer``, plus its aliases from the release's ``id_aliases.json`` (``{"Q274304": [...]}``)
when that file is given and the record has ``answer_id``. Human annotations: the supporting facts,
each a (title, sentence) whose text is looked up in the record's own ``context``. A JSON array has no
useful line numbers, so errors name the record by index and ``_id``.
"""

from __future__ import annotations

import os

import polars as pl

from .evidence import distinct, evidence_frame, queries_frame
from .readers import DataFormatError, as_id, display_name, read_json_document


def load_aliases(path: str | os.PathLike, member: str | None = None) -> dict[str, list[str]]:
    doc = read_json_document(path, member)
    if not isinstance(doc, dict):
        raise DataFormatError(display_name(path, member), None, "expected an object mapping answer ids to alias lists")
    return {k: distinct(v) for k, v in doc.items() if isinstance(v, list)}


def load_2wiki_queries(
    path: str | os.PathLike,
    *,
    member: str | None = None,
    aliases: dict[str, list[str]] | None = None,
    limit: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read 2WikiMultihopQA's dev.json; return (source queries, evidence)."""
    name = display_name(path, member)
    doc = read_json_document(path, member)
    if not isinstance(doc, list):
        raise DataFormatError(name, None, f"expected a JSON array of records, found {type(doc).__name__}")
    rows, evidence, seen = [], [], {}
    for i, rec in enumerate(doc):
        if limit is not None and len(rows) >= limit:
            break
        where = f"record {i}"

        def fail(problem: str) -> DataFormatError:
            return DataFormatError(name, None, f"{where}: {problem}")

        if not isinstance(rec, dict):
            raise fail(f"expected an object, found {type(rec).__name__}")
        qid = as_id(rec.get("_id"))
        if qid is None:
            raise fail("missing or empty field '_id'")
        where = f"record {i} (_id {qid!r})"
        if qid in seen:
            raise fail(f"duplicate _id (first at record {seen[qid]})")
        seen[qid] = i
        question = rec.get("question")
        if not isinstance(question, str) or not question.strip():
            raise fail("field 'question' must be a non-empty string")
        answers = distinct([rec.get("answer")] + (aliases or {}).get(str(rec.get("answer_id")), []))
        if not answers:
            raise fail("field 'answer' is missing or empty")
        context = rec.get("context") or []
        if not isinstance(context, list):
            raise fail("field 'context' must be a list of [title, sentences]")
        sentences = {}
        for item in context:
            if not (
                isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)
            ):
                raise fail(f"context entries must be [title, [sentences]], found {item!r:.80}")
            sentences.setdefault(item[0], item[1])
        facts = rec.get("supporting_facts") or []
        if not isinstance(facts, list):
            raise fail("field 'supporting_facts' must be a list of [title, sentence id]")
        seen_facts = set()
        for fi, fact in enumerate(facts):
            if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
                raise fail(f"supporting_facts[{fi}] must be [title, sentence id], found {fact!r:.80}")
            title, sid = fact
            if (title, sid) in seen_facts:
                continue
            seen_facts.add((title, sid))
            sents = sentences.get(title)
            text = sents[sid] if sents is not None and isinstance(sid, int) and 0 <= sid < len(sents) else None
            evidence.append(
                {"qid": qid, "ref": f"f{fi}", "title": title, "text": text if isinstance(text, str) else None}
            )
        rows.append((qid, question.strip(), answers, "qa"))
    if not rows:
        raise DataFormatError(name, None, "no queries (the array is empty)")
    return queries_frame(rows), evidence_frame(evidence)
