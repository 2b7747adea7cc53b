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
    log: logging.Logger = _log,
) -> dict[str, pl.DataFrame]:
    """Everything one LLM judges or scores about one dataset's candidates, in one model session:

    - ``judgments`` (method -> path): verbalized selections of every candidate of C, columns qid,
      pid, selected, parsed, output (the raw output; a listwise method's is the same on all
      candidates of a query); an output that does not parse is a row with ``parsed = false`` and
      nothing selected; ``max_new_tokens`` maps a method's form (pointwise, listwise) or ``thinking``
      to its output limit;
    - ``rankings`` (method -> path): utility rankings of C (``method.rankings.RANKINGS_SCHEMA``):
      ``listwise``, ``listwise_pa``, ``likelihood`` and ``attention`` (on the backend
      ``rankings.attention_backend`` names: a second session after this one when it is not the
      LLM's own backend, once the first has freed the device);
    - ``perplexity`` (path): the perplexities of Figure 4 (``perplexity_rows``).

    ``pseudo_answers`` maps the answer contexts the pseudo-answers come from (``topk``,
    ``topk_think``) to their files. Judgments and rankings cover the first ``max_queries`` queries
    (all when None); perplexity covers every query with a gold set.
    """
    rankings = dict(rankings or {})
    for method in rankings:
        ranking_method(method)
    selection = [J.selection_method(name) for name in judgments]
    q = read_table(queries, QUERIES_SCHEMA)
    judged = _judged(q, max_queries)
    cands = read_candidates(candidates)
    pseudo = _pseudo_answers(pseudo_answers or {})
    wordings = load_prompts(prompts)
    cfg = dict(rankings_cfg or {})
    pools = {qid: cands.C[qid] for qid in judged["qid"].to_list()}
    tables: dict[str, pl.DataFrame] = {}
    attention_apart = "attention" in rankings and cfg.get("attention_backend", spec["backend"]) != spec["backend"]
    with model_session(manifest=manifest, spec=spec, store=store, job=job, threads=threads, log=log) as (gen, calls):
        passages = truncate_passages(cands.passages, gen, spec["max_passage_tokens"])
        # Each method's calls are counted apart (the cost table's `method` column).
        for m in selection:
            limit = max_new_tokens["thinking" if m.thinking else m.form]
            if m.form == "listwise":
                k = max(map(len, pools.values()), default=0)
                J.check_output_cap(gen, "listwise", k, limit, "judgments.thinking_max_new_tokens" if m.thinking else "judgments.listwise_max_new_tokens")
            with calls.section(m.name):
                tables[f"judgments|{m.name}"] = _judge(m, dataset, judged, cands, passages, pseudo, wordings, gen, calls, spec, limit)
        for method in rankings:
            if method != "attention" or not attention_apart:
                with calls.section(f"rank_{method}"):
                    tables[f"rankings|{method}"] = _model_ranking(
                        method, dataset, judged, pools, passages, pseudo.get("topk", {}), wordings, spec, cfg, gen, calls
                    )
        if perplexity:
            with calls.section("perplexity"):
                tables["perplexity"] = perplexity_rows(dataset, q, cands, read_table(gold_U, GOLD_SCHEMA), gen, calls, spec)
    if attention_apart:
        # vLLM exposes no attention weights: the transformers backend (eager attention) computes them.
        spec_hf = {**spec, "backend": cfg["attention_backend"]}
        session = model_session(manifest=manifest, spec=spec_hf, store=store, job=job + "+attention", threads=threads, log=log)
        with session as (gen, calls), calls.section("rank_attention"):
            passages = truncate_passages(cands.passages, gen, spec["max_passage_tokens"])
            tables["rankings|attention"] = _model_ranking(
                "attention", dataset, judged, pools, passages, pseudo.get("topk", {}), wordings, spec_hf, cfg, gen, calls
            )
    for name, path in judgments.items():
        table = tables[f"judgments|{name}"]
        write_parquet(table, path)
        log.info(
            "%s: %d queries judged, %d of %d candidates selected, outputs parsed for %.1f%% of the queries",
            name, judged.height, int(table["selected"].sum()), table.height, 100 * _parsed_share(table),
        )
    for method, path in rankings.items():
        table = tables[f"rankings|{method}"]
        write_parquet(table.select(list(RANKINGS_SCHEMA)), path)
        log.info("%s: ranked %d queries; parsed for %.1f%%", method, len(pools), 100 * _parsed_share(table))
    if perplexity:
        write_parquet(tables["perplexity"], perplexity)
        log.info("perplexity of %d human passages", tables["perplexity"].height)
    return tables


def rank_retriever_job(*, queries: str, candidates: str, output: str, max_queries: int | None = None, log=_log) -> pl.DataFrame:
    """The retrieval order of C as a ranking (Table 4's baseline), for the judged queries."""
    q = _judged(read_table(queries, QUERIES_SCHEMA), max_queries)
    cands = read_candidates(candidates)
    pools = {qid: cands.C[qid] for qid in q["qid"].to_list()}
    table = from_orders(pools, {qid: list(range(1, len(p) + 1)) for qid, p in pools.items()}, dict.fromkeys(pools, True))
    write_parquet(table, output)
    log.info("retriever: %d queries", len(pools))
    return table


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


def _parsed_share(table: pl.DataFrame) -> float:
    return float(table.group_by("qid").agg(pl.col("parsed").all())["parsed"].mean() or 0.0) if table.height else 0.0


def _model_ranking(method, dataset, q, pools, passages, pseudo, wordings, spec, cfg, gen, calls) -> pl.DataFrame:
    """One model-based ranking of every pool (see ``judge_job``); ``pseudo`` maps qid to the
    pseudo-answer (the topk answer), which attention attends from."""
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
        J.check_output_cap(gen, "rank", max(map(len, pools.values()), default=0), max_new, "rankings.max_new_tokens")
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


def perplexity_rows(dataset: str, q: pl.DataFrame, cands, gold: pl.DataFrame, gen, calls, spec) -> pl.DataFrame:
    """Figure 4 (top): the LLM's perplexity of each human passage of the queries whose gold set (U)
    is not empty, alone (``{title} {text}`` after the BOS token) and after its query
    (``{question} {title} {text}``), with whether the passage is in the LLM's gold set."""
    gold_pairs = set(gold.select("qid", "pid").iter_rows())
    with_gold = set(gold["qid"].to_list())
    keys = [
        (qid, pid, question)
        for qid, question in q.select("qid", "question").iter_rows()
        if qid in with_gold
        for pid in cands.human[qid]
    ]
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
    return pl.DataFrame(rows, schema=PERPLEXITY_SCHEMA, orient="row")


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
