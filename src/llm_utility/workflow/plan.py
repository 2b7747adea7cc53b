"""What a configuration asks the workflow to make, as pure functions of the validated config: the
datasets, LLMs and methods each stage covers, the answer contexts each table reads, the selection
methods each judge job runs, and the model jobs that exist. The rule files turn these names into
file patterns; nothing here knows a path.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ..method.answers import (
    CANDIDATE_CONTEXTS,
    REASK_BASE_CONTEXTS,
    gold_context,
    reask_context,
    reranked_context,
    run_context,
    selected_context,
)
from ..method.judgments import selection_method
from ..report.analysis import TABLE1_CONTEXTS
from ..report.findings.framework import PAPER_DATASETS, REASK_PREFIX
from ..retrieval.lexical import BACKEND as BM25
from ..retrieval.lexical import spec_keys
from .checks import BENCHMARK_SOURCES
from .operational import LLM_OPERATIONAL_KEYS, OPERATIONAL_KEYS
from .parts import SHARDABLE_RULES, part_names, shard_count, shards_key

BM25_KEYS = spec_keys()
# Table 8 compares these two selection methods when both are judged.
KNOWN_REJECTION = ("listwise_pa", "listwise_pa_reject")
# Figure 9 shows the transfer of the paper's best selection method when it is a rag method.
FIGURE9_PREFERRED = "listwise_pa"


# The paper's datasets a demo (worldfacts) flavour stands for: single-hop questions like NQ and
# TriviaQA, two-hop ones like HotpotQA and 2WikiQA, true/false claims like FEVER.
WORLDFACTS_STANDS_FOR = {"single_hop": ["nq", "triviaqa"], "two_hop": ["hotpotqa", "2wikiqa"], "claim": ["fever"]}
# A KILT file's name says its task (nq-dev-kilt.jsonl, triviaqa-dev_id-kilt.jsonl, ...).
KILT_FILE_PREFIXES = {"nq-": "nq", "triviaqa-": "triviaqa", "hotpotqa-": "hotpotqa", "fever-": "fever"}


# The paper's query counts (Table 6), for the runtime estimates of a dataset that stands for one.
PAPER_QUERY_COUNTS = {"nq": 2837, "hotpotqa": 5600, "2wikiqa": 12576, "triviaqa": 5359, "msmarco-fqa": 3199, "fever": 10245}
# Config keys that only schedule jobs (shards, runtime estimates): kept out of every job's params, so
# setting them reruns nothing that was made (the shards change which jobs make a table, not the table).
DATASET_SCHEDULING_KEYS = ("shards", "expected_queries")
LLM_SCHEDULING_KEYS = ("prefill_tokens_per_s", "decode_tokens_per_s")
# What materializing an LLM's weights reads (generation.models.materialize): the backend, arithmetic
# and decoding settings change no weight file, so switching them (the demo and config/vllm-cpu.yaml
# in one checkout) must not dequantize again, nor rerun every job after the manifest.
LLM_WEIGHTS_KEYS = ("weights", "prompt_format")


def paper_datasets_of(name: str, spec: Mapping[str, Any]) -> list[str] | None:
    """The paper's datasets a configured dataset (``name``, its config ``spec``) stands for, or None
    (see ``Plan.paper_datasets``)."""
    if spec.get("paper_dataset") is not None:
        return list(spec["paper_dataset"])
    if name in PAPER_DATASETS:
        return [name]
    source = spec["source"]
    if source == "worldfacts":
        return list(WORLDFACTS_STANDS_FOR[spec["flavour"]])
    if source == "2wiki":
        return ["2wikiqa"]
    if source == "msmarco-qa":
        return ["msmarco-fqa"]
    if source == "kilt":
        file = spec["file"]
        location = str(file.get("url") or file.get("path") or "") if isinstance(file, Mapping) else str(file)
        base = location.rsplit("/", 1)[-1].lower()
        for prefix, paper in KILT_FILE_PREFIXES.items():
            if base.startswith(prefix):
                return [paper]
    return None


def counterpart(method: str) -> str:
    """The method without thinking that a thinking method is compared with in Table 5."""
    return method.replace("_pat_think", "_pa").replace("_think", "")


class Plan:
    """The workflow's plan for one validated ``config`` (``snakemake.utils.validate`` filled its
    defaults and ``workflow.checks.check_config`` passed)."""

    def __init__(self, config: Mapping[str, Any], dropped_runs: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """``dropped_runs``: TREC run files found in the drop-in folder (dataset -> name -> path),
        scored beside the config's ``runs.files``."""
        self.config = config
        self.dropped_runs = {d: dict(files) for d, files in (dropped_runs or {}).items() if d in config["datasets"]}
        self.datasets: list[str] = list(config["datasets"])
        self.llms: list[str] = list(config["llms"])
        self.corpora: list[str] = list(config["corpora"])
        self.retrievers: list[str] = list(config["retrievers"])
        self.judgments: Mapping[str, Any] = config["judgments"]
        self.rankings: Mapping[str, Any] = config["rankings"]

    # --- data -------------------------------------------------------------------------------------

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

    def llm_spec(self, llm: str) -> dict[str, Any]:
        """The LLM's config entry as its jobs get it (their `spec` param): without the keys that only
        estimate runtimes, or say which Python runs them."""
        left_out = (*LLM_SCHEDULING_KEYS, *LLM_OPERATIONAL_KEYS)
        return {k: v for k, v in self.config["llms"][llm].items() if k not in left_out}

    def weights_spec(self, llm: str) -> dict[str, Any]:
        """The LLM's config entry as rule materialize_model gets it: only what its weights depend on."""
        return {k: v for k, v in self.config["llms"][llm].items() if k in LLM_WEIGHTS_KEYS}

    # --- query shards of the model jobs (workflow.parts) -------------------------------------------

    def shards(self, dataset: str, rule: str) -> int:
        """``rule``'s query shards of ``dataset``: ``datasets.<name>.shards``, an integer for every
        model rule or a mapping ``{default: n, <rule>: m}`` (workflow.parts.shard_count)."""
        return shard_count(self.config["datasets"][dataset].get("shards"), rule)

    def shards_key(self, dataset: str, rule: str | None = None) -> str:
        """The config key that sets ``rule``'s shards of ``dataset`` (for messages)."""
        return shards_key(self.config["datasets"][dataset].get("shards"), dataset, rule)

    def parts(self, dataset: str, rule: str) -> list[str]:
        """The query shards of ``rule``'s jobs of ``dataset`` (``1-of-4``, ...); none when unsharded."""
        return part_names(self.shards(dataset, rule))

    def sharded_datasets(self, rule: str) -> list[str]:
        """The datasets whose ``rule`` jobs run in parts (``<rule>_part``, gathered by ``<rule>_gather``)."""
        return [d for d in self.datasets if self.parts(d, rule)]

    def unsharded_datasets(self, rule: str) -> list[str]:
        """The datasets whose ``rule`` job is one job per (dataset, LLM, ...): rule ``<rule>`` itself."""
        return [d for d in self.datasets if not self.parts(d, rule)]

    @functools.cached_property
    def all_parts(self) -> list[str]:
        """Every part name of any rule and dataset (the ``part`` wildcard's constraint)."""
        return sorted({p for d in self.datasets for r in SHARDABLE_RULES for p in self.parts(d, r)})

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
        if spec["source"] in BENCHMARK_SOURCES and len(paper) == 1 and paper[0] in PAPER_QUERY_COUNTS and not full_msmarco:
            known.append(PAPER_QUERY_COUNTS[paper[0]])
        return min(known) if known else None

    # --- retrieval runs: the configured retriever's, the other retrievers', run files -------------------

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

    def run_answer_context(self, dataset: str, run: str) -> str:
        """The answers with a run's top-k: ``topk`` for the configured retriever (the same call), else
        ``run_<run>``."""
        return "topk" if run == self.pool_retriever(dataset) else run_context(run)

    def run_answer_jobs(self) -> list[dict[str, str]]:
        """(dataset, llm, run) of every answer_run job."""
        if not self.run_rag:
            return []
        return [{"dataset": d, "llm": llm, "run": r} for d in self.datasets for llm in self.llms for r in self.other_runs(d)]

    # --- answer contexts ----------------------------------------------------------------------------

    def gold_sources(self, candidates: str) -> dict[str, str]:
        """Every LLM's gold set among ``candidates`` as a context: context -> the LLM whose gold set
        it is (an LLM's own: from itself)."""
        return {gold_context(candidates, source): source for source in self.llms}

    def gold_contexts(self, candidates: str) -> list[str]:
        return list(self.gold_sources(candidates))

    def selection_sources(self) -> dict[str, tuple[str, str]]:
        """RAG with selections: every rag method's selections of every LLM, context -> (the LLM that
        selected, its method)."""
        return {
            selected_context(m, source): (source, m) for m in self.judgments["rag_methods"] for source in self.llms
        }

    def selected_contexts(self) -> list[str]:
        return list(self.selection_sources())

    def reranked_sources(self) -> dict[str, str]:
        """RAG with the top passages of the LLM's own rag rankings, context -> ranking method."""
        return {reranked_context(m, self.rankings["rag_top"]): m for m in self.rankings["rag_methods"]}

    def reranked_contexts(self) -> list[str]:
        return list(self.reranked_sources())

    def own_gold_contexts(self, llm: str) -> list[str]:
        return [gold_context("C", llm), gold_context("U", llm)]

    def table1_contexts(self, llm: str) -> list[str]:
        """Table 1's columns as the answer contexts of ``llm`` (its own gold sets)."""
        return [context.format(llm=llm) for context in TABLE1_CONTEXTS.values()]

    # --- the re-ask (method.answers' reask_* contexts) -----------------------------------------------

    @functools.cached_property
    def reask(self) -> bool:
        """Whether the re-ask stage runs (``reask.enabled``)."""
        return bool(self.config["reask"]["enabled"])

    def reask_gold_sources(self) -> dict[str, tuple[str, str]]:
        """The re-asked gold sets, context -> (the LLM whose gold set it is, its candidates C or U)."""
        return {
            reask_context(gold_context(candidates, source)): (source, candidates)
            for candidates in ("C", "U")
            for source in self.llms
        }

    def reask_contexts(self) -> list[str]:
        """What an ``answer_reask`` job answers: the re-ask of none, human, topk, union and of every
        LLM's gold sets among C and U (nothing when the re-ask is off)."""
        if not self.reask:
            return []
        return [reask_context(c) for c in REASK_BASE_CONTEXTS] + list(self.reask_gold_sources())

    def table1_reask_contexts(self, llm: str) -> list[str]:
        """Table 1's re-ask block: the re-ask of each of its columns (none when the re-ask is off)."""
        return [reask_context(c) for c in self.table1_contexts(llm)] if self.reask else []

    def empty_answers_contexts(self, llm: str) -> list[str]:
        """Every context answered before any judgment: the candidates' and the LLM's own gold sets."""
        return list(CANDIDATE_CONTEXTS) + self.own_gold_contexts(llm)

    def table3_contexts(self, llm: str) -> list[str]:
        """Table 3: the top-k, and the LLM's own selections with every rag method."""
        return ["topk"] + [selected_context(m, llm) for m in self.judgments["rag_methods"]]

    def table7_contexts(self) -> list[str]:
        """Table 7: the top-k, and the top passages of the LLM's own rag rankings."""
        return ["topk"] + self.reranked_contexts()

    def figure9_contexts(self) -> list[str]:
        """Figure 9: the selections of every LLM with ``figure9_method``."""
        return [selected_context(self.figure9_method, source) for source in self.llms]

    def findings_contexts(self) -> list[str]:
        """The answers a finding reads, for every LLM: Table 1's that need no gold set, every LLM's
        gold sets among C and U (the transfer findings), every LLM's selections with Figure 9's
        method (Tables 3 and 9) and the reranked top passages (Table 7)."""
        no_gold = [c for c in TABLE1_CONTEXTS.values() if "{llm}" not in c]
        return list(dict.fromkeys(no_gold + self.gold_contexts("C") + self.gold_contexts("U") + self.figure9_contexts() + self.reranked_contexts()))

    def findings_reask_contexts(self) -> list[str]:
        """The re-ask answers the re-ask twins read, for every LLM (the contract with the re-ask
        stage: ``reask_<context>`` for none, human, topk, union and every LLM's gold sets C and U),
        whether or not the stage runs (the findings rule reads only those that exist, then)."""
        return [REASK_PREFIX + c for c in ["none", "human", "topk", "union", *self.gold_contexts("C"), *self.gold_contexts("U")]]

    # --- judgments ---------------------------------------------------------------------------------

    def can_think(self, llm: str) -> bool:
        return bool(self.config["llms"][llm]["can_think"])

    @functools.cached_property
    def thinking_llms(self) -> list[str]:
        return [llm for llm in self.llms if self.can_think(llm)]

    @functools.cached_property
    def thinking_pairs(self) -> list[tuple[str, str]]:
        """(dataset, llm) pairs the thinking methods run for (Table 5)."""
        datasets = self.judgments["thinking_datasets"] or self.datasets
        return [(d, llm) for d in datasets for llm in self.llms if self.can_think(llm)]

    @functools.cached_property
    def thinking_methods(self) -> list[str]:
        """The selection methods of a ``judge_thinking`` job (thinking on)."""
        return list(self.judgments["thinking_methods"])

    @functools.cached_property
    def judge_methods(self) -> list[str]:
        """The selection methods of a ``judge`` job, for every (dataset, LLM): Table 2's, the RAG ones,
        and Table 5's counterparts where some model thinks."""
        counterparts = [counterpart(m) for m in self.thinking_methods] if self.thinking_pairs else []
        return list(dict.fromkeys(list(self.judgments["methods"]) + list(self.judgments["rag_methods"]) + counterparts))

    @functools.cached_property
    def known_rejection_methods(self) -> list[str]:
        """Table 8's two methods, or none when either is not judged."""
        return list(KNOWN_REJECTION) if set(KNOWN_REJECTION) <= set(self.judge_methods) else []

    def table5_methods(self, dataset: str, llm: str) -> list[str]:
        """Table 5: the thinking methods and their counterparts without thinking."""
        if (dataset, llm) not in self.thinking_pairs:
            return []
        return list(dict.fromkeys(counterpart(m) for m in self.thinking_methods)) + self.thinking_methods

    @functools.cached_property
    def figure9_method(self) -> str:
        """The rag method whose selections Figure 9 transfers across LLMs."""
        rag = self.judgments["rag_methods"]
        return FIGURE9_PREFERRED if FIGURE9_PREFERRED in rag else rag[0]

    @staticmethod
    def pseudo_contexts(methods: Sequence[str]) -> list[str]:
        """The answer contexts the pseudo-answers of ``methods`` come from (topk, topk_think)."""
        return sorted({selection_method(m).pseudo_context for m in methods} - {None})

    def judge_max_new_tokens(self) -> dict[str, int]:
        """Output limits of a judgment, by its form, or with thinking on."""
        return {
            "pointwise": self.judgments["pointwise_max_new_tokens"],
            "listwise": self.judgments["listwise_max_new_tokens"],
            "thinking": self.judgments["thinking_max_new_tokens"],
        }

    def thinking_spec(self, llm: str) -> dict[str, Any]:
        """The LLM's spec with thinking on (judge_thinking)."""
        return {**self.llm_spec(llm), "enable_thinking": True, "stop": []}

    def thinking_answer_spec(self, llm: str) -> dict[str, Any]:
        """topk_think: the top-k answer with thinking on and the thinking budget (pseudo-answer (T))."""
        return {**self.thinking_spec(llm), "max_new_tokens": self.judgments["thinking_max_new_tokens"]}

    @functools.cached_property
    def ranked(self) -> list[str]:
        """Every configured ranking method (Table 4's and the RAG ones)."""
        return list(dict.fromkeys(list(self.rankings["methods"]) + list(self.rankings["rag_methods"])))

    @functools.cached_property
    def model_rankings(self) -> list[str]:
        """The rankings an LLM makes in its ``judge`` job; the retriever's needs no model."""
        return [m for m in self.ranked if m != "retriever"]

    def findings_rankings(self) -> list[str]:
        """The rankings a finding reads (Table 4's: every configured ranking method)."""
        return list(self.rankings["methods"])

    # --- findings: the paper's datasets each claim covers ---------------------------------------------

    @functools.cached_property
    def paper_datasets(self) -> dict[str, list[str] | None]:
        """The paper's datasets each configured dataset stands for (the scope of a claim,
        ``report.claim_scope``): ``datasets.<name>.paper_dataset`` where given; else the dataset's
        own name when it is one of the paper's; else by its source (``PAPER_DATASETS_OF``: a 2wiki
        file is 2WikiQA, msmarco-qa MS MARCO-FQA, a KILT file by its file name, a worldfacts flavour
        by its kind of query); else None (a dataset of the user's own: in every claim's scope)."""
        return {d: paper_datasets_of(d, spec) for d, spec in self.config["datasets"].items()}

    def claim_scope(self) -> dict[str, list[str]]:
        """``report.claim_scope``: the paper's datasets each scope of claims covers."""
        return {name: list(v) for name, v in self.config["report"]["claim_scope"].items()}

    # --- report -------------------------------------------------------------------------------------

    @functools.cached_property
    def figure1_dataset(self) -> str:
        """The dataset of Figure 1 (right): ``report.figure1_dataset``, or else the first of
        ``datasets`` (so a config with datasets of its own needs no edit here)."""
        chosen = self.config.get("report", {}).get("figure1_dataset")
        return chosen if chosen is not None else self.datasets[0]

    @functools.cached_property
    def transfer_figures(self) -> dict[str, dict[str, Any]]:
        """Figure 1 right (one dataset, U candidates), Figure 2 (every dataset, U), Figure 8 (every
        dataset, C), by file name."""
        return {
            "fig1_right_transfer": {"candidates": "U", "datasets": [self.figure1_dataset]},
            "fig2_transfer_U": {"candidates": "U", "datasets": self.datasets},
            "fig8_transfer_C": {"candidates": "C", "datasets": self.datasets},
        }

    def families(self) -> dict[str, str | None]:
        return {llm: self.config["llms"][llm]["family"] for llm in self.llms}

    def bootstrap(self) -> dict[str, Any]:
        """Bootstrap settings of every interval (Table 1, the judgment tables, findings.json)."""
        return {k: self.config["report"][k] for k in ("resamples", "bootstrap_seed", "confidence")}

    def intervals(self) -> dict[str, Any] | None:
        """What the tables get: the bootstrap settings, or None when report.intervals is off (the
        paper's exact layout)."""
        return self.bootstrap() if self.config["report"]["intervals"] else None

    def results_config(self) -> dict[str, Any]:
        """The validated config without the operational settings, which change no result."""
        out = {k: v for k, v in self.config.items() if k not in OPERATIONAL_KEYS}
        out["llms"] = {
            llm: {k: v for k, v in spec.items() if k not in LLM_OPERATIONAL_KEYS} for llm, spec in self.config["llms"].items()
        }
        return out

    # --- model jobs ---------------------------------------------------------------------------------

    def model_jobs(self) -> list[tuple[str, dict[str, str]]]:
        """Every job that loads an LLM, as (rule, wildcards): the cost table's rows. A sharded
        rule's jobs of a dataset come once per query shard of that rule, with a ``part`` wildcard
        (rule ``<rule>_part``)."""
        jobs: list[tuple[str, dict[str, str]]] = []
        for rule, wc in self._model_jobs():
            parts = self.parts(wc["dataset"], rule) if "dataset" in wc else []
            jobs += [(rule, {**wc, "part": part}) for part in parts] if parts else [(rule, wc)]
        return jobs

    def _model_jobs(self) -> list[tuple[str, dict[str, str]]]:
        pairs = [{"dataset": d, "llm": llm} for d in self.datasets for llm in self.llms]
        thinking = [{"dataset": d, "llm": llm} for d, llm in self.thinking_pairs]
        jobs: list[tuple[str, dict[str, str]]] = [("materialize_model", {"llm": llm}) for llm in self.llms]
        for name in ("answer_candidates", "answer_gold", "judge"):
            jobs += [(name, wc) for wc in pairs]
        if any(selection_method(m).pseudo_context == "topk_think" for m in self.thinking_methods):
            jobs += [("answer_thinking", wc) for wc in thinking]
        jobs += [("judge_thinking", wc) for wc in thinking]
        if self.judgments["rag_methods"] or self.rankings["rag_methods"]:
            jobs += [("answer_judgments", wc) for wc in pairs]
        if self.reask:
            jobs += [("answer_reask", wc) for wc in pairs]
        jobs += [("answer_run", wc) for wc in self.run_answer_jobs()]
        return jobs
