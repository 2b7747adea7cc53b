"""Bring-your-own data: the DPR passage TSV and the JSONL query file, and their error messages."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from llm_utility.data.local import DataFormatError, load_corpus_tsv, load_queries_jsonl
from llm_utility.schemas import PASSAGES_SCHEMA, QUERIES_SCHEMA

# The first record of DPR's psgs_w100.tsv in its own quoting, then plain and quoted variants.
DPR_SAMPLE = (
    "id\ttext\ttitle\n"
    '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, high priest, and the brother of Moses"\tAaron\n'
    "2\tGod at Sinai granted Aaron the priesthood\tAaron\n"
    '3\tA "quoted" word inside an unquoted field\t"Title, with ""quotes"""\n'
    '4\t"A quoted field with a\ttab"\tTabbed\n'
    "5\tLast passage\t\n"
)


def _write(tmp_path, name: str, content: str):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return path


# --- corpus TSV --------------------------------------------------------------------------------------


def test_tsv_reads_dpr_quoting(tmp_path):
    df = load_corpus_tsv(_write(tmp_path, "psgs.tsv", DPR_SAMPLE))
    assert df.schema == pl.Schema(PASSAGES_SCHEMA)
    assert df["pid"].to_list() == ["1", "2", "3", "4", "5"]
    rows = {pid: (title, text) for pid, title, text in df.iter_rows()}
    assert rows["1"] == ("Aaron", 'Aaron Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses')
    assert rows["3"] == ('Title, with "quotes"', 'A "quoted" word inside an unquoted field')
    assert rows["4"] == ("Tabbed", "A quoted field with a\ttab")
    assert rows["5"] == ("", "Last passage")


def test_tsv_reads_gzip(tmp_path):
    path = tmp_path / "psgs_w100.tsv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(DPR_SAMPLE)
    assert load_corpus_tsv(path).equals(load_corpus_tsv(_write(tmp_path, "plain.tsv", DPR_SAMPLE)))


def test_tsv_large_file_in_chunks(tmp_path, monkeypatch):
    from llm_utility.data import local

    monkeypatch.setattr(local, "_CHUNK_ROWS", 7)
    body = "".join(f"p{i}\tpassage number {i}\tT{i % 3}\n" for i in range(50))
    df = load_corpus_tsv(_write(tmp_path, "big.tsv", "id\ttext\ttitle\n" + body))
    assert df.height == 50 and df["pid"][49] == "p49" and df["text"][10] == "passage number 10"


@pytest.mark.parametrize(
    "content, line, problem",
    [
        ("pid\ttext\ttitle\n1\tx\tt\n", 1, "header must be"),
        ("id\ttitle\ttext\n1\tx\tt\n", 1, "header must be"),
        ("", None, "no passages"),
        ("id\ttext\ttitle\n", None, "no passages"),
        ("id\ttext\ttitle\n1\tfine\tT\n2\tmissing title\n", 3, "expected 3 tab-separated fields"),
        ("id\ttext\ttitle\n1\ta\tT\n2\tb\tT\textra\n", 3, "found 4"),
        ("id\ttext\ttitle\n1\ta\tT\n2\t  \tT\n", 3, "empty text"),
        ("id\ttext\ttitle\n1\ta\tT\n\tb\tT\n", 3, "empty id"),
        ("id\ttext\ttitle\n7\ta\tT\n8\tb\tT\n7\tc\tT\n", 4, "duplicate id '7' (first on line 2)"),
        # One passage per line: a quoted field may not run onto the next line.
        ('id\ttext\ttitle\n1\t"two\nlines"\tT\n1\tagain\tT\n', 2, "a quoted field does not close on this line"),
        ('id\ttext\ttitle\n1\t"closed" then more\tT\n', 2, "must be quoted as a whole"),
        # Ids are stripped: " 7" and "7" are the same id.
        ("id\ttext\ttitle\n7\ta\tT\n 7 \tb\tT\n", 3, "duplicate id '7' (first on line 2)"),
    ],
)
def test_tsv_errors_name_file_and_line(tmp_path, content, line, problem):
    path = _write(tmp_path, "bad_corpus.tsv", content)
    with pytest.raises(DataFormatError) as err:
        load_corpus_tsv(path)
    message = str(err.value)
    assert str(path) in message and problem in message
    assert (f"line {line}:" in message) if line is not None else ("line" not in message)
    assert err.value.line == line
    assert isinstance(err.value, ValueError)


# --- queries JSONL -----------------------------------------------------------------------------------


