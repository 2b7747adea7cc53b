"""Human annotations mapped onto corpus passages, and the coverage report that accounts for each one.

Four documented rules, chosen by the corpus and the annotations (docs/data.md, "Human passages"):

- ``span`` (a KILT-derived corpus, which has ``spans.parquet``): a KILT provenance maps to every passage
  of the same page (``wikipedia_id``) whose span overlaps the provenance span, comparing positions as
  (paragraph, character) pairs, ends exclusive; ``start_character``/``end_character`` of -1 mean
  whole paragraphs. Exact: no text comparison is involved.
- ``title-text`` (any corpus with titles, e.g. DPR's ``psgs_w100``): an annotation with a title and a
  text maps to every passage with the same title (exactly, else case-insensitively) that shares a
  run of ``min(8, len(text))`` consecutive words with the text (DPR tokens, lowercased). A sentence
  cut by a passage boundary therefore maps to both passages. KILT provenance gets its text from the
  knowledge source page (``kilt.span_text``); 2Wiki supporting facts carry theirs.
- ``text`` (MS MARCO's collection): a selected passage maps to the collection passages whose text is
  equal after collapsing whitespace.
- ``pid`` (MS MARCO's collection, passage-ranking qrels): a qrel names its collection passage; it maps
  to that passage when the corpus holds it.

Every annotation is either mapped or counted as unmapped with a reason; ``coverage_report`` writes
those counts, so no human passage is lost silently.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

import polars as pl

from llm_utility.metrics import dpr_tokens
from llm_utility.schemas import HUMAN_SCHEMA, UNMAPPED_SCHEMA

NGRAM = 8

# Reasons an annotation maps to no passage.
NO_PAGE_ID = "no wikipedia_id"
NO_SPAN = "no paragraph span"
PAGE_NOT_IN_CORPUS = "page not in corpus"
SPAN_OUTSIDE = "span covers no passage (a heading, or beyond the page)"
NO_TEXT = "no evidence text"
TITLE_NOT_IN_CORPUS = "title not in corpus"
TEXT_NOT_UNDER_TITLE = "text not found in the passages of that title"
TEXT_NOT_IN_CORPUS = "text not in corpus"
PID_NOT_IN_CORPUS = "passage id not in corpus"


def _result(mapped: list[tuple], unmapped: list[tuple]) -> tuple[pl.DataFrame, pl.DataFrame]:
    human = pl.DataFrame(mapped, schema=HUMAN_SCHEMA, orient="row").unique(maintain_order=True)
    return human, pl.DataFrame(unmapped, schema=UNMAPPED_SCHEMA, orient="row")


def map_by_span(evidence: pl.DataFrame, spans_path: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rule ``span``: KILT provenance onto a KILT-derived corpus (reads only the pages needed)."""
    mapped, unmapped = [], []
    pages = evidence["wikipedia_id"].drop_nulls().unique().to_list()
    spans = pl.scan_parquet(spans_path).filter(pl.col("wikipedia_id").is_in(pages)).collect()
    by_page: dict[str, list[tuple]] = defaultdict(list)
    for pid, wid, sp, sc, ep, ec in spans.select(
        "pid", "wikipedia_id", "start_paragraph", "start_char", "end_paragraph", "end_char"
    ).iter_rows():
        by_page[wid].append((pid, (sp, sc), (ep, ec)))
    for r in evidence.iter_rows(named=True):
        key = (r["qid"], r["ref"])
        if r["wikipedia_id"] is None:
            unmapped.append((*key, NO_PAGE_ID))
            continue
        if r["start_paragraph"] is None or r["end_paragraph"] is None:
            unmapped.append((*key, NO_SPAN))
            continue
        if r["wikipedia_id"] not in by_page:
            unmapped.append((*key, PAGE_NOT_IN_CORPUS))
            continue
        sc = r["start_char"] if r["start_char"] is not None and r["start_char"] >= 0 else 0
        ec = r["end_char"] if r["end_char"] is not None and r["end_char"] >= 0 else math.inf
        start, end = (r["start_paragraph"], sc), (r["end_paragraph"], ec)
        if end <= start:  # an empty span still points at its position
            end = (start[0], start[1] + 1)
        hits = [pid for pid, p_start, p_end in by_page[r["wikipedia_id"]] if p_start < end and start < p_end]
        if hits:
            mapped.extend((*key, pid) for pid in hits)
        else:
            unmapped.append((*key, SPAN_OUTSIDE))
    return _result(mapped, unmapped)


def _ngrams(tokens: tuple[str, ...], n: int) -> set[tuple[str, ...]]:
    return {tokens[i : i + n] for i in range(len(tokens) - n + 1)}


def _fold_title(title: str) -> str:
    return " ".join(title.replace("_", " ").split()).casefold()


