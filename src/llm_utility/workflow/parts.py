"""Query parts of a dataset's model jobs (the count is config ``datasets.<name>.shards``; corpus
shards are another thing, ``corpora.<name>.shards``): which queries part i of n holds, its name in
paths and wildcards, and the gather of per-part tables. A dataset with ``datasets.<name>.shards: n``
gets each model job n times, one per part, so that no job outlives a scheduler's time limit; a
gather job concatenates the parts' tables, in part order, into the table one job would have written.
``shards`` may instead map rule names to counts (``{default: 2, judge_thinking: 37}``), so that one
long rule does not multiply the dataset's other jobs (and their model loads).

Parts are contiguous blocks of the dataset's query order (the order of ``queries.parquet``, which
every answer, judgment and ranking table follows), so the gathered table is row for row the
unsharded one. Pure functions of their arguments; no Snakemake.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_PART = re.compile(r"^(\d+)-of-(\d+)$")

# A query part's folder in a model job's paths, right after the dataset's
# (results/{dataset}/parts/2-of-4/{llm}/...): the `part_dir` wildcard, empty for a whole-dataset job.
PART_DIR = "parts/{part}/"


def shard_count(shards: Any, rule: str) -> int:
    """``rule``'s query parts under a dataset's ``shards`` value: the integer itself (null: 1), or
    from a mapping its ``rule`` entry, else its ``default``, else 1."""
    if isinstance(shards, Mapping):
        return int(shards.get(rule, shards.get("default", 1)))
    return int(shards or 1)


def shards_key(shards: Any, dataset: str, rule: str | None = None) -> str:
    """The config key that sets ``rule``'s shards of ``dataset`` (for messages): ``datasets.nq.shards``
    for an integer, ``datasets.nq.shards.judge_thinking`` (or ``.default``) in a mapping."""
    key = f"datasets.{dataset}.shards"
    if isinstance(shards, Mapping):
        rule = rule or "default"
        return f"{key}.{rule if rule in shards else 'default'}"
    return key


def part_name(index: int, count: int) -> str:
    """The name of part ``index`` (1-based) of ``count`` in paths and the ``part`` wildcard: ``2-of-4``."""
    if not 1 <= index <= count:
        raise ValueError(f"part {index} of {count}: a part is numbered 1 to {count}")
    return f"{index}-of-{count}"


def part_names(count: int) -> list[str]:
    """Every part of a dataset with ``count`` shards, in order; none when it is not sharded (1)."""
    return [part_name(i, count) for i in range(1, count + 1)] if count > 1 else []


def part_dir(part: str | None) -> str:
    """The ``part_dir`` wildcard of part ``part`` (``2-of-4`` -> ``parts/2-of-4/``; none: "")."""
    return PART_DIR.format(part=part) if part else ""


def part_of_dir(folder: str | None) -> str | None:
    """The part a ``part_dir`` wildcard names (``parts/2-of-4/`` -> ``2-of-4``); None when empty."""
    if not folder:
        return None
    prefix, suffix = PART_DIR.split("{part}")
    if not (folder.startswith(prefix) and folder.endswith(suffix)):
        raise ValueError(f"'{folder}' is not a part folder ({PART_DIR})")
    return folder[len(prefix) : -len(suffix)]


def job_wildcards(wildcards: Mapping[str, str]) -> dict[str, str]:
    """A model job's wildcards as the plan lists its jobs: its ``part_dir`` as ``part`` (absent for
    a whole-dataset job)."""
    out = {k: v for k, v in wildcards.items() if k != "part_dir"}
    part = part_of_dir(wildcards.get("part_dir"))
    return {**out, "part": part} if part else out


def parse_part(name: str) -> tuple[int, int]:
    """(index, count) of a part name (``2-of-4`` -> (2, 4))."""
    match = _PART.match(name)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise ValueError(f"'{name}' is not a part name (<i>-of-<n>, 1 <= i <= n)")
    return int(match[1]), int(match[2])


def part_bounds(total: int, index: int, count: int) -> tuple[int, int]:
    """[start, stop) of part ``index`` (1-based) of ``count`` over ``total`` items: contiguous
    blocks in order, every item in exactly one, sizes differing by at most one (the first
    ``total % count`` parts hold one more)."""
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"part {index} of {count}: a part is numbered 1 to {count}")
    size, extra = divmod(total, count)
    start = (index - 1) * size + min(index - 1, extra)
    return start, start + size + (1 if index <= extra else 0)


def query_part(qids: Sequence[str], index: int, count: int, key: str = "shards") -> list[str]:
    """The query ids part ``index`` of ``count`` holds: a contiguous block of ``qids`` (the
    dataset's query order). More parts than queries would leave a part empty: a ValueError naming
    the config ``key`` (``datasets.<name>.shards``)."""
    if count > len(qids):
        raise ValueError(
            f"{key} is {count}, more than the dataset's {len(qids)} queries: lower it to at most {len(qids)}"
        )
    start, stop = part_bounds(len(qids), index, count)
    return list(qids[start:stop])


def part_queries(
    queries: str, part: str | None, dataset: str, rule: str | None = None, shards: Any = None
) -> list[str] | None:
    """The query ids a model job of ``part`` covers, read from the dataset's ``queries`` table (its
    qid column, in order); None for an unsharded job (``part`` None or empty: every query). ``rule``
    and the dataset's ``shards`` value only name the key in the error of a part too many."""
    if not part:
        return None
    import polars as pl

    index, count = parse_part(part)
    qids = pl.read_parquet(queries, columns=["qid"])["qid"].to_list()
    return query_part(qids, index, count, key=shards_key(shards, dataset, rule))


def job_part_queries(job: Any) -> list[str] | None:
    """``part_queries`` for a model job's ``snakemake`` object: its queries input, its ``part_dir``
    and ``dataset`` wildcards, its rule and the dataset's ``shards`` (None for a whole-dataset job)."""
    dataset = job.wildcards.dataset
    return part_queries(
        job.input.queries,
        part_of_dir(job.wildcards.get("part_dir")),
        dataset,
        rule=job.rule,
        shards=job.config["datasets"][dataset].get("shards"),
    )
