"""The data-stage jobs as plain functions of file paths (one per rule of rules/data.smk).

Every function takes the paths its rule declares as inputs and outputs, the validated config entry
of its corpus or dataset, and nothing else; every output is written atomically.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ..data import kilt, local, mapping, msmarco, twowiki
from ..data.files import download
from ..data.sources import member_of
from ..io import atomic_path, conform, read_table, write_parquet, write_text
from ..schemas import (
    EVIDENCE_SCHEMA,
    HUMAN_SCHEMA,
    PASSAGES_ARROW,
    QUERIES_SCHEMA,
    SHARD_ARROW,
    SOURCE_QUERIES_SCHEMA,
    SPANS_ARROW,
)

_log = logging.getLogger("llm_utility")


def download_job(
    *, url: str, output: str, sha256: str | None, md5: str | None, retries: int, timeout: float, log=_log
) -> None:
    """Rule download_data: fetch one configured URL into resources/ (retries, resume, checksum)."""
    download(url, output, sha256=sha256, md5=md5, retries=retries, timeout=timeout, log=log)


# --- corpora -------------------------------------------------------------------------------------


def prepare_corpus_job(
    *, name: str, cfg: Mapping, inputs: Mapping[str, object], output: str, seed: int, log=_log
) -> int:
    """Rule prepare_corpus: write ``passages.parquet`` (pid, title, text); return the passage count.

    File sources stream: memory holds one chunk of passages (plus the ids, for the duplicate check).
    A KILT corpus concatenates its shard files (``chunk_corpus_shard``) row group by row group.
    """
    started = time.perf_counter()
    source = cfg["source"]
    if source == "worldfacts":
        from ..data.sources import prepare_corpus

        df = prepare_corpus(name, cfg, seed=seed)
        write_parquet(df, output)
        n = df.height
    elif source in ("local", "dpr"):
        path = inputs["file"]
        n = local.write_corpus(local.iter_dpr_tsv(path, member_of(cfg, "file")), output, str(path))
    elif source == "msmarco":
        path = inputs["file"]
        n = local.write_corpus(local.iter_msmarco_tsv(path, member_of(cfg, "file")), output, str(path))
    elif source == "kilt":
        n = _concat_parquet(inputs["shards"], output, PASSAGES_ARROW, check=lambda tmp: _check_unique_pids(tmp, output))
    else:
        raise ValueError(f"corpora.{name}.source: unknown source '{source}'")
    seconds = time.perf_counter() - started
    log.info("corpus %s: %d passages in %.1f s (%.0f passages/s)", name, n, seconds, n / max(seconds, 1e-9))
    return n


def chunk_corpus_shard_job(
    *, knowledge_source: str, shard: int, n_shards: int, words: int, output: str, log=_log
) -> int:
    """Rule chunk_corpus_shard: one shard of a KILT knowledge source as passages with spans."""
    started, n = time.perf_counter(), 0
    with atomic_path(output) as tmp:
        writer = pq.ParquetWriter(tmp, SHARD_ARROW, compression="zstd")
        try:
            for table in kilt.chunk_knowledge_source_shard(knowledge_source, shard, n_shards, words):
                writer.write_table(table)
                n += table.num_rows
        finally:
            writer.close()
    seconds = time.perf_counter() - started
    log.info(
        "shard %d/%d: %d passages in %.1f s (%.0f passages/s)", shard, n_shards, n, seconds, n / max(seconds, 1e-9)
    )
    return n


def corpus_spans_job(*, shards: Sequence[str], output: str) -> int:
    """Rule corpus_spans: the (pid, wikipedia_id, paragraph/character span) side table of a KILT corpus."""
    return _concat_parquet(shards, output, SPANS_ARROW)


def _concat_parquet(paths: Sequence[str], output: str, schema: pa.Schema, check=None) -> int:
    """Concatenate the ``schema`` columns of Parquet files, one row group at a time.

    ``check(path)`` runs on the complete temporary file; if it raises, nothing is written.
    """
    n = 0
    with atomic_path(output) as tmp:
        writer = pq.ParquetWriter(tmp, schema, compression="zstd")
        try:
            for path in paths:
                pf = pq.ParquetFile(path)
                for i in range(pf.num_row_groups):
                    table = pf.read_row_group(i, columns=schema.names).cast(schema)
                    writer.write_table(table)
                    n += table.num_rows
        finally:
            writer.close()
        if check is not None:
            check(str(tmp))
    return n


def _check_unique_pids(path: str, name: str) -> None:
    # Ids are <page id>_<k>, so a page that occurs twice duplicates its first id: checking those
    # (one per page) costs a hash table of pages, not of all 34M passages.
    first = pl.scan_parquet(path).select("pid").filter(pl.col("pid").str.ends_with("_0"))
    dupes = first.group_by("pid").len().filter(pl.col("len") > 1).head(3).collect()
    if dupes.height:
        raise ValueError(
            f"{name}: duplicate passage ids {dupes['pid'].to_list()} (a page id occurs twice in the knowledge source?)"
        )


# --- datasets ------------------------------------------------------------------------------------


def load_queries_job(
    *,
    name: str,
    cfg: Mapping,
    inputs: Mapping[str, str],
    queries_out: str,
    evidence_out: str,
    summary_out: str,
    log=_log,
) -> None:
    """Rule load_queries: a benchmark file as source queries, its human annotations, and what was dropped."""
    source, limit, dropped = cfg["source"], cfg.get("limit"), {}
    if source == "kilt":
        questions = None
        if "questions" in inputs:
            questions = kilt.load_triviaqa_questions(inputs["questions"], member_of(cfg, "questions"))
        queries, evidence = kilt.load_kilt_queries(inputs["file"], task=cfg["task"], questions=questions, limit=limit)
    elif source == "2wiki":
        aliases = twowiki.load_aliases(inputs["aliases"], member_of(cfg, "aliases")) if "aliases" in inputs else None
        queries, evidence = twowiki.load_2wiki_queries(
            inputs["file"], member=member_of(cfg, "file"), aliases=aliases, limit=limit
        )
    elif source == "msmarco-qa" and "ranking_qrels" in inputs:
        queries, evidence, dropped = msmarco.load_msmarco_ranking_queries(
            inputs["file"],
            inputs["ranking_queries"],
            inputs["ranking_qrels"],
            query_types=cfg["query_types"],
            qna_member=member_of(cfg, "file"),
            queries_member=member_of(cfg, "ranking_queries"),
            qrels_member=member_of(cfg, "ranking_qrels"),
            limit=limit,
        )
    elif source == "msmarco-qa":
        queries, evidence, dropped = msmarco.load_msmarco_queries(
            inputs["file"], query_types=cfg["query_types"], member=member_of(cfg, "file"), limit=limit
        )
    else:
        raise ValueError(f"datasets.{name}.source: '{source}' has no loader here")
    write_parquet(queries, queries_out)
    write_parquet(evidence, evidence_out)
    write_text(
        json.dumps({"dataset": name, "queries": queries.height, "dropped_queries": dropped}, indent=2) + "\n",
        summary_out,
    )
    log.info("dataset %s: %d queries, %d annotations, dropped %s", name, queries.height, evidence.height, dropped)


def extract_answers_job(
    *, queries: str, manifest: str, prompts: str, spec: Mapping, store: str, job: str, output: str, log=_log
) -> pl.DataFrame:
    """Rule extract_answers: MS MARCO long answers -> short entity answers through the generation store."""
    from ..generation import strip_thinking
    from ..method.prompts import load_prompts
    from .common import model_session

    q = read_table(queries, SOURCE_QUERIES_SCHEMA)
    template = load_prompts(prompts)["extract_answer"]
    requests = msmarco.extraction_requests(q)
    with model_session(manifest=manifest, spec=spec, store=store, job=job, log=log) as (generator, calls):
        prompt_texts = [
            generator.render(template.format(question=question, answer=long)) for _, question, long in requests
        ]
        generator.check_fits(
            prompt_texts, [f"query {qid}, answer extraction" for qid, _, _ in requests], reserve=spec["max_new_tokens"]
        )
        outputs = calls.generate(
            generator,
            prompt_texts,
            max_new_tokens=spec["max_new_tokens"],
            stop=list(spec["stop"]),
            batch_size=spec["batch_size"],
            desc=f"{generator.slug} extract_answer",
        )
    table = msmarco.short_answer_table(requests, [strip_thinking(o) for o in outputs])
    write_parquet(table, output)
    log.info("extracted %d short answers from %d long answers", table["kept"].sum(), table.height)
    return table


def map_human_passages_job(
    *,
    dataset: str,
    corpus: str,
    rule: str,
    evidence: str,
    queries: str,
    summary: str,
    passages: str,
    spans: str | None = None,
    knowledge_source: str | None = None,
    human_out: str,
    coverage_out: str,
    log=_log,
) -> dict:
    """Rule map_human_passages: annotations -> corpus pids (rule ``span``, ``title-text``, ``text`` or
    ``pid``) + coverage."""
    ev = read_table(evidence, EVIDENCE_SCHEMA)
    if rule == "span":
        human, unmapped = mapping.map_by_span(ev, spans)
    elif rule == "title-text":
        if knowledge_source is not None:
            wanted = set(ev["wikipedia_id"].drop_nulls().to_list())
            ev = mapping.add_span_texts(ev, kilt.knowledge_source_pages(knowledge_source, wanted))
        human, unmapped = mapping.map_by_title_text(ev, passages)
    elif rule == "text":
        human, unmapped = mapping.map_by_text(ev, passages)
    elif rule == "pid":
        human, unmapped = mapping.map_by_pid(ev, passages)
    else:
        raise ValueError(f"unknown mapping rule {rule!r}")
    q = read_table(queries, SOURCE_QUERIES_SCHEMA)
    dropped = json.loads(open(summary, encoding="utf-8").read()).get("dropped_queries", {})
    report = mapping.coverage_report(
        dataset=dataset,
        corpus=corpus,
        rule=rule,
        queries=q,
        evidence=ev,
        human=human,
        unmapped=unmapped,
        dropped_queries=dropped,
    )
    write_parquet(human, human_out)
    write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", coverage_out)
    log.info(
        "human passages of %s on %s (%s): %d of %d annotations mapped",
        dataset,
        corpus,
        rule,
        report["mapped"],
        report["annotations"],
    )
    return report


def prepare_benchmark_queries_job(
    *, name: str, queries: str, human: str, short_answers: str | None = None, output: str, log=_log
) -> pl.DataFrame:
    """Rule prepare_queries for a benchmark: source queries + mapped human passages (+ short answers)."""
    q = read_table(queries, SOURCE_QUERIES_SCHEMA)
    h = read_table(human, HUMAN_SCHEMA)
    if short_answers is not None:
        short = (
            read_table(short_answers, msmarco.EXTRACTION_SCHEMA)
            .filter(pl.col("kept"))
            .group_by("qid", maintain_order=True)
            .agg(pl.col("short_answer").unique(maintain_order=True).alias("short"))
        )
        before = q.height
        q = q.join(short, on="qid", how="inner").with_columns(answers=pl.col("short")).drop("short")
        log.info("dataset %s: %d of %d queries have a short answer", name, q.height, before)
    pids = h.group_by("qid", maintain_order=True).agg(pl.col("pid").unique(maintain_order=True).alias("human_pids"))
    out = q.join(pids, on="qid", how="left").with_columns(
        pl.col("human_pids").fill_null(pl.lit([], dtype=pl.List(pl.String)))
    )
    out = conform(out, QUERIES_SCHEMA, f"dataset {name}")
    write_parquet(out, output)
    log.info(
        "dataset %s: %d queries, %d with human passages", name, out.height, (out["human_pids"].list.len() > 0).sum()
    )
    return out


def prepare_queries_job(
    *, name: str, cfg: Mapping, inputs: Mapping[str, str], output: str, seed: int, log=_log
) -> pl.DataFrame:
    """Rule prepare_queries: worldfacts, a local JSONL, or a benchmark's loaded queries + mapped human passages."""
    if cfg["source"] in ("worldfacts", "local"):
        from ..data.sources import prepare_queries

        queries = prepare_queries(name, cfg, inputs["passages"], seed=seed, queries_path=inputs.get("queries"))
        write_parquet(queries, output)
        log.info("dataset %s: %d queries", name, queries.height)
        return queries
    return prepare_benchmark_queries_job(
        name=name,
        queries=inputs["source"],
        human=inputs["human"],
        short_answers=inputs.get("short_answers"),
        output=output,
        log=log,
    )