def map_by_title_text(evidence: pl.DataFrame, passages_path: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rule ``title-text`` (see the module doc); reads only the passages of the titles needed."""
    mapped, unmapped = [], []
    with_text = evidence.filter(pl.col("title").is_not_null())
    folded = {_fold_title(t) for t in with_text["title"].unique().to_list()}
    psg = (
        pl.scan_parquet(passages_path)
        .with_columns(folded=pl.col("title").str.replace_all("_", " ").str.to_lowercase())
        .filter(pl.col("folded").is_in(list(folded)))
        .select("pid", "title", "text")
        .collect()
    )
    exact: dict[str, list[tuple[str, tuple]]] = defaultdict(list)
    loose: dict[str, list[tuple[str, tuple]]] = defaultdict(list)
    for pid, title, text in psg.iter_rows():
        entry = (pid, tuple(t.lower() for t in dpr_tokens(text)))
        exact[title].append(entry)
        loose[_fold_title(title)].append(entry)
    for r in evidence.iter_rows(named=True):
        key = (r["qid"], r["ref"])
        if r["title"] is None:
            unmapped.append((*key, NO_PAGE_ID if r["wikipedia_id"] is None else TITLE_NOT_IN_CORPUS))
            continue
        candidates = exact.get(r["title"]) or loose.get(_fold_title(r["title"]))
        if not candidates:
            unmapped.append((*key, TITLE_NOT_IN_CORPUS))
            continue
        tokens = tuple(t.lower() for t in dpr_tokens(r["text"] or ""))
        if not tokens:
            unmapped.append((*key, NO_TEXT))
            continue
        n = min(NGRAM, len(tokens))
        grams = _ngrams(tokens, n)
        hits = [pid for pid, ptoks in candidates if grams & _ngrams(ptoks, n)]
        if hits:
            mapped.extend((*key, pid) for pid in hits)
        else:
            unmapped.append((*key, TEXT_NOT_UNDER_TITLE))
    return _result(mapped, unmapped)


def _collapse(col: pl.Expr) -> pl.Expr:
    return col.str.replace_all(r"\s+", " ").str.strip_chars()


def map_by_text(evidence: pl.DataFrame, passages_path: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rule ``text``: MS MARCO selected passages onto the collection (one streaming scan, a join)."""
    need = evidence.select("qid", "ref", norm=_collapse(pl.col("text").fill_null("")))
    texts = need["norm"].unique().to_list()
    found = (
        pl.scan_parquet(passages_path)
        .select("pid", norm=_collapse(pl.col("text")))
        .filter(pl.col("norm").is_in(texts))
        .collect()
    )
    hits = need.join(found, on="norm", how="inner")
    mapped = list(hits.select("qid", "ref", "pid").iter_rows())
    missing = need.join(found, on="norm", how="anti")
    unmapped = [(q, r, NO_TEXT if not n else TEXT_NOT_IN_CORPUS) for q, r, n in missing.iter_rows()]
    return _result(mapped, unmapped)


def map_by_pid(evidence: pl.DataFrame, passages_path: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rule ``pid``: qrels onto the collection they were judged in (one scan of the pid column)."""
    wanted = evidence["pid"].drop_nulls().unique().to_list()
    present = set(
        pl.scan_parquet(passages_path).select("pid").filter(pl.col("pid").is_in(wanted)).collect()["pid"].to_list()
    )
    mapped, unmapped = [], []
    for qid, ref, pid in evidence.select("qid", "ref", "pid").iter_rows():
        if pid in present:
            mapped.append((qid, ref, pid))
        else:
            unmapped.append((qid, ref, PID_NOT_IN_CORPUS))
    return _result(mapped, unmapped)


def add_span_texts(evidence: pl.DataFrame, pages: Iterable[Mapping]) -> pl.DataFrame:
    """Fill ``text`` of KILT provenance rows from knowledge-source ``pages`` (for rule ``title-text``)."""
    from .kilt import span_text

    wanted = defaultdict(list)
    for i, r in enumerate(evidence.iter_rows(named=True)):
        if r["wikipedia_id"] is not None and r["start_paragraph"] is not None and r["end_paragraph"] is not None:
            wanted[r["wikipedia_id"]].append(i)
    texts: list[str | None] = list(evidence["text"])
    titles: list[str | None] = list(evidence["title"])
    for page in pages:
        for i in wanted.get(str(page["wikipedia_id"]), []):
            r = evidence.row(i, named=True)
            sc = r["start_char"] if r["start_char"] is not None else -1
            ec = r["end_char"] if r["end_char"] is not None else -1
            texts[i] = span_text(page, r["start_paragraph"], sc, r["end_paragraph"], ec)
            titles[i] = titles[i] or page["wikipedia_title"]
    return evidence.with_columns(pl.Series("text", texts, dtype=pl.String), pl.Series("title", titles, dtype=pl.String))


def coverage_report(
    *,
    dataset: str,
    corpus: str,
    rule: str,
    queries: pl.DataFrame,
    evidence: pl.DataFrame,
    human: pl.DataFrame,
    unmapped: pl.DataFrame,
    dropped_queries: Mapping[str, int] | None = None,
    examples: int = 20,
) -> dict:
    """What happened to every annotation of the kept queries (the human_coverage.json document)."""
    kept = set(queries["qid"].to_list())
    evidence = evidence.filter(pl.col("qid").is_in(list(kept)))
    human = human.filter(pl.col("qid").is_in(list(kept)))
    unmapped = unmapped.filter(pl.col("qid").is_in(list(kept)))
    entries = evidence.height
    n_mapped = human.select("qid", "ref").unique().height
    per_query = human.group_by("qid").agg(pl.col("pid").n_unique().alias("n"))
    reasons = Counter(unmapped["reason"].to_list())
    return {
        "dataset": dataset,
        "corpus": corpus,
        "rule": rule,
        "queries": len(kept),
        "dropped_queries": dict(dropped_queries or {}),
        "queries_with_annotations": evidence["qid"].n_unique(),
        "queries_with_human_passages": per_query.height,
        "annotations": entries,
        "mapped": n_mapped,
        "unmapped": entries - n_mapped,
        "unmapped_reasons": dict(sorted(reasons.items())),
        "coverage": round(n_mapped / entries, 4) if entries else None,
        "human_passages": int(per_query["n"].sum()) if per_query.height else 0,
        "human_passages_per_query": round(float(per_query["n"].sum() or 0) / len(kept), 4) if kept else None,
        "unmapped_examples": unmapped.head(examples).to_dicts(),
    }
