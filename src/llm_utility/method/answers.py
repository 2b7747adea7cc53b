"""Which passages each LLM call gets (the answer contexts) and the answer tables they produce.

Contexts (docs/method.md, "Answer contexts"), per query:

    none                      no passage
    single                    each passage of U alone (one row per passage)
    topk                      C, the top-k retrieved
    union                     U = C followed by the human passages not in C
    human                     the human-annotated passages
    topk_think                C, answered with thinking on (the pseudo-answer "(T)" of Table 5)
    gold_{C,U}_from_{llm}     the gold set (Eq. 1-2) that <llm> has among C or U; from itself: its own
    selected_{method}_from_{llm}   the passages <llm> selected with a judgment method; from itself: its own
    reranked_{method}_top{n}  the first n passages of the LLM's own utility ranking by <method>
    reask_{context}           the re-ask of an evaluation context (none, human, topk, union and the
                              gold sets): the same passages in reverse order under the paraphrased
                              instruction ``reask`` of prompts.yaml, so that no evaluated call is the
                              call that selected its passages (a gold set of one passage was selected
                              by its ``single`` call, an empty one by the ``none`` call)
    run_{run}                 the top-k of another run (a retriever other than the dataset's, or a
                              TREC run file), in its rank order: RAG accuracy per run

Passages keep retrieval order (then human order), except reranked contexts, which keep the ranking's
order, and re-asks, which reverse their context's order; so equal passage lists always render as
equal prompts and the store serves repeats (an empty gold set or selection is the ``none`` call, a
one-passage one is a ``single`` call; an empty re-asked gold set is the ``reask_none`` call).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from ..metrics import score_answer
from ..schemas import ANSWERS_SCHEMA, CANDIDATES_SCHEMA
from .prompts import Passage, answer_prompt

CANDIDATE_CONTEXTS = ("none", "single", "topk", "union", "human")
# The evaluation contexts that get a re-ask (besides every LLM's gold sets among C and U).
REASK_BASE_CONTEXTS = ("none", "human", "topk", "union")
REASK_PREFIX = "reask_"
_SLUG = r"[a-z0-9][a-z0-9-]*"
CONTEXT_PATTERNS = {
    "gold": re.compile(rf"^gold_(?P<candidates>[CU])_from_(?P<source>{_SLUG})$"),
    "selected": re.compile(rf"^selected_(?P<method>[a-z0-9_]+?)_from_(?P<source>{_SLUG})$"),
    "reranked": re.compile(r"^reranked_(?P<method>[a-z0-9_]+)_top(?P<n>[0-9]+)$"),
    "run": re.compile(rf"^run_(?P<run>{_SLUG})$"),
}


def gold_context(candidates: str, source: str) -> str:
    return f"gold_{candidates}_from_{source}"


def reask_context(context: str) -> str:
    """The re-ask twin of an evaluation context (``topk`` -> ``reask_topk``)."""
    return REASK_PREFIX + context


def is_reask(context: str) -> bool:
    return context.startswith(REASK_PREFIX)


def reasked(context: str) -> str:
    """The context a re-ask context asks again (``reask_topk`` -> ``topk``)."""
    if not is_reask(context):
        raise ValueError(f"'{context}' is not a re-ask context (they start with '{REASK_PREFIX}')")
    base = context[len(REASK_PREFIX) :]
    if base not in REASK_BASE_CONTEXTS and not CONTEXT_PATTERNS["gold"].match(base):
        raise ValueError(
            f"unknown re-ask context '{context}': the re-ask covers {', '.join(REASK_BASE_CONTEXTS)} and the gold sets"
        )
    return base


def selected_context(method: str, source: str) -> str:
    return f"selected_{method}_from_{source}"


def reranked_context(method: str, n: int) -> str:
    return f"reranked_{method}_top{n}"


def run_context(run: str) -> str:
    return f"run_{run}"


def run_passages(table: pl.DataFrame) -> dict[str, Passage]:
    """The passages of a run's top-k table (``RUN_TOPK_SCHEMA``), which need not be in U."""
    return {pid: Passage(pid, title, text) for pid, title, text in table.select("pid", "title", "text").iter_rows()}


