"""The config checks ``config/schema.yaml`` cannot express: cross-references between sections and
what the data sources need. Every error names the offending key. The workflow runs them after
``snakemake.utils.validate`` has filled in the schema's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..generation.specs import normalize_spec
from ..method.judgments import selection_method
from .data_plan import BENCHMARK_SOURCES
from .model_rules import QUERY_PART_RULES

# Directory names under results/ that a dataset slug must not shadow.
RESERVED = {"corpora", "tables", "figures", "logs", "benchmarks"}


def check_config(config: Mapping[str, Any]) -> None:
    """Raise ValueError naming the key of the first problem found."""
    datasets, corpora, retrievers = config["datasets"], config["corpora"], config["retrievers"]
    for name, ds in datasets.items():
        if name in RESERVED:
            raise ValueError(f"config: datasets.{name}: '{name}' is reserved for results/{name}/")
        if ds["corpus"] not in corpora:
            raise ValueError(f"config: datasets.{name}.corpus = '{ds['corpus']}' is not in corpora ({list(corpora)})")
        if ds["retriever"] not in retrievers:
            raise ValueError(
                f"config: datasets.{name}.retriever = '{ds['retriever']}' is not in retrievers ({list(retrievers)})"
            )
        if ds["source"] == "worldfacts" and corpora[ds["corpus"]]["source"] != "worldfacts":
            raise ValueError(f"config: datasets.{name}: worldfacts queries need a worldfacts corpus")
        # Where the query count is known now (limit, n_queries); otherwise the shard job checks it.
        known = [n for n in (ds.get("limit"), ds.get("n_queries") if ds["source"] == "worldfacts" else None) if n]
        check_shards(ds.get("shards"), name, min(known) if known else None)
    for slug, spec in config["llms"].items():
        normalize_spec(spec, slug)
    judgments = config.get("judgments", {})
    for key in ("methods", "rag_methods", "thinking_methods"):
        for name in judgments.get(key, []):
            try:
                selection_method(name)
            except ValueError as err:
                raise ValueError(f"config: judgments.{key}: {err}") from None
    for name in judgments.get("thinking_methods", []):
        if not selection_method(name).thinking:
            raise ValueError(f"config: judgments.thinking_methods: {name!r} does not judge with thinking on")
    for name in judgments.get("thinking_datasets") or []:
        if name not in datasets:
            raise ValueError(f"config: judgments.thinking_datasets: '{name}' is not in datasets ({list(datasets)})")
    runs = config.get("runs", {})
    for name in runs.get("retrievers") or []:
        if name not in retrievers:
            raise ValueError(f"config: runs.retrievers: '{name}' is not in retrievers ({list(retrievers)})")
    for dataset, files in (runs.get("files") or {}).items():
        if dataset not in datasets:
            raise ValueError(f"config: runs.files.{dataset}: '{dataset}' is not in datasets ({list(datasets)})")
        for run in files:
            if run in retrievers:
                raise ValueError(
                    f"config: runs.files.{dataset}.{run}: '{run}' names a retriever; give the run file another name"
                )
    report = config.get("report", {})
    figure1 = report.get("figure1_dataset")
    if figure1 is not None and figure1 not in datasets:
        raise ValueError(f"config: report.figure1_dataset = '{figure1}' is not in datasets ({list(datasets)})")
    check_data_sources(config)


def check_shards(shards: Any, dataset: str, queries: int | None) -> None:
    """A ValueError naming the key of the first problem of a dataset's ``shards``: a mapping key that
    is no model rule that runs in query parts (nor ``default``), or a count above the dataset's
    ``queries`` (when known)."""
    items = shards.items() if isinstance(shards, Mapping) else [(None, shards or 1)]
    for rule, count in items:
        if rule is not None and rule != "default" and rule not in QUERY_PART_RULES:
            raise ValueError(
                f"config: datasets.{dataset}.shards.{rule}: not a model rule that can be sharded "
                f"(default, {', '.join(QUERY_PART_RULES)})"
            )
        if queries is not None and count > queries:
            key = f"datasets.{dataset}.shards" + (f".{rule}" if rule else "")
            raise ValueError(
                f"config: {key} is {count}, more than the dataset's {queries} queries: lower it to at most {queries}"
            )


def check_data_sources(config: Mapping[str, Any]) -> None:
    """What each dataset and corpus source needs: its file, a matching corpus, an extractor LLM."""
    for name, ds in config["datasets"].items():
        corpus = config["corpora"][ds["corpus"]]
        where = f"config: datasets.{name}"
        if ds["source"] in BENCHMARK_SOURCES:
            if ds.get("file") is None:
                raise ValueError(f"{where}: source '{ds['source']}' needs `file`")
            if corpus["source"] in ("worldfacts", "msmarco") and ds["source"] != "msmarco-qa":
                raise ValueError(f"{where}: a Wikipedia dataset needs a Wikipedia corpus (kilt, dpr or local)")
        if (ds.get("ranking_queries") is None) != (ds.get("ranking_qrels") is None):
            raise ValueError(
                f"{where}: ranking_queries and ranking_qrels go together (the passage-ranking queries and their qrels)"
            )
        if ds["source"] == "msmarco-qa" and ds.get("extractor") not in config["llms"]:
            raise ValueError(f"{where}.extractor = {ds.get('extractor')!r} must name an entry of llms")
        if ds["source"] == "kilt" and corpus["source"] != "kilt" and ds.get("knowledge_source") is None:
            raise ValueError(
                f"{where}: KILT provenance on corpus '{ds['corpus']}' is mapped by title and text, "
                "which needs the provenance texts: set `knowledge_source` to the KILT knowledge source"
            )
    for name, cfg in config["corpora"].items():
        if cfg["source"] in ("dpr", "msmarco", "kilt") and cfg.get("file") is None:
            raise ValueError(f"config: corpora.{name}: source '{cfg['source']}' needs `file`")


def validated(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` validated as the Snakefile validates it (``config/schema.yaml`` through
    ``snakemake.utils.validate``, its defaults filled in), then ``check_config``: for commands that
    read a config outside a run (``python -m llm_utility.workflow.estimates``, ``llm_utility.init``)."""
    import copy

    from snakemake.utils import validate  # only here: importing the glue never imports Snakemake

    from ..config import SCHEMA

    full = copy.deepcopy(dict(config))
    validate(full, str(SCHEMA))
    check_config(full)
    return full
