"""Jobs of the judgment stage: verbalized utility selections (Tables 2, 3, 5, 8), utility rankings
(Table 4: retriever, verbalized, likelihood, attention) and perplexities (Figure 4)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from ..io import read_table, write_parquet
from ..method.judgments import (
    JudgeTask,
    check_output_cap,
    generate_together,
    output_format,
    selection_calls,
    selection_method,
)
from ..method.perplexity import perplexity_rows
from ..method.prompts import load_prompts
from ..method.rankings import ranking_method, retrieval_order
from ..schemas import GOLD_SCHEMA, QUERIES_SCHEMA, RANKINGS_SCHEMA
from .answers import read_candidates
from .common import model_session, truncate_passages

_log = logging.getLogger("llm_utility")


def _judged(queries: pl.DataFrame, max_queries: int | None) -> pl.DataFrame:
    """The queries a judgment job covers: all, or the first ``max_queries`` (a demo budget)."""
    return queries.head(max_queries) if max_queries else queries


def _pseudo_answers(paths: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """{answer context: {qid: output}} of the pseudo-answer files given (topk, topk_think)."""
    return {ctx: dict(read_table(path).select("qid", "output").iter_rows()) for ctx, path in paths.items()}


def judge_job(
    *,
    dataset: str,
    queries: str,
    candidates: str,
    manifest: str,
    prompts: str,
    spec: Mapping[str, Any],
    store: str,
    job: str,
    judgments: Mapping[str, str],
    rankings: Mapping[str, str] | None = None,
    perplexity: str | None = None,
    pseudo_answers: Mapping[str, str] | None = None,
    gold_U: str | None = None,
    max_new_tokens: Mapping[str, int] | None = None,
    rankings_cfg: Mapping[str, Any] | None = None,
    max_queries: int | None = None,
    threads: int | None = None,
    qids: Sequence[str] | None = None,
    log: logging.Logger = _log,
) -> dict[str, pl.DataFrame]:
    """Everything one LLM judges or scores about one dataset's candidates, in one model session:

    - ``judgments`` (method -> path): verbalized selections of every candidate of C, columns qid,
      pid, selected, parsed, echo, output (the raw output; a listwise method's is the same on all
      candidates of a query); an output that does not parse, or repeats its prompt (``echo``), is a
      row with ``parsed = false`` and nothing selected; ``max_new_tokens`` maps a method's form
      (pointwise, listwise) or ``thinking`` to its output limit;
    - ``rankings`` (method -> path): utility rankings of C (``schemas.RANKINGS_SCHEMA``) by the
      methods of ``method.rankings.RANKING_METHODS``: ``listwise``, ``listwise_pa``, ``likelihood``
      and ``attention`` (on the backend ``rankings.attention_backend`` names: a second session
      after this one when it is not the LLM's own backend, once the first has freed the device);
    - ``perplexity`` (path): the perplexities of Figure 4 (``method.perplexity.perplexity_rows``).

    ``pseudo_answers`` maps the answer contexts the pseudo-answers come from (``topk``,
    ``topk_think``) to their files. Judgments and rankings cover the first ``max_queries`` queries
    (all when None); perplexity covers every query with a gold set. ``qids``: the queries of a
    query part (``workflow.parts``): only those of them are judged, ranked and scored (None: all).
    """
    rankings = dict(rankings or {})
    methods = {name: ranking_method(name) for name in rankings}
    selection = [selection_method(name) for name in judgments]
    q = read_table(queries, QUERIES_SCHEMA)
    # max_queries is the dataset's first N: a shard judges those of them it holds.
    judged = _judged(q, max_queries)
    cands = read_candidates(candidates)
    if qids is not None:
        keep = list(qids)
        judged, q = judged.filter(pl.col("qid").is_in(keep)), q.filter(pl.col("qid").is_in(keep))
        cands = cands.restrict(qids)
        log.info("query shard: %d of the dataset's queries, %d judged", q.height, judged.height)
    pseudo = _pseudo_answers(pseudo_answers or {})
    wordings = load_prompts(prompts)
    cfg = dict(rankings_cfg or {})
    pools = {qid: cands.C[qid] for qid in judged["qid"].to_list()}

    def task(gen, calls, spec) -> JudgeTask:
        passages = truncate_passages(cands.passages, gen, spec["max_passage_tokens"])
        return JudgeTask(dataset, judged, pools, passages, pseudo, wordings, spec, gen, calls)

    tables: dict[str, pl.DataFrame] = {}
    # vLLM exposes no attention weights: attention rankings then run in a second session, on the
    # backend rankings.attention_backend names, once the first has freed the device.
    backend = cfg.get("attention_backend", spec["backend"])
    apart = [m for m in methods.values() if m.attention and backend != spec["backend"]]
    with model_session(manifest=manifest, spec=spec, store=store, job=job, threads=threads, log=log) as (gen, calls):
        on_model = task(gen, calls, spec)
        # Each method's calls are counted apart (the cost table's `method` column).
        k = max(map(len, pools.values()), default=0)
        generations = {}
        for m in selection:
            limit = max_new_tokens["thinking" if m.thinking else m.form]
            key = "judgments.thinking_max_new_tokens" if m.thinking else f"judgments.{m.form}_max_new_tokens"
            check_output_cap(gen, m.form, k, limit, key, output_format(wordings, m.form))
            generations[f"judgments|{m.name}"] = selection_calls(on_model, m, limit)
        for m in methods.values():
            if m not in apart and m.calls is not None:
                generations[f"rankings|{m.name}"] = m.calls(on_model, cfg)
        # The verbalized methods decode together, those with the same output limit in one batch.
        tables.update(zip(generations, generate_together(on_model, list(generations.values()))))
        for m in methods.values():
            if m not in apart and m.calls is None:
                with calls.section(f"rank_{m.name}"):
                    tables[f"rankings|{m.name}"] = m.rank(on_model, cfg)
        if perplexity:
            with calls.section("perplexity"):
                tables["perplexity"] = perplexity_rows(
                    dataset, q, cands, read_table(gold_U, GOLD_SCHEMA), gen, calls, spec
                )
    if apart:
        spec_apart = {**spec, "backend": backend}
        session = model_session(
            manifest=manifest, spec=spec_apart, store=store, job=job + "+attention", threads=threads, log=log
        )
        with session as (gen, calls):
            on_model = task(gen, calls, spec_apart)
            for m in apart:
                with calls.section(f"rank_{m.name}"):
                    tables[f"rankings|{m.name}"] = m.rank(on_model, cfg)
    for name, path in judgments.items():
        table = tables[f"judgments|{name}"]
        write_parquet(table, path)
        log.info(
            "%s: %d queries judged, %d of %d candidates selected, "
            "outputs parsed for %.1f%% of the queries, echoes of the prompt for %.1f%%",
            name,
            judged.height,
            int(table["selected"].sum()),
            table.height,
            100 * _parsed_share(table),
            100 * _echo_share(table),
        )
    for method, path in rankings.items():
        table = tables[f"rankings|{method}"]
        write_parquet(table.select(list(RANKINGS_SCHEMA)), path)
        log.info(
            "%s: ranked %d queries; parsed for %.1f%%, echoes for %.1f%%",
            method,
            len(pools),
            100 * _parsed_share(table),
            100 * _echo_share(table),
        )
    if perplexity:
        write_parquet(tables["perplexity"], perplexity)
        log.info("perplexity of %d human passages", tables["perplexity"].height)
    return tables


def rank_retriever_job(
    *, queries: str, candidates: str, output: str, max_queries: int | None = None, log=_log
) -> pl.DataFrame:
    """The retrieval order of C as a ranking (Table 4's baseline), for the judged queries."""
    q = _judged(read_table(queries, QUERIES_SCHEMA), max_queries)
    cands = read_candidates(candidates)
    pools = {qid: cands.C[qid] for qid in q["qid"].to_list()}
    table = retrieval_order(pools)
    write_parquet(table, output)
    log.info("retriever: %d queries", len(pools))
    return table


def _parsed_share(table: pl.DataFrame) -> float:
    return float(table.group_by("qid").agg(pl.col("parsed").all())["parsed"].mean() or 0.0) if table.height else 0.0


def _echo_share(table: pl.DataFrame) -> float:
    return float(table.group_by("qid").agg(pl.col("echo").any())["echo"].mean() or 0.0) if table.height else 0.0


def qrels_job(*, gold: str, candidates: str, pool: str, output: str, log: logging.Logger = _log) -> None:
    """An LLM's gold set as TREC qrels: every passage of the pool (C or U) of every query, relevance
    1 for its gold passages and 0 for the rest, so a run's unjudged passages are known."""
    from ..data.trec import format_qrels
    from ..io import write_text

    cands = read_candidates(candidates)
    relevant: dict[str, list[str]] = {}
    for qid, pid in read_table(gold, GOLD_SCHEMA).iter_rows():
        relevant.setdefault(qid, []).append(pid)
    write_text(format_qrels(cands.of(pool), relevant), output)
    log.info(
        "qrels: %d queries, %d judged passages, %d relevant",
        len(cands.of(pool)),
        sum(map(len, cands.of(pool).values())),
        sum(map(len, relevant.values())),
    )
