"""End to end on the real-format path: KILT-style queries with provenance and a small KILT-style knowledge
source (written here from the worldfacts facts) go through download-free chunking (two shards), exact
human-passage mapping, retrieval and gold sets with the demo encoder and SmolLM2 on CPU; Table 6 and
the coverage report come out; a configured local file that is missing stops the run naming where to
get it and where to put it."""

from __future__ import annotations

import json

import polars as pl
import pytest
import yaml

from llm_utility.data import worldfacts
from workflow_runner import run_workflow, workdir_sharing_models

pytestmark = pytest.mark.slow

N_PAGES = 30
N_QUERIES = 5
TARGETS = [
    "results/kilt-nq/smollm2-135m/gold_U.parquet",
    "results/kilt-nq/human_coverage.json",
    "results/tables/table6_datasets.md",
]


def _write_kilt_files(workdir):
    """A KILT knowledge source of N_PAGES country pages and N_QUERIES KILT-format NQ-style queries."""
    corpus = worldfacts.build_corpus(seed=13, n_cities=0)
    queries = worldfacts.build_queries("single_hop", N_QUERIES, seed=13, passages=corpus)
    corpus = corpus.with_columns(iso3=pl.col("pid").str.split("-").list.first())
    needed = {p.split("-")[0] for pids in queries["human_pids"] for p in pids}
    others = [c for c in corpus["iso3"].unique(maintain_order=True) if c not in needed]
    countries = sorted(needed) + others[: N_PAGES - len(needed)]
    pages, where = [], {}
    for n, iso3 in enumerate(countries):
        sections = corpus.filter(pl.col("iso3") == iso3)
        title = sections["title"][0]
        text = [f"{title}\n", "Section::::Abstract.\n"]
        for pid, body in sections.select("pid", "text").iter_rows():
            where[pid] = (str(1000 + n), title, len(text), len(body))
            text.append(body + "\n")
        pages.append(
            {"_id": str(n), "wikipedia_id": str(1000 + n), "wikipedia_title": title, "text": text, "anchors": []}
        )
    with open(workdir / "kilt_knowledgesource.json", "w", encoding="utf-8") as f:
        for page in pages:
            f.write(json.dumps(page, ensure_ascii=False) + "\n")
    with open(workdir / "nq-dev-kilt.jsonl", "w", encoding="utf-8") as f:
        for i, (qid, question, answers, human) in enumerate(
            queries.select("qid", "question", "answers", "human_pids").iter_rows()
        ):
            provenance = []
            for pid in human:
                wid, title, paragraph, length = where[pid]
                # Even queries: an exact character span; odd ones: the whole paragraph (-1), as KILT writes both.
                sc, ec = (0, length) if i % 2 == 0 else (-1, -1)
                provenance.append(
                    {
                        "wikipedia_id": wid,
                        "title": title,
                        "start_paragraph_id": paragraph,
                        "start_character": sc,
                        "end_paragraph_id": paragraph,
                        "end_character": ec,
                        "bleu_score": 1.0,
                    }
                )
            outputs = [{"answer": a} for a in answers] + [{"provenance": provenance}]
            if i == 0:  # a page the knowledge source does not hold: counted, not lost
                outputs.append(
                    {
                        "provenance": [
                            {
                                "wikipedia_id": "424242",
                                "title": "Elsewhere",
                                "start_paragraph_id": 1,
                                "start_character": 0,
                                "end_paragraph_id": 1,
                                "end_character": 5,
                            }
                        ]
                    }
                )
            f.write(
                json.dumps({"id": qid, "input": question, "output": outputs, "meta": {}}, ensure_ascii=False) + "\n"
            )
    return queries


