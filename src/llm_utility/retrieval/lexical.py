"""Lexical retrieval: BM25 through ``bm25s`` (sparse matrices of precomputed BM25 term scores), a
baseline beside the dense retrievers (config ``retrievers.<name>.backend: bm25``).

Passages are rendered as for the dense encoders (``{title} {text}``) and tokenized by ``bm25s``:
lowercased, split with a regex (scikit-learn's ``(?u)\\b\\w\\w+\\b`` by default: words of two or more
word characters), stopwords dropped (``bm25s``' English list, NLTK's), and stemmed with a Snowball
stemmer (``PyStemmer``). Queries get the same treatment, so the index and the queries share one
vocabulary; a query term the corpus never uses scores nothing.

The index is a folder (``bm25s``' own files, loaded memory-mapped for search) plus
``spec.json``, which records the settings it was built with: a search with other tokenization
settings than the index's stops with both named, instead of silently scoring nothing.

Ranking is deterministic: score descending, ties by corpus row; a passage that shares no term with
the query (score 0) is not retrieved, so a query can get fewer than ``k`` hits.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

BACKEND = "bm25"
SPEC_FILE = "spec.json"
# bm25s' term-frequency and idf variants ("lucene" is Lucene's BM25, as in Anserini and Pyserini).
METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")


@dataclass(frozen=True)
class BM25Spec:
    """A validated BM25 retriever spec (``config/schema.yaml``, ``retrievers``; other keys ignored).

    Defaults are Anserini's and Pyserini's BM25 baseline (k1 0.9, b 0.4), the usual lexical
    baseline on Wikipedia and MS MARCO passages.
    """

    k1: float = 0.9
    b: float = 0.4
    method: str = "lucene"
    lowercase: bool = True
    token_pattern: str = r"(?u)\b\w\w+\b"
    stopwords: str | None = "english"
    stemmer: str | None = "english"

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> BM25Spec:
        known = {f.name for f in fields(cls)}
        out = cls(**{k: v for k, v in spec.items() if k in known})
        if out.method not in METHODS:
            raise ValueError(f"unknown BM25 method {out.method!r}; expected one of {METHODS}")
        if out.stemmer is not None:
            import Stemmer

            if out.stemmer not in Stemmer.algorithms():
                raise ValueError(f"unknown stemmer {out.stemmer!r}; PyStemmer has {sorted(Stemmer.algorithms())}")
        return out

    def tokenization(self) -> dict[str, Any]:
        """The settings that decide a text's tokens (an index and its queries must share them)."""
        return {k: v for k, v in asdict(self).items() if k not in ("k1", "b", "method")}


def spec_keys() -> tuple[str, ...]:
    """The config keys a BM25 retriever reads."""
    return tuple(f.name for f in fields(BM25Spec))


def tokenize(texts: Sequence[str], spec: BM25Spec) -> list[list[str]]:
    """Each text's tokens (strings, stemmed) under ``spec``'s tokenization."""
    import bm25s

    stemmer = None
    if spec.stemmer is not None:
        import Stemmer

        stemmer = Stemmer.Stemmer(spec.stemmer)
    return bm25s.tokenize(
        list(texts),
        lower=spec.lowercase,
        token_pattern=spec.token_pattern,
        stopwords=spec.stopwords if spec.stopwords is not None else [],
        stemmer=stemmer,
        return_ids=False,
        show_progress=False,
    )


def passage_texts_of(passages_path: str | os.PathLike) -> list[str]:
    """``{title} {text}`` of every corpus row, in row order (the dense encoders' rendering)."""
    import pyarrow.parquet as pq

    from .encoders import passage_texts

    texts: list[str] = []
    for batch in pq.ParquetFile(passages_path).iter_batches(columns=["title", "text"]):
        texts += passage_texts(batch)
    return texts


