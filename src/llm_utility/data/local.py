"""Bring your own data: a DPR-style passage TSV and a JSONL query file.

Corpus (``load_corpus_tsv``), the layout of DPR's ``psgs_w100.tsv``::

    id<TAB>text<TAB>title
    1<TAB>"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, ..."<TAB>Aaron

Queries (``load_queries_jsonl``), one JSON object per line (blank lines are skipped)::

    {"id": "q1", "question": "who wrote hamlet", "answers": ["Shakespeare", "William Shakespeare"],
     "human_pids": ["1234"], "task": "qa"}

Both loaders only read and validate: they return a table and never write, so a file that fails
validation leaves nothing behind. Every problem raises ``DataFormatError`` naming the file, the
1-based line number and what is wrong.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
from collections.abc import Iterator
from typing import IO

import polars as pl

from llm_utility.io import PASSAGES_SCHEMA, QUERIES_SCHEMA, TASKS, conform

TSV_HEADER = ["id", "text", "title"]
_CHUNK_ROWS = 200_000  # rows per DataFrame chunk: bounds the Python objects alive at once
_FIELD_LIMIT = 1 << 24  # csv's default 128 KiB field limit is too small for some long passages


class DataFormatError(ValueError):
    """A user data file is malformed; the message names the file, the line and the problem."""

    def __init__(self, path: str | os.PathLike, line: int | None, problem: str):
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


def _open_text(path: str | os.PathLike) -> IO[str]:
    """Open a text file, transparently gunzipping ``*.gz`` (DPR ships ``psgs_w100.tsv.gz``).

    ``newline=""`` lets the csv module see the raw line endings, as it requires for quoted fields
    that contain newlines; ``utf-8-sig`` drops a byte-order mark some editors write.
    """
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def load_corpus_tsv(path: str | os.PathLike) -> pl.DataFrame:
    """Read a DPR-style passage file into a PASSAGES_SCHEMA table (pid, title, text).

    Format: tab-separated, first line exactly ``id<TAB>text<TAB>title``, then one passage per
    record. Fields follow the CSV quoting convention that DPR's ``psgs_w100.tsv`` uses and that DPR
    itself reads with ``csv.reader(..., delimiter="\\t")``: a field may be wrapped in double quotes,
    inside which ``""`` stands for one ``"`` and tabs or newlines are literal. So the text
    ``"Aaron ( or ; ""Ahärôn"") is"`` becomes ``Aaron ( or ; "Ahärôn") is``. An unquoted field is
    taken as is, including any quote characters inside it. Quoting is done by the reader, not by
    stripping characters, so a text that merely starts with a quote is never damaged.

    Checks: the header, three fields per record, a non-empty id and text, unique ids. The title may
    be empty; blank lines are skipped. Line numbers are those of the line a record starts on. The
    file is read in chunks, so memory holds the result plus one chunk (DPR's 21M passages need
    about as much memory as their text).
    """
    chunks: list[pl.DataFrame] = []
    ids: list[str] = []
    titles: list[str] = []
    texts: list[str] = []
    lines: list[int] = []

    def flush() -> None:
        if ids:
            chunks.append(
                pl.DataFrame(
                    {"pid": ids, "title": titles, "text": texts, "line": lines},
                    schema={**PASSAGES_SCHEMA, "line": pl.Int64},
                )
            )
            for column in (ids, titles, texts, lines):
                column.clear()

    old_limit = csv.field_size_limit()
    csv.field_size_limit(max(old_limit, _FIELD_LIMIT))
    try:
        with _open_text(path) as f:
            header_seen = False
            for lineno, row in _tsv_records(path, f):
                if not header_seen:
                    header_seen = True
                    if row != TSV_HEADER:
                        expected, found = "\t".join(TSV_HEADER), "\t".join(row)
                        raise DataFormatError(path, lineno, f"header must be {expected!r}, found {found!r}")
                    continue
                if len(row) != 3:
                    raise DataFormatError(
                        path, lineno, f"expected 3 tab-separated fields (id, text, title), found {len(row)}"
                    )
                pid, text, title = row
                if not pid.strip():
                    raise DataFormatError(path, lineno, "empty id")
                if not text.strip():
                    raise DataFormatError(path, lineno, f"passage {pid!r} has an empty text")
                ids.append(pid)
                texts.append(text)
                titles.append(title)
                lines.append(lineno)
                if len(ids) >= _CHUNK_ROWS:
                    flush()
    finally:
        csv.field_size_limit(old_limit)
    flush()
    if not chunks:
        raise DataFormatError(path, None, "no passages (the file is empty or has only a header)")
    df = pl.concat(chunks, rechunk=True)
    _check_unique_ids(path, df)
    return conform(df, PASSAGES_SCHEMA, str(path))


def _tsv_records(path: str | os.PathLike, f: IO[str]) -> Iterator[tuple[int, list[str]]]:
    """Yield (first line number, fields) per record, turning csv errors into DataFormatError."""
    reader = csv.reader(f, delimiter="\t", quotechar='"', doublequote=True, strict=False)
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # an unterminated quote, a field over the size limit
            raise DataFormatError(path, start, f"cannot parse the record: {e}") from None
        if row:  # csv yields [] for a blank line; it carries no passage
            yield start, row
        start = reader.line_num + 1


def _check_unique_ids(path: str | os.PathLike, df: pl.DataFrame) -> None:
    dupes = df.select("pid", "line").filter(pl.col("pid").is_duplicated())
    if dupes.is_empty():
        return
    # Report the earliest second occurrence, with the line of the first.
    first_line: dict[str, int] = {}
    for pid, line in dupes.sort("line").iter_rows():
        if pid in first_line:
            raise DataFormatError(path, line, f"duplicate id {pid!r} (first on line {first_line[pid]})")
        first_line[pid] = line


def load_queries_jsonl(
    path: str | os.PathLike,
    corpus_pids: set[str] | None = None,
    default_task: str = "qa",
) -> pl.DataFrame:
    """Read a JSONL query file into a QUERIES_SCHEMA table (qid, question, answers, human_pids, task).

    Each non-blank line is a JSON object with ``id`` (string or integer, stored as a string),
    ``question`` (non-empty string), ``answers`` (non-empty list of non-empty strings; for claims
    ``["SUPPORTS"]`` or ``["REFUTES"]``), optionally ``human_pids`` (list of passage ids, strings or
    integers; default empty) and ``task`` (``"qa"`` or ``"fact"``; default ``default_task``). Other
    keys are ignored, so NQ- or KILT-style records with extra fields load unchanged. When
    ``corpus_pids`` is given, every human passage id must be in it.
    """
    if default_task not in TASKS:
        raise ValueError(f"default_task must be one of {TASKS}, got {default_task!r}")
    rows: list[tuple] = []
    seen: dict[str, int] = {}
    with _open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            rec = _parse_query(path, lineno, line, corpus_pids, default_task)
            qid = rec[0]
            if qid in seen:
                raise DataFormatError(path, lineno, f"duplicate id {qid!r} (first on line {seen[qid]})")
            seen[qid] = lineno
            rows.append(rec)
    if not rows:
        raise DataFormatError(path, None, "no queries (the file is empty)")
    df = pl.DataFrame(rows, schema=QUERIES_SCHEMA, orient="row")
    return conform(df, QUERIES_SCHEMA, str(path))


def _parse_query(path, lineno: int, line: str, corpus_pids: set[str] | None, default_task: str) -> tuple:
    def fail(problem: str) -> DataFormatError:
        return DataFormatError(path, lineno, problem)

    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise fail(f"invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise fail(f"expected a JSON object, found {type(obj).__name__}")
    for field in ("id", "question", "answers"):
        if field not in obj:
            raise fail(f"missing field {field!r}")

    qid = _as_id(obj["id"])
    if qid is None:
        raise fail(f"field 'id' must be a non-empty string or an integer, found {obj['id']!r}")
    question = obj["question"]
    if not isinstance(question, str) or not question.strip():
        raise fail(f"field 'question' must be a non-empty string, found {question!r}")
    answers = obj["answers"]
    if not isinstance(answers, list):
        raise fail(f"field 'answers' must be a list of strings, found {type(answers).__name__}")
    if not answers:
        raise fail("field 'answers' is empty: a query needs at least one answer")
    if not all(isinstance(a, str) and a.strip() for a in answers):
        raise fail(f"field 'answers' must hold non-empty strings, found {answers!r}")

    human = obj.get("human_pids", [])
    if human is None:
        human = []
    if not isinstance(human, list):
        raise fail(f"field 'human_pids' must be a list of passage ids, found {type(human).__name__}")
    human_pids = [_as_id(p) for p in human]
    if any(p is None for p in human_pids):
        raise fail(f"field 'human_pids' must hold strings or integers, found {human!r}")
    if corpus_pids is not None:
        missing = [p for p in human_pids if p not in corpus_pids]
        if missing:
            raise fail(f"human passage id(s) {missing} not found in the corpus")

    task = obj.get("task", default_task)
    if task not in TASKS:
        raise fail(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    return (qid, question, list(answers), human_pids, task)


def _as_id(value) -> str | None:
    """Ids may be strings or integers (bool excluded: ``true`` is not an id)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    return None