def _config(repo, workdir, ks_path):
    demo = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    cfg = {
        "seed": 13,
        "prompts": str(repo / "config" / "prompts.yaml"),
        "corpora": {"kilt-wiki": {"source": "kilt", "file": str(ks_path), "shards": 2, "passage_words": 50}},
        "datasets": {
            "kilt-nq": {
                "source": "kilt",
                "file": str(workdir / "nq-dev-kilt.jsonl"),
                "corpus": "kilt-wiki",
                "retriever": "minilm",
            }
        },
        "retrievers": demo["retrievers"],
        "top_k": 3,
        "llms": {"smollm2-135m": demo["llms"]["smollm2-135m"]},
    }
    path = workdir / "kilt.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def kilt_run(repo, tmp_path_factory):
    workdir = workdir_sharing_models(repo, tmp_path_factory, "kilt-e2e")
    queries = _write_kilt_files(workdir)
    cfg_path = _config(repo, workdir, workdir / "kilt_knowledgesource.json")
    out = run_workflow(repo, workdir, cfg_path, "--cores", "2", *TARGETS)
    assert out.returncode == 0, out.stderr[-5000:]
    return workdir, queries


def test_human_passages_map_exactly(kilt_run):
    workdir, source = kilt_run
    coverage = json.loads((workdir / "results/kilt-nq/human_coverage.json").read_text())
    assert coverage["rule"] == "span" and coverage["queries"] == N_QUERIES
    assert coverage["annotations"] == sum(len(h) for h in source["human_pids"]) + 1
    assert coverage["unmapped"] == 1 and coverage["unmapped_reasons"] == {"page not in corpus": 1}
    queries = pl.read_parquet(workdir / "results/kilt-nq/queries.parquet")
    passages = pl.read_parquet(workdir / "results/corpora/kilt-wiki/passages.parquet")
    texts = dict(passages.select("pid", "text").iter_rows())
    expected = dict(zip(source["qid"], source["human_pids"], strict=True))
    corpus = worldfacts.build_corpus(seed=13, n_cities=0)
    section = dict(corpus.select("pid", "text").iter_rows())
    for qid, human in queries.select("qid", "human_pids").iter_rows():
        assert human, qid
        # Every mapped passage holds a piece of the annotated section, and together they hold all of it.
        joined = " ".join(texts[p] for p in human)
        for pid in expected[qid]:
            assert " ".join(section[pid].split()[:5]) in joined or " ".join(section[pid].split()[-5:]) in joined


def test_gold_sets_and_table6(kilt_run):
    workdir, _ = kilt_run
    gold = pl.read_parquet(workdir / "results/kilt-nq/smollm2-135m/gold_U.parquet")
    queries = pl.read_parquet(workdir / "results/kilt-nq/queries.parquet")
    assert set(gold["qid"]) <= set(queries["qid"])
    table = (workdir / "results/tables/table6_datasets.md").read_text()
    n_passages = pl.read_parquet(workdir / "results/corpora/kilt-wiki/passages.parquet").height
    assert "kilt-nq" in table and f"{n_passages:,}" in table and "#Qrels/q" in table
    csv = pl.read_csv(workdir / "results/tables/table6_datasets.csv")
    assert csv["queries"].to_list() == [N_QUERIES] and csv["corpus_passages"].to_list() == [n_passages]
    shards = sorted((workdir / "results/corpora/kilt-wiki/shards").glob("*.parquet"))
    assert len(shards) == 2 and sum(pl.read_parquet(s).height for s in shards) == n_passages


def test_missing_local_file_names_where_to_get_it(repo, kilt_run, tmp_path):
    workdir, _ = kilt_run
    cfg_path = _config(repo, tmp_path, tmp_path / "nowhere" / "kilt_knowledgesource.json")
    (tmp_path / "nq-dev-kilt.jsonl").write_text((workdir / "nq-dev-kilt.jsonl").read_text())
    out = run_workflow(repo, tmp_path, cfg_path, "--cores", "1", "results/kilt-nq/human_coverage.json")
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "rule missing_data_file" in text
    assert "config key corpora.kilt-wiki.file" in text and "kilt_knowledgesource.json" in text and "put it at" in text
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.parquet"))
