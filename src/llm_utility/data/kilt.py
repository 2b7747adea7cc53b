"""KILT: the task files (NQ, TriviaQA, HotpotQA, FEVER dev) and the knowledge source.

Task files are JSON Lines, one query per line (the KILT README's data format)::

    {"id": "-5004457603684974952", "input": "who is playing the halftime show at super bowl 2016",
     "output": [{"answer": "Coldplay", "provenance": [{"wikipedia_id": "45267196",
        "title": "Super Bowl 50 halftime show", "start_paragraph_id": 1, "start_character": 178,
        "end_paragraph_id": 1, "end_character": 186, "bleu_score": 1.0}]},
      {"answer": "", "provenance": [...]}, ...], "meta": {}}

``load_kilt_queries`` keeps the distinct non-empty ``answer`` strings (FEVER: exactly one of SUPPORTS
or REFUTES, task ``fact``) and every distinct provenance span of every output as the query's human
annotations. KILT's TriviaQA files carry only ids: give TriviaQA's own ``wikipedia-dev.json``
(``questions``), which supplies each question and its answer aliases.

The knowledge source (``kilt_knowledgesource.json``) holds one Wikipedia page per line:
``{"_id", "wikipedia_id", "wikipedia_title", "text": [title, paragraph 1, ...], "anchors", ...}``.
``chunk_page`` splits a page into passages of ``words`` words the way DPR split Wikipedia: the
page's text (paragraphs 1.., section headings ``Section::::...`` dropped, list markers ``BULLET::::-``
removed) is cut into consecutive blocks of ``words`` whitespace-separated words that may cross
paragraphs but never pages; the last block of a page is shorter. Each passage keeps its page id and
the span it covers in KILT coordinates (start paragraph and character, end paragraph and character,
end exclusive), which is what makes the mapping of provenance spans exact.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping

import polars as pl
import pyarrow as pa

from ..schemas import SHARD_ARROW
from .evidence import distinct, evidence_frame, queries_frame
from .readers import DataFormatError, as_id, decode_line, display_name, iter_jsonl, parse_json_line, read_json_document

FACT_LABELS = ("SUPPORTS", "REFUTES")
_HEADING = "Section::::"
_BULLET = re.compile(r"^BULLET::::-?\s*")
_WORD = re.compile(r"\S+")


# --- task files ----------------------------------------------------------------------------------


def load_triviaqa_questions(path: str | os.PathLike, member: str | None = None) -> dict[str, tuple[str, list[str]]]:
    """TriviaQA's ``{"Data": [{"QuestionId", "Question", "Answer": {"Value", "Aliases"}}]}`` by id."""
    name = display_name(path, member)
    doc = read_json_document(path, member)
    if not isinstance(doc, dict) or not isinstance(doc.get("Data"), list):
        raise DataFormatError(name, None, "expected TriviaQA's layout: an object with a 'Data' list")
    out = {}
    for i, rec in enumerate(doc["Data"]):
        qid = as_id(rec.get("QuestionId")) if isinstance(rec, dict) else None
        question = rec.get("Question") if isinstance(rec, dict) else None
        if qid is None or not isinstance(question, str):
            raise DataFormatError(name, None, f"Data[{i}]: needs 'QuestionId' and 'Question'")
        answer = rec.get("Answer") or {}
        out[qid] = (question, distinct([answer.get("Value"), *(answer.get("Aliases") or [])]))
    return out


