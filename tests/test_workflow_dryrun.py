"""The DAG resolves for both configs without any model or data present, and each target schedules
only what it needs. (Lint, formatting and bad configs: tests/test_workflow_config.py.)"""

import re
import shutil
import subprocess

import pytest
import yaml

from llm_utility.workflow.model_rules import MODEL_RULE_NAMES, OTHER_LLM_RULES
from llm_utility.workflow.parts import shard_count
from workflow_runner import snakemake_cmd

# Each test starts Snakemake (10-45 s on 2 cores): the slow tier.
pytestmark = pytest.mark.slow


def _dry_run(cwd, *args):
    out = subprocess.run(
        snakemake_cmd("-n", "--cores", "4", *args), cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    return out.stdout + out.stderr


def _job_counts(text):
    if "Nothing to be done" in text:
        return {}
    block = text.split("Job stats:")[1].split("Reasons:")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", block, re.M)}


@pytest.fixture(scope="session")
def fresh(repo, tmp_path_factory):
    """A checkout with no results (dry-runs must not depend on what results/ holds)."""
    root = tmp_path_factory.mktemp("fresh")
    for name in ("Snakefile", "rules", "config", "workflow", "report", "envs", "src"):
        src = repo / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    return root


@pytest.fixture(scope="session")
def paper_dag(fresh):
    """One dry-run of config/paper.yaml with the commands printed, shared by the tests below."""
    return _dry_run(fresh, "--configfile", "config/paper.yaml", "-p")


def _paper_shards(repo, rule):
    """Each dataset's query shards of ``rule`` in config/paper.yaml (an integer or a per-rule mapping)."""
    datasets = yaml.safe_load((repo / "config" / "paper.yaml").read_text())["datasets"]
    return {d: shard_count(spec.get("shards"), rule) for d, spec in datasets.items()}


def _model_jobs(counts, rule):
    """Jobs of a model rule: one per (dataset, LLM) where the rule is unsharded, one per query part
    where it runs in parts (the same rule: its `part_dir` wildcard names the part)."""
    return counts.get(rule, 0)


def test_paper_config_resolves_full_dag(paper_dag, repo):
    counts = _job_counts(paper_dag)
    n_datasets, n_llms, n_thinking = 6, 4, 1

    # datasets.<name>.shards, per rule: each job of a rule a dataset shards runs once per query
    # shard, and one gather job per (rule, dataset, LLM) writes the table every consumer reads.
    def jobs_per_llm(rule):
        return sum(_paper_shards(repo, rule).values())

    def gathers(rule):
        return sum(1 for n in _paper_shards(repo, rule).values() if n > 1) * n_llms

    assert counts["materialize_model"] == n_llms
    assert counts["candidate_passages"] == n_datasets
    assert _model_jobs(counts, "answer_candidates") == jobs_per_llm("answer_candidates") * n_llms
    # By hand: NQ's candidate answers fit in one job per LLM, the five other datasets' in 15 parts.
    assert counts["answer_candidates"] == n_llms + 15 * n_llms
    assert counts["answer_candidates_gather"] == gathers("answer_candidates") == 5 * n_llms
    assert counts["gold_sets"] == n_datasets * n_llms
    # One engine start per (dataset, LLM) answers every LLM's gold sets among C and among U.
    assert _model_jobs(counts, "answer_gold") == jobs_per_llm("answer_gold") * n_llms
    # One judge job per pair (every configured selection, ranking and perplexity: one engine start),
    # the thinking ones for the one model with a thinking switch on NQ, with its thinking
    # pseudo-answer there, and one job answering with every judgment-derived context.
    assert _model_jobs(counts, "judge") == jobs_per_llm("judge") * n_llms
    assert _model_jobs(counts, "answer_judgments") == jobs_per_llm("answer_judgments") * n_llms
    assert counts["rank_retriever"] == n_datasets * n_llms
    # Table 5's thinking judgments alone run in NQ's 37 parts; the thinking pseudo-answer in one job.
    assert counts["judge_thinking"] == n_thinking * _paper_shards(repo, "judge_thinking")["nq"] == 37
    assert counts["judge_thinking_gather"] == n_thinking
    assert counts["answer_thinking"] == n_thinking and "answer_thinking_gather" not in counts
    # The re-ask control: one job per pair (none, human, topk, union and every LLM's gold sets re-asked).
    assert _model_jobs(counts, "answer_reask") == jobs_per_llm("answer_reask") * n_llms
    for rule in ("answer_gold", "judge", "answer_judgments", "answer_reask", "answer_run"):
        assert counts.get(f"{rule}_gather", 0) == gathers(rule), rule
    assert counts["qrels"] == n_datasets * n_llms * 2
    for table in (
        "table1",
        "table2",
        "table3",
        "table4",
        "table5",
        "table7",
        "table8",
        "figure_perplexity",
        "figure_selection_transfer",
    ):
        assert counts[table] == 1, table
    assert counts["figure_transfer"] == 3
    assert counts["encode_corpus_shard"] == 2 * 64  # two corpora, 64 GPU shards each
    # Data: every publisher file is a download job (nothing is downloaded by a dry run): the KILT
    # knowledge source, the MS MARCO collection, five task files and TriviaQA's questions, 2Wiki.
    assert counts["download_data"] == 9
    assert counts["chunk_corpus_shard"] == 64 and counts["corpus_spans"] == 1  # the KILT corpus, sharded
    assert counts["prepare_corpus"] == 2
    assert counts["load_queries"] == n_datasets and counts["map_human_passages"] == n_datasets
    assert counts["extract_answers"] == 1  # MS MARCO-FQA's short answers
    assert counts["table6"] == 1
    assert counts["findings"] == counts["cost"] == counts["config_report"] == 1
    assert counts["transfer_unknown_both"] == 2  # C and U
    # The runs stage: a BM25 index per corpus and a run per dataset, next to BGE-M3's; each run's
    # top-k read once, answered with by every LLM (BGE-M3's is the topk answer: no job of its own).
    assert counts["bm25_index"] == 2 and counts["retrieve_bm25"] == counts["retrieve"] == n_datasets
    assert counts["run_topk"] == 2 * n_datasets
    assert _model_jobs(counts, "answer_run") == jobs_per_llm("answer_run") * n_llms
    assert counts["external_runs"] == counts["qrels_agreement"] == counts["retrieval_table"] == 1


def _jobs(text):
    """(rule, its job's block) of every job of a dry-run printed with -p."""
    return re.findall(r"^(?:local)?rule (\w+):\n(.*?)(?=\n\n|\Z)", text, re.M | re.S)


def test_every_rule_that_loads_an_llm_is_in_the_model_rules_table(paper_dag):
    """A job that loads an LLM writes its manifest (resources/models/<llm>/manifest.json:
    materialize_model) or reads it and asks for the LLM's GPUs (the cost table also reads every
    manifest, to wait for the model jobs, but loads nothing): each rule with such a job has a row
    in llm_utility.workflow.model_rules (its priority, query parts, runtime estimate and cost-table
    rows come from there), or is one of the few that load an LLM named by their dataset's config
    (OTHER_LLM_RULES)."""
    manifest = re.compile(r"resources/models/[^/\s,]+/manifest\.json")

    def line(block, field):
        found = re.search(rf"^    {field}: (.*)$", block, re.M)
        return found.group(1) if found else ""

    loading = {
        rule
        for rule, block in _jobs(paper_dag)
        if manifest.search(line(block, "output"))
        or (manifest.search(line(block, "input")) and re.search(r"\bgpu=", line(block, "resources")))
    }
    assert {"materialize_model", "answer_candidates", "judge", "judge_thinking", "extract_answers"} <= loading
    assert loading - set(MODEL_RULE_NAMES) == set(OTHER_LLM_RULES)
    # Every row has jobs in the paper DAG (a row without a rule would list jobs no rule makes).
    assert set(MODEL_RULE_NAMES) <= loading


def test_cost_table_waits_for_exactly_the_model_jobs(fresh, paper_dag):
    """The cost rule's inputs are the outputs of the model jobs (llm_utility.workflow.model_rules:
    model_jobs): the full DAG's, no fewer (the table would miss a stage) and no more (the paper
    DAG's counts above include the cost rule, so an extra job would show there)."""
    alone = _job_counts(_dry_run(fresh, "results/tables/cost.md", "--configfile", "config/paper.yaml"))
    full = _job_counts(paper_dag)
    assert {r: alone.get(r, 0) for r in MODEL_RULE_NAMES} == {r: full.get(r, 0) for r in MODEL_RULE_NAMES}
    assert _model_jobs(alone, "answer_thinking") >= 1 and _model_jobs(alone, "judge") == _model_jobs(full, "judge") > 0


def test_paper_config_tags_gpu_jobs(paper_dag):
    for rule in ("answer_candidates", "answer_gold", "judge", "judge_thinking", "answer_judgments", "answer_run"):
        jobs = re.findall(rf"rule {rule}:.*?resources: ([^\n]*)", paper_dag, re.S)
        assert jobs and all("gpu=" in r and "gpu=0" not in r for r in jobs), rule
        # Every model job asks for the runtime its expected time needs, within the 8-hour limit.
        assert all(0 < int(re.search(r"runtime=(\d+)", r).group(1)) <= 480 for r in jobs), rule
    # qwen3-32b is configured with two GPUs (tensor parallel)
    assert re.search(
        r"output: results/nq/(parts/1-of-\d+/)?qwen3-32b/answers/none.parquet.*?resources: [^\n]*gpu=2", paper_dag, re.S
    )
    assert re.search(
        r"output: [^\n]*results/nq/(parts/1-of-\d+/)?qwen3-32b/judgments/listwise_pa.parquet[^\n]*\n"
        r".*?resources: [^\n]*gpu=2",
        paper_dag,
        re.S,
    )


def test_default_config_resolves(fresh):
    text = _dry_run(fresh, "-p")
    counts = _job_counts(text)
    assert counts["answer_candidates"] == 3 * 2 and counts["answer_gold"] == 3 * 2
    assert counts["judge"] == 3 * 2 and counts["answer_judgments"] == 3 * 2 and counts["table2"] == 1
    # The demo runs the re-ask: one job per (dataset, LLM), every re-ask context its output, and
    # Table 1 reads them.
    assert counts["answer_reask"] == 3 * 2
    job = re.search(r"rule answer_reask:\n(.*?)\n\n", text, re.S).group(1)
    outputs = re.search(r"output: ([^\n]*)", job).group(1).split(", ")
    assert sorted(o.rsplit("/", 1)[1] for o in outputs) == sorted(
        f"reask_{c}.parquet"
        for c in (
            "none",
            "human",
            "topk",
            "union",
            "gold_C_from_smollm2-135m",
            "gold_C_from_gemma3-270m",
            "gold_U_from_smollm2-135m",
            "gold_U_from_gemma3-270m",
        )
    )
    table1 = re.search(r"rule table1:\n(.*?)\n\n", text, re.S).group(1)
    assert "answers/reask_gold_U_from_gemma3-270m.parquet" in table1 and "answers/reask_none.parquet" in table1
    # Every model job waits for the candidates: the chain to them (corpus, encoding, index,
    # retrieval) goes before the LLMs' materialization, and the demo's encoding and retrieval jobs
    # take one thread each, so that they run beside other jobs.
    jobs = re.findall(r"^(?:local)?rule (\w+):\n(.*?)(?:\n\n|\Z)", text, re.S | re.M)
    priority = {rule: _job_setting(body, "priority", 0) for rule, body in jobs}
    chain = ("prepare_corpus", "materialize_retriever", "encode_corpus_shard", "build_index", "retrieve")
    assert {priority[r] for r in chain} == {priority["retrieve"]}
    assert priority["retrieve"] > priority["materialize_model"]
    assert [_job_setting(body, "threads", 1) for rule, body in jobs if rule == "retrieve"] == [1, 1, 1]
    assert [_job_setting(body, "threads", 1) for rule, body in jobs if rule == "encode_corpus_shard"] == [1]


def _job_setting(body, key, default):
    """A dry-run job's ``key`` (priority, threads), which Snakemake prints only when not the default."""
    return int(m.group(1)) if (m := re.search(rf"^\s+{key}: (\d+)$", body, re.M)) else default


def test_reask_switch_off_removes_the_stage(fresh, tmp_path):
    cfg = yaml.safe_load((fresh / "config" / "config.yaml").read_text())
    cfg["reask"] = {"enabled": False}
    path = tmp_path / "no-reask.yaml"
    path.write_text(yaml.safe_dump(cfg))
    text = _dry_run(fresh, "--configfile", str(path), "-p")
    assert "answer_reask" not in _job_counts(text) and "answers/reask_" not in text


def test_figure1_right_schedules_only_what_it_needs(fresh):
    """One dataset, U candidates: not every transfer job of every dataset (the Figure 1 issue)."""
    counts = _job_counts(_dry_run(fresh, "results/figures/fig1_right_transfer.png"))
    assert counts["answer_gold"] == 2  # one dataset x two LLMs
    assert counts["answer_candidates"] == 2 and counts["retrieve"] == 1
    assert not {"judge", "table1", "answer_judgments"} & set(counts)
    assert sum(counts.values()) - counts["total"] <= 16


def test_own_corpora_and_datasets_need_no_other_edit(fresh, tmp_path):
    """Bring your own data: config/config.yaml with only its corpora: and datasets: replaced runs
    as it is, and Figure 1 (right) shows the first dataset."""
    cfg = yaml.safe_load((fresh / "config" / "config.yaml").read_text())
    passages = tmp_path / "passages.tsv"
    passages.write_text(
        "id\ttext\ttitle\n1\tParis is the capital of France.\tFrance\n2\tThe Seine flows through Paris.\tSeine\n"
    )
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        '{"id": "q1", "question": "What is the capital of France?", "answers": ["Paris"], "human_pids": ["1"]}\n'
    )
    claims = tmp_path / "claims.jsonl"
    claims.write_text(
        '{"id": "c1", "question": "The Seine flows through Paris.", "answers": ["SUPPORTS"], "task": "fact"}\n'
    )
    cfg["corpora"] = {"my-passages": {"source": "local", "path": str(passages)}}
    local = {"source": "local", "corpus": "my-passages", "retriever": "minilm"}
    cfg["datasets"] = {
        "my-questions": {**local, "queries": str(questions)},
        "my-claims": {**local, "queries": str(claims)},
    }
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(cfg, sort_keys=False))
    text = _dry_run(fresh, "--configfile", str(mine))
    counts = _job_counts(text)
    assert counts["answer_candidates"] == 2 * 2 and counts["table1"] == 1 and counts["figure_transfer"] == 3
    (figure_inputs,) = re.findall(r"^    input: (.*)\n    output: results/figures/fig1_right_transfer\.png", text, re.M)
    assert "results/my-questions/" in figure_inputs and "results/my-claims/" not in figure_inputs
