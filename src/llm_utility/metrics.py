"""Answer and utility metrics.

``has_answer`` follows DPR's ``SimpleTokenizer`` semantics (the paper's answer metric); the set and
ranking metrics follow the paper's conventions (DESIGN.md, "Method facts").
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
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


FACT_LABELS = ("SUPPORTS", "REFUTES")


@lru_cache(maxsize=1024)
def _phrases(words: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    return tuple(p for p in (dpr_tokens(w) for w in words) if p)


def _contains(tokens: Sequence[str], phrase: Sequence[str]) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == tuple(phrase) for i in range(len(tokens) - n + 1))


def stated_verdicts(text: str, synonyms: Mapping[str, Sequence[str]] | None = None) -> set[str]:
    """The verdict labels (``FACT_LABELS``) that ``text`` states.

    A label is stated when it, or one of its ``synonyms`` (e.g. ``{"SUPPORTS": ["yes", "true"]}``),
    occurs as whole words, case-insensitively (DPR tokens, so "SUPPORTS." and "Supports" count and
    "SUPPORTSX" does not).
    """
    tokens = dpr_tokens(text)
    synonyms = synonyms or {}
    stated = set()
    for label in FACT_LABELS:
        for phrase in _phrases((label, *synonyms.get(label, ()))):
            if _contains(tokens, phrase):
                stated.add(label)
                break
    return stated


def score_answer(
    output: str, answers: Sequence[str], task: str, synonyms: Mapping[str, Sequence[str]] | None = None
) -> bool:
    """Whether ``output`` answers correctly: ``has_answer`` for ``qa``; for ``fact`` (claims), true
    only when the output states exactly one verdict and it is the gold one (``stated_verdicts``), so
    an output that echoes "SUPPORTS or REFUTES" is wrong for both labels."""
    if task == "qa":
        return has_answer(output, answers)
    if task == "fact":
        gold = {a.strip().upper() for a in answers}
        unknown = gold - set(FACT_LABELS)
        if unknown:
            raise ValueError(f"fact answers must be among {FACT_LABELS}, got {sorted(unknown)}")
        stated = stated_verdicts(output, synonyms)
        return len(stated) == 1 and stated <= gold
    raise ValueError(f"unknown task {task!r}; expected 'qa' or 'fact'")


def retrieval_quality(queries, retrieved: Mapping[str, Sequence[str]], texts: Mapping[str, str]):
    """Per-query answer recall and human-passage recall of the retrieved lists.

    ``retrieved`` maps each qid to its top-k pids, ``texts`` each of those pids to its rendered text
    (``{title} {text}``). answer_recall: 1 when some retrieved passage has_answer the query's answers
    (DPR's top-k accuracy); human_recall: share of the query's human passages among the retrieved
    (null when the query has none). Returns a polars DataFrame (qid, answer_recall, human_recall).
    """
    import polars as pl

    rows = []
    for qid, answers, human, task in queries.select("qid", "answers", "human_pids", "task").iter_rows():
        pids = retrieved.get(qid, [])
        # Claims' labels (SUPPORTS/REFUTES) never occur in passages: answer recall is undefined there.
        ans = None if task == "fact" else float(any(has_answer(texts[p], answers) for p in pids))
        hum = len(set(human) & set(pids)) / len(set(human)) if human else None
        rows.append((qid, ans, hum))
    return pl.DataFrame(
        rows, schema={"qid": pl.String, "answer_recall": pl.Float64, "human_recall": pl.Float64}, orient="row"
    )
