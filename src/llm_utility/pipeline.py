"""The jobs behind the workflow's rules, as plain functions of file paths.

Workflow scripts stay thin by calling these; tests call them directly, without Snakemake.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

from .method.answers import answer_contexts, candidate_sets, context_requests, load_passages
from .method.gold import GOLD_SCHEMA, gold_sets, known_flags
from .io import QUERIES_SCHEMA, RUN_SCHEMA, read_table, write_parquet
from .method.prompts import load_prompts

_log = logging.getLogger("llm_utility")


def answer_job(
    *,
    queries: str,
    run: str,
    passages: str,
    manifest: str,
    prompts: str,
    gold: Mapping[str, str],
    outputs: Mapping[str, str],
    spec: Mapping,
    top_k: int,
    store_path: str,
    threads: int = 1,
    log: logging.Logger = _log,
) -> dict:
    """Answer every context named in ``outputs`` (context -> parquet path) and write the tables.

    All contexts go to the generation store in one call, so prompts shared between contexts are
    computed once, and prompts any earlier job computed are served from the store.
    Returns the store's statistics (prompts made and served).
    """
    from .generation import GenerationStore, load_generator, strip_thinking

    started = time.perf_counter()
    q = read_table(queries, QUERIES_SCHEMA)
    cands = candidate_sets(q, read_table(run, RUN_SCHEMA), top_k)
    gold_tables = {name: read_table(path, GOLD_SCHEMA) for name, path in gold.items()}
    requests = {ctx: context_requests(ctx, cands, gold_tables.get(ctx)) for ctx in outputs}
    needed = {p for reqs in requests.values() for _, pids in reqs for p in pids}
    texts = load_passages(passages, needed)

    _set_threads(threads)
    generator = load_generator(manifest, spec)
    store = GenerationStore(store_path)

    timing = {"generate_seconds": 0.0}

    def generate(prompt_texts: list[str]) -> list[str]:
        t0 = time.perf_counter()
        outs = store.generate(
            generator,
            prompt_texts,
            max_new_tokens=spec.get("max_new_tokens", 32),
            stop=list(spec.get("stop", [])),
            batch_size=spec.get("batch_size", 16),
            desc=f"{generator.slug} {','.join(outputs)}",
        )
        timing["generate_seconds"] += time.perf_counter() - t0
        return [strip_thinking(o) for o in outs]

    frames = answer_contexts(requests, q, texts, load_prompts(prompts), generator.render, generate)
    for ctx, path in outputs.items():
        write_parquet(frames[ctx], path)
        log.info("%s: %d rows, has_answer %.1f%%", ctx, frames[ctx].height, 100 * frames[ctx]["has_answer"].mean())
    log.info("generation store: %s", store.summary())
    # One machine-readable line per job: benchmarks/ and tests add these up across the DAG.
    log.info("store_stats %s", json.dumps({"llm": generator.slug, **store.stats, **timing}))
    log.info("answer job took %.1f s", time.perf_counter() - started)
    return {**store.stats, **timing}


def gold_job(
    *, queries: str, run: str, none: str, single: str, top_k: int, outputs: Mapping[str, str], log=_log
) -> None:
    """Write gold_C, gold_U (qid, pid) and known (qid, known) for one (dataset, LLM)."""
    q = read_table(queries, QUERIES_SCHEMA)
    cands = candidate_sets(q, read_table(run, RUN_SCHEMA), top_k)
    none_df, single_df = read_table(none), read_table(single)
    for name in ("C", "U"):
        gold = gold_sets(none_df, single_df, cands, name)
        write_parquet(gold, outputs[f"gold_{name}"])
        log.info("gold_%s: %d passages over %d queries", name, gold.height, gold["qid"].n_unique())
    known = known_flags(none_df)
    write_parquet(known, outputs["known"])
    log.info("known queries: %d of %d", known["known"].sum(), known.height)


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(max(1, threads))


def retrieve_job(*, queries: str, passages: str, index: str, encoder_spec: Mapping, top_k: int, output: str, log=_log):
    """Encode the queries, search the index and write the run (qid, pid, rank, score)."""
    import polars as pl

    from .retrieval.encoders import load_encoder
    from .retrieval.index import run_frame, search

    q = read_table(queries, QUERIES_SCHEMA)
    encoder = load_encoder(encoder_spec)
    emb = encoder.encode_queries(q["question"].to_list())
    scores, rows = search(index, emb, top_k, nprobe=encoder_spec.get("nprobe"))
    pids = pl.read_parquet(passages, columns=["pid"])["pid"].to_numpy()
    run = run_frame(q["qid"].to_list(), pids, scores, rows)
    write_parquet(run, output)
    log.info("retrieved top-%d for %d queries", top_k, q.height)


def retrieval_table_job(*, datasets, queries, runs, passages, top_k: int, csv: str, md: str) -> None:
    """Per dataset: number of queries, answer recall@k and human-passage recall@k (percent)."""
    import polars as pl

    from .io import write_text
    from .metrics import retrieval_quality

    rows = []
    for name, qpath, rpath, ppath in zip(datasets, queries, runs, passages, strict=True):
        q, run = read_table(qpath, QUERIES_SCHEMA), read_table(rpath, RUN_SCHEMA)
        needed = run.filter(pl.col("rank") <= top_k)["pid"].unique().to_list()
        psg = pl.scan_parquet(ppath).filter(pl.col("pid").is_in(needed)).collect()
        per_query = retrieval_quality(q, run, psg, top_k)
        rows.append(
            {
                "dataset": name,
                "queries": q.height,
                "k": top_k,
                f"answer_recall@{top_k}": _percent(per_query["answer_recall"].mean()),
                f"human_recall@{top_k}": _percent(per_query["human_recall"].mean()),
            }
        )
    table = pl.DataFrame(rows)
    write_text(table.write_csv(), csv)
    frame = table.to_pandas()
    # tabulate's missingval applies to None only, not to the NaN pandas turns nulls into.
    frame = frame.astype(object).where(frame.notna(), None)
    write_text(frame.to_markdown(index=False, floatfmt=".2f", missingval="n/a") + "\n", md)


def _percent(x):
    return None if x is None else round(100 * x, 2)


# --- tables and figures -------------------------------------------------------------------------


def load_answers(pattern: str, datasets, llms, contexts_of) -> dict:
    """{(dataset, llm): {context: answers}} read through ``pattern`` (rules/common.smk's ANSWERS).

    ``contexts_of(llm)`` lists the contexts to read for that LLM.
    """
    return {
        (d, llm): {c: read_table(pattern.format(dataset=d, llm=llm, context=c)) for c in contexts_of(llm)}
        for d in datasets
        for llm in llms
    }


def load_gold(pattern: str, datasets, llms, candidates=("C", "U")) -> dict:
    """{(dataset, llm, candidates): gold (qid, pid)} read through ``pattern``."""
    return {
        (d, llm, c): read_table(pattern.format(dataset=d, llm=llm, candidates=c), GOLD_SCHEMA)
        for d in datasets
        for llm in llms
        for c in candidates
    }


def load_queries(pattern: str, datasets) -> dict:
    return {d: read_table(pattern.format(dataset=d), QUERIES_SCHEMA) for d in datasets}


def table1_job(*, datasets, llms, patterns: Mapping[str, str], csv: str, md: str, tex: str) -> None:
    """Table 1: has_answer (%) with None, C, U, Human, G(C), G(U) per dataset and LLM."""
    from .report.analysis import TABLE1_CONTEXTS, table1
    from .report.tables import write_table1

    answers = load_answers(patterns["answers"], datasets, llms, lambda _: list(TABLE1_CONTEXTS.values()))
    gold = load_gold(patterns["gold"], datasets, llms)
    write_table1(table1(answers, gold, load_queries(patterns["queries"], datasets)), csv, md, tex)


def topk_figure_job(*, datasets, llms, patterns: Mapping[str, str], style: Mapping, png: str, pdf: str) -> None:
    """Figure 1 left: has_answer (%) without passages and with the same top-k, per LLM."""
    from .report.analysis import topk_gain
    from .report.figures import plot_topk

    answers = load_answers(patterns["answers"], datasets, llms, lambda _: ["none", "topk"])
    plot_topk(topk_gain(answers), png, pdf, style=style)


def transfer_figure_job(
    *, datasets, llms, candidates: str, patterns: Mapping[str, str], style: Mapping, png: str, pdf: str, csv: str
) -> None:
    """Transfer heatmaps (Figures 1 right, 2, 8): rows = whose gold set, columns = answering LLM."""
    from .report.analysis import transfer_matrix
    from .report.figures import plot_transfer
    from .report.tables import write_transfer_csv

    def contexts(llm):
        return ["human", f"gold_{candidates}"] + [f"gold_{candidates}_from_{o}" for o in llms if o != llm]

    answers = load_answers(patterns["answers"], datasets, llms, contexts)
    matrices = {d: transfer_matrix(answers, llms, d, candidates) for d in datasets}
    plot_transfer(matrices, png, pdf, title=f"Gold utilitarian passages ({candidates} candidates) across LLMs", style=style)
    write_transfer_csv(matrices, csv, candidates=candidates)


def overlap_figure_job(*, datasets, llms, patterns: Mapping[str, str], style: Mapping, png: str, pdf: str, csv: str) -> None:
    """Figure 3: average overlap between LLMs' gold sets (U) and with the human passages."""
    from .report.analysis import gold_overlap
    from .report.figures import plot_overlap
    from .report.tables import write_overlap_csv

    gold = load_gold(patterns["gold"], datasets, llms, candidates=("U",))
    queries = load_queries(patterns["queries"], datasets)
    matrices = {d: gold_overlap(gold, queries, llms, d, "U") for d in datasets}
    plot_overlap(matrices, png, pdf, title="Average overlap of gold utilitarian passages (U)", style=style)
    write_overlap_csv(matrices, csv)
