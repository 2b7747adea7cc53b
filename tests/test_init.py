"""`python -m llm_utility.init`: your own corpus and queries become a config with the paper's settings,
checked as the loaders check them, with the run's cost printed before anything runs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import polars as pl
import pytest
import yaml

from llm_utility import init, sizing
from llm_utility.config import SCHEMA

REPO = SCHEMA.parents[1]
PAPER = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
DEMO = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
NO_GPU = {"memory": 24 * 2**30, "cores": 2, "gpu": False}
GPU = {"memory": 512 * 2**30, "cores": 64, "gpu": True}
# The reference CPU's kind (an Intel Xeon with AMX), two cores, the demo models already materialized.
AMX = {
    "memory": 24 * 2**30,
    "cores": 2,
    "gpu": False,
    "cpu_flags": {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8"},
    "materialized": {"smollm2-135m", "gemma3-270m"},
}


def _files(
    tmp_path: Path, queries: list[dict], passages: int = 30, names=("psgs_w100.tsv", "my-queries.jsonl")
) -> tuple[Path, Path]:
    corpus = tmp_path / names[0]
    body = "".join(f'{i}\t"Passage {i} says ""{i}"" in a hundred words."\tTitle {i}\n' for i in range(1, passages + 1))
    corpus.write_text("id\ttext\ttitle\n" + body, encoding="utf-8")
    path = tmp_path / names[1]
    path.write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    return corpus, path


QA = [
    {"id": f"q{i}", "question": f"What does passage {i} say?", "answers": [str(i)], "human_pids": [str(i)]}
    for i in range(1, 6)
]


def _run(tmp_path, monkeypatch, capsys, queries=QA, *extra: str, here=NO_GPU, passages=30):
    monkeypatch.setattr(init, "machine", lambda: here)
    corpus, path = _files(tmp_path, queries, passages)
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
    assert "of one core (1 thread)" in printed and "the whole run: ~" in printed and "WARNING" not in printed


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
    # One thread (the demo's encode_threads) of a CPU of unknown kind: the slowest kind's rate, 3,390
    # words/s on the reference CPU times 57/131 (float32 products), after 15 s of loading.
    hours = (15 + 21_015_324 * 100 / (3_390 * 57 / 131)) / 3600
    assert f"encoding 21,015,324 passages on this CPU takes ~{hours:.1f} h" in text
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


MANY = [
    {"id": f"q{i}", "question": f"What does passage {i} say?", "answers": [str(i)], "human_pids": [str(i)]}
    for i in range(1, 41)
]


def _written_run(out: Path, corpus: Path) -> tuple[dict, sizing.Cut, sizing.Estimate]:
    """The written config, the size it has on init's ladder and its estimate on the AMX machine."""
    config = yaml.safe_load(out.read_text())
    dataset = config["datasets"]["my-queries"]
    queries = dataset.get("limit") or dataset["expected_queries"]
    judged = config["judgments"].get("max_queries") or queries
    cut = sizing.Cut(queries, judged, config["top_k"] != PAPER["top_k"])
    return config, cut, sizing.cpu_run(init.validate(config), init.check_corpus(corpus), AMX)


