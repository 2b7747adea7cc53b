"""Where a corpus or a query set comes from: the embedded worldfacts generator or the user's files.

Both functions return normalized tables (``io.PASSAGES_SCHEMA`` / ``io.QUERIES_SCHEMA``) and write
nothing, so the caller's atomic write is the only place an output appears.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl

from . import local, worldfacts
from ..io import PASSAGES_SCHEMA, QUERIES_SCHEMA, conform


def prepare_corpus(name: str, cfg: Mapping, seed: int) -> pl.DataFrame:
    """The passages of corpus ``name`` as configured under ``corpora.<name>``."""
    if cfg["source"] == "worldfacts":
        df = worldfacts.build_corpus(seed=seed, n_cities=cfg.get("n_cities", 300))
    elif cfg["source"] == "local":
        _require_file(cfg["path"], f"corpora.{name}.path")
        df = local.load_corpus_tsv(cfg["path"])
    else:
        raise ValueError(f"corpora.{name}.source: unknown source '{cfg['source']}'")
    return conform(df, PASSAGES_SCHEMA, f"corpus {name}")


def prepare_queries(name: str, cfg: Mapping, passages_path: str, seed: int) -> pl.DataFrame:
    """The queries of dataset ``name`` as configured under ``datasets.<name>``."""
    if cfg["source"] == "worldfacts":
        passages = pl.read_parquet(passages_path)
        df = worldfacts.build_queries(cfg["flavour"], cfg.get("n_queries", 12), seed=seed, passages=passages)
    elif cfg["source"] == "local":
        _require_file(cfg["queries"], f"datasets.{name}.queries")
        # Only the id column: a DPR corpus has 21M passages and we just check human_pids against it.
        pids = set(pl.read_parquet(passages_path, columns=["pid"])["pid"].to_list())
        df = local.load_queries_jsonl(cfg["queries"], corpus_pids=pids, default_task=cfg.get("task", "qa"))
    else:
        raise ValueError(f"datasets.{name}.source: unknown source '{cfg['source']}'")
    if cfg.get("limit"):
        df = df.head(cfg["limit"])
    return conform(df, QUERIES_SCHEMA, f"dataset {name}")


def _require_file(path: str, key: str) -> None:
    if not Path(path).is_file():
        raise FileNotFoundError(f"config key {key}: no such file '{path}' (see README, 'Bring your own data')")
