"""MS MARCO-FQA as the paper's Table 6 counts it (3,199 queries, 1.1 human passages per query, the
8.8M-passage collection): the passage-ranking dev queries with their qrels, of the factual query types
that the QnA dev file gives, on small files in the publishers' own layouts (a collectionandqueries.tar.gz
with collection.tsv, queries.dev.small.tsv and qrels.dev.small.tsv; QnA's columnar dev_v2.1.json.gz)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import polars as pl
import pytest

from llm_utility.data import mapping, msmarco
from llm_utility.data.readers import DataFormatError
from llm_utility.pipeline import data as jobs

FACTUAL = ["LOCATION", "NUMERIC", "PERSON", "ENTITY"]
# QnA v2.1 dev: columns keyed by row; query_id is the passage-ranking qid.
QNA = {
    "query": {
        "0": "where was coldplay formed",
        "1": "what is a rock band",
        "2": "how many viewers watched super bowl 50",
        "3": "who headlined the halftime show",
        "4": "what county is lima in",
    },
    "query_id": {"0": 1001, "1": 1002, "2": 1003, "3": 1004, "4": 1005},
    "query_type": {"0": "LOCATION", "1": "DESCRIPTION", "2": "NUMERIC", "3": "PERSON", "4": "LOCATION"},
    "answers": {
        "0": ["Coldplay was formed in London, England."],
        "1": ["A band that plays rock."],
        "2": ["115.5 million viewers watched it."],
        "3": ["No Answer Present."],
        "4": ["Lima is in Allen County."],
    },
    "wellFormedAnswers": {"0": "[]", "1": "[]", "2": "[]", "3": "[]", "4": "[]"},
    "passages": {str(i): [] for i in range(5)},
}
COLLECTION = (
    "7\tColdplay are a British rock band formed in London in 1996.\n"
    "8\tThe show was watched by 115.5 million viewers.\n"
    "9\tLima is a city in Allen County, Ohio.\n"
)
# queries.dev.small.tsv: qid<TAB>query; 1006 is not in the QnA file (another split).
QUERIES = (
    "1001\twhere was coldplay formed\n"
    "1002\twhat is a rock band\n"
    "1003\thow many viewers watched super bowl 50\n"
    "1004\twho headlined the halftime show\n"
    "1005\twhat county is lima in\n"
    "1006\tan eval query\n"
)
# qrels.dev.small.tsv: TREC qrels, tab-separated; 1003 has two relevant passages, one not in the collection.
QRELS = "1001\t0\t7\t1\n1002\t0\t7\t1\n1003\t0\t8\t1\n1003\t0\t99\t1\n1004\t0\t8\t1\n1005\t0\t9\t1\n1005\t0\t7\t0\n"


@pytest.fixture
def files(tmp_path):
    qna = tmp_path / "dev_v2.1.json.gz"
    with gzip.open(qna, "wt", encoding="utf-8") as f:
        json.dump(QNA, f)
    archive = tmp_path / "collectionandqueries.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        for name, text in (
            ("collection.tsv", COLLECTION),
            ("queries.dev.small.tsv", QUERIES),
            ("qrels.dev.small.tsv", QRELS),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return qna, archive


def _load(qna, archive, **kw):
    return msmarco.load_msmarco_ranking_queries(
        qna,
        archive,
        archive,
        query_types=FACTUAL,
        queries_member="queries.dev.small.tsv",
        qrels_member="qrels.dev.small.tsv",
        **kw,
    )


def test_the_ranking_dev_queries_of_the_factual_types_with_their_qrels(files, tmp_path):
    qna, archive = files
    queries, evidence, dropped = _load(qna, archive)
    # 1002 is DESCRIPTION, 1004 has no answer, 1006 is not a QnA dev query; relevance 0 is no qrel.
    assert queries["qid"].to_list() == ["1001", "1003", "1005"]
    assert dropped == {"not in the QnA file": 1, "query type": 1, "no answer": 1, "no relevant passage": 0}
    assert queries.row(2) == ("1005", "what county is lima in", ["Lima is in Allen County."], "qa")
    assert evidence.select("qid", "pid").rows() == [("1001", "7"), ("1003", "8"), ("1003", "99"), ("1005", "9")]

    # The collection from the same archive; qrels need no text matching, only the pid to exist.
    passages = tmp_path / "passages.parquet"
    cfg = {"source": "msmarco", "file": {"path": str(archive), "member": "collection.tsv"}}
    jobs.prepare_corpus_job(name="m", cfg=cfg, inputs={"file": str(archive)}, output=str(passages), seed=0)
    human, unmapped = mapping.map_by_pid(evidence, str(passages))
    assert human.select("qid", "pid").rows() == [("1001", "7"), ("1003", "8"), ("1005", "9")]
    assert unmapped.rows() == [("1003", "qrel1", mapping.PID_NOT_IN_CORPUS)]
    # Table 6's "#Qrels/q" is the mean number of human passages per query.
    assert human.height / queries.height == pytest.approx(1.0)


def test_the_load_queries_job_takes_the_ranking_files_when_configured(files, tmp_path):
    qna, archive = files
    cfg = {
        "source": "msmarco-qa",
        "query_types": FACTUAL,
        "file": {"path": str(qna)},
        "ranking_queries": {"path": str(archive), "member": "queries.dev.small.tsv"},
        "ranking_qrels": {"path": str(archive), "member": "qrels.dev.small.tsv"},
    }
    out = {k: str(tmp_path / f"{k}.out") for k in ("queries_out", "evidence_out", "summary_out")}
    jobs.load_queries_job(
        name="msmarco-fqa",
        cfg=cfg,
        inputs={"file": str(qna), "ranking_queries": str(archive), "ranking_qrels": str(archive)},
        **out,
    )
    assert pl.read_parquet(out["queries_out"])["qid"].to_list() == ["1001", "1003", "1005"]
    assert json.loads(open(out["summary_out"]).read())["dropped_queries"]["query type"] == 1


@pytest.mark.parametrize(
    ("member", "text", "problem"),
    [
        ("qrels.dev.small.tsv", "1001\t0\t7\n", "line 1: expected TREC qrels"),
        ("queries.dev.small.tsv", "1001 where was coldplay formed\n", "line 1: expected `qid<TAB>query`"),
        ("queries.dev.small.tsv", "1001\ta\n1001\tb\n", "line 2: duplicate qid 1001 (first on line 1)"),
    ],
)
def test_bad_lines_name_the_file_and_line(files, tmp_path, member, text, problem):
    qna, _ = files
    bad = tmp_path / member
    bad.write_text(text)
    good = tmp_path / ("qrels.tsv" if member != "qrels.dev.small.tsv" else "queries.tsv")
    good.write_text(QRELS if member != "qrels.dev.small.tsv" else QUERIES)
    queries, qrels = (bad, good) if member == "queries.dev.small.tsv" else (good, bad)
    with pytest.raises(DataFormatError) as err:
        msmarco.load_msmarco_ranking_queries(qna, queries, qrels, query_types=FACTUAL)
    assert str(bad) in str(err.value) and problem in str(err.value)


def test_queries_of_another_split_are_a_clear_error(files, tmp_path):
    qna, _ = files
    other, qrels = tmp_path / "queries.eval.small.tsv", tmp_path / "qrels.tsv"
    other.write_text("5001\tan eval query\n")
    qrels.write_text("5001\t0\t7\t1\n")
    with pytest.raises(DataFormatError, match="must be the same split"):
        msmarco.load_msmarco_ranking_queries(qna, other, qrels, query_types=FACTUAL)
