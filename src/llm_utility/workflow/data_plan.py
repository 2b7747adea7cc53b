"""The data plan: what a configuration asks the data and retrieval stages to make, as pure functions of
the validated config (the datasets and corpora, how each is read and mapped, every retrieval run a
dataset is scored with). The rule files turn these names into file patterns; nothing here knows a
path.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ..data.paper import PAPER_QUERY_COUNTS, paper_datasets_of
from ..retrieval.lexical import BACKEND as BM25
from ..retrieval.lexical import spec_keys

BM25_KEYS = spec_keys()
# Dataset sources read from a publisher's benchmark file (their human passages are mapped onto a corpus).
BENCHMARK_SOURCES = ("kilt", "2wiki", "msmarco-qa")
# Config keys that only schedule jobs (shards, runtime estimates): kept out of every job's params, so
# setting them reruns nothing that was made (the shards change which jobs make a table, not the table).
DATASET_SCHEDULING_KEYS = ("shards", "expected_queries")


class DataPlan:
    """The data stage's plan for one validated ``config`` (``snakemake.utils.validate`` filled its
    defaults and ``workflow.checks.check_config`` passed)."""

    def __init__(self, config: Mapping[str, Any], dropped_runs: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """``dropped_runs``: TREC run files found in the drop-in folder (dataset -> name -> path),
        scored beside the config's ``runs.files``."""
        self.config = config
        self.dropped_runs = {d: dict(files) for d, files in (dropped_runs or {}).items() if d in config["datasets"]}
        self.datasets: list[str] = list(config["datasets"])
        self.corpora: list[str] = list(config["corpora"])
        self.retrievers: list[str] = list(config["retrievers"])

    # --- datasets and corpora --------------------------------------------------------------------

    @functools.cached_property
    def benchmarks(self) -> list[str]:
        """Datasets read from a publisher's benchmark file (their human passages are mapped)."""
        return [d for d, c in self.config["datasets"].items() if c["source"] in BENCHMARK_SOURCES]

    @functools.cached_property
    def msmarco_qa(self) -> list[str]:
        """Datasets whose short answers an LLM extracts (MS MARCO-FQA)."""
        return [d for d in self.benchmarks if self.config["datasets"][d]["source"] == "msmarco-qa"]

    @functools.cached_property
    def kilt_corpora(self) -> list[str]:
        """Corpora chunked from the KILT knowledge source, in shards."""
        return [c for c, v in self.config["corpora"].items() if v["source"] == "kilt"]

    def corpus_of(self, dataset: str) -> str:
        return self.config["datasets"][dataset]["corpus"]

    def corpus_file_key(self, corpus: str) -> str:
        """The config key of a corpus's own file: ``path`` (local TSV) or ``file`` (a publisher's)."""
        return "path" if self.config["corpora"][corpus]["source"] == "local" else "file"

    def maps_provenance_by_text(self, dataset: str) -> bool:
        """Whether KILT provenance is mapped onto a non-KILT corpus by title and text, which needs
        the provenance texts from the KILT knowledge source (``datasets.<name>.knowledge_source``)."""
        return self.config["datasets"][dataset]["source"] == "kilt" and self.mapping_rule(dataset) == "title-text"

    def mapping_rule(self, dataset: str) -> str:
        """How a benchmark's human annotations map onto its corpus: ``pid`` (MS MARCO passage-ranking
        qrels name collection passages), ``text`` (MS MARCO QnA's selected passages only have texts),
        ``span`` (KILT provenance on a KILT corpus) or ``title-text``."""
        ds = self.config["datasets"][dataset]
        corpus = self.config["corpora"][ds["corpus"]]
        if ds["source"] == "msmarco-qa":
            return "pid" if ds.get("ranking_qrels") else "text"
        if ds["source"] == "kilt" and corpus["source"] == "kilt":
            return "span"
        return "title-text"

    def dataset_spec(self, dataset: str) -> dict[str, Any]:
        """The dataset's config entry as its data jobs get it: without the scheduling keys."""
        return {k: v for k, v in self.config["datasets"][dataset].items() if k not in DATASET_SCHEDULING_KEYS}

    def expected_queries(self, dataset: str) -> int | None:
        """The query count of ``dataset`` that runtime estimates assume: ``expected_queries``, else
        the smallest of ``limit``, ``n_queries`` (worldfacts) and the paper's Table 6 count of the one
        paper dataset it stands for; None when none is known (a local file, the whole MS MARCO QnA
        dev set)."""
        spec = self.config["datasets"][dataset]
        if spec.get("expected_queries"):
            return int(spec["expected_queries"])
        known = []
        if spec.get("limit"):
            known.append(int(spec["limit"]))
        if spec["source"] == "worldfacts":
            known.append(int(spec["n_queries"]))
        paper = paper_datasets_of(dataset, spec) or []
        full_msmarco = spec["source"] == "msmarco-qa" and not spec.get("ranking_queries")
        stands_for_one = len(paper) == 1 and paper[0] in PAPER_QUERY_COUNTS
        if spec["source"] in BENCHMARK_SOURCES and stands_for_one and not full_msmarco:
            known.append(PAPER_QUERY_COUNTS[paper[0]])
        return min(known) if known else None

    # --- retrieval runs: the configured retriever's, the other retrievers', run files -------------

    def backend_of(self, retriever: str) -> str:
        return self.config["retrievers"][retriever]["backend"]

    @functools.cached_property
    def bm25_retrievers(self) -> list[str]:
        return [r for r in self.retrievers if self.backend_of(r) == BM25]

    @functools.cached_property
    def dense_retrievers(self) -> list[str]:
        return [r for r in self.retrievers if self.backend_of(r) != BM25]

    def retriever_spec(self, retriever: str) -> dict[str, Any]:
        """The retriever's config entry with only the keys its backend reads (a dense retriever's
        jobs never see the BM25 settings, nor a BM25 retriever's the encoder's)."""
        entry = self.config["retrievers"][retriever]
        if self.backend_of(retriever) == BM25:
            return {k: v for k, v in entry.items() if k in ("backend", *BM25_KEYS)}
        return {k: v for k, v in entry.items() if k not in BM25_KEYS}

    def pool_retriever(self, dataset: str) -> str:
        """The dataset's configured retriever: its top-k is the candidates C, every LLM's pool."""
        return self.config["datasets"][dataset]["retriever"]

    @functools.cached_property
    def run_retrievers(self) -> list[str]:
        """The retrievers whose run every dataset gets (``runs.retrievers``; null: all of them)."""
        chosen = self.runs_config["retrievers"]
        return list(self.retrievers) if chosen is None else list(chosen)

    @functools.cached_property
    def runs_config(self) -> Mapping[str, Any]:
        return self.config.get("runs") or {"retrievers": None, "files": {}, "depth": 100, "rag": True}

    def run_files(self, dataset: str) -> dict[str, str]:
        """The TREC run files scored on ``dataset``: the drop-in folder's, then ``runs.files``."""
        return {**self.dropped_runs.get(dataset, {}), **(self.runs_config["files"] or {}).get(dataset, {})}

    def runs_of(self, dataset: str) -> dict[str, tuple[str, str]]:
        """Every run evaluated on ``dataset``, name -> (``retriever``, slug) or (``file``, path): the
        configured retriever first, then the other run retrievers, then the run files."""
        pool = self.pool_retriever(dataset)
        runs = {pool: ("retriever", pool)}
        runs |= {r: ("retriever", r) for r in self.run_retrievers if r != pool}
        runs |= {name: ("file", path) for name, path in self.run_files(dataset).items()}
        return runs

    def run_depth(self, dataset: str, retriever: str) -> int:
        """How deep a retriever's run goes: the configured retriever's only to the top-k (its top-k is
        the pool C, every passage judged, so nothing below it is ever read); another run to
        ``runs.depth``, for the condensed lists (unjudged passages dropped, then cut at k)."""
        top_k = self.config["top_k"]
        return top_k if retriever == self.pool_retriever(dataset) else max(top_k, self.runs_config["depth"])

    def other_runs(self, dataset: str) -> list[str]:
        """The runs of ``dataset`` whose top-k is not the candidates C (each gets its own answers)."""
        return [r for r in self.runs_of(dataset) if r != self.pool_retriever(dataset)]

    @functools.cached_property
    def run_rag(self) -> bool:
        """Whether each LLM answers with every run's top-k (``runs.rag``) and the agreement is made."""
        return bool(self.runs_config["rag"]) and any(self.other_runs(d) for d in self.datasets)
