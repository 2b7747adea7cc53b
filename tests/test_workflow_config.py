"""The workflow lints and formats clean, and a bad config stops the dry-run with a message naming
the key."""

import subprocess
from pathlib import Path

import pytest

from conftest import snakemake_cmd


def test_lint_clean(repo):
    out = subprocess.run(snakemake_cmd("--lint"), cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Congratulations" in out.stdout + out.stderr, out.stdout + out.stderr


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("retriever: minilm", "retriever: nosuch", "datasets.wf-single.retriever = 'nosuch' is not in retrievers"),
        ("\nfigures:", "\nreport:\n  figure1_dataset: nq\nfigures:", "report.figure1_dataset = 'nq' is not in datasets"),
    ],
)
def test_bad_config_names_the_key(repo, tmp_path, old, new, message):
    bad = tmp_path / "bad.yaml"
    text = (repo / "config" / "config.yaml").read_text()
    assert old in text
    bad.write_text(text.replace(old, new, 1))
    out = subprocess.run(snakemake_cmd("-n", "--configfile", str(bad)), cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert message in out.stdout + out.stderr


def test_unknown_judgment_method_lists_the_valid_ones(repo, tmp_path):
    bad = tmp_path / "bad.yaml"
    text = (repo / "config" / "config.yaml").read_text()
    line = "  methods: [pointwise, pointwise_pa, listwise_pa, listwise_pa_reject]"
    assert line in text
    bad.write_text(text.replace(line, "  methods: [listwise_pa, pointwise_magic]"))
    out = subprocess.run(snakemake_cmd("-n", "--configfile", str(bad)), cwd=repo, capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "judgments.methods: unknown judgment method 'pointwise_magic'" in text
    assert "pointwise_pa" in text and "listwise_pa_reject" in text


def test_snakefmt_clean(repo):
    snakefmt = str(Path(snakemake_cmd()[0]).with_name("snakefmt"))
    out = subprocess.run([snakefmt, "--check", "Snakefile", "rules"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