@dataclass(frozen=True)
class Candidates:
    """Per-query passage lists: C (top-k, rank order), U (C then human passages not in C), human;
    and the text of every passage in them."""

    C: dict[str, list[str]]
    U: dict[str, list[str]]
    human: dict[str, list[str]]
    passages: dict[str, Passage]

    def of(self, name: str) -> dict[str, list[str]]:
        return {"C": self.C, "U": self.U}[name]

    def restrict(self, qids: Iterable[str]) -> Candidates:
        """Only the queries ``qids`` (a query part's), in this table's order, and their passages."""
        keep = set(qids)
        U = {q: u for q, u in self.U.items() if q in keep}
        pids = {p for u in U.values() for p in u}
        return Candidates(
            {q: c for q, c in self.C.items() if q in keep},
            U,
            {q: h for q, h in self.human.items() if q in keep},
            {p: v for p, v in self.passages.items() if p in pids},
        )

    @classmethod
    def from_table(cls, table: pl.DataFrame) -> Candidates:
        """From a candidates table (``CANDIDATES_SCHEMA``, rows in U order per query)."""
        C: dict[str, list[str]] = {}
        U: dict[str, list[str]] = {}
        human: dict[str, list[str]] = {}
        passages: dict[str, Passage] = {}
        for qid, pid, in_c, is_human, title, text in table.select(
            "qid", "pid", "in_C", "human", "title", "text"
        ).iter_rows():
            U.setdefault(qid, []).append(pid)
            C.setdefault(qid, [])
            human.setdefault(qid, [])
            if in_c:
                C[qid].append(pid)
            if is_human:
                human[qid].append(pid)
            passages[pid] = Passage(pid, title, text)
        return cls(C, U, human, passages)


def candidates_table(queries: pl.DataFrame, run: pl.DataFrame, passages_path: str, top_k: int) -> pl.DataFrame:
    """Every passage any LLM call of the dataset can get (U) with its text, built once per dataset:
    one row per (query, passage of U), in U order, with its retrieval rank (null for a human passage
    retrieved below top-k), whether it is in C and whether it is human-annotated.

    Reads only the needed rows of ``passages_path`` (a corpus of 21M passages is scanned once, here,
    instead of by every LLM job).
    """
    top = (
        run.filter(pl.col("rank") <= top_k)
        .sort(["qid", "rank"])
        .group_by("qid", maintain_order=True)
        .agg(pl.col("pid"), pl.col("rank"))
    )
    retrieved = {qid: list(zip(pids, ranks)) for qid, pids, ranks in top.iter_rows()}
    rows = []
    for qid, human_pids in queries.select("qid", "human_pids").iter_rows():
        human = list(dict.fromkeys(human_pids))
        c = retrieved.get(qid, [])
        in_c = {p for p, _ in c}
        rows += [(qid, p, r, True, p in human) for p, r in c]
        rows += [(qid, p, None, False, True) for p in human if p not in in_c]
    frame = pl.DataFrame(
        rows,
        schema={k: CANDIDATES_SCHEMA[k] for k in ("qid", "pid", "rank", "in_C", "human")},
        orient="row",
    )
    needed = frame["pid"].unique().to_list()
    texts = pl.scan_parquet(passages_path).filter(pl.col("pid").is_in(needed)).select("pid", "title", "text").collect()
    missing = set(needed) - set(texts["pid"].to_list())
    if missing:
        raise KeyError(f"{passages_path}: {len(missing)} passage id(s) not in the corpus, e.g. {sorted(missing)[:3]}")
    return frame.join(texts, on="pid", how="left", maintain_order="left").select(list(CANDIDATES_SCHEMA))


