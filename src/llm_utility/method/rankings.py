"""Utility rankings of C (paper Section 3.3.2): from a verbalized ranking's parsed order, or from
per-passage scores (likelihood, Eq. 7; attention, Eq. 6), into one table shape.

A ranking table has one row per candidate of every ranked query: qid, pid, rank (1 = most useful),
score (higher = more useful; the method's own scale), parsed (whether the model's output or score
could be read; when not, the ranking is the retrieval order), echo (a verbalized ranking's output
repeats its prompt: ``method.parsing``; never for scores).

``RANKING_METHODS`` names every method (config ``rankings.methods``) and how it ranks a
``JudgeTask``: the retriever's order (no model), a verbalized listwise ranking (a generation), the
likelihood of the pseudo-answer after each passage (a scoring) or the pseudo-answer's attention to
each passage (an attention call).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..generation.store import AttentionRequest
from ..schemas import RANKINGS_SCHEMA
from .judgments import (
    VERBAL_RANKING_METHODS,
    Generations,
    JudgeTask,
    JudgmentMethod,
    check_output_cap,
    generate_together,
    listwise_messages,
    output_format,
    render_judgment,
)
from .parsing import ECHO, GENUINE, JudgmentPrompt, parse_ranking
from .prompts import answer_prompt, render_passages


def from_scores(
    pools: Mapping[str, Sequence[str]], scores: Mapping[str, Sequence[float]], parsed: Mapping[str, bool]
) -> pl.DataFrame:
    """Rank each query's ``pools`` (retrieval order) by ``scores``, highest first; ties and NaN
    scores keep retrieval order (a query whose scores are all equal keeps the retriever's ranking)."""
    rows = []
    for qid, pids in pools.items():
        values = list(scores[qid])
        key = [(-(v if not math.isnan(v) else -math.inf), i) for i, v in enumerate(values)]
        order = sorted(range(len(pids)), key=lambda i: key[i])
        rows += [(qid, pids[i], r, values[i], parsed[qid], False) for r, i in enumerate(order, start=1)]
    return pl.DataFrame(rows, schema=RANKINGS_SCHEMA, orient="row")


def from_orders(
    pools: Mapping[str, Sequence[str]],
    orders: Mapping[str, Sequence[int]],
    parsed: Mapping[str, bool],
    echo: Mapping[str, bool] | None = None,
) -> pl.DataFrame:
    """Rankings from 1-based positions into each query's pool (a permutation, as
    ``method.parsing.parse_ranking`` returns); score = k - rank + 1; ``echo``: the queries whose
    output repeated the prompt (none when not given)."""
    rows = []
    echo = echo or {}
    for qid, pids in pools.items():
        order = list(orders[qid])
        k = len(order)
        rows += [
            (qid, pids[i - 1], r, float(k - r + 1), parsed[qid], echo.get(qid, False))
            for r, i in enumerate(order, start=1)
        ]
    return pl.DataFrame(rows, schema=RANKINGS_SCHEMA, orient="row")


def passage_spans(prompt: str, rendered: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """Character spans of each rendered passage in ``prompt``, found in order (a passage that
    repeats an earlier one's text is found after it)."""
    spans, start = [], 0
    for text in rendered:
        at = prompt.find(text, start)
        if at < 0:
            raise ValueError(f"passage text not found in the prompt: {text[:60]!r}")
        spans.append((at, at + len(text)))
        start = at + len(text)
    return tuple(spans)


def likelihood_score(logprobs: Sequence[float], normalization: str) -> float:
    """log P(answer | q, d) from the answer's token log-probabilities: their sum (the paper's
    product of probabilities, in log space) or their mean (``normalization="mean"``); NaN when the
    answer has no token."""
    if not logprobs:
        return math.nan
    total = float(sum(logprobs))
    return total / len(logprobs) if normalization == "mean" else total


def retrieval_order(pools: Mapping[str, Sequence[str]]) -> pl.DataFrame:
    """Each pool in its retrieval order: Table 4's baseline."""
    return from_orders(pools, {qid: list(range(1, len(p) + 1)) for qid, p in pools.items()}, dict.fromkeys(pools, True))


# ---------------------------------------------------------------------------------------------------
# How each method ranks a judge job's pools. ``cfg`` is the ``rankings`` config section.


def _retriever(task: JudgeTask, cfg: Mapping[str, Any]) -> pl.DataFrame:
    return retrieval_order(task.pools)


def _verbal(method: JudgmentMethod, task: JudgeTask, cfg: Mapping[str, Any]) -> Generations:
    """Eq. 5: the model orders the numbered candidates (``[i] > [j] > ...``), with the pseudo-answer
    (its ``topk`` answer) where the method has one: the calls, read into a ranking."""
    gen, pools, questions = task.generator, task.pools, task.questions()
    pseudo = task.pseudo_answers.get("topk", {})
    texts = [
        render_judgment(
            task.prompts,
            method,
            gen,
            listwise_messages(
                task.prompts,
                method,
                questions[qid],
                [task.passages[p] for p in pool],
                pseudo.get(qid, "") if method.pseudo_answer else None,
            ),
        )
        for qid, pool in pools.items()
    ]
    max_new = cfg["max_new_tokens"]
    fmt = output_format(task.prompts, "rank")
    check_output_cap(gen, "rank", max(map(len, pools.values()), default=0), max_new, "rankings.max_new_tokens", fmt)
    gen.check_fits(
        texts, [f"dataset {task.dataset}, query {qid}, ranking {method.name}" for qid in pools], reserve=max_new
    )

    def read(outs: list[str]) -> pl.DataFrame:
        orders, parsed, echo = {}, {}, {}
        for (qid, pool), text, out in zip(pools.items(), texts, outs, strict=True):
            orders[qid], status = parse_ranking(out, len(pool), JudgmentPrompt(text, fmt))
            parsed[qid], echo[qid] = status == GENUINE, status == ECHO
        return from_orders(pools, orders, parsed, echo)

    return Generations(f"rank_{method.name}", texts, max_new, read)


def _likelihood(task: JudgeTask, cfg: Mapping[str, Any]) -> pl.DataFrame:
    """Eq. 7: log P(pseudo-answer | q, d_i), the pseudo-answer as the answer turn after the
    one-passage answer prompt (the ``single`` prompt), for every candidate."""
    gen, pools, questions, tasks = task.generator, task.pools, task.questions(), task.tasks()
    pseudo = task.pseudo_answers.get("topk", {})
    keys, pairs = [], []
    for qid, pool in pools.items():
        for pid in pool:
            prompt = gen.render(answer_prompt(task.prompts, tasks[qid], questions[qid], [task.passages[pid]]))
            keys.append(qid)
            pairs.append((prompt, pseudo.get(qid, "")))
    gen.check_fits([p for p, _ in pairs], [f"dataset {task.dataset}, query {k}, likelihood" for k in keys], reserve=64)
    logprobs = task.calls.score(
        gen, pairs, batch_size=task.spec["batch_size"], desc=f"{gen.slug} {task.dataset} likelihood"
    )
    scores: dict[str, list[float]] = {qid: [] for qid in pools}
    for qid, lp in zip(keys, logprobs, strict=True):
        scores[qid].append(likelihood_score(lp, cfg["likelihood_normalization"]))
    parsed = {qid: bool(pseudo.get(qid, "").strip()) for qid in pools}
    return from_scores(pools, scores, parsed)


def _attention(task: JudgeTask, cfg: Mapping[str, Any]) -> pl.DataFrame:
    """Eq. 6: the answer generated with all of C (its pseudo-answer) attending to each passage."""
    gen, pools, questions, tasks = task.generator, task.pools, task.questions(), task.tasks()
    pseudo = task.pseudo_answers.get("topk", {})
    requests = []
    for qid, pool in pools.items():
        prompt = gen.render(answer_prompt(task.prompts, tasks[qid], questions[qid], [task.passages[p] for p in pool]))
        rendered = [render_passages(task.prompts, [task.passages[p]]) for p in pool]
        requests.append(AttentionRequest(prompt, passage_spans(prompt, rendered), pseudo.get(qid, "")))
    gen.check_fits(
        [r.prompt for r in requests], [f"dataset {task.dataset}, query {qid}, attention" for qid in pools], reserve=64
    )
    masses = task.calls.attention(
        gen, requests, pooling=cfg["attention_pooling"], desc=f"{gen.slug} {task.dataset} attention"
    )
    return from_scores(pools, dict(zip(pools, masses, strict=True)), dict.fromkeys(pools, True))


@dataclass(frozen=True)
class RankingMethod:
    """One ranking method: its name and how it ranks a judge job's pools (``rank(task, cfg)``); a
    verbalized one also gives its generation calls unmade (``calls(task, cfg)``), so a judge job can
    decode them with other methods' (``generate_together``). ``attention`` methods run on
    ``rankings.attention_backend`` (vLLM exposes no attention weights)."""

    name: str
    rank: Callable[[JudgeTask, Mapping[str, Any]], pl.DataFrame]
    uses_model: bool = True
    attention: bool = False
    calls: Callable[[JudgeTask, Mapping[str, Any]], Generations] | None = None


def _verbal_method(name: str, method: JudgmentMethod) -> RankingMethod:
    calls = functools.partial(_verbal, method)
    return RankingMethod(name, lambda task, cfg: generate_together(task, [calls(task, cfg)])[0], calls=calls)


RANKING_METHODS: dict[str, RankingMethod] = {
    "retriever": RankingMethod("retriever", _retriever, uses_model=False),
    **{name: _verbal_method(name, method) for name, method in VERBAL_RANKING_METHODS.items()},
    "likelihood": RankingMethod("likelihood", _likelihood),
    "attention": RankingMethod("attention", _attention, attention=True),
}


def ranking_method(name: str) -> RankingMethod:
    """The ranking method called ``name``; an unknown name stops with the list of valid ones."""
    try:
        return RANKING_METHODS[name]
    except KeyError:
        raise ValueError(f"unknown ranking method {name!r}; valid: {', '.join(RANKING_METHODS)}") from None
