"""TREC formats: qrels (``qid 0 docid relevance``) written from gold sets, and run files
(``qid Q0 docid rank score tag``) read from any retriever, with file:line errors."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence

from .local import DataFormatError


def format_qrels(judged: Mapping[str, Sequence[str]], relevant: Mapping[str, Iterable[str]]) -> str:
    """Qrels text: every judged passage of every query, relevance 1 when it is in ``relevant``."""
    lines = []
    for qid, pids in judged.items():
        positive = set(relevant.get(qid, ()))
        lines += [f"{qid} 0 {pid} {int(pid in positive)}" for pid in pids]
    return "\n".join(lines) + ("\n" if lines else "")


def read_qrels(path: str | os.PathLike) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """(judged pids per query, relevant pids per query) from a qrels file."""
    judged: dict[str, list[str]] = {}
    relevant: dict[str, set[str]] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 4 or not parts[3].lstrip("-").isdigit():
                raise DataFormatError(path, lineno, f"expected 'qid 0 docid relevance', found {line.strip()!r}")
            qid, _, pid, rel = parts
            judged.setdefault(qid, []).append(pid)
            relevant.setdefault(qid, set())
            if int(rel) > 0:
                relevant[qid].add(pid)
    return judged, relevant


def read_run(path: str | os.PathLike) -> dict[str, list[str]]:
    """Ranked docids per query from a TREC run file, ordered by score (descending; ties by rank).

    Each non-blank line is ``qid Q0 docid rank score tag``; a line with another number of fields, a
    non-numeric rank or score, or a docid repeated within a query stops with file and line.
    """
    entries: dict[str, list[tuple[float, int, str]]] = {}
    seen: dict[tuple[str, str], int] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 6:
                raise DataFormatError(
                    path, lineno, f"expected 6 fields 'qid Q0 docid rank score tag', found {len(parts)}"
                )
            qid, _, pid, rank, score, _ = parts
            try:
                rank_i, score_f = int(rank), float(score)
            except ValueError:
                raise DataFormatError(path, lineno, f"rank {rank!r} and score {score!r} must be numbers") from None
            if math.isnan(score_f):
                raise DataFormatError(path, lineno, "score is NaN")
            if (qid, pid) in seen:
                raise DataFormatError(
                    path, lineno, f"docid {pid!r} repeats for query {qid!r} (first on line {seen[qid, pid]})"
                )
            seen[qid, pid] = lineno
            entries.setdefault(qid, []).append((-score_f, rank_i, pid))
    if not entries:
        raise DataFormatError(path, None, "no run lines")
    return {qid: [pid for _, _, pid in sorted(rows)] for qid, rows in entries.items()}


def read_ranked(path: str | os.PathLike) -> dict[str, list[str]]:
    """Ranked docids per query from a run: a TREC run file (``read_run``) or the workflow's run
    table (``run.parquet``: qid, pid, rank, score; ordered by rank)."""
    if str(path).endswith(".parquet"):
        import polars as pl

        table = pl.read_parquet(path, columns=["qid", "pid", "rank"]).sort(["qid", "rank"])
        grouped = table.group_by("qid", maintain_order=True).agg(pl.col("pid"))
        return {str(qid): [str(p) for p in pids] for qid, pids in grouped.iter_rows()}
    return read_run(path)


def format_run(ranked: Mapping[str, Sequence[str]], tag: str) -> str:
    """A TREC run file's text from ranked docids per query (scores: descending from the list length)."""
    lines = [
        f"{qid} Q0 {pid} {i + 1} {len(pids) - i} {tag}" for qid, pids in ranked.items() for i, pid in enumerate(pids)
    ]
    return "\n".join(lines) + ("\n" if lines else "")
