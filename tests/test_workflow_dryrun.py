"""The DAG resolves for both configs without any model or data present, and lints clean."""

import re
import subprocess
from pathlib import Path

from conftest import snakemake_cmd


def _dry_run(repo, *args):
    out = subprocess.run(
        snakemake_cmd("-n", "--cores", "4", *args), cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    return out.stdout + out.stderr


def _job_counts(text):
    block = text.split("Job stats:")[1].split("Reasons:")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", block, re.M)}


def test_paper_config_resolves_full_dag(repo):
    counts = _job_counts(_dry_run(repo, "--configfile", "config/paper.yaml"))
    n_datasets, n_llms = 6, 4
    assert counts["prepare_queries"] == n_datasets
    assert counts["materialize_model"] == n_llms
    assert counts["answer_candidates"] == n_datasets * n_llms
    assert counts["gold_sets"] == n_datasets * n_llms
    assert counts["answer_transfer"] == n_datasets * n_llms * (n_llms - 1)
    assert counts["encode_corpus_shard"] == 2 * 64  # two corpora, 64 GPU shards each
    assert counts["table1"] == 1 and counts["figure_transfer"] == 3
    # Data: every publisher file is a download job (nothing is downloaded by a dry run): the KILT
    # knowledge source, the MS MARCO collection, five task files and TriviaQA's questions, 2Wiki.
    assert counts["download_data"] == 9
    assert counts["chunk_corpus_shard"] == 64 and counts["corpus_spans"] == 1  # the KILT corpus, sharded
    assert counts["prepare_corpus"] == 2
    assert counts["load_queries"] == n_datasets and counts["map_human_passages"] == n_datasets
    assert counts["extract_answers"] == 1  # MS MARCO-FQA's short answers
    assert counts["table6"] == 1


def test_paper_config_tags_gpu_jobs(repo):
    text = _dry_run(repo, "--configfile", "config/paper.yaml", "-p")
    answer_jobs = re.findall(r"rule answer_candidates:.*?resources: ([^\n]*)", text, re.S)
    assert answer_jobs and all("gpu=" in r and "gpu=0" not in r for r in answer_jobs)
    # qwen3-32b is configured with two GPUs (tensor parallel)
    assert re.search(r"output: results/nq/qwen3-32b/answers/none.parquet.*?resources: [^\n]*gpu=2", text, re.S)


def test_default_config_resolves(repo):
    counts = _job_counts(_dry_run(repo, "--forceall"))  # whatever results/ already holds
    assert counts["answer_candidates"] == 3 * 2 and counts["answer_transfer"] == 3 * 2


def test_lint_clean(repo):
    out = subprocess.run(snakemake_cmd("--lint"), cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Congratulations" in out.stdout + out.stderr, out.stdout + out.stderr


def test_bad_config_names_the_key(repo, tmp_path):
    bad = tmp_path / "bad.yaml"
    text = (repo / "config" / "config.yaml").read_text().replace("retriever: minilm", "retriever: nosuch", 1)
    bad.write_text(text)
    out = subprocess.run(
        snakemake_cmd("-n", "--configfile", str(bad)), cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert out.returncode != 0
    assert "datasets.wf-single.retriever = 'nosuch' is not in retrievers" in out.stdout + out.stderr


def test_snakefmt_clean(repo):
    snakefmt = str(Path(snakemake_cmd()[0]).with_name("snakefmt"))
    out = subprocess.run([snakefmt, "--check", "Snakefile", "rules"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
