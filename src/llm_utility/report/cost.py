"""What the model stages cost: LLM calls made and served, tokens and time per stage, method and LLM.

Read from what every model job already leaves behind: the ``store_stats {json}`` line(s) in its log
(``pipeline.common.model_session``: the dtype the model ran in, and per kind of call, calls ``made``
by the model and ``served`` by the generation store, ``prompt_tokens`` and ``output_tokens`` of the
calls made, and ``seconds`` spent in the store's calls) and its Snakemake benchmark file (``s``: wall
time of the whole job, loading the model included; ``max_rss`` in MB). A job's log and benchmark
describe its latest run: a rerun whose calls the store serves shows them as served, with no tokens.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

_STORE_STATS = re.compile(r"store_stats (\{.*\})\s*$", re.M)
KINDS = ("generate", "score", "attention")
COST_COLUMNS = {
    "rule": pl.String,
    "method": pl.String,
    "llm": pl.String,
    "backend": pl.String,
    "dtype": pl.String,
    "jobs": pl.Int64,
    "kinds": pl.String,
    "calls_made": pl.Int64,
    "calls_served": pl.Int64,
    "prompt_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "call_seconds": pl.Float64,
    "wall_seconds": pl.Float64,
    "max_rss_mb": pl.Float64,
    "missing": pl.String,
}


_STAT_KEYS = ("made", "served", "prompt_tokens", "output_tokens", "seconds")


# The columns a total row adds up (max_rss_mb takes the largest).
SUMMED_COLUMNS = (
    "jobs",
    "calls_made",
    "calls_served",
    "prompt_tokens",
    "output_tokens",
    "call_seconds",
    "wall_seconds",
)


def _add_calls(into: dict[str, dict[str, float]], calls: Mapping[str, Mapping[str, Any]]) -> None:
    for kind, stats in calls.items():
        counter = into.setdefault(kind, dict.fromkeys(_STAT_KEYS, 0.0))
        for key in counter:
            counter[key] += float(stats.get(key, 0))


Tags = dict[str, set[str]]


def read_job_stats(
    log: str | Path,
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]], Tags, Tags] | None:
    """(totals, per method, dtypes, backends) of a job's calls, summed over every ``store_stats`` line of its log:
    totals ``{kind: {made, served, prompt_tokens, output_tokens, seconds}}``, and the same per
    method for the calls a job counted apart (a judge job's ``methods``); None when the log is
    missing. A line that is not valid JSON raises a ValueError naming the file and the 1-based line.
    ``dtypes``, ``backends``: what its lines name (none in logs written before the lines named them),
    under ``""`` for the whole job and under each method for the lines that counted it (a judge job
    whose attention runs on another backend than its LLM's logs a line for each session)."""
    path = Path(log)
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    totals: dict[str, dict[str, float]] = {}
    methods: dict[str, dict[str, dict[str, float]]] = {}
    dtypes: Tags = {"": set()}
    backends: Tags = {"": set()}
    for match in _STORE_STATS.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        try:
            record = json.loads(match.group(1))
            _add_calls(totals, record["calls"])
            for method, calls in record.get("methods", {}).items():
                _add_calls(methods.setdefault(method, {}), calls)
            for tags, key in ((dtypes, "dtype"), (backends, "backend")):
                for method in ("", *record.get("methods", {})):
                    tags.setdefault(method, set()).update([str(record[key])] if record.get(key) else [])
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{path}:{line}: unreadable store_stats line ({err})") from None
    return totals, methods, dtypes, backends


def read_store_stats(log: str | Path) -> dict[str, dict[str, float]] | None:
    """A job's call totals per kind (``read_job_stats``' first half); None when the log is missing."""
    stats = read_job_stats(log)
    return None if stats is None else stats[0]


def read_benchmark(path: str | Path | None) -> dict[str, float] | None:
    """Wall seconds (mean over repeats) and peak resident memory (MB) of a Snakemake benchmark file;
    None when there is none."""
    if path is None or not Path(path).exists():
        return None
    table = pl.read_csv(path, separator="\t", infer_schema_length=None)
    if table.height == 0 or "s" not in table.columns:
        raise ValueError(f"{path}: not a Snakemake benchmark file (no 's' column or no row)")
    rss = table["max_rss"].cast(pl.Float64, strict=False).max() if "max_rss" in table.columns else None
    return {"seconds": float(table["s"].mean()), "max_rss_mb": None if rss is None or math.isnan(rss) else float(rss)}


def cost_table(jobs: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """One row per (rule, method, llm) over the given jobs, then a total per LLM and an overall total
    (rule ``total``).

    ``jobs`` holds, per job: ``rule``, ``wildcards`` (a mapping; ``method`` and ``llm`` are read from
    it), ``log`` and ``benchmark`` (paths, the latter may be None). The calls a job counted per
    method (a judge job's selections, ``rank_<method>`` rankings and ``perplexity``) get rows of their
    own with 0 jobs; the job's row keeps its jobs, wall time, memory and any calls outside those
    methods, so every column sums to the totals. Columns: rule, method, llm, backend and dtype (what
    the jobs' models ran on and in, each ``+``-joined when they differ), jobs,
    kinds (the kinds of call made or served), calls_made, calls_served, prompt_tokens, output_tokens
    (of the calls made), call_seconds (time inside the store's calls), wall_seconds (benchmark: the
    whole jobs, loading included), max_rss_mb (the largest job's peak memory), missing (how many jobs
    had no log / no benchmark, if any).
    """
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}

    def row_of(rule: str, method: str, llm: str) -> dict[str, Any]:
        return rows.setdefault(
            (rule, method, llm),
            {
                "jobs": 0,
                "backends": set(),
                "dtypes": set(),
                "kinds": set(),
                "calls_made": 0,
                "calls_served": 0,
                "prompt_tokens": 0,
                "output_tokens": 0,
                "call_seconds": 0.0,
                "wall_seconds": 0.0,
                "max_rss_mb": None,
                "no_log": 0,
                "no_benchmark": 0,
            },
        )

    def add(row: dict[str, Any], stats: Mapping[str, Mapping[str, float]]) -> None:
        for kind, s in stats.items():
            if s["made"] or s["served"]:
                row["kinds"].add(kind)
            row["calls_made"] += int(s["made"])
            row["calls_served"] += int(s["served"])
            row["prompt_tokens"] += int(s["prompt_tokens"])
            row["output_tokens"] += int(s["output_tokens"])
            row["call_seconds"] += max(0.0, s["seconds"])  # a remainder may round below 0

    for job in jobs:
        wildcards = job.get("wildcards", {})
        llm = wildcards.get("llm", "")
        row = row_of(job["rule"], wildcards.get("method", ""), llm)
        row["jobs"] += 1
        stats = read_job_stats(job["log"])
        if stats is None:
            row["no_log"] += 1
        else:
            totals, methods, dtypes, backends = stats
            row["dtypes"] |= dtypes[""]
            row["backends"] |= backends[""]
            for method, calls in methods.items():
                method_row = row_of(job["rule"], method, llm)
                add(method_row, calls)
                method_row["dtypes"] |= dtypes.get(method, set())
                method_row["backends"] |= backends.get(method, set())
                for kind, counts in calls.items():  # counted on the method's row, not the job's
                    for key, value in counts.items():
                        totals[kind][key] -= value
            add(row, totals)
        bench = read_benchmark(job.get("benchmark"))
        if bench is None:
            row["no_benchmark"] += 1
        else:
            row["wall_seconds"] += bench["seconds"]
            if bench["max_rss_mb"] is not None:
                row["max_rss_mb"] = max(row["max_rss_mb"] or 0.0, bench["max_rss_mb"])
    records = []
    for (rule, method, llm), row in rows.items():
        missing = ", ".join(
            f"{row[k]} without {what}" for k, what in (("no_log", "log"), ("no_benchmark", "benchmark")) if row[k]
        )
        records.append(
            {
                "rule": rule,
                "method": method,
                "llm": llm,
                "backend": "+".join(sorted(row["backends"])),
                "dtype": "+".join(sorted(row["dtypes"])),
                **{k: row[k] for k in (*SUMMED_COLUMNS, "max_rss_mb")},
                "kinds": "+".join(k for k in KINDS if k in row["kinds"])
                + "".join(f"+{k}" for k in sorted(row["kinds"] - set(KINDS))),
                "missing": missing,
            }
        )
    table = pl.DataFrame(records, schema=COST_COLUMNS) if records else pl.DataFrame(schema=COST_COLUMNS)
    return pl.concat([table, _totals(table)], how="vertical")


def _totals(table: pl.DataFrame) -> pl.DataFrame:
    sums = [pl.col(c).sum() for c in SUMMED_COLUMNS]
    per_llm = table.group_by("llm", maintain_order=True).agg(*sums, pl.col("max_rss_mb").max())
    overall = table.select(pl.lit("all").alias("llm"), *sums, pl.col("max_rss_mb").max())
    both = pl.concat([per_llm, overall]) if table.height else per_llm
    return both.select(
        pl.lit("total").alias("rule"),
        pl.lit("").alias("method"),
        "llm",
        pl.lit("").alias("backend"),
        pl.lit("").alias("dtype"),
        "jobs",
        pl.lit("").alias("kinds"),
        "calls_made",
        "calls_served",
        "prompt_tokens",
        "output_tokens",
        "call_seconds",
        "wall_seconds",
        "max_rss_mb",
        pl.lit("").alias("missing"),
    ).cast(COST_COLUMNS)
