"""Benchmark loaders (KILT, 2WikiMultihopQA, MS MARCO), KILT chunking, human-passage mapping, coverage,
Table 6 and downloads, on small files in the publishers' formats."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import json
import threading

import polars as pl
import pytest

from benchmark_fixtures import (
    COLDPLAY,
    COLLECTION,
    FEVER_LINES,
    MSMARCO_DEV,
    NQ_LINES,
    SUPER_BOWL,
    TWOWIKI,
    write_jsonl,
    write_knowledge_source,
)
from llm_utility.data import files, kilt, mapping, msmarco, twowiki
from llm_utility.data.readers import DataFormatError
from llm_utility.pipeline import data as jobs
from llm_utility.report.datasets import table6, table6_latex, table6_markdown
from llm_utility.schemas import PASSAGES_SCHEMA, QUERIES_SCHEMA

# --- KILT task files -----------------------------------------------------------------------------


def test_kilt_nq_answers_and_distinct_provenance(tmp_path):
    q, ev = kilt.load_kilt_queries(write_jsonl(tmp_path / "nq-dev-kilt.jsonl", NQ_LINES), task="qa")
    first = q.row(0, named=True)
    assert first["answers"] == ["Coldplay", "Beyoncé", "Coldplay with special guest performers Beyoncé and Bruno Mars"]
    assert first["task"] == "qa" and q["qid"].to_list() == ["-5004457603684974952", "42"]
    spans = ev.filter(pl.col("qid") == "42")
    assert spans["wikipedia_id"].to_list() == ["6009", "999999"]
    assert ev.filter(pl.col("qid") == first["qid"]).height == 4  # four distinct spans, one per output with provenance


def test_kilt_fever_one_label_and_integer_ids(tmp_path):
    q, ev = kilt.load_kilt_queries(write_jsonl(tmp_path / "fever.jsonl", FEVER_LINES), task="fact")
    assert q["answers"].to_list() == [["SUPPORTS"], ["REFUTES"]] and set(q["task"]) == {"fact"}
    assert q["qid"].to_list() == ["137334", "111897"] and ev.height == 1


def test_kilt_triviaqa_questions_and_aliases_from_triviaqa(tmp_path):
    ids_only = [{"id": "tc_1", "output": [{"answer": "Paris", "provenance": []}]}]
    path = write_jsonl(tmp_path / "triviaqa-dev_id-kilt.jsonl", ids_only)
    with pytest.raises(DataFormatError, match="line 1: no question.*set the dataset's `questions`"):
        kilt.load_kilt_queries(path, task="qa")
    trivia = tmp_path / "wikipedia-dev.json"
    trivia.write_text(
        json.dumps(
            {
                "Data": [
                    {
                        "QuestionId": "tc_1",
                        "Question": "Capital of France?",
                        "Answer": {"Value": "Paris", "Aliases": ["Paris", "Paree"]},
                    }
                ]
            }
        )
    )
    q, _ = kilt.load_kilt_queries(path, task="qa", questions=kilt.load_triviaqa_questions(trivia))
    assert q.row(0) == ("tc_1", "Capital of France?", ["Paris", "Paree"], "qa")


@pytest.mark.parametrize(
    "line, problem",
    [
        (
            '{"id": "a", "input": "q", "output": [{"answer": "x"}]',
            "invalid JSON (Expecting ',' delimiter at the end of the line",
        ),
        ({"input": "q", "output": [{"answer": "x"}]}, "missing or empty field 'id'"),
        ({"id": "a", "input": "q", "output": []}, "'output' must be a non-empty list"),
        ({"id": "a", "input": "q", "output": [{"answer": " "}, {"provenance": []}]}, "no non-empty 'answer'"),
        (
            {"id": "a", "input": "q", "output": [{"answer": "x", "provenance": ["p"]}]},
            "provenance[0] must be an object",
        ),
        ({"id": "a", "input": "", "output": [{"answer": "x"}]}, "no question"),
    ],
)
def test_kilt_bad_lines_name_file_and_line(tmp_path, line, problem):
    path = write_jsonl(tmp_path / "bad.jsonl", [NQ_LINES[1], line])
    with pytest.raises(DataFormatError) as err:
        kilt.load_kilt_queries(path, task="qa")
    assert f"{path}, line 2:" in str(err.value) and problem in str(err.value)


def test_kilt_fever_conflicting_labels(tmp_path):
    path = write_jsonl(
        tmp_path / "f.jsonl", [{"id": 1, "input": "c", "output": [{"answer": "SUPPORTS"}, {"answer": "REFUTES"}]}]
    )
    with pytest.raises(DataFormatError, match="line 1: a claim needs exactly one label"):
        kilt.load_kilt_queries(path, task="fact")


# --- knowledge source chunking -------------------------------------------------------------------


def test_chunk_page_spans_follow_kilt_coordinates():
    passages = kilt.chunk_page(SUPER_BOWL, words=10)
    para = SUPER_BOWL["text"][1]
    for p in passages:
        if p["start_paragraph"] == p["end_paragraph"] == 1:
            assert para[p["start_char"] : p["end_char"]].split() == p["text"].split()
    words = [w for p in passages for w in p["text"].split()]
    assert "Section::::Background." not in words and "BULLET::::-" not in words and "Coldplay" in words
    assert all(len(p["text"].split()) == 10 for p in passages[:-1]) and len(passages[-1]["text"].split()) <= 10
    assert passages[-1]["end_paragraph"] == 4 and passages[0]["pid"] == "45267196_0"


def test_sharded_chunking_equals_one_shard(tmp_path):
    pages = [dict(SUPER_BOWL, wikipedia_id=str(100 + i), wikipedia_title=f"Page {i}") for i in range(7)]
    ks = write_knowledge_source(tmp_path / "ks.json", pages)
    one = tmp_path / "one.parquet"
    jobs.chunk_corpus_shard_job(knowledge_source=str(ks), shard=0, n_shards=1, words=12, output=str(one))
    shards = [str(tmp_path / f"s{i}.parquet") for i in range(3)]
    for i, out in enumerate(shards):
        jobs.chunk_corpus_shard_job(knowledge_source=str(ks), shard=i, n_shards=3, words=12, output=out)
    merged = tmp_path / "passages.parquet"
    jobs.prepare_corpus_job(name="k", cfg={"source": "kilt"}, inputs={"shards": shards}, output=str(merged), seed=0)
    assert pl.read_parquet(merged).equals(pl.read_parquet(one).select("pid", "title", "text"))
    assert pl.read_parquet(merged).schema == pl.Schema(PASSAGES_SCHEMA)


def test_knowledge_source_bad_page_names_line(tmp_path):
    ks = tmp_path / "ks.json"
    ks.write_text(json.dumps(SUPER_BOWL) + "\n" + json.dumps({"wikipedia_id": "1", "text": []}) + "\n")
    with pytest.raises(DataFormatError, match=r"ks.json, line 2: page without 'wikipedia_title'"):
        jobs.chunk_corpus_shard_job(
            knowledge_source=str(ks), shard=1, n_shards=2, words=10, output=str(tmp_path / "s.parquet")
        )
    assert not (tmp_path / "s.parquet").exists()


# --- mapping and coverage ------------------------------------------------------------------------


@pytest.fixture
def kilt_corpus(tmp_path):
    ks = write_knowledge_source(tmp_path / "ks.json", [SUPER_BOWL, COLDPLAY])
    shard = str(tmp_path / "s0.parquet")
    jobs.chunk_corpus_shard_job(knowledge_source=str(ks), shard=0, n_shards=1, words=10, output=shard)
    jobs.prepare_corpus_job(
        name="k", cfg={"source": "kilt"}, inputs={"shards": [shard]}, output=str(tmp_path / "p.parquet"), seed=0
    )
    jobs.corpus_spans_job(shards=[shard], output=str(tmp_path / "spans.parquet"))
    return tmp_path


def test_span_mapping_is_exact_and_counts_what_it_cannot_map(kilt_corpus):
    q, ev = kilt.load_kilt_queries(write_jsonl(kilt_corpus / "nq.jsonl", NQ_LINES), task="qa")
    human, unmapped = mapping.map_by_span(ev, str(kilt_corpus / "spans.parquet"))
    texts = dict(pl.read_parquet(kilt_corpus / "p.parquet").select("pid", "text").iter_rows())
    nq = human.filter(pl.col("qid") == q["qid"][0])
    coldplay = nq.filter(pl.col("ref") == "o0p0")["pid"].to_list()
    assert len(coldplay) == 1 and "Coldplay" in texts[coldplay[0]]
    whole = nq.filter(pl.col("ref") == "o4p0")["pid"].to_list()  # paragraph 4, characters -1
    assert whole and "viewers" in " ".join(texts[p] for p in whole)
    assert unmapped.rows() == [("42", "o1p0", mapping.PAGE_NOT_IN_CORPUS)]
    report = mapping.coverage_report(
        dataset="nq", corpus="k", rule="span", queries=q, evidence=ev, human=human, unmapped=unmapped
    )
    assert (report["annotations"], report["mapped"], report["unmapped"]) == (6, 5, 1)
    assert report["unmapped_reasons"] == {mapping.PAGE_NOT_IN_CORPUS: 1} and report["coverage"] == round(5 / 6, 4)


def test_title_text_mapping_for_2wiki_and_kilt_on_a_dpr_corpus(kilt_corpus, tmp_path):
    q, ev = twowiki.load_2wiki_queries(
        _write_json(tmp_path / "dev.json", TWOWIKI), aliases={"Q84": ["London", "City of London"]}
    )
    assert q.row(0)[2] == ["London", "City of London"] and ev.height == 3  # the duplicate fact counted once
    human, unmapped = mapping.map_by_title_text(ev, str(kilt_corpus / "p.parquet"))
    assert set(human["ref"]) == {"f0", "f1"} and unmapped.rows() == [(q["qid"][0], "f3", mapping.TITLE_NOT_IN_CORPUS)]
    # KILT provenance on a title/text corpus takes its text from the knowledge source.
    _, nq_ev = kilt.load_kilt_queries(write_jsonl(tmp_path / "nq.jsonl", NQ_LINES), task="qa")
    pages = kilt.knowledge_source_pages(kilt_corpus / "ks.json", set(nq_ev["wikipedia_id"].drop_nulls()))
    with_text = mapping.add_span_texts(nq_ev, pages)
    assert with_text.filter(pl.col("ref") == "o0p0")["text"].to_list() == ["Coldplay", "1996"]
    human, unmapped = mapping.map_by_title_text(with_text, str(kilt_corpus / "p.parquet"))
    assert ("42", "o0p0") in set(human.select("qid", "ref").iter_rows())


def _write_json(path, obj):
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return path


def test_2wiki_errors_name_the_record(tmp_path):
    bad = [dict(TWOWIKI[0]), dict(TWOWIKI[0], _id="x2", answer="")]
    with pytest.raises(DataFormatError, match=r"record 1 \(_id 'x2'\): field 'answer' is missing or empty"):
        twowiki.load_2wiki_queries(_write_json(tmp_path / "dev.json", bad))


def test_msmarco_filter_extraction_and_text_mapping(tmp_path):
    path = tmp_path / "dev_v2.1.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(MSMARCO_DEV, f)
    q, ev, dropped = msmarco.load_msmarco_queries(path, query_types=["LOCATION", "NUMERIC", "PERSON", "ENTITY"])
    assert q["qid"].to_list() == ["1001", "1003"] and dropped == {"query type": 1, "no answer": 1}
    assert q.row(1)[2] == ["115.5 million viewers watched it.", "The show was watched by 115.5 million viewers."]
    collection = tmp_path / "collection.tsv"
    collection.write_text(COLLECTION)
    out = tmp_path / "msmarco.parquet"
    jobs.prepare_corpus_job(
        name="m", cfg={"source": "msmarco"}, inputs={"file": str(collection)}, output=str(out), seed=0
    )
    assert pl.read_parquet(out)["text"][0] == '"Quoted" text at the start stays literal.'
    human, unmapped = mapping.map_by_text(ev, str(out))
    assert sorted(human.select("qid", "pid").rows()) == [("1001", "7"), ("1003", "8")]  # whitespace collapsed
    assert unmapped.rows() == [("1003", "p1", mapping.TEXT_NOT_IN_CORPUS)]
    # Extraction outputs are kept only when they are a span of the long answer.
    assert msmarco.parse_extraction(" London\n", "Coldplay was formed in London, England.") == "London"
    assert msmarco.parse_extraction('"115.5 million".', "115.5 million viewers watched it.") == "115.5 million"
    assert msmarco.parse_extraction("NONE", "anything") is None
    assert msmarco.parse_extraction("Paris", "Coldplay was formed in London.") is None


# --- Table 6 -------------------------------------------------------------------------------------


def test_table6_layout_and_values():
    q = pl.DataFrame(
        {
            "qid": ["a", "b"],
            "question": ["?", "?"],
            "answers": [["x"], ["y"]],
            "human_pids": [["1", "2"], []],
            "task": ["qa", "qa"],
        },
        schema=QUERIES_SCHEMA,
    )
    df = table6(["nq", "wf"], ["wiki", "wf"], [q, q], [34_000_000, 1626], {"nq": {"coverage": 0.9, "unmapped": 3}})
    assert df.row(0) == ("nq", 2, 1.0, "wiki", 34_000_000, 90.0, 3) and df.row(1)[5] is None
    md = table6_markdown(df)
    assert "#Qrels/q" in md and "34M" in md and "1,626" in md and "90.00" in md
    assert r"\toprule" in table6_latex(df)


# --- downloads -----------------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_download_verifies_checksum(server, tmp_path):
    root, base = server
    (root / "nq.jsonl").write_bytes(b'{"id": 1}\n')
    good = hashlib.sha256(b'{"id": 1}\n').hexdigest()
    dest = tmp_path / "data" / "nq.jsonl"
    assert files.download(f"{base}/nq.jsonl", dest, sha256=good, retries=1, timeout=5) == good
    assert dest.read_bytes() == b'{"id": 1}\n'
    other = tmp_path / "data" / "bad.jsonl"
    with pytest.raises(ValueError, match="sha256 .* does not match"):
        files.download(f"{base}/nq.jsonl", other, sha256="0" * 64, retries=1, timeout=5)
    assert not other.exists() and not list(other.parent.glob(".bad.jsonl.part"))


def test_download_failure_says_where_to_get_and_put_the_file(server, tmp_path):
    _, base = server
    dest = tmp_path / "data" / "missing.jsonl"
    with pytest.raises(files.MissingDataError) as err:
        files.download(f"{base}/missing.jsonl", dest, md5="0" * 32, retries=2, timeout=5, backoff=0)
    message = str(err.value)
    assert "after 2 tries" in message and f"{base}/missing.jsonl" in message and str(dest) in message
    assert not dest.exists()


def test_file_specs_and_missing_message():
    assert files.local_path("resources/x.tsv", "resources/data") == "resources/x.tsv"
    assert (
        files.local_path({"url": "https://h/a/dev_v2.1.json.gz?dl=1"}, "resources/data")
        == "resources/data/dev_v2.1.json.gz"
    )
    msg = files.missing_message("resources/data/nq.jsonl", "datasets.nq.file", "kilt")
    assert (
        "datasets.nq.file" in msg
        and "github.com/facebookresearch/KILT" in msg
        and "put it at 'resources/data/nq.jsonl'" in msg
    )


# --- the demo and bring-your-own sources through the same jobs ------------------------------------


@pytest.mark.slow
def test_local_and_worldfacts_jobs_read_their_declared_inputs(tmp_path):
    tsv = tmp_path / "mine.tsv"
    tsv.write_text("id\ttext\ttitle\n1\tParis is the capital of France.\tParis\n2\tLima is in Peru.\tLima\n")
    qs = write_jsonl(
        tmp_path / "mine.jsonl",
        [{"id": "q", "question": "Capital of France?", "answers": ["Paris"], "human_pids": [" 1"]}],
    )
    out = tmp_path / "results"
    cfg_corpus = {"source": "local", "path": "elsewhere/not-read.tsv"}  # the declared input wins
    jobs.prepare_corpus_job(name="c", cfg=cfg_corpus, inputs={"file": str(tsv)}, output=str(out / "p.parquet"), seed=0)
    cfg_ds = {"source": "local", "queries": "elsewhere/not-read.jsonl", "task": "qa", "limit": None}
    q = jobs.prepare_queries_job(
        name="d",
        cfg=cfg_ds,
        inputs={"passages": str(out / "p.parquet"), "queries": str(qs)},
        output=str(out / "q.parquet"),
        seed=0,
    )
    assert q.row(0) == ("q", "Capital of France?", ["Paris"], ["1"], "qa")
    wf = {"source": "worldfacts", "n_cities": 0}
    jobs.prepare_corpus_job(name="wf", cfg=wf, inputs={}, output=str(out / "wf.parquet"), seed=13)
    wq = jobs.prepare_queries_job(
        name="w",
        cfg={"source": "worldfacts", "flavour": "claim", "n_queries": 4, "limit": None},
        inputs={"passages": str(out / "wf.parquet")},
        output=str(out / "wq.parquet"),
        seed=13,
    )
    assert wq.height == 4 and set(wq["task"]) == {"fact"}


def test_extract_answers_job_goes_through_the_store(tmp_path, monkeypatch, repo):
    """MS MARCO-FQA extraction with a stand-in LLM: prompts from config/prompts.yaml, outputs cached."""
    import llm_utility.generation as generation

    class StandIn:
        backend, fingerprint, slug, calls, dtype = "stand-in", "stand-in-1", "stand-in", 0, "float32"

        def render(self, text):
            return text

        def count_tokens(self, prompts, special=True):
            return [len(p.split()) for p in prompts]

        def check_fits(self, prompts, labels, reserve):
            pass

        def store_key_extras(self):
            return {}

        def close(self):
            pass

        def generate(self, prompts, max_new_tokens, stop=()):
            StandIn.calls += len(prompts)
            # The last word of the long answer, or an extraction the long answer does not contain.
            return [
                p.split("Long answer: ")[1].split("\n")[0].rstrip(".").split()[-1] if "London" in p else "Paris"
                for p in prompts
            ]

    monkeypatch.setattr(generation, "load_generator", lambda manifest, spec, threads=None: StandIn())
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(MSMARCO_DEV))
    q, _, _ = msmarco.load_msmarco_queries(path, query_types=["LOCATION", "NUMERIC"])
    queries = tmp_path / "source.parquet"
    q.write_parquet(queries)
    spec = {"max_new_tokens": 16, "stop": ["\n"], "batch_size": 4}
    kwargs = dict(
        queries=str(queries),
        manifest="unused",
        prompts=str(repo / "config" / "prompts.yaml"),
        spec=spec,
        store=str(tmp_path / "store"),
        job="extract_answers",
    )
    table = jobs.extract_answers_job(**kwargs, output=str(tmp_path / "short.parquet"))
    assert table.filter(pl.col("kept"))["short_answer"].to_list() == ["England"]
    assert table.height == 3 and StandIn.calls == 3
    jobs.extract_answers_job(**kwargs, output=str(tmp_path / "again.parquet"))
    assert StandIn.calls == 3  # the rerun is served from the generation store


def test_a_page_twice_in_the_knowledge_source_is_an_error(tmp_path):
    ks = write_knowledge_source(tmp_path / "ks.json", [SUPER_BOWL, COLDPLAY, SUPER_BOWL])
    shard = str(tmp_path / "s0.parquet")
    jobs.chunk_corpus_shard_job(knowledge_source=str(ks), shard=0, n_shards=1, words=10, output=shard)
    out = tmp_path / "passages.parquet"
    with pytest.raises(ValueError, match=r"duplicate passage ids \['45267196_0'\]"):
        jobs.prepare_corpus_job(name="k", cfg={"source": "kilt"}, inputs={"shards": [shard]}, output=str(out), seed=0)
    assert not out.exists()
