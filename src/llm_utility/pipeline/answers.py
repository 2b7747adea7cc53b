"""Jobs of the answer and gold stages: the candidate passages of a dataset, an LLM's answers under
any set of contexts, and its gold sets."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..io import read_table, write_parquet
from ..method.answers import (
    CONTEXT_PATTERNS,
    Candidates,
    answer_contexts,
    candidates_table,
    context_requests,
    run_passages,
)
from ..method.gold import gold_sets, known_flags
from ..method.prompts import load_prompts
from ..schemas import CANDIDATES_SCHEMA, QUERIES_SCHEMA, RUN_SCHEMA
from .common import empty_share, model_session, truncate_passages

_log = logging.getLogger("llm_utility")


def candidates_job(*, queries: str, run: str, passages: str, top_k: int, output: str, log=_log) -> None:
    """Write the dataset's candidates table (``method.answers.candidates_table``)."""
    table = candidates_table(read_table(queries, QUERIES_SCHEMA), read_table(run, RUN_SCHEMA), passages, top_k)
    write_parquet(table, output)
    log.info("%d candidate passages over %d queries", table.height, table["qid"].n_unique())


def read_candidates(path: str) -> Candidates:
    return Candidates.from_table(read_table(path, CANDIDATES_SCHEMA))


def answer_job(
    *,
    dataset: str,
    queries: str,
    candidates: str,
    manifest: str,
    prompts: str,
    tables: Mapping[str, str],
    outputs: Mapping[str, str],
    spec: Mapping[str, Any],
    store: str,
    job: str,
    synonyms: Mapping[str, Sequence[str]] | None = None,
    threads: int | None = None,
    qids: Sequence[str] | None = None,
    log: logging.Logger = _log,
) -> dict:
    """Answer every context named in ``outputs`` (context -> parquet path) and write the tables.

    ``qids``: the queries of a query part (``workflow.parts``), the only ones answered; None: all.

    ``tables`` maps a derived context (gold_*, selected_*, reranked_*) to the table it is made from.
    All contexts go to the store in one call, so prompts shared between contexts are computed once
    and prompts an earlier job computed are served. Before any model call, every prompt is checked
    to fit the model's context. Returns the store's statistics.
    """
    from ..generation import strip_thinking

    q = read_table(queries, QUERIES_SCHEMA)
    cands = read_candidates(candidates)
    if qids is not None:
        cands = cands.restrict(qids)
        log.info("query shard: %d of %d queries", len(cands.U), q.height)
    derived = {ctx: read_table(tables[ctx]) for ctx in outputs if ctx in tables}
    requests = {ctx: context_requests(ctx, cands, derived.get(ctx)) for ctx in outputs}
    # Another run's top-k brings passages of its own, beyond the candidates U.
    known_passages = dict(cands.passages)
    for ctx, table in derived.items():
        if CONTEXT_PATTERNS["run"].match(ctx):
            known_passages = {**run_passages(table), **known_passages}
    with model_session(manifest=manifest, spec=spec, store=store, job=job, threads=threads, log=log) as (gen, calls):
        passages = truncate_passages(known_passages, gen, spec["max_passage_tokens"])
        wordings = load_prompts(prompts)

        def generate(texts: list[str]) -> list[str]:
            labels = [
                f"dataset {dataset}, query {qid}, context {ctx}" for ctx, reqs in requests.items() for qid, _ in reqs
            ]
            gen.check_fits(texts, labels, reserve=spec["max_new_tokens"])
            outs = calls.generate(
                gen,
                texts,
                max_new_tokens=spec["max_new_tokens"],
                stop=spec["stop"],
                batch_size=spec["batch_size"],
                desc=f"{gen.slug} {dataset}",
            )
            return [strip_thinking(o) for o in outs]

        frames = answer_contexts(requests, q, passages, wordings, gen.render, generate, synonyms)
        for ctx, path in outputs.items():
            frame = frames[ctx]
            write_parquet(frame, path)
            log.info(
                "%s: %d calls, correct %.1f%%, empty outputs %.1f%%",
                ctx,
                frame.height,
                100 * frame["correct"].mean() if frame.height else 0.0,
                100 * empty_share(frame["output"].to_list()),
            )
        return calls.stats


def gold_job(*, candidates: str, none: str, single: str, outputs: Mapping[str, str], log=_log) -> None:
    """Write gold_C, gold_U (qid, pid) and known (qid, known) for one (dataset, LLM)."""
    cands = read_candidates(candidates)
    none_df, single_df = read_table(none), read_table(single)
    for name in ("C", "U"):
        gold = gold_sets(none_df, single_df, cands, name)
        write_parquet(gold, outputs[f"gold_{name}"])
        log.info("gold_%s: %d passages over %d queries", name, gold.height, gold["qid"].n_unique())
    known = known_flags(none_df)
    write_parquet(known, outputs["known"])
    log.info("known queries: %d of %d", known["known"].sum(), known.height)
