"""Gold utilitarian passages (paper Eq. 1-2) and the known flag.

u_i = 1 iff correct(L(q, d_i)) > correct(L(q, ∅)): a passage is gold for an LLM when the LLM answers
correctly with that passage alone and did not without any (``correct`` is ``metrics.score_answer``:
the paper's has_answer for questions, the stated verdict for claims). A query is *known* when the
LLM answers it correctly with no passage (the paper's definition, Section 3.4), which also means its
gold set is empty.
"""

from __future__ import annotations

import polars as pl

from ..schemas import GOLD_SCHEMA
from .answers import Candidates


def known_flags(none_answers: pl.DataFrame) -> pl.DataFrame:
    """qid, known: whether the no-passage answer is correct."""
    return none_answers.select("qid", pl.col("correct").alias("known"))


def gold_sets(
    none_answers: pl.DataFrame, single_answers: pl.DataFrame, cands: Candidates, candidates: str
) -> pl.DataFrame:
    """Long table (qid, pid) of the gold passages among candidate set ``candidates`` ("C" or "U")."""
    known = dict(zip(none_answers["qid"].to_list(), none_answers["correct"].to_list()))
    helped = {
        (qid, pids[0])
        for qid, pids, ok in single_answers.select("qid", "pids", "correct").iter_rows()
        if ok and len(pids) == 1
    }
    rows = [
        (qid, pid)
        for qid, pool in cands.of(candidates).items()
        if not known[qid]
        for pid in pool
        if (qid, pid) in helped
    ]
    return pl.DataFrame(rows, schema=GOLD_SCHEMA, orient="row")
