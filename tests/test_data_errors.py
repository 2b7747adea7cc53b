"""Bad input met inside a job stops it with one line naming the file, the line and the problem, as
`python -m llm_utility.init` reports it; the traceback stays in the job's log (llm_utility.logs)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import yaml

from llm_utility import logs
from llm_utility.data import files
from llm_utility.data.readers import DataFormatError
from workflow_runner import REPO, snakemake_cmd


def _fail(error: BaseException, terminal: io.StringIO, log: io.StringIO, monkeypatch) -> None:
    """What a job's excepthook does with ``error``, the job's stderr being ``log``."""
    monkeypatch.setattr(sys, "stderr", log)
    try:
        raise error
    except BaseException as raised:  # noqa: BLE001 (the hook's own input)
        logs.report_failure(terminal, type(raised), raised, raised.__traceback__)


def test_a_data_error_is_one_line_on_the_terminal_and_a_traceback_in_the_log(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    terminal, log = io.StringIO(), io.StringIO()
    _fail(DataFormatError("data/queries.jsonl", 2, "missing field 'question'"), terminal, log, monkeypatch)
    line = "error: data/queries.jsonl, line 2: missing field 'question'"
    assert terminal.getvalue() == line + "\n"
    assert log.getvalue().startswith("Traceback (most recent call last):")
    assert log.getvalue().rstrip().endswith("DataFormatError: data/queries.jsonl, line 2: missing field 'question'")
    # The run's onerror hook repeats it, once however many times a job wrote it.
    _fail(DataFormatError("data/queries.jsonl", 2, "missing field 'question'"), io.StringIO(), log, monkeypatch)
    summary = io.StringIO()
    logs.print_data_errors(summary)
    assert summary.getvalue().splitlines() == [
        "The run stopped on bad input (each job's log has the traceback):",
        f"  {line}",
    ]
    logs.clear_data_errors()
    logs.print_data_errors(summary := io.StringIO())
    assert summary.getvalue() == ""


def test_any_other_failure_shows_its_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    terminal, log = io.StringIO(), io.StringIO()
    _fail(KeyError("top_k"), terminal, log, monkeypatch)
    assert terminal.getvalue() == log.getvalue() and "Traceback (most recent call last):" in terminal.getvalue()
    assert not logs.DATA_ERRORS.exists()


def test_the_data_errors_are_one_type(tmp_path):
    bad = tmp_path / "x.tsv"
    bad.write_text("id\ttext\ttitle\n")
    with pytest.raises(logs.DataError, match=r"x\.tsv: sha256 .* does not match the configured 00"):
        files.verify(bad, sha256="00")
    assert issubclass(files.MissingDataError, logs.DataError) and issubclass(DataFormatError, logs.DataError)


@pytest.mark.slow
def test_a_workflow_run_on_bad_files_prints_one_line_each(tmp_path):
    """Four local datasets, each with one kind of bad input, run with --keep-going: every failed
    job's one line is in Snakemake's output (and again in its last lines), no traceback is, and each
    job's log has its traceback."""
    good = tmp_path / "corpus.tsv"
    good.write_text("id\ttext\ttitle\n" + "".join(f"{i}\tPassage {i}.\tT{i}\n" for i in range(1, 6)), encoding="utf-8")
    latin1 = tmp_path / "latin1.tsv"
    latin1.write_bytes("id\ttext\ttitle\n1\tone\tT\n2\tZ\u00fcrich\tT\n".encode("latin-1"))
    query = {"id": "q1", "question": "What?", "answers": ["1"], "human_pids": ["1"]}
    cases = {  # dataset: (corpus, query lines, the line its job prints)
        "no-question": (good, [query, {"id": "q2", "answers": ["2"]}], "line 2: missing field 'question'"),
        "duplicate": (good, [query, query], "line 2: duplicate id 'q1'"),
        "unknown-human": (
            good,
            [{**query, "human_pids": ["404"]}],
            "line 1: human passage id(s) ['404'] not found in the corpus",
        ),
        "bad-byte": (latin1, [query], "line 3: not UTF-8"),
    }
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["prompts"] = [str(REPO / "config" / "prompts.yaml"), str(REPO / "config" / "prompts-demo.yaml")]
    config["corpora"] = {c.stem: {"source": "local", "path": str(c)} for c in (good, latin1)}
    config["datasets"] = {}
    for name, (corpus, lines, _) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(q) + "\n" for q in lines), encoding="utf-8")
        config["datasets"][name] = {
            "source": "local",
            "queries": str(path),
            "corpus": corpus.stem,
            "retriever": "minilm",
        }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    targets = [f"results/{name}/queries.parquet" for name in cases]
    args = ["--directory", str(tmp_path), "--configfile", str(tmp_path / "config.yaml"), "--cores", "2"]
    out = subprocess.run(
        snakemake_cmd(*args, "--keep-going", *targets), cwd=REPO, capture_output=True, text=True, timeout=600
    )
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "Traceback" not in text
    for name, (corpus, _, problem) in cases.items():
        where = corpus if name == "bad-byte" else tmp_path / f"{name}.jsonl"
        expected = f"error: {where}, {problem}"
        assert sum(expected in line for line in text.splitlines()) == 2, (expected, text)  # the job's, the end's
        assert expected in "\n".join(text.splitlines()[-10:])
        rule, wildcard = ("prepare_corpus", "latin1") if name == "bad-byte" else ("prepare_queries", name)
        log = (tmp_path / "logs" / rule / f"{wildcard}.log").read_text()
        assert "Traceback (most recent call last):" in log and f"DataFormatError: {where}, {problem}" in log
    assert not list((tmp_path / "results").rglob("queries.parquet"))