def build_bm25_index(passages_path: str | os.PathLike, out_dir: str | os.PathLike, spec: Mapping[str, Any]) -> int:
    """Index every passage of ``passages.parquet`` (row i is document i) into the folder ``out_dir``;
    return the number of passages. The folder appears only once complete (built beside it, then
    renamed), so a killed build leaves nothing a later run could mistake for an index."""
    import bm25s

    parsed = BM25Spec.from_dict(spec)
    texts = passage_texts_of(passages_path)
    if not texts:
        raise ValueError(f"{passages_path}: no passages to index")
    tokens = tokenize(texts, parsed)
    del texts
    retriever = bm25s.BM25(k1=parsed.k1, b=parsed.b, method=parsed.method)
    # Terms numbered in sorted order: from strings, bm25s numbers them in a set's order, which
    # Python's hash seed changes from run to run, and the index files with it (not the scores).
    vocab = {term: i for i, term in enumerate(sorted({term for doc in tokens for term in doc}))}
    retriever.index(([[vocab[term] for term in doc] for doc in tokens], vocab), show_progress=False)
    n_terms = len(retriever.vocab_dict)
    del tokens
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        retriever.save(str(tmp), show_progress=False)
        record = {
            **asdict(parsed),
            "passages": retriever.scores["num_docs"],
            "terms": n_terms,
            "bm25s": bm25s.__version__,
        }
        (tmp / SPEC_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("BM25 index of %d passages, %d terms: %s", record["passages"], n_terms, out)
    return int(record["passages"])


def read_index_spec(index_dir: str | os.PathLike) -> dict[str, Any]:
    path = Path(index_dir) / SPEC_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{index_dir}: not a BM25 index of this workflow (no {SPEC_FILE}); rebuild it")
    return json.loads(path.read_text(encoding="utf-8"))


def top_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The rows of the ``k`` highest positive scores, by score descending, ties by row."""
    positive = np.flatnonzero(scores > 0)
    if len(positive) > k:
        kth = np.partition(scores[positive], len(positive) - k)[len(positive) - k]
        above = positive[scores[positive] > kth]
        tied = positive[scores[positive] == kth][: k - len(above)]
        positive = np.concatenate([above, tied])
    return positive[np.lexsort((positive, -scores[positive]))]


def bm25_search(
    index_dir: str | os.PathLike, queries: Sequence[str], k: int, spec: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` BM25 search; ``(scores, rows)`` of shape (n_queries, k), -1 and 0 padding queries
    with fewer hits (as ``retrieval.index.search``). ``spec``'s tokenization must be the index's."""
    import bm25s

    parsed = BM25Spec.from_dict(spec)
    built = read_index_spec(index_dir)
    recorded = BM25Spec.from_dict(built)
    if recorded.tokenization() != parsed.tokenization():
        raise ValueError(
            f"{index_dir} was built with tokenization {recorded.tokenization()}, the retriever asks for "
            f"{parsed.tokenization()}: rebuild the index (rule bm25_index)"
        )
    if (recorded.k1, recorded.b, recorded.method) != (parsed.k1, parsed.b, parsed.method):
        raise ValueError(
            f"{index_dir} holds BM25 scores for k1={recorded.k1}, b={recorded.b}, method={recorded.method}; "
            f"the retriever asks for k1={parsed.k1}, b={parsed.b}, method={parsed.method}: rebuild the index"
        )
    retriever = bm25s.BM25.load(str(index_dir), mmap=True, show_progress=False)
    scores_out = np.zeros((len(queries), k), dtype=np.float32)
    rows_out = np.full((len(queries), k), -1, dtype=np.int64)
    for i, terms in enumerate(tokenize(queries, parsed)):
        known = retriever.get_tokens_ids(terms)
        if not known:
            continue
        scores = np.asarray(retriever.get_scores_from_ids(known), dtype=np.float32)
        rows = top_rows(scores, k)
        scores_out[i, : len(rows)] = scores[rows]
        rows_out[i, : len(rows)] = rows
    return scores_out, rows_out
