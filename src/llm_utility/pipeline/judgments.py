"""Jobs of the judgment stage: verbalized utility selections (Tables 2, 3, 5, 8), utility rankings
(Table 4: retriever, verbalized, likelihood, attention) and perplexities (Figure 4)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import polars as pl

from ..io import QUERIES_SCHEMA, read_table, write_parquet
from ..method import judgments as J
from ..method.gold import GOLD_SCHEMA
from ..method.prompts import load_prompts, render_passages
from ..method.rankings import (
    RANKINGS_SCHEMA,
    from_orders,
    from_scores,
    likelihood_score,
    passage_spans,
    perplexity,
    ranking_method,
)
from .answers import read_candidates
from .common import model_session, truncate_passages

_log = logging.getLogger("llm_utility")
JUDGMENTS_SCHEMA = {"qid": pl.String, "pid": pl.String, "selected": pl.Boolean, "parsed": pl.Boolean, "output": pl.String}
PERPLEXITY_SCHEMA = {
    "qid": pl.String,
    "pid": pl.String,
    "in_gold": pl.Boolean,
    "ppl_passage": pl.Float64,
    "ppl_query_passage": pl.Float64,
}


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
    pseudo_answers: Mapping[str, str],
    spec: Mapping[str, Any],
    max_new_tokens: Mapping[str, int],
    max_queries: int | None,
    store: str,
    job: str,
    outputs: Mapping[str, str],
    threads: int | None = None,
    log: logging.Logger = _log,
) -> dict[str, pl.DataFrame]:
    """Judge every candidate of C with each selection method named in ``outputs`` (method -> path),
    in one model session, and write qid, pid, selected, parsed, output (the raw output; for a
    listwise method the same for all candidates of a query).

    ``pseudo_answers`` maps the answer contexts the methods' pseudo-answers come from (``topk``,
    ``topk_think``) to their files; ``max_new_tokens`` maps a method's form (pointwise, listwise) or
    ``thinking`` to its output limit. An output that does not parse is a row with
    ``parsed = false`` and nothing selected.
    """
    methods = [J.selection_method(name) for name in outputs]
    q = _judged(read_table(queries, QUERIES_SCHEMA), max_queries)
    cands = read_candidates(candidates)
    pseudo = _pseudo_answers(pseudo_answers)
    wordings = load_prompts(prompts)
    tables = {}
    with model_session(manifest=manifest, spec=spec, store=store, job=job, threads=threads, log=log) as (gen, calls):
        passages = truncate_passages(cands.passages, gen, spec["max_passage_tokens"])
        for m in methods:
            limit = max_new_tokens["thinking" if m.thinking else m.form]
            tables[m.name] = _judge(m, dataset, q, cands, passages, pseudo, wordings, gen, calls, spec, limit)
    for name, table in tables.items():
        write_parquet(table, outputs[name])
        parsed_share = table.group_by("qid").agg(pl.col("parsed").all())["parsed"].mean() if table.height else 0.0
        log.info(
            "%s: %d queries judged, %d of %d candidates selected, outputs parsed for %.1f%% of the queries",
            name, q.height, int(table["selected"].sum()), table.height, 100 * (parsed_share or 0.0),
        )
    return tables


def _judge(m, dataset, q, cands, passages, pseudo, wordings, gen, calls, spec, max_new_tokens) -> pl.DataFrame:
    """One selection method's judgments (see ``judge_job``)."""
    from ..generation import strip_thinking
    from ..method.parsing import parse_selection, parse_yes_no

    answers = pseudo.get(m.pseudo_context, {}) if m.pseudo_context else None
    keys, texts = [], []
    for qid, question in q.select("qid", "question").iter_rows():
        answer = answers.get(qid, "") if answers is not None else None
        pool = [passages[p] for p in cands.C[qid]]
        if m.form == "pointwise":
            for passage in pool:
                keys.append((qid, passage.pid))
                texts.append(J.render_judgment(wordings, m, gen, J.pointwise_prompt(wordings, m, question, passage, answer)))
        else:
            keys.append((qid, None))
            texts.append(J.render_judgment(wordings, m, gen, J.listwise_messages(wordings, m, question, pool, answer)))
    gen.check_fits(texts, [f"dataset {dataset}, query {qid}, judgment {m.name}" for qid, _ in keys], reserve=max_new_tokens)
    outputs = calls.generate(
        gen, texts, max_new_tokens=max_new_tokens, stop=spec["stop"], batch_size=spec["batch_size"],
        desc=f"{gen.slug} {dataset} {m.name}",
    )
    rows = []
    for (qid, pid), raw in zip(keys, outputs, strict=True):
        out = strip_thinking(raw) if "</think>" in raw else raw
        if m.form == "pointwise":
            selected, parsed = parse_yes_no(out)
            rows.append((qid, pid, selected, parsed, raw))
        else:
            pool = cands.C[qid]
            ids, parsed = parse_selection(out, len(pool))
            chosen = {pool[i - 1] for i in ids}
            rows += [(qid, p, p in chosen, parsed, raw) for p in pool]
    return pl.DataFrame(rows, schema=JUDGMENTS_SCHEMA, orient="row")


