"""Answer and utility metrics.

``has_answer`` follows DPR's ``SimpleTokenizer`` semantics (the paper's answer metric); the set and
ranking metrics follow the paper's conventions (DESIGN.md, "Method facts").
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import lru_cache

import regex

# DPR's SimpleTokenizer: runs of letters/digits/marks are words, every other non-space,
# non-control character is a token of its own.
_TOKEN = regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)


@lru_cache(maxsize=65536)
def dpr_tokens(text: str) -> tuple[str, ...]:
    """NFD-normalise ``text``, split it into DPR tokens and lowercase them."""
    text = unicodedata.normalize("NFD", text)
    return tuple(m.group().lower() for m in _TOKEN.finditer(text))


def _is_word(token: str) -> bool:
    return _TOKEN.fullmatch(token) is not None and _TOKEN.fullmatch(token).group(1) is not None


def has_answer(text: str, answers: Sequence[str]) -> bool:
    """True when some answer's token sequence occurs contiguously in ``text``'s tokens.

    An answer with no word token (empty, whitespace or punctuation only) never matches: DPR's own
    loop would match an empty answer trivially at position 0, and a lone "." matches any sentence.
    """
    tokens = dpr_tokens(text)
    for answer in answers:
        ans = dpr_tokens(answer)
        n = len(ans)
        if n == 0 or n > len(tokens) or not any(_is_word(t) for t in ans):
            continue
        first = ans[0]
        for i in range(len(tokens) - n + 1):
            if tokens[i] == first and tokens[i : i + n] == ans:
                return True
    return False


def retrieval_quality(queries, run, passages, k: int):
    """Per-query answer recall@k and human-passage recall@k of a retrieval run.

    answer_recall: 1 when some of the top-k passages (``{title} {text}``) has_answer the query's
    answers (DPR's top-k accuracy); human_recall: share of the query's human passages found in the
    top-k (null when the query has none). ``passages`` needs only the retrieved pids.
    Returns a polars DataFrame (qid, answer_recall, human_recall).
    """
    import polars as pl

    text = dict(zip(passages["pid"].to_list(), (passages["title"] + " " + passages["text"]).to_list()))
    top = run.filter(pl.col("rank") <= k).sort(["qid", "rank"]).group_by("qid").agg(pl.col("pid"))
    retrieved = dict(zip(top["qid"].to_list(), top["pid"].to_list()))
    rows = []
    for qid, answers, human, task in queries.select("qid", "answers", "human_pids", "task").iter_rows():
        pids = retrieved.get(qid, [])
        # Claims' labels (SUPPORTS/REFUTES) never occur in passages: answer recall is undefined there.
        ans = None if task == "fact" else float(any(has_answer(text[p], answers) for p in pids))
        hum = len(set(human) & set(pids)) / len(set(human)) if human else None
        rows.append((qid, ans, hum))
    return pl.DataFrame(
        rows, schema={"qid": pl.String, "answer_recall": pl.Float64, "human_recall": pl.Float64}, orient="row"
    )
