"""Which passages each LLM call gets (the answer contexts) and the answer tables they produce.

Contexts (DESIGN.md, DAG step 4), per query:
    none     no passage                      single   each passage of U alone (one row per passage)
    topk     C, the top-k retrieved          union    U = C followed by human passages not in C
    human    the human-annotated passages    gold_C / gold_U   the LLM's own gold set (Eq. 1-2)
    gold_C_from_<llm> / gold_U_from_<llm>    another LLM's gold set (transfer)
Passages keep retrieval order (then human order), so equal sets always render as equal prompts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from ..metrics import has_answer
from .prompts import Passage, answer_prompt

CANDIDATE_CONTEXTS = ("none", "single", "topk", "union", "human")
GOLD_CONTEXT = re.compile(r"^gold_(?P<candidates>[CU])(?:_from_(?P<source>[a-z0-9][a-z0-9-]*))?$")
ANSWERS_SCHEMA = {"qid": pl.String, "pids": pl.List(pl.String), "output": pl.String, "has_answer": pl.Boolean}


@dataclass(frozen=True)
class Candidates:
    """Per-query passage lists: C (top-k), U (C then human passages not in C) and human."""

    C: dict[str, list[str]]
    U: dict[str, list[str]]
    human: dict[str, list[str]]

    def of(self, name: str) -> dict[str, list[str]]:
        return {"C": self.C, "U": self.U}[name]


def candidate_sets(queries: pl.DataFrame, run: pl.DataFrame, top_k: int) -> Candidates:
    """Build C and U for every query from the retrieval run (rank order) and the human passages."""
    top = (
        run.filter(pl.col("rank") <= top_k)
        .sort(["qid", "rank"])
        .group_by("qid", maintain_order=True)
        .agg(pl.col("pid"))
    )
    retrieved = dict(zip(top["qid"].to_list(), top["pid"].to_list()))
    C, U, human = {}, {}, {}
    for qid, hp in zip(queries["qid"].to_list(), queries["human_pids"].to_list()):
        c = list(retrieved.get(qid, []))
        C[qid] = c
        U[qid] = c + [p for p in dict.fromkeys(hp) if p not in set(c)]
        human[qid] = list(dict.fromkeys(hp))
    return Candidates(C, U, human)


def order_gold(gold: pl.DataFrame, cands: Candidates) -> dict[str, list[str]]:
    """Gold pids per query, in the order they have in U (so prompts are canonical)."""
    chosen: dict[str, set[str]] = {}
    for qid, pid in zip(gold["qid"].to_list(), gold["pid"].to_list()):
        chosen.setdefault(qid, set()).add(pid)
    return {qid: [p for p in u if p in chosen.get(qid, ())] for qid, u in cands.U.items()}


def context_requests(
    context: str, cands: Candidates, gold: pl.DataFrame | None = None
) -> list[tuple[str, tuple[str, ...]]]:
    """The (qid, passage ids) calls that make up ``context``, in query order."""
    if context == "none":
        return [(q, ()) for q in cands.U]
    if context == "single":
        return [(q, (p,)) for q, u in cands.U.items() for p in u]
    if context in ("topk", "union", "human"):
        lists = {"topk": cands.C, "union": cands.U, "human": cands.human}[context]
        return [(q, tuple(pids)) for q, pids in lists.items()]
    if GOLD_CONTEXT.match(context):
        if gold is None:
            raise ValueError(f"context '{context}' needs a gold set")
        return [(q, tuple(pids)) for q, pids in order_gold(gold, cands).items()]
    raise ValueError(f"unknown answer context '{context}'")


def load_passages(path: str, pids: set[str]) -> dict[str, Passage]:
    """Read only the passages in ``pids`` from a (possibly huge) passages.parquet."""
    df = pl.scan_parquet(path).filter(pl.col("pid").is_in(list(pids))).collect()
    found = {r["pid"]: Passage(r["pid"], r["title"], r["text"]) for r in df.iter_rows(named=True)}
    missing = pids - found.keys()
    if missing:
        raise KeyError(f"{path}: {len(missing)} passage id(s) not in the corpus, e.g. {sorted(missing)[:3]}")
    return found


def answer_contexts(
    requests: Mapping[str, Sequence[tuple[str, tuple[str, ...]]]],
    queries: pl.DataFrame,
    passages: Mapping[str, Passage],
    prompts: Mapping,
    render: Callable[[str], str],
    generate: Callable[[list[str]], list[str]],
) -> dict[str, pl.DataFrame]:
    """Answer every request of every context in ONE generation call and score it with has_answer.

    ``render`` turns an instruction into the model's prompt string (chat template or completion);
    ``generate`` maps prompt strings to outputs (normally the generation store, which deduplicates
    across contexts: ``union`` equals ``topk`` whenever the human passages were retrieved).
    """
    info = {r["qid"]: r for r in queries.select("qid", "question", "answers", "task").iter_rows(named=True)}
    flat = [(ctx, qid, pids) for ctx, reqs in requests.items() for qid, pids in reqs]
    texts = [
        render(answer_prompt(prompts, info[qid]["task"], info[qid]["question"], [passages[p] for p in pids]))
        for _, qid, pids in flat
    ]
    outputs = generate(texts)
    rows: dict[str, list[tuple]] = {ctx: [] for ctx in requests}
    for (ctx, qid, pids), out in zip(flat, outputs, strict=True):
        rows[ctx].append((qid, list(pids), out, has_answer(out, info[qid]["answers"])))
    return {ctx: pl.DataFrame(r, schema=ANSWERS_SCHEMA, orient="row") for ctx, r in rows.items()}
