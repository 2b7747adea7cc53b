"""Answer and utility metrics.

``has_answer`` follows DPR's ``SimpleTokenizer`` semantics (the paper's answer metric); the set and
ranking metrics follow the paper's conventions (docs/method.md, "The formulas").
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache

import regex

# DPR's SimpleTokenizer: runs of letters/digits/marks are words, every other non-space,
# non-control character is a token of its own.
_TOKEN = regex.compile(
    r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE
)


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


def _occurrences(tokens: Sequence[str], phrase: Sequence[str]) -> list[tuple[int, int]]:
    n = len(phrase)
    return [(i, i + n) for i in range(len(tokens) - n + 1) if tokens[i : i + n] == tuple(phrase)]


def stated_verdicts(text: str, synonyms: Mapping[str, Sequence[str]] | None = None) -> set[str]:
    """The verdict labels (``FACT_LABELS``) that ``text`` states.

    A label is stated when it, or one of its ``synonyms`` (e.g. ``{"SUPPORTS": ["yes", "true"]}``),
    occurs as whole words, case-insensitively (DPR tokens, so "SUPPORTS." and "Supports" count and
    "SUPPORTSX" does not). A match inside a longer match of the other label does not count, so with
    ``"not true"`` as a REFUTES synonym, "not true" states REFUTES only.
    """
    tokens = dpr_tokens(text)
    synonyms = synonyms or {}
    matches = [
        (start, end, label)
        for label in FACT_LABELS
        for phrase in _phrases((label, *synonyms.get(label, ())))
        for start, end in _occurrences(tokens, phrase)
    ]
    return {
        label
        for start, end, label in matches
        if not any(s <= start and end <= e and (e - s) > (end - start) for s, e, _ in matches)
    }


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


# ---------------------------------------------------------------------------------------------------
# Set and ranking metrics of utility judgments (paper Tables 2, 4 and 8; docs/method.md "The formulas").
# ``selected``/``rankings`` and ``gold`` map a qid to pids; the queries are always gold's keys.


def _mean(values) -> float:
    """Mean of ``values``; NaN (not an exception) over zero values."""
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def set_metrics_per_query(
    selected: Mapping[str, Collection[str]], gold: Mapping[str, Collection[str]], unparsed: Collection[str] = ()
):
    """Per-query set metrics of a selection against the gold sets, in gold's query order.

    Returns a polars DataFrame with one row per query of ``gold``: qid, n_gold, n_selected,
    precision, recall, f1 (null when the gold set is empty; precision and F1 are 0 when nothing is
    selected), correct_empty (null when the gold set is not empty; 1.0 when nothing was selected and
    the output parsed, else 0.0) and parsed. ``unparsed`` names the queries whose output (or, for a
    pointwise method, one of its outputs) did not parse: such a query is never a correct rejection,
    and its unparsed outputs select nothing, so an unparsed listwise output is a miss for precision
    and recall. A query missing from ``selected`` selected nothing; queries only in ``selected``
    are ignored; repeated pids count once.
    """
    import polars as pl

    unparsed = set(unparsed)
    rows = []
    for qid, gold_pids in gold.items():
        g, s = set(gold_pids), set(selected.get(qid, ()))
        parsed = qid not in unparsed
        if g:
            hits = len(g & s)
            p = hits / len(s) if s else 0.0
            r = hits / len(g)
            f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
            rows.append((qid, len(g), len(s), p, r, f1, None, parsed))
        else:
            rows.append((qid, 0, len(s), None, None, None, float(parsed and not s), parsed))
    schema = {
        "qid": pl.String,
        "n_gold": pl.Int64,
        "n_selected": pl.Int64,
        "precision": pl.Float64,
        "recall": pl.Float64,
        "f1": pl.Float64,
        "correct_empty": pl.Float64,
        "parsed": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def set_metrics(
    selected: Mapping[str, Collection[str]], gold: Mapping[str, Collection[str]], unparsed: Collection[str] = ()
) -> dict:
    """Selection quality against the gold sets, the paper's way (Tables 2 and 8).

    On queries with a non-empty gold set: ``precision`` and ``recall`` are per-query values averaged
    (precision is 0 when nothing is selected), ``f1`` is the harmonic mean of those two averages (the
    paper's convention; 0 when both are 0) and ``f1_per_query`` the mean of per-query F1. On queries
    with an empty gold set: ``accuracy_empty`` is the share where nothing was selected and the output
    parsed (an output that does not parse is never a correct rejection; ``unparsed`` names those
    queries, see ``set_metrics_per_query``). ``n_nonempty``/``n_empty`` count the two sides,
    ``avg_selected_nonempty``/``avg_selected_empty`` are the mean number of passages selected on
    each, and ``unparsed_nonempty``/``unparsed_empty`` the share of each side's queries whose output
    did not parse. A mean over zero queries is NaN.
    """
    per_query = set_metrics_per_query(selected, gold, unparsed)
    nonempty = per_query.filter(per_query["n_gold"] > 0)
    empty = per_query.filter(per_query["n_gold"] == 0)
    precision = _mean(nonempty["precision"])
    recall = _mean(nonempty["recall"])
    if precision != precision or recall != recall:  # NaN: no non-empty gold set
        f1 = float("nan")
    else:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "f1_per_query": _mean(nonempty["f1"]),
        "accuracy_empty": _mean(empty["correct_empty"]),
        "n_nonempty": nonempty.height,
        "n_empty": empty.height,
        "avg_selected_nonempty": _mean(nonempty["n_selected"]),
        "avg_selected_empty": _mean(empty["n_selected"]),
        "unparsed_nonempty": _mean(float(not p) for p in nonempty["parsed"]),
        "unparsed_empty": _mean(float(not p) for p in empty["parsed"]),
    }


def ranking_metrics_per_query(rankings: Mapping[str, Sequence[str]], gold: Mapping[str, Collection[str]], k: int = 5):
    """Per-query NDCG@k and Recall@k of rankings, gold as binary relevance, through trec_eval.

    Only queries with a non-empty gold set get a row (in gold's order); a query missing from
    ``rankings`` (or ranking nothing) scores 0. A ranking's repeated pids count at their first place.
    trec_eval orders documents by score and breaks ties by document id, never by input order, so the
    rank order becomes strictly decreasing integer scores. Returns a polars DataFrame (qid, ndcg,
    recall).
    """
    import ir_measures
    import polars as pl
    from ir_measures import R, nDCG

    if k < 1:
        raise ValueError(f"ranking metrics need a cutoff k >= 1, got {k}")
    qrels, run = {}, {}
    for qid, gold_pids in gold.items():
        if len(gold_pids) == 0:
            continue
        qrels[str(qid)] = {str(p): 1 for p in gold_pids}
        ranked = list(dict.fromkeys(str(p) for p in rankings.get(qid, ())))
        if ranked:
            run[str(qid)] = {pid: float(len(ranked) - i) for i, pid in enumerate(ranked)}
    ndcg_at, recall_at = nDCG @ k, R @ k
    values: dict[tuple[str, object], float] = {}
    if run:
        # The pytrec_eval provider (trec_eval's C code) explicitly, whatever else ir-measures finds.
        for m in ir_measures.pytrec_eval.iter_calc([ndcg_at, recall_at], qrels, run):
            values[(m.query_id, m.measure)] = float(m.value)
    rows = [(q, values.get((q, ndcg_at), 0.0), values.get((q, recall_at), 0.0)) for q in qrels]
    return pl.DataFrame(rows, schema={"qid": pl.String, "ndcg": pl.Float64, "recall": pl.Float64}, orient="row")


def ranking_metrics(rankings: Mapping[str, Sequence[str]], gold: Mapping[str, Collection[str]], k: int = 5) -> dict:
    """NDCG@k and Recall@k (keys ``ndcg``, ``recall``) averaged over queries with a non-empty gold set.

    ``rankings`` maps qid to pids in rank order; identifiers a method left out must already be
    appended in retrieval order. NaN when no query has a non-empty gold set.
    See ``ranking_metrics_per_query``.
    """
    per_query = ranking_metrics_per_query(rankings, gold, k)
    return {"ndcg": _mean(per_query["ndcg"]), "recall": _mean(per_query["recall"])}