def test_a_budget_picks_the_largest_run_whose_estimate_fits(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(init, "machine", lambda: AMX)
    corpus, queries = _files(tmp_path, MANY, passages=40)
    whole = init.build_config(
        corpus,
        queries,
        "my-queries",
        "psgs-w100",
        "qa",
        "demo",
        init.check_corpus(corpus),
        {"queries": 40, "tasks": {"qa": 40}, "human_passages": 40, "with_human": 40},
    )
    ladder = sizing.ladder(40)

    def minutes(cut: sizing.Cut) -> float:
        config = sizing.apply_cut(whole, "my-queries", cut, 40)
        return sizing.cpu_run(init.validate(config), init.check_corpus(corpus), AMX).minutes

    # Along the ladder the estimates never rise: the budget takes the first size that fits.
    sampled = [minutes(c) for c in ladder[:: len(ladder) // 12]]
    assert sampled == sorted(sampled, reverse=True) and sampled[0] > sampled[-1]
    # Budgets that fall between the sizes of 30 and 10 queries (a third of them judged).
    sizes = {c.queries: c for c in ladder if c.judged == max(1, -(-3 * c.queries // 10)) and c.demo_cuts}
    picked = {}
    for budget in (minutes(sizes[30]) + 0.01, minutes(sizes[10]) + 0.01):
        out = tmp_path / f"budget-{budget:.2f}.yaml"
        args = ["--corpus", str(corpus), "--queries", str(queries), "--models", "demo", "--budget", f"{budget:.2f}"]
        assert init.main([*args, "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        config, cut, estimate = _written_run(out, corpus)
        assert estimate.minutes <= budget  # its own estimate fits ...
        richer = ladder[ladder.index(cut) - 1]
        assert minutes(richer) > budget  # ... and the next larger size does not
        assert f"queries: the first {cut.queries} of 40 (datasets.my-queries.limit)" in printed
        assert f"judged queries: the first {cut.judged} of those (judgments.max_queries)" in printed
        assert "judgments.methods: the demo's, without listwise" in printed
        assert "top_k: 5 (the demo's), not 20" in printed and "# Cut to fit --budget" in out.read_text()
        assert config["judgments"]["methods"] == DEMO["judgments"]["methods"] and config["top_k"] == DEMO["top_k"]
        picked[budget] = cut
    big, small = picked.values()
    assert (big.queries, big.judged) == (30, 9) and (small.queries, small.judged) == (10, 3)


def test_a_budget_the_whole_run_fits_cuts_nothing(tmp_path, monkeypatch, capsys):
    code, out, printed, _ = _run(tmp_path, monkeypatch, capsys, QA, "--models", "demo", "--budget", "600", here=AMX)
    config = yaml.safe_load(out.read_text())
    assert code == 0 and "fits --budget 600 minutes without a cut" in printed
    assert "limit" not in config["datasets"]["my-queries"] and config["judgments"] == {
        **PAPER["judgments"],
        "thinking_datasets": ["my-queries"],
    }


def test_no_run_fits_a_budget_below_one_query(tmp_path, monkeypatch, capsys):
    code, out, _, err = _run(tmp_path, monkeypatch, capsys, QA, "--models", "demo", "--budget", "0.2", here=AMX)
    assert code == 1 and not out.exists()
    assert "error: no run fits --budget 0.2: one query, judged, with the demo's methods is estimated at" in err


def test_a_budget_needs_the_cpu_models(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        _run(tmp_path, monkeypatch, capsys, QA, "--budget", "10", here=AMX)
    assert "add --models demo" in capsys.readouterr().err


def test_limit_keeps_the_first_n_queries(tmp_path, monkeypatch, capsys):
    from llm_utility.data.sources import prepare_queries

    code, out, printed, _ = _run(tmp_path, monkeypatch, capsys, QA, "--limit", "3", "--models", "demo", here=AMX)
    assert code == 0 and "LLM calls on 3 queries" in printed
    dataset = init.validate(yaml.safe_load(out.read_text()))["datasets"]["my-queries"]
    assert dataset["limit"] == 3 and dataset["expected_queries"] == 3
    # The workflow's loader on the written config: the file's first three lines.
    passages = tmp_path / "passages.parquet"
    pl.DataFrame({"pid": [str(i) for i in range(1, 31)]}).write_parquet(passages)
    loaded = prepare_queries(
        "my-queries", dataset, str(passages), seed=13, queries_path=str(tmp_path / "my-queries.jsonl")
    )
    first = [json.loads(line)["id"] for line in (tmp_path / "my-queries.jsonl").read_text().splitlines()[:3]]
    assert loaded["qid"].to_list() == first == ["q1", "q2", "q3"]


def test_the_header_records_every_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(init, "machine", lambda: AMX)
    corpus, queries = _files(tmp_path, QA)
    argv = [
        "--corpus", str(corpus), "--queries", str(queries), "--out", str(tmp_path / "my config.yaml"),
        "--name", "wf-capitals", "--corpus-name", "wiki", "--task", "qa", "--models", "demo",
        "--limit", "4", "--budget", "30", "--force",
    ]  # fmt: skip
    assert init.main(argv) == 0
    first = (tmp_path / "my config.yaml").read_text().splitlines()[0]
    assert first.startswith("# Written by `") and first.endswith("`.")
    assert shlex.split(first[len("# Written by `") : -2]) == ["python", "-m", "llm_utility.init", *argv]


def test_the_encoding_estimate_uses_the_config_s_threads(tmp_path, monkeypatch, capsys):
    code, out, printed, _ = _run(tmp_path, monkeypatch, capsys, QA, "--models", "demo", here=AMX)
    config = yaml.safe_load(out.read_text())
    assert config["retrievers"]["minilm"]["encode_threads"] == 1  # the demo's, which init writes
    assert "encoding 30 passages with MiniLM on 1 thread(s) (retrievers.minilm.encode_threads)" in printed
    corpus = init.check_corpus(tmp_path / "psgs_w100.tsv")
    # 30 passages of 8 words and a 2-word title; MiniLM's 3,390 words/s on one thread of the reference
    # CPU, 1.5x with two, after 15 s of loading; two threads' seconds count twice (both cores).
    words = 30 * 10
    assert corpus["passages"] * corpus["mean_words"] == words
    one = sizing.cpu_run(init.validate(config), corpus, AMX)
    assert one.parts["encoding"] == pytest.approx(15 + words / 3_390)
    config["retrievers"]["minilm"]["encode_threads"] = 2
    two = sizing.cpu_run(init.validate(config), corpus, AMX)
    assert two.parts["encoding"] == pytest.approx(2 * (15 + words / (3_390 * 1.5)))
    lines, _ = init.report(init.validate(config), "my-queries", corpus, {"queries": 5}, AMX)
    assert any("on 2 thread(s)" in line for line in lines)


@pytest.mark.parametrize(
    "names, extra, suggested",
    [
        (
            ("corpus.tsv", "queries.jsonl"),
            [],
            ["--name for the dataset 'queries'", "--corpus-name for the corpus 'corpus'"],
        ),
        (("passages.tsv", "data.jsonl"), ["--name", "nq-sample"], ["--corpus-name for the corpus 'passages'"]),
        (("psgs_w100.tsv", "my-queries.jsonl"), [], []),
    ],
)
def test_generic_file_names_get_a_name_suggestion(tmp_path, monkeypatch, capsys, names, extra, suggested):
    monkeypatch.setattr(init, "machine", lambda: AMX)
    corpus, queries = _files(tmp_path, QA, names=names)
    args = ["--corpus", str(corpus), "--queries", str(queries), "--out", str(tmp_path / "m.yaml"), *extra]
    assert init.main(args) == 0
    printed = capsys.readouterr().out
    notes = [line for line in printed.splitlines() if "name them with" in line]
    assert len(notes) == (1 if suggested else 0)
    for suggestion in suggested:
        assert suggestion in notes[0]
    if len(suggested) == 1:
        assert "--name for" not in notes[0]


def test_the_estimate_of_the_demo_is_the_demo_s_measured_run():
    """init's estimate of config/config.yaml on the CPU its rates were measured on gives back that
    run: its calls' seconds per LLM (results/tables/cost.csv: SmolLM2 194.3 s, Gemma 3 236.1 s) and
    its wall time (113 jobs in 5 min 13 s, the two models materialized in the run)."""
    from llm_utility.data import worldfacts

    passages = worldfacts.build_corpus(seed=13, n_cities=300)
    words = sum(len(t.split()) + len(x.split()) for t, x in zip(passages["title"], passages["text"])) / passages.height
    assert round(words * init.TOKENS_PER_WORD) == sizing.DEMO_PASSAGE_TOKENS
    demo = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    # The three datasets' human passages (1, 2 and 1 a query) as one mean: the count is linear in it.
    demo["resources"] = {"estimate": {"passage_tokens": sizing.DEMO_PASSAGE_TOKENS, "human_passages": 4 / 3}}
    estimate = sizing.cpu_run(
        init.validate(demo), {"passages": passages.height, "mean_words": words}, {**AMX, "materialized": set()}
    )
    assert estimate.parts["model calls: smollm2-135m"] == pytest.approx(194.3, abs=0.5)
    assert estimate.parts["model calls: gemma3-270m"] == pytest.approx(236.1, abs=0.5)
    assert estimate.seconds == pytest.approx(5 * 60 + 13, rel=0.1)


@pytest.mark.parametrize(
    "flags, kind",
    [
        ({"avx2", "avx512f", "avx512_bf16", "amx_bf16"}, "amx"),
        ({"avx2", "avx512f", "avx512_bf16", "avx512_vnni"}, "avx512"),
        ({"avx2", "fma"}, "avx2"),
        (set(), "unknown"),
    ],
)
def test_the_cpu_kind_picks_its_rates(flags, kind):
    key, rates = sizing.cpu_kind(flags)
    assert key == kind
    slowest = sizing.CPU_KINDS["avx2"]
    if kind == "unknown":
        assert (rates.model_factor, rates.encode_factor) == (slowest.model_factor, slowest.encode_factor)
    assert rates.model_factor >= 1 and rates.encode_factor <= 1  # none faster than the reference