def context_requests(
    context: str, cands: Candidates, table: pl.DataFrame | None = None
) -> list[tuple[str, tuple[str, ...]]]:
    """The (qid, passage ids) calls that make up ``context``, in query order.

    ``table`` is what a derived context is made from: a gold set (qid, pid) for ``gold_*``, a
    judgment (qid, pid, selected) for ``selected_*``, a ranking (qid, pid, rank) for ``reranked_*``,
    a run's top-k (qid, pid, rank, ...) for ``run_*`` (every query; one the run ranks nothing for
    gets no passage, which is the ``none`` call);
    a re-ask takes the table of the context it asks again, and gets its passages in reverse order.
    """
    if is_reask(context):
        return [(q, pids[::-1]) for q, pids in context_requests(reasked(context), cands, table)]
    if context == "none":
        return [(q, ()) for q in cands.U]
    if context == "single":
        return [(q, (p,)) for q, u in cands.U.items() for p in u]
    if context in ("topk", "union", "human", "topk_think"):
        lists = {"topk": cands.C, "topk_think": cands.C, "union": cands.U, "human": cands.human}[context]
        return [(q, tuple(pids)) for q, pids in lists.items()]
    for kind, pattern in CONTEXT_PATTERNS.items():
        match = pattern.match(context)
        if not match:
            continue
        if table is None:
            raise ValueError(f"context '{context}' needs its {kind} table as input")
        if kind == "gold":  # a query with an empty gold set has no row: every query is answered
            return _in_order(table, cands.U)
        if kind == "run":
            ranked = dict(
                table.sort(["qid", "rank"]).group_by("qid", maintain_order=True).agg(pl.col("pid")).iter_rows()
            )
            return [(q, tuple(ranked.get(q, ()))) for q in cands.U]
        # A judgment or ranking covers the queries it has rows for (a demo may judge only some).
        judged = set(table["qid"].to_list())
        if kind == "selected":
            chosen = _in_order(table.filter(pl.col("selected")), cands.C)
            return [(q, pids) for q, pids in chosen if q in judged]
        ranked = table.sort(["qid", "rank"]).group_by("qid", maintain_order=True).agg(pl.col("pid"))
        top = {qid: tuple(pids[: int(match["n"])]) for qid, pids in ranked.iter_rows()}
        return [(q, top[q]) for q in cands.U if q in judged]
    raise ValueError(f"unknown answer context '{context}'")


def _in_order(table: pl.DataFrame, pools: Mapping[str, list[str]]) -> list[tuple[str, tuple[str, ...]]]:
    """The pids ``table`` lists per query, in the order of the query's ``pools`` list."""
    chosen: dict[str, set[str]] = {}
    for qid, pid in table.select("qid", "pid").iter_rows():
        chosen.setdefault(qid, set()).add(pid)
    return [(q, tuple(p for p in pool if p in chosen.get(q, ()))) for q, pool in pools.items()]


def answer_contexts(
    requests: Mapping[str, Sequence[tuple[str, tuple[str, ...]]]],
    queries: pl.DataFrame,
    passages: Mapping[str, Passage],
    prompts: Mapping,
    render: Callable[[str], str],
    generate: Callable[[list[str]], list[str]],
    synonyms: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, pl.DataFrame]:
    """Answer every request of every context in ONE generation call and score it with
    ``metrics.score_answer`` (has_answer for questions, the stated verdict for claims).

    ``render`` turns an instruction into the model's prompt string (chat template or completion);
    ``generate`` maps prompt strings to outputs (normally the generation store, which deduplicates
    across contexts: ``union`` equals ``topk`` whenever the human passages were retrieved).
    """
    texts = render_requests(requests, queries, passages, prompts, render)
    outputs = generate([t for _, _, _, t in texts])
    info = {r["qid"]: r for r in queries.select("qid", "answers", "task").iter_rows(named=True)}
    rows: dict[str, list[tuple]] = {ctx: [] for ctx in requests}
    for (ctx, qid, pids, _), out in zip(texts, outputs, strict=True):
        correct = score_answer(out, info[qid]["answers"], info[qid]["task"], synonyms)
        rows[ctx].append((qid, list(pids), out, correct))
    return {ctx: pl.DataFrame(r, schema=ANSWERS_SCHEMA, orient="row") for ctx, r in rows.items()}


def render_requests(
    requests: Mapping[str, Sequence[tuple[str, tuple[str, ...]]]],
    queries: pl.DataFrame,
    passages: Mapping[str, Passage],
    prompts: Mapping,
    render: Callable[[str], str],
) -> list[tuple[str, str, tuple[str, ...], str]]:
    """(context, qid, pids, rendered prompt) of every request, in order; a re-ask context's requests
    get the ``reask`` wording."""
    info = {r["qid"]: r for r in queries.select("qid", "question", "task").iter_rows(named=True)}
    return [
        (
            ctx,
            qid,
            pids,
            render(
                answer_prompt(
                    prompts,
                    info[qid]["task"],
                    info[qid]["question"],
                    [passages[p] for p in pids],
                    wording="reask" if is_reask(ctx) else "answer",
                )
            ),
        )
        for ctx, reqs in requests.items()
        for qid, pids in reqs
    ]
