"""Jobs of the findings stage: findings.json, the transfer control tables, the cost table, and the
validated config for the report. Inputs come keyed as in ``pipeline.report``."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..io import read_table, write_text
from .report import _read_keyed, _read_known, read_gold, read_queries

_log = logging.getLogger("llm_utility")


def findings_job(
    *,
    answers: Mapping[tuple[str, str, str], str],
    known: Mapping[tuple[str, str], str],
    gold: Mapping[tuple[str, str, str], str],
    queries: Mapping[str, str],
    perplexity: Mapping[tuple[str, str], str],
    judgments: Mapping[tuple[str, str, str], str],
    rankings: Mapping[tuple[str, str, str], str],
    llms: Sequence[str],
    run_pairs: str | None = None,
    families: Mapping[str, str | None],
    k: int,
    resampling: Mapping[str, Any],
    paper_datasets: Mapping[str, Sequence[str] | None] | None = None,
    claim_scope: Mapping[str, Sequence[str]] | None = None,
    figure9_method: str = "listwise_pa",
    rag_top: int = 5,
    json_path: str,
    md: str,
    html: str,
    summary: str | None = None,
    log: logging.Logger = _log,
) -> list[dict[str, Any]]:
    """Every headline finding (``report.findings.all_findings``) on the files given: ``findings.json``
    (settings and one entry per finding), ``findings.md`` and ``findings.html`` (each opening with
    the summary of what the run establishes) and, with ``summary``, that summary alone as
    reStructuredText (the Snakemake report's opening page shows it). ``resampling`` is the
    ``report`` config section (resamples, bootstrap_seed, confidence, min_queries). A kind of input left empty makes
    the findings that need it ``not run``. ``paper_datasets`` (``report.plan.ReportPlan.paper_datasets``) and
    ``claim_scope`` (``report.claim_scope``) decide which datasets each claim pools; left out, every
    dataset is in every claim's scope. ``figure9_method`` and ``rag_top`` name the answers of Tables
    3, 7 and Figure 9. ``run_pairs`` is the runs stage's (query, run) metrics with the answers'
    correctness (``qrels_agreement``), None where no run was answered with."""
    from ..report.findings import FindingInputs, Resampling, all_findings, findings_html, findings_markdown
    from ..report.findings.summary import summarize, summary_rst

    rs = Resampling.from_config(resampling)
    inputs = FindingInputs(
        llms=list(llms),
        answers=_read_keyed(answers),
        known=_read_known(known),
        gold=read_gold(gold),
        queries=read_queries(queries),
        perplexity=_read_keyed(perplexity),
        judgments=_read_keyed(judgments),
        rankings=_read_keyed(rankings),
        families=dict(families),
        k=k,
        paper_datasets=dict(paper_datasets or {}),
        claim_scope=dict(claim_scope or {}),
        figure9_method=figure9_method,
        rag_top=rag_top,
        run_pairs=read_table(run_pairs) if run_pairs else None,
    )
    entries = all_findings(inputs, rs)
    document = {
        "settings": {
            "resamples": rs.n_resamples,
            "seed": rs.seed,
            "confidence": rs.confidence,
            "min_queries": rs.min_queries,
            "llms": list(llms),
            "datasets": inputs.datasets,
            "paper_datasets": dict(inputs.paper_datasets),
            "claim_scope": dict(inputs.claim_scope),
        },
        "findings": entries,
    }
    write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", json_path)
    write_text(findings_markdown(entries, rs, llms), md)
    write_text(findings_html(entries, rs, llms), html)
    if summary is not None:
        write_text(summary_rst(summarize(entries, min_queries=rs.min_queries, llms=llms)), summary)
    for e in entries:
        log.info("finding %s: %s%s", e["id"], e["verdict"], f" ({e['reason']})" if e["reason"] else "")
    return entries


# What the transfer tables' notation means, inserted before their first table.
TRANSFER_UNKNOWN_LEGEND = (
    ("all queries (paper)", "every query of the dataset, as in the paper's transfer figures"),
    (
        "diagonal",
        "an LLM answering with its own gold set, which was selected on these same answers (a one-passage set "
        "replays the call that selected it; on all queries a known query's empty set replays its correct "
        "no-passage answer): its advantage is partly built in, which the unknown-to-both control and Table 1's "
        "re-ask check",
    ),
    ("(n=...)", "the number of queries unknown to both behind the cell"),
    ("n/a (n=0)", "no query is unknown to both"),
)


def transfer_unknown_job(*, answers, known, llms: Sequence[str], candidates: str, csv: str, md: str) -> None:
    """The transfer matrices (``candidates`` C or U) beside their control on the queries unknown to
    both LLMs of each cell, every dataset: tidy CSV and Markdown."""
    import polars as pl

    from ..report.findings import transfer_unknown_both, transfer_unknown_markdown
    from ..report.tables import with_legend, write_csv, write_page

    frames, flags = _read_keyed(answers), _read_known(known)
    datasets = list(dict.fromkeys(d for d, _, _ in frames))
    tables = [transfer_unknown_both(frames, flags, llms, d, candidates) for d in datasets]
    table = pl.concat(tables) if tables else transfer_unknown_both({}, {}, [], "", candidates)
    write_csv(table, csv)
    write_page(with_legend(transfer_unknown_markdown(table), TRANSFER_UNKNOWN_LEGEND), md)


def cost_job(*, jobs: Sequence[Mapping[str, Any]], csv: str, md: str, log: logging.Logger = _log) -> None:
    """The cost table (``report.cost.cost_table``) of the model jobs listed in ``jobs`` (rule,
    wildcards, log, benchmark): CSV and Markdown."""
    from ..report.cost import cost_table
    from ..report.tables import simple_markdown, write_csv, write_page

    table = cost_table(jobs)
    write_csv(table, csv)
    page = simple_markdown(
        table,
        title="Cost of the model stages",
        intro="Per rule, method and LLM: the backend and dtype its models ran on and in, model jobs, LLM calls made "
        "by the model and served by the generation store, prompt and generated tokens of the calls made, seconds "
        "inside the store's calls, wall seconds of the jobs (Snakemake benchmarks, model loading included) and the "
        "largest peak memory (MB). Read from the jobs' `store_stats` log lines and benchmark files: each job's latest "
        "run. An LLM with `keep_loaded` is loaded by its model hosts, once per host, not by its jobs: their wall "
        "seconds and memory leave the loading out (each job's log names its host and that host's log).",
        glossary=(
            ("method", "a judge job's calls per method (rank_<method>: its rankings); the job's own row has none"),
            (
                "dtype",
                "the arithmetic the models ran in (float32, bfloat16, int8); `dtype: auto` takes the fastest at least "
                'as close to float32 as plain bfloat16, which docs/performance.md measures ("The fidelity floor")',
            ),
            ("kinds", "the kinds of model call: generate, score (likelihoods), attention"),
            ("calls_served", "calls found in the generation store: they cost nothing"),
            ("missing", "jobs without a log or benchmark"),
            ("total", "the rows of each LLM summed, and of all of them (llm all)"),
        ),
        missing="not measured: a judge job's per-method rows share the job's benchmark, on its own row",
        floatfmt=".1f",
    )
    write_page(page, md)
    total = table.filter((table["rule"] == "total") & (table["llm"] == "all"))
    if total.height:
        log.info("cost: %s", total.to_dicts()[0])


def config_job(*, config: Mapping[str, Any], output: str) -> None:
    """The validated config (defaults filled in) as YAML, for the report."""
    import yaml

    header = "# The configuration these results were made from (validated, defaults filled in).\n"
    write_text(header + yaml.safe_dump(dict(config), sort_keys=False, allow_unicode=True), output)