def load_kilt_queries(
    path: str | os.PathLike,
    *,
    task: str,
    questions: Mapping[str, tuple[str, list[str]]] | None = None,
    limit: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read a KILT task file; return (source queries, evidence). See the module doc.

    Malformed lines stop with file, line and reason: bad JSON, no id, no question (no ``input`` and
    no TriviaQA question for the id), no ``output`` list, no non-empty answer, a FEVER label other
    than SUPPORTS/REFUTES or two different labels, a duplicate id, a provenance that is not an object.
    A provenance without a page id or span is kept (with what it has) and counted as unmapped later.
    """
    name = str(path)
    rows, evidence, seen = [], [], {}
    for lineno, obj in iter_jsonl(path):
        if limit is not None and len(rows) >= limit:
            break

        def fail(problem: str) -> DataFormatError:
            return DataFormatError(name, lineno, problem)

        if not isinstance(obj, dict):
            raise fail(f"expected a JSON object, found {type(obj).__name__}")
        qid = as_id(obj.get("id"))
        if qid is None:
            raise fail("missing or empty field 'id'")
        if qid in seen:
            raise fail(f"duplicate id {qid!r} (first on line {seen[qid]})")
        seen[qid] = lineno
        question = obj.get("input")
        extra_answers: list[str] = []
        if questions is not None and qid in questions:
            trivia_question, extra_answers = questions[qid]
            question = question if isinstance(question, str) and question.strip() else trivia_question
        if not isinstance(question, str) or not question.strip():
            hint = (
                " (KILT's TriviaQA files carry only ids: "
                "set the dataset's `questions` to TriviaQA's wikipedia-dev.json)"
                if questions is None
                else " (and the TriviaQA questions file has no question with this id)"
            )
            raise fail(f"no question: field 'input' is missing or empty{hint}")
        outputs = obj.get("output")
        if not isinstance(outputs, list) or not outputs:
            raise fail("field 'output' must be a non-empty list")
        answers, spans = [], {}
        for oi, out in enumerate(outputs):
            if not isinstance(out, dict):
                raise fail(f"output[{oi}] must be an object, found {type(out).__name__}")
            answers.append(out.get("answer"))
            provenance = out.get("provenance") or []
            if not isinstance(provenance, list):
                raise fail(f"output[{oi}].provenance must be a list")
            for pi, prov in enumerate(provenance):
                if not isinstance(prov, dict):
                    raise fail(f"output[{oi}].provenance[{pi}] must be an object")
                row = _provenance_row(prov)
                key = tuple(row.values())
                spans.setdefault(key, {"qid": qid, "ref": f"o{oi}p{pi}", **row})
        answers = distinct(answers + extra_answers)
        if not answers:
            raise fail("no non-empty 'answer' in any output: a query needs at least one answer")
        if task == "fact":
            labels = {a.upper() for a in answers}
            if not labels <= set(FACT_LABELS) or len(labels) != 1:
                raise fail(f"a claim needs exactly one label, SUPPORTS or REFUTES; found {answers}")
            answers = [labels.pop()]
        rows.append((qid, question.strip(), answers, task))
        evidence.extend(spans.values())
    if not rows:
        raise DataFormatError(name, None, "no queries (the file is empty)")
    return queries_frame(rows), evidence_frame(evidence)


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _provenance_row(prov: Mapping) -> dict:
    return {
        "wikipedia_id": as_id(prov.get("wikipedia_id")),
        "title": prov.get("title") if isinstance(prov.get("title"), str) else None,
        "start_paragraph": _int_or_none(prov.get("start_paragraph_id")),
        "start_char": _int_or_none(prov.get("start_character")),
        "end_paragraph": _int_or_none(prov.get("end_paragraph_id")),
        "end_char": _int_or_none(prov.get("end_character")),
    }


# --- knowledge source ----------------------------------------------------------------------------


def chunk_page(page: Mapping, words: int) -> list[dict]:
    """A knowledge-source page as passages with their spans (see the module doc)."""
    wid = str(page["wikipedia_id"])
    title = page["wikipedia_title"]
    # (paragraph, start, end, word) for every word of the page's body, in order.
    tokens: list[tuple[int, int, int, str]] = []
    for pi, para in enumerate(page["text"][1:], start=1):
        if para.startswith(_HEADING):
            continue
        bullet = _BULLET.match(para)
        offset = bullet.end() if bullet else 0
        tokens.extend((pi, m.start() + offset, m.end() + offset, m.group()) for m in _WORD.finditer(para, offset))
    passages = []
    for k, i in enumerate(range(0, len(tokens), words)):
        block = tokens[i : i + words]
        passages.append(
            {
                "pid": f"{wid}_{k}",
                "title": title,
                "text": " ".join(t[3] for t in block),
                "wikipedia_id": wid,
                "start_paragraph": block[0][0],
                "start_char": block[0][1],
                "end_paragraph": block[-1][0],
                "end_char": block[-1][2],
            }
        )
    return passages


def _check_page(name: str, lineno: int | None, page) -> None:
    def fail(problem):
        raise DataFormatError(name, lineno, problem)

    if not isinstance(page, dict):
        fail(f"expected a JSON object (a page), found {type(page).__name__}")
    if as_id(page.get("wikipedia_id")) is None:
        fail("page without 'wikipedia_id'")
    if not isinstance(page.get("wikipedia_title"), str):
        fail("page without 'wikipedia_title'")
    text = page.get("text")
    if not isinstance(text, list) or not all(isinstance(p, str) for p in text):
        fail("page 'text' must be a list of paragraph strings")


def iter_shard_lines(path: str | os.PathLike, shard: int, n_shards: int) -> Iterator[tuple[int | None, int, bytes]]:
    """Yield (line number or None, byte offset, raw line) of the lines that belong to ``shard``.

    An uncompressed file is split by bytes: a line belongs to the shard its first byte falls in, so
    each shard job reads only its 1/n of the file. Line numbers are then not known without reading
    everything before the shard, so they are None (errors give the byte offset, and ``line_at``
    counts the line only when an error needs it). A ``.gz`` file cannot seek: every shard reads it
    all and keeps lines ``i`` with ``i % n_shards == shard``.
    """
    if str(path).endswith(".gz"):
        import gzip

        with gzip.open(path, "rb") as f:
            for i, raw in enumerate(f):
                if i % n_shards == shard:
                    yield i + 1, -1, raw
        return
    size = os.path.getsize(path)
    start, end = size * shard // n_shards, size * (shard + 1) // n_shards
    with open(path, "rb") as f:
        pos = start
        if start > 0:
            f.seek(start - 1)
            if f.read(1) != b"\n":
                pos += len(f.readline())  # the line in progress belongs to the previous shard
        f.seek(pos)
        while pos < end:
            raw = f.readline()
            if not raw:
                break
            yield None, pos, raw
            pos += len(raw)


def line_at(path: str | os.PathLike, offset: int) -> int:
    """The 1-based line number of the byte at ``offset`` (reads the file up to it)."""
    count, done = 1, 0
    with open(path, "rb") as f:
        while done < offset:
            block = f.read(min(1 << 24, offset - done))
            if not block:
                break
            count += block.count(b"\n")
            done += len(block)
    return count


def chunk_knowledge_source_shard(path: str | os.PathLike, shard: int, n_shards: int, words: int) -> Iterator[pa.Table]:
    """Yield tables (SHARD_ARROW) of the passages of one shard of a knowledge source, page by page batch."""
    name = str(path)
    batch: list[dict] = []
    for lineno, offset, raw in iter_shard_lines(path, shard, n_shards):
        if not raw.strip():
            continue
        try:
            if lineno is None:
                lineno_known = None
                line = raw.decode("utf-8").rstrip("\r\n")
            else:
                lineno_known = lineno
                line = decode_line(name, lineno, raw).rstrip("\r\n")
            page = parse_json_line(name, lineno_known or 0, line)
            _check_page(name, lineno_known, page)
        except (DataFormatError, UnicodeDecodeError) as e:
            line_no = lineno if lineno is not None else line_at(path, offset)
            problem = e.problem if isinstance(e, DataFormatError) else f"not UTF-8 ({e.reason})"
            raise DataFormatError(name, line_no, problem) from None
        batch.extend(chunk_page(page, words))
        if len(batch) >= 50_000:
            yield pa.Table.from_pylist(batch, schema=SHARD_ARROW)
            batch = []
    if batch:
        yield pa.Table.from_pylist(batch, schema=SHARD_ARROW)


_WID_PREFIX = re.compile(rb'"wikipedia_id"\s*:\s*"?(\d+)')


def knowledge_source_pages(path: str | os.PathLike, wanted: set[str]) -> Iterator[dict]:
    """Yield the pages whose id is in ``wanted``, parsing only those lines (a cheap byte pre-filter)."""
    name = str(path)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            m = _WID_PREFIX.search(raw, 0, 4096)
            if m is not None and m.group(1).decode() not in wanted:
                continue
            page = parse_json_line(name, lineno, decode_line(name, lineno, raw).rstrip("\r\n"))
            _check_page(name, lineno, page)
            if str(page["wikipedia_id"]) in wanted:
                yield page


def span_text(page: Mapping, sp: int, sc: int, ep: int, ec: int) -> str | None:
    """The text of a provenance span of ``page`` (-1 characters mean whole paragraphs)."""
    paras = page["text"]
    if not (0 <= sp < len(paras)) or not (0 <= ep < len(paras)) or ep < sp:
        return None
    parts = []
    for pi in range(sp, ep + 1):
        para = paras[pi]
        lo = sc if (pi == sp and sc >= 0) else 0
        hi = ec if (pi == ep and ec >= 0) else len(para)
        parts.append(para[lo:hi])
    text = " ".join(p.strip() for p in parts if p.strip())
    return text or None