def rank_job(
    *,
    dataset: str,
    queries: str,
    candidates: str,
    outputs: Mapping[str, str],
    manifest: str | None = None,
    prompts: str | None = None,
    pseudo_answers: str | None = None,
    spec: Mapping[str, Any] | None = None,
    rankings_cfg: Mapping[str, Any] | None = None,
    max_queries: int | None = None,
    store: str | None = None,
    job: str = "rank",
    threads: int | None = None,
    log: logging.Logger = _log,
) -> dict[str, pl.DataFrame]:
    """Rank every judged query's candidates C by utility with each method named in ``outputs``
    (method -> path), in one model session, and write the ranking tables
    (``method.rankings.RANKINGS_SCHEMA``). ``retriever`` needs no model; ``attention`` runs on the
    backend ``rankings.attention_backend`` names (a job of its own in the workflow)."""
    for method in outputs:
        ranking_method(method)
    q = _judged(read_table(queries, QUERIES_SCHEMA), max_queries)
    cands = read_candidates(candidates)
    pools = {qid: cands.C[qid] for qid in q["qid"].to_list()}
    tables: dict[str, pl.DataFrame] = {}
    if "retriever" in outputs:
        tables["retriever"] = from_orders(pools, {qid: list(range(1, len(p) + 1)) for qid, p in pools.items()}, dict.fromkeys(pools, True))
    model_methods = [m for m in outputs if m != "retriever"]
    if model_methods:
        cfg = dict(rankings_cfg or {})
        spec = dict(spec or {})
        if "attention" in model_methods:
            if len(model_methods) > 1:
                raise ValueError("attention runs on its own backend: rank it in a job of its own")
            spec = {**spec, "backend": cfg["attention_backend"]}
        pseudo = dict(read_table(pseudo_answers).select("qid", "output").iter_rows()) if pseudo_answers else {}
        wordings = load_prompts(prompts)
        with model_session(manifest=manifest, spec=spec, store=store, job=job, threads=threads, log=log) as (gen, calls):
            passages = truncate_passages(cands.passages, gen, spec["max_passage_tokens"])
            for method in model_methods:
                tables[method] = _model_ranking(method, dataset, q, pools, passages, pseudo, wordings, spec, cfg, gen, calls)
    for method, table in tables.items():
        write_parquet(table.select(list(RANKINGS_SCHEMA)), outputs[method])
        log.info("%s: ranked %d queries; parsed for %.1f%%", method, len(pools), 100 * _parsed_share(table))
    return tables


def _parsed_share(table: pl.DataFrame) -> float:
    return float(table.group_by("qid").agg(pl.col("parsed").all())["parsed"].mean() or 0.0) if table.height else 0.0


