"""Where a corpus or a query set comes from, and the file each source reads.

Sources of corpora: ``worldfacts`` (generated demo), ``local`` (a DPR-layout TSV at ``path``), ``dpr``
(DPR's ``psgs_w100.tsv``, ``file``), ``msmarco`` (MS MARCO's ``collection.tsv``, ``file``), ``kilt`` (the
KILT knowledge source chunked into 100-word passages, ``file``). Sources of datasets: ``worldfacts``,
``local`` (a JSONL at ``queries``), ``kilt`` (a KILT task file), ``2wiki`` (2WikiMultihopQA dev.json),
``msmarco-qa`` (MS MARCO QnA v2.1 dev). Functions here take the paths a job declared as its inputs,
never paths read from config, so a job reads exactly what its rule declares.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from ..io import conform
from ..schemas import PASSAGES_SCHEMA, QUERIES_SCHEMA
from . import local, worldfacts
from .files import normalize_spec


def member_of(cfg: Mapping, key: str) -> str | None:
    value = cfg.get(key)
    return None if value is None else normalize_spec(value).get("member")


def prepare_corpus(name: str, cfg: Mapping, seed: int) -> pl.DataFrame:
    """The worldfacts demo corpus (the file sources stream through ``jobs.prepare_corpus_job``)."""
    if cfg["source"] != "worldfacts":
        raise ValueError(f"corpora.{name}.source: '{cfg['source']}' is prepared by streaming, not in memory")
    df = worldfacts.build_corpus(seed=seed, n_cities=cfg["n_cities"], n_countries=cfg.get("n_countries"))
    return conform(df, PASSAGES_SCHEMA, f"corpus {name}")


def prepare_queries(
    name: str, cfg: Mapping, passages_path: str, seed: int, queries_path: str | None = None
) -> pl.DataFrame:
    """The queries of a ``worldfacts`` or ``local`` dataset; ``queries_path`` is the declared JSONL input."""
    if cfg["source"] == "worldfacts":
        passages = pl.read_parquet(passages_path)
        df = worldfacts.build_queries(cfg["flavour"], cfg["n_queries"], seed=seed, passages=passages)
    elif cfg["source"] == "local":
        if queries_path is None:
            raise ValueError(f"datasets.{name}: a local dataset needs its queries file as a declared input")
        # Only the id column: a DPR corpus has 21M passages and we just check human_pids against it.
        pids = set(pl.read_parquet(passages_path, columns=["pid"])["pid"].to_list())
        df = local.load_queries_jsonl(queries_path, corpus_pids=pids, default_task=cfg["task"])
    else:
        raise ValueError(f"datasets.{name}.source: '{cfg['source']}' is prepared from its loaded and mapped tables")
    if cfg.get("limit"):
        df = df.head(cfg["limit"])
    return conform(df, QUERIES_SCHEMA, f"dataset {name}")
