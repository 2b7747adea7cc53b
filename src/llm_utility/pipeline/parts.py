"""The gather of a model job run in query parts: its parts' tables concatenated, in part order, into
the tables one job of the whole dataset writes (``workflow.parts``: parts are contiguous blocks of
the query order, so the result is row for row the unsharded table)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import polars as pl

from ..io import write_parquet

_log = logging.getLogger("llm_utility")


def gather_parts_job(
    *, parts: Mapping[str, Sequence[str]], outputs: Mapping[str, str], log: logging.Logger = _log
) -> dict[str, pl.DataFrame]:
    """For each output key, the Parquet tables of ``parts[key]`` (in part order) concatenated into
    ``outputs[key]``. Every part must have the same columns and types (they come from one rule);
    a part that differs stops the job naming both files."""
    missing = sorted(set(outputs) - set(parts))
    if missing:
        raise KeyError(f"no parts given for output(s) {missing}")
    tables = {}
    for key, path in outputs.items():
        frames = [pl.read_parquet(p) for p in parts[key]]
        if not frames:
            raise ValueError(f"{key}: no part to gather into {path}")
        for p, frame in zip(parts[key][1:], frames[1:], strict=True):
            if frame.schema != frames[0].schema:
                raise ValueError(
                    f"{p}: columns {dict(frame.schema)} differ from {parts[key][0]}'s {dict(frames[0].schema)}"
                )
        table = pl.concat(frames, how="vertical")
        write_parquet(table, path)
        tables[key] = table
        log.info("%s: %d rows from %d parts", key, table.height, len(frames))
    return tables