def _jsonl(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def test_jsonl_reads_records(tmp_path):
    content = _jsonl(
        {"id": "q1", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"], "human_pids": ["1", 2]},
        "",
        "   ",
        {"id": 7, "question": "Paris is in France.", "answers": ["SUPPORTS"], "task": "fact", "extra": {"a": 1}},
        {"id": "q3", "question": "Capital of Peru?", "answers": ["Lima", "Ciudad de los Reyes"]},
    )
    df = load_queries_jsonl(_write(tmp_path, "q.jsonl", content), corpus_pids={"1", "2"})
    assert df.schema == pl.Schema(QUERIES_SCHEMA)
    assert df.to_dicts() == [
        {
            "qid": "q1",
            "question": "Who wrote Hamlet?",
            "answers": ["Shakespeare"],
            "human_pids": ["1", "2"],
            "task": "qa",
        },
        {"qid": "7", "question": "Paris is in France.", "answers": ["SUPPORTS"], "human_pids": [], "task": "fact"},
        {
            "qid": "q3",
            "question": "Capital of Peru?",
            "answers": ["Lima", "Ciudad de los Reyes"],
            "human_pids": [],
            "task": "qa",
        },
    ]


def test_jsonl_default_task_and_no_corpus_check(tmp_path):
    content = _jsonl({"id": "c1", "question": "The sky is green.", "answers": ["REFUTES"], "human_pids": ["99"]})
    df = load_queries_jsonl(_write(tmp_path, "claims.jsonl", content), default_task="fact")
    assert df["task"].to_list() == ["fact"] and df["human_pids"].to_list() == [["99"]]
    with pytest.raises(ValueError, match="default_task"):
        load_queries_jsonl(_write(tmp_path, "claims.jsonl", content), default_task="qa2")


GOOD = {"id": "a", "question": "Q?", "answers": ["A"]}


@pytest.mark.parametrize(
    "lines, line, problem",
    [
        ([GOOD, '{"id": "b", "question": "Q?", "answers": ["A"]'], 2, "invalid JSON"),
        ([GOOD, "", "[1, 2]"], 3, "expected a JSON object"),
        ([{"id": "b", "answers": ["A"]}], 1, "missing field 'question'"),
        ([GOOD, {"id": "b", "question": "Q?"}], 2, "missing field 'answers'"),
        ([{"question": "Q?", "answers": ["A"]}], 1, "missing field 'id'"),
        ([{"id": True, "question": "Q?", "answers": ["A"]}], 1, "field 'id'"),
        ([{"id": "b", "question": 3, "answers": ["A"]}], 1, "field 'question' must be a non-empty string"),
        ([{"id": "b", "question": "Q?", "answers": "A"}], 1, "field 'answers' must be a list"),
        ([GOOD, {"id": "b", "question": "Q?", "answers": []}], 2, "field 'answers' is empty"),
        ([{"id": "b", "question": "Q?", "answers": ["A", ""]}], 1, "non-empty strings"),
        ([{"id": "b", "question": "Q?", "answers": ["A"], "human_pids": "p1"}], 1, "field 'human_pids' must be a list"),
        ([{"id": "b", "question": "Q?", "answers": ["A"], "human_pids": ["p1", "nope"]}], 1, "['nope'] not found"),
        ([{"id": "b", "question": "Q?", "answers": ["A"], "task": "mcq"}], 1, "unknown task 'mcq'"),
        # A claim's label is exactly SUPPORTS or REFUTES (the verdict scoring stops on anything else).
        (
            [GOOD, {"id": "c", "question": "Paris is in France.", "answers": ["supports"], "task": "fact"}],
            2,
            'exactly ["SUPPORTS"] or ["REFUTES"]',
        ),
        (
            [{"id": "c", "question": "C.", "answers": ["SUPPORTS", "REFUTES"], "task": "fact"}],
            1,
            "found ['SUPPORTS', 'REFUTES']",
        ),
        ([{"id": "c", "question": "C.", "answers": ["NOT ENOUGH INFO"], "task": "fact"}], 1, "a claim's 'answers'"),
        ([GOOD, "", {"id": "b", "question": "Q?", "answers": ["A"]}, GOOD], 4, "duplicate id 'a' (first on line 1)"),
        ([], None, "no queries"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, lines, line, problem):
    path = _write(tmp_path, "bad_queries.jsonl", _jsonl(*lines))
    with pytest.raises(DataFormatError) as err:
        load_queries_jsonl(path, corpus_pids={"p1"})
    message = str(err.value)
    assert str(path) in message and problem in message
    assert (f"line {line}:" in message) if line is not None else ("line" not in message)


def test_loaders_write_nothing(tmp_path):
    _write(tmp_path, "psgs.tsv", DPR_SAMPLE + "1\tduplicate\tT\n")
    _write(tmp_path, "q.jsonl", _jsonl(GOOD, GOOD))
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(DataFormatError):
        load_corpus_tsv(tmp_path / "psgs.tsv")
    with pytest.raises(DataFormatError):
        load_queries_jsonl(tmp_path / "q.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# --- inputs that must not lose data silently (issue 6, item 8) -----------------------------------------


def test_unmatched_quote_stops_instead_of_merging_passages(tmp_path):
    body = "".join(f"{i}\tpassage {i}\tT\n" for i in range(1, 8)).replace("passage 3", '"passage 3 opens a quote')
    path = _write(tmp_path, "psgs.tsv", "id\ttext\ttitle\n" + body)
    with pytest.raises(DataFormatError) as err:
        load_corpus_tsv(path)
    assert err.value.line == 4 and "does not close on this line" in str(err.value)


def test_every_line_is_one_passage(tmp_path):
    body = "".join(f"{i}\t{chr(34) * (i % 2)}text {i}{chr(34) * (i % 2)}\tT\n" for i in range(1, 8))
    df = load_corpus_tsv(_write(tmp_path, "psgs.tsv", "id\ttext\ttitle\n" + body))
    assert df.height == 7 and df["text"].to_list() == [f"text {i}" for i in range(1, 8)]


def test_non_utf8_names_line_and_column(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("id\ttext\ttitle\n1\tok\tT\n2\tcaf\u00e9\tT\n".encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"latin1.tsv, line 3: not UTF-8: byte 0xe9 at column 6"):
        load_corpus_tsv(path)
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_bytes(b'{"id": "a", "question": "q", "answers": ["x"]}\n{"id": "b", "question": "caf\xe9"}\n')
    with pytest.raises(DataFormatError, match=r"q.jsonl, line 2: not UTF-8"):
        load_queries_jsonl(jsonl)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_utf16_is_named_not_decoded_as_garbage(tmp_path, encoding):
    path = tmp_path / "utf16.tsv"
    path.write_bytes("id\ttext\ttitle\n1\tok\tT\n".encode(encoding))
    with pytest.raises(DataFormatError, match=r"utf16.tsv, line 1: .*(UTF-16|NUL bytes)"):
        load_corpus_tsv(path)


def test_json_error_column_at_line_end(tmp_path):
    path = _write(tmp_path, "q.jsonl", _jsonl(GOOD, '{"id": "b", "question": "Q?", "answers": ["A"]'))
    with pytest.raises(DataFormatError) as err:
        load_queries_jsonl(path)
    assert err.value.line == 2 and "at the end of the line, column 47" in str(err.value)
    path = _write(tmp_path, "q2.jsonl", _jsonl('{"id": "b", "question": "Q?" "answers": ["A"]}'))
    with pytest.raises(DataFormatError, match="line 1: invalid JSON .* at column 30"):
        load_queries_jsonl(path)
    # json's "starting at" messages get the column once: where the string starts.
    path = _write(tmp_path, "q3.jsonl", _jsonl('{"id": "b", "question": "Q?'))
    with pytest.raises(DataFormatError) as err:
        load_queries_jsonl(path)
    assert str(err.value).endswith("line 1: invalid JSON (Unterminated string starting at column 25)")


def test_query_ids_differing_by_spaces_are_duplicates(tmp_path):
    content = _jsonl(
        {"id": "q1", "question": "Q?", "answers": ["A"]}, {"id": " q1 ", "question": "Q?", "answers": ["A"]}
    )
    with pytest.raises(DataFormatError, match="line 2: duplicate id 'q1' \\(first on line 1\\)"):
        load_queries_jsonl(_write(tmp_path, "q.jsonl", content))


def test_streamed_corpus_with_duplicates_writes_nothing(tmp_path, monkeypatch):
    from llm_utility.data import local

    monkeypatch.setattr(local, "_CHUNK_ROWS", 3)
    body = "".join(f"p{i}\tpassage {i}\tT\n" for i in range(10)) + "p4\tagain\tT\n"
    path = _write(tmp_path, "psgs.tsv", "id\ttext\ttitle\n" + body)
    out = tmp_path / "out" / "passages.parquet"
    with pytest.raises(DataFormatError, match="line 12: duplicate id 'p4' \\(first on line 6\\)"):
        local.write_corpus(local.iter_dpr_tsv(path), out, str(path))
    assert not out.exists() and list(out.parent.iterdir()) == []
    good = _write(tmp_path, "good.tsv", "id\ttext\ttitle\n" + body.rsplit("p4", 1)[0])
    assert local.write_corpus(local.iter_dpr_tsv(good), out, str(good)) == 10
    assert pl.read_parquet(out)["pid"].to_list() == [f"p{i}" for i in range(10)]
