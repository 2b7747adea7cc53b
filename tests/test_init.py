"""`python -m llm_utility.init`: your own corpus and queries become a config with the paper's settings,
checked as the loaders check them, with the run's cost printed before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from llm_utility import init
from llm_utility.config import SCHEMA

REPO = SCHEMA.parents[1]
PAPER = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
DEMO = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
NO_GPU = {"memory": 24 * 2**30, "cores": 2, "gpu": False}
GPU = {"memory": 512 * 2**30, "cores": 64, "gpu": True}


def _files(tmp_path: Path, queries: list[dict], passages: int = 30) -> tuple[Path, Path]:
    corpus = tmp_path / "psgs_w100.tsv"
    body = "".join(f'{i}\t"Passage {i} says ""{i}"" in a hundred words."\tTitle {i}\n' for i in range(1, passages + 1))
    corpus.write_text("id\ttext\ttitle\n" + body, encoding="utf-8")
    path = tmp_path / "my-queries.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    return corpus, path


QA = [
    {"id": f"q{i}", "question": f"What does passage {i} say?", "answers": [str(i)], "human_pids": [str(i)]}
    for i in range(1, 6)
]


def _run(tmp_path, monkeypatch, capsys, queries=QA, *extra: str, here=NO_GPU):
    monkeypatch.setattr(init, "machine", lambda: here)
    corpus, path = _files(tmp_path, queries)
    out = tmp_path / "mine.yaml"
    code = init.main(["--corpus", str(corpus), "--queries", str(path), "--out", str(out), *extra])
    printed = capsys.readouterr()
    return code, out, printed.out, printed.err


def test_writes_the_paper_s_settings_for_the_user_s_files(tmp_path, monkeypatch, capsys):
    code, out, printed, _ = _run(tmp_path, monkeypatch, capsys)
    assert code == 0
    text = out.read_text()
    config = yaml.safe_load(text)
    full = init.validate(config)  # valid as the Snakefile validates it
    # The paper's settings, none of the demo's cuts.
    assert config["llms"] == PAPER["llms"] and config["top_k"] == PAPER["top_k"] == 20
    assert full["judgments"]["max_queries"] is None and full["judgments"]["methods"] == PAPER["judgments"]["methods"]
    assert config["prompts"] == "config/prompts.yaml" and "verdict_synonyms" not in config
    assert set(config["retrievers"]) == {"bge-m3", "bm25"}
    # The user's files, and what the estimates need from them.
    ((corpus_name, corpus),) = config["corpora"].items()
    assert corpus == {"source": "local", "path": str(tmp_path / "psgs_w100.tsv")}
    dataset = config["datasets"]["my-queries"]
    assert dataset["corpus"] == corpus_name and dataset["retriever"] == "bge-m3" and dataset["expected_queries"] == 5
    assert "paper_dataset" not in dataset
    assert config["resources"]["estimate"]["human_passages"] == 1
    # A comment where a CPU-only user changes the LLMs.
    assert "# CPU demo's two models instead" in text.split("\nllms:\n")[0]
    # What it prints: the checks, the cost per LLM, and that this machine cannot run it.
    assert "30 passages, ids unique" in printed and "5 queries (5 qa), 5 human passages on 5 of them" in printed
    for llm in PAPER["llms"]:
        assert f"    {llm}: " in printed and "calls" in printed
    assert "WARNING: bge-m3 and the paper's LLMs need GPUs and this machine has none" in printed
    assert "--models demo" in printed


def test_demo_models_for_a_machine_without_a_gpu(tmp_path, monkeypatch, capsys):
    claims = [{"id": "c1", "question": "Passage 1 says 1.", "answers": ["SUPPORTS"], "human_pids": ["1"]}]
    code, out, printed, _ = _run(tmp_path, monkeypatch, capsys, claims, "--models", "demo", "--task", "fact")
    assert code == 0
    config = yaml.safe_load(out.read_text())
    init.validate(config)
    assert config["llms"] == DEMO["llms"] and config["datasets"]["my-queries"]["retriever"] == "minilm"
    assert config["datasets"]["my-queries"]["task"] == "fact" and config["verdict_synonyms"] == DEMO["verdict_synonyms"]
    assert "of one core at the demo's measured rate" in printed and "WARNING" not in printed


@pytest.mark.parametrize(
    "queries, line, problem",
    [
        (
            [QA[0], {"id": "c", "question": "C.", "answers": ["supports"], "task": "fact"}],
            2,
            'exactly ["SUPPORTS"] or ["REFUTES"]',
        ),
        ([QA[0], QA[1], {**QA[2], "human_pids": ["404"]}], 3, "['404'] not found in the corpus"),
        ([QA[0], QA[0]], 2, "duplicate id 'q1'"),
    ],
)
def test_bad_queries_stop_it_with_file_and_line(tmp_path, monkeypatch, capsys, queries, line, problem):
    code, out, _, err = _run(tmp_path, monkeypatch, capsys, queries)
    assert code == 1 and not out.exists()
    assert f"my-queries.jsonl, line {line}:" in err and problem in err


def test_a_duplicate_passage_id_names_its_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(init, "machine", lambda: NO_GPU)
    corpus, queries = _files(tmp_path, QA)
    corpus.write_text(corpus.read_text() + "7\tagain\tT\n")
    code = init.main(["--corpus", str(corpus), "--queries", str(queries), "--out", str(tmp_path / "m.yaml")])
    assert code == 1 and "psgs_w100.tsv, line 32: duplicate id '7' (first on line 8)" in capsys.readouterr().err


def test_a_paper_benchmark_s_name_says_so(tmp_path, monkeypatch, capsys):
    code, out, printed, _ = _run(tmp_path, monkeypatch, capsys, QA, "--name", "nq", here=GPU)
    assert code == 0 and "the dataset name 'nq' means the paper's NQ" in printed
    text = out.read_text()
    assert yaml.safe_load(text)["datasets"]["nq"]["paper_dataset"] == ["nq"]
    assert "Set `paper_dataset: []`" in text
    assert "WARNING" not in printed  # a GPU machine with the memory for it


def test_a_corpus_too_large_for_the_machine_names_the_fix(tmp_path, monkeypatch, capsys):
    """DPR's 21M passages on a 2-core, 24 GiB machine without a GPU, with the demo's models: days of
    encoding, a BM25 build of ~110 GiB (docs/performance.md's 5.6 KB a passage)."""
    corpus_info = {"passages": 21_015_324, "mean_words": 100, "pids": set()}
    query_info = {"queries": 3610, "tasks": {"qa": 3610}, "human_passages": 3610, "with_human": 3610}
    config = init.build_config(Path("c.tsv"), Path("q.jsonl"), "mine", "wiki", "qa", "demo", corpus_info, query_info)
    assert config["retrievers"]["minilm"]["shards"] == 40  # ~530k passages per encoding job
    lines, warnings = init.report(init.validate(config), "mine", corpus_info, query_info, NO_GPU)
    text = "\n".join(warnings)
    assert "encoding 21,015,324 passages on this CPU takes ~184.2 h" in text
    assert "building the BM25 index (~109.6 GiB) does not fit" in text and "runs: {retrievers: []}" in text
    assert "the GPU retriever (bge-m3" in text and "shards" in text
    assert "IVF65536,SQ8" in text  # a flat index of 21M x 384 float32 is ~30 GiB
    # The same corpus with the paper's models on a large GPU machine fits, in encoding shards.
    config = init.build_config(Path("c.tsv"), Path("q.jsonl"), "mine", "wiki", "qa", "paper", corpus_info, query_info)
    assert (
        config["retrievers"]["bge-m3"]["shards"] == 40
        and config["retrievers"]["bge-m3"]["index_factory"] == "IVF65536,SQ8"
    )
    lines, warnings = init.report(init.validate(config), "mine", corpus_info, query_info, GPU)
    assert not warnings and any("40 job(s) of one GPU" in line for line in lines)


def test_it_never_overwrites_without_force(tmp_path, monkeypatch, capsys):
    (tmp_path / "mine.yaml").write_text("mine")
    with pytest.raises(SystemExit):
        _run(tmp_path, monkeypatch, capsys)
    assert (tmp_path / "mine.yaml").read_text() == "mine"


def test_it_knows_the_names_findings_reads_as_the_paper_s():
    from llm_utility.report.findings.framework import PAPER_DATASETS

    assert set(init.PAPER_DATASETS) == set(PAPER_DATASETS)
