"""Passage TSV files (DPR's ``psgs_w100.tsv``, MS MARCO's ``collection.tsv``) and JSONL query files.

Corpus, DPR layout (``iter_dpr_tsv``)::

    id<TAB>text<TAB>title
    1<TAB>"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, ..."<TAB>Aaron

One passage per line, always: the number of passages equals the number of non-blank lines after the
header. Quoting follows the strict CSV rule DPR's own writer used: a field that starts with ``"`` is
quoted, ends with a ``"`` followed by a tab or the end of the line, and stands for ``"`` with ``""``;
a ``"`` anywhere else in a field is literal. A quoted field that does not close on its own line (a
text that merely starts with an unmatched ``"``) is an error naming the line, never a reason to merge
the following lines into it.

Corpus, MS MARCO layout (``iter_msmarco_tsv``): no header, ``id<TAB>text`` per line, no quoting (every
character is literal), no title.

Queries (``load_queries_jsonl``), one JSON object per line (blank lines are skipped)::

    {"id": "q1", "question": "who wrote hamlet", "answers": ["Shakespeare", "William Shakespeare"],
     "human_pids": ["1234"], "task": "qa"}

Loaders only read and validate; ``write_corpus`` streams passages into Parquet through an atomic
temporary file, so a file that fails validation leaves nothing behind. Every problem raises
``DataFormatError`` naming the file, the 1-based line and what is wrong.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Iterator

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from llm_utility.io import atomic_path, conform
from llm_utility.metrics import FACT_LABELS
from llm_utility.schemas import PASSAGES_ARROW, PASSAGES_SCHEMA, QUERIES_SCHEMA, TASKS

from .readers import DataFormatError, as_id, display_name, iter_jsonl, iter_lines

__all__ = [
    "DataFormatError",
    "iter_dpr_tsv",
    "iter_msmarco_tsv",
    "load_corpus_tsv",
    "load_queries_jsonl",
    "write_corpus",
]

TSV_HEADER = ["id", "text", "title"]
_CHUNK_ROWS = 50_000  # rows per chunk (and Parquet row group): bounds the Python objects alive at once
_FIELD_LIMIT = 1 << 24  # csv's default 128 KiB field limit is too small for some long passages


class Chunk:
    """Up to ``_CHUNK_ROWS`` passages with the line each came from."""

    __slots__ = ("lines", "pids", "texts", "titles")

    def __init__(self) -> None:
        self.pids: list[str] = []
        self.titles: list[str] = []
        self.texts: list[str] = []
        self.lines: list[int] = []

    def add(self, pid: str, title: str, text: str, line: int) -> None:
        self.pids.append(pid)
        self.titles.append(title)
        self.texts.append(text)
        self.lines.append(line)

    def __len__(self) -> int:
        return len(self.pids)

    def table(self) -> pa.Table:
        return pa.table([self.pids, self.titles, self.texts], schema=PASSAGES_ARROW)


def _check_passage(name: str, lineno: int, pid_raw: str, text: str) -> str:
    pid = as_id(pid_raw)
    if pid is None:
        raise DataFormatError(name, lineno, "empty id")
    if not text.strip():
        raise DataFormatError(name, lineno, f"passage {pid!r} has an empty text")
    return pid


def _split_quoted(name: str, lineno: int, line: str) -> list[str]:
    """Split one line by the strict CSV rule (see the module doc); errors name the line."""
    if '"' not in line:
        return line.split("\t")
    try:
        return next(csv.reader([line], delimiter="\t", quotechar='"', doublequote=True, strict=True))
    except csv.Error as e:
        if "unexpected end of data" in str(e):
            problem = (
                "a quoted field does not close on this line (an unmatched '\"' at the start of a field?): "
                "one passage per line; quote the whole field and write a literal '\"' as '\"\"'"
            )
        else:
            problem = f"cannot parse the line ({e}): a field that starts with '\"' must be quoted as a whole"
        raise DataFormatError(name, lineno, problem) from None


def iter_dpr_tsv(path: str | os.PathLike, member: str | None = None) -> Iterator[Chunk]:
    """Yield chunks of a DPR-layout passage TSV (header ``id, text, title``; see the module doc)."""
    name = display_name(path, member)
    old_limit = csv.field_size_limit()
    csv.field_size_limit(max(old_limit, _FIELD_LIMIT))
    try:
        chunk, header_seen = Chunk(), False
        for lineno, line in iter_lines(path, member):
            if not line.strip():
                continue
            row = _split_quoted(name, lineno, line)
            if not header_seen:
                header_seen = True
                if row != TSV_HEADER:
                    expected, found = "\t".join(TSV_HEADER), "\t".join(row)
                    raise DataFormatError(name, lineno, f"header must be {expected!r}, found {found!r}")
                continue
            if len(row) != 3:
                raise DataFormatError(
                    name, lineno, f"expected 3 tab-separated fields (id, text, title), found {len(row)}"
                )
            pid = _check_passage(name, lineno, row[0], row[1])
            chunk.add(pid, row[2], row[1], lineno)
            if len(chunk) >= _CHUNK_ROWS:
                yield chunk
                chunk = Chunk()
        if len(chunk):
            yield chunk
    finally:
        csv.field_size_limit(old_limit)


def iter_msmarco_tsv(path: str | os.PathLike, member: str | None = None) -> Iterator[Chunk]:
    """Yield chunks of MS MARCO's ``collection.tsv``: ``id<TAB>text`` per line, literal, no header."""
    name = display_name(path, member)
    chunk = Chunk()
    for lineno, line in iter_lines(path, member):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataFormatError(name, lineno, f"expected 2 tab-separated fields (id, text), found {len(fields)}")
        pid = _check_passage(name, lineno, fields[0], fields[1])
        chunk.add(pid, "", fields[1], lineno)
        if len(chunk) >= _CHUNK_ROWS:
            yield chunk
            chunk = Chunk()
    if len(chunk):
        yield chunk