def _model_ranking(method, dataset, q, pools, passages, pseudo, wordings, spec, cfg, gen, calls) -> pl.DataFrame:
    """One model-based ranking of every pool (see ``rank_job``)."""
    from ..generation import AttentionRequest
    from ..method.answers import answer_prompt
    from ..method.parsing import parse_ranking

    questions = dict(q.select("qid", "question").iter_rows())
    tasks = dict(q.select("qid", "task").iter_rows())
    if method in J.VERBAL_RANKING_METHODS:
        m = J.VERBAL_RANKING_METHODS[method]
        texts = [
            J.render_judgment(
                wordings, m, gen,
                J.listwise_messages(wordings, m, questions[qid], [passages[p] for p in pool], pseudo.get(qid, "") if m.pseudo_answer else None),
            )
            for qid, pool in pools.items()
        ]
        max_new = cfg["max_new_tokens"]
        gen.check_fits(texts, [f"dataset {dataset}, query {qid}, ranking {method}" for qid in pools], reserve=max_new)
        outs = calls.generate(gen, texts, max_new_tokens=max_new, stop=spec["stop"], batch_size=spec["batch_size"], desc=f"{gen.slug} {dataset} rank {method}")
        orders, parsed = {}, {}
        for (qid, pool), out in zip(pools.items(), outs, strict=True):
            orders[qid], parsed[qid] = parse_ranking(out, len(pool))
        return from_orders(pools, orders, parsed)
    if method == "likelihood":
        # Eq. 7: log P(pseudo-answer | q, d_i), the pseudo-answer as the answer turn after the
        # one-passage answer prompt (the `single` prompt), for every candidate.
        keys, pairs = [], []
        for qid, pool in pools.items():
            for pid in pool:
                prompt = gen.render(answer_prompt(wordings, tasks[qid], questions[qid], [passages[pid]]))
                keys.append(qid)
                pairs.append((prompt, pseudo.get(qid, "")))
        gen.check_fits([p for p, _ in pairs], [f"dataset {dataset}, query {k}, likelihood" for k in keys], reserve=64)
        logprobs = calls.score(gen, pairs, batch_size=spec["batch_size"], desc=f"{gen.slug} {dataset} likelihood")
        scores: dict[str, list[float]] = {qid: [] for qid in pools}
        for qid, lp in zip(keys, logprobs, strict=True):
            scores[qid].append(likelihood_score(lp, cfg["likelihood_normalization"]))
        parsed = {qid: bool(pseudo.get(qid, "").strip()) for qid in pools}
        return from_scores(pools, scores, parsed)
    # attention, Eq. 6: the answer generated with all of C (its pseudo-answer) attending to each passage.
    requests = []
    for qid, pool in pools.items():
        prompt = gen.render(answer_prompt(wordings, tasks[qid], questions[qid], [passages[p] for p in pool]))
        rendered = [render_passages(wordings, [passages[p]]) for p in pool]
        requests.append(AttentionRequest(prompt, passage_spans(prompt, rendered), pseudo.get(qid, "")))
    gen.check_fits([r.prompt for r in requests], [f"dataset {dataset}, query {qid}, attention" for qid in pools], reserve=64)
    masses = calls.attention(gen, requests, pooling=cfg["attention_pooling"], desc=f"{gen.slug} {dataset} attention")
    return from_scores(pools, dict(zip(pools, masses, strict=True)), dict.fromkeys(pools, True))


def perplexity_job(
    *,
    dataset: str,
    queries: str,
    candidates: str,
    gold_U: str,
    manifest: str,
    spec: Mapping[str, Any],
    store: str,
    job: str,
    output: str,
    threads: int | None = None,
    log: logging.Logger = _log,
) -> pl.DataFrame:
    """Figure 4 (top): the LLM's perplexity of each human passage of the queries whose gold set (U)
    is not empty, alone (``{title} {text}`` after the BOS token) and after its query
    (``{question} {title} {text}``), with whether the passage is in the LLM's gold set."""
    q = read_table(queries, QUERIES_SCHEMA)
    gold = read_table(gold_U, GOLD_SCHEMA)
    cands = read_candidates(candidates)
    gold_pairs = set(gold.select("qid", "pid").iter_rows())
    with_gold = set(gold["qid"].to_list())
    keys = [
        (qid, pid, question)
        for qid, question in q.select("qid", "question").iter_rows()
        if qid in with_gold
        for pid in cands.human[qid]
    ]
    with model_session(manifest=manifest, spec=spec, store=store, job=job, threads=threads, log=log) as (gen, calls):
        texts = [f"{cands.passages[pid].title} {cands.passages[pid].text}" for _, pid, _ in keys]
        pairs = [("", t) for t in texts] + [("", f"{question} {t}") for (_, _, question), t in zip(keys, texts)]
        labels = [f"dataset {dataset}, query {qid}, perplexity of {pid}" for qid, pid, _ in keys] * 2
        gen.check_fits([t for _, t in pairs], labels, reserve=1)
        logprobs = calls.score(gen, pairs, batch_size=spec["batch_size"], desc=f"{gen.slug} {dataset} perplexity")
    n = len(keys)
    rows = [
        (qid, pid, (qid, pid) in gold_pairs, perplexity(logprobs[i]), perplexity(logprobs[n + i]))
        for i, (qid, pid, _) in enumerate(keys)
    ]
    table = pl.DataFrame(rows, schema=PERPLEXITY_SCHEMA, orient="row")
    write_parquet(table, output)
    log.info("perplexity of %d human passages over %d queries with a gold set", n, len({k[0] for k in keys}))
    return table


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
    log.info("qrels: %d queries, %d judged passages, %d relevant", len(cands.of(pool)), sum(map(len, cands.of(pool).values())), sum(map(len, relevant.values())))