def write_corpus(chunks: Iterable[Chunk], out: str | os.PathLike, name: str) -> int:
    """Stream passage chunks into a (pid, title, text) Parquet file; return the passage count.

    Memory holds one chunk plus the ids and line numbers (for the duplicate check), never the texts
    of the whole corpus. Duplicate ids raise ``DataFormatError`` and nothing is written.
    """
    ids: list[pa.Array] = []
    lines: list[np.ndarray] = []
    with atomic_path(out) as tmp:
        writer = pq.ParquetWriter(tmp, PASSAGES_ARROW, compression="zstd")
        try:
            for chunk in chunks:
                table = chunk.table()
                writer.write_table(table, row_group_size=len(chunk))
                ids.append(table.column("pid").combine_chunks())
                lines.append(np.asarray(chunk.lines, dtype=np.int32))
        finally:
            writer.close()
        if not ids:
            raise DataFormatError(name, None, "no passages (the file is empty or has only a header)")
        _check_unique_ids(name, pl.from_arrow(pa.chunked_array(ids)), np.concatenate(lines))
    return int(sum(len(a) for a in ids))


def _check_unique_ids(name: str, pids: pl.Series, lines: np.ndarray) -> None:
    df = pl.DataFrame({"pid": pids, "line": lines})
    dupes = df.filter(pl.col("pid").is_duplicated())
    if dupes.is_empty():
        return
    first_line: dict[str, int] = {}
    for pid, line in dupes.sort("line").iter_rows():
        if pid in first_line:
            raise DataFormatError(name, line, f"duplicate id {pid!r} (first on line {first_line[pid]})")
        first_line[pid] = line


def load_corpus_tsv(path: str | os.PathLike) -> pl.DataFrame:
    """A small DPR-layout TSV as a PASSAGES_SCHEMA table (tests, hand-made corpora).

    The workflow streams large files with ``iter_dpr_tsv`` + ``write_corpus`` instead.
    """
    chunks = list(iter_dpr_tsv(path))
    if not chunks:
        raise DataFormatError(path, None, "no passages (the file is empty or has only a header)")
    df = pl.from_arrow(pa.concat_tables([c.table() for c in chunks]))
    _check_unique_ids(str(path), df["pid"], np.concatenate([np.asarray(c.lines) for c in chunks]))
    return conform(df, PASSAGES_SCHEMA, str(path))


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
    keys are ignored. Ids are stripped of surrounding whitespace. When ``corpus_pids`` is given, every
    human passage id must be in it.
    """
    if default_task not in TASKS:
        raise ValueError(f"default_task must be one of {TASKS}, got {default_task!r}")
    rows: list[tuple] = []
    seen: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        rec = _parse_query(path, lineno, obj, corpus_pids, default_task)
        qid = rec[0]
        if qid in seen:
            raise DataFormatError(path, lineno, f"duplicate id {qid!r} (first on line {seen[qid]})")
        seen[qid] = lineno
        rows.append(rec)
    if not rows:
        raise DataFormatError(path, None, "no queries (the file is empty)")
    df = pl.DataFrame(rows, schema=QUERIES_SCHEMA, orient="row")
    return conform(df, QUERIES_SCHEMA, str(path))


def _parse_query(path, lineno: int, obj, corpus_pids: set[str] | None, default_task: str) -> tuple:
    def fail(problem: str) -> DataFormatError:
        return DataFormatError(path, lineno, problem)

    if not isinstance(obj, dict):
        raise fail(f"expected a JSON object, found {type(obj).__name__}")
    for field in ("id", "question", "answers"):
        if field not in obj:
            raise fail(f"missing field {field!r}")

    qid = as_id(obj["id"])
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
    human_pids = [as_id(p) for p in human]
    if any(p is None for p in human_pids):
        raise fail(f"field 'human_pids' must hold strings or integers, found {human!r}")
    if corpus_pids is not None:
        missing = [p for p in human_pids if p not in corpus_pids]
        if missing:
            raise fail(f"human passage id(s) {missing} not found in the corpus")

    task = obj.get("task", default_task)
    if task not in TASKS:
        raise fail(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if task == "fact" and (len(set(answers)) != 1 or answers[0] not in FACT_LABELS):
        # Claims are scored by the verdict an answer states (metrics.score_answer): the label must be
        # exactly one of these, or the first model job that scores it would stop instead.
        raise fail(f'a claim\'s \'answers\' must be exactly ["SUPPORTS"] or ["REFUTES"], found {answers!r}')
    return (qid, question, list(answers), human_pids, task)
