"""The model plan: what a configuration asks the model stages to make, as pure functions of the
validated config and the data plan: each LLM's spec, the query parts of its jobs, the answer
contexts each answer job makes, the methods each judge job runs, the thinking pairs and the re-ask.
Which model rules exist and their jobs: ``workflow.model_rules``. Nothing here knows a path.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ..method.answers import (
    REASK_BASE_CONTEXTS,
    gold_context,
    reask_context,
    reranked_context,
    run_context,
    selected_context,
)
from ..method.judgments import counterpart, selection_method
from .data_plan import DataPlan
from .operational import LLM_OPERATIONAL_KEYS
from .parts import part_names, shard_count, shards_key

LLM_SCHEDULING_KEYS = ("prefill_tokens_per_s", "decode_tokens_per_s")
# What materializing an LLM's weights reads (generation.models.materialize): the backend, arithmetic
# and decoding settings change no weight file, so switching them (the demo and config/vllm-cpu.yaml
# in one checkout) must not dequantize again, nor rerun every job after the manifest.
LLM_WEIGHTS_KEYS = ("weights", "prompt_format")


class ModelPlan:
    """The model stages' plan, on the data plan ``data`` of the same config."""

    def __init__(self, data: DataPlan) -> None:
        self.data = data
        self.config = data.config
        self.datasets = data.datasets
        self.llms: list[str] = list(self.config["llms"])
        self.judgments: Mapping[str, Any] = self.config["judgments"]
        self.rankings: Mapping[str, Any] = self.config["rankings"]

    def llm_spec(self, llm: str) -> dict[str, Any]:
        """The LLM's config entry as its jobs get it (their `spec` param): without the keys that only
        estimate runtimes, or say which Python runs them."""
        left_out = (*LLM_SCHEDULING_KEYS, *LLM_OPERATIONAL_KEYS)
        return {k: v for k, v in self.config["llms"][llm].items() if k not in left_out}

    def weights_spec(self, llm: str) -> dict[str, Any]:
        """The LLM's config entry as rule materialize_model gets it: only what its weights depend on."""
        return {k: v for k, v in self.config["llms"][llm].items() if k in LLM_WEIGHTS_KEYS}

    # --- query parts of the model jobs (workflow.parts) --------------------------------------------

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
        """The datasets whose ``rule`` jobs run in query parts (gathered by ``<rule>_gather``)."""
        return [d for d in self.datasets if self.parts(d, rule)]

    def unsharded_datasets(self, rule: str) -> list[str]:
        """The datasets whose ``rule`` job is one job per (dataset, LLM, ...), with no query parts."""
        return [d for d in self.datasets if not self.parts(d, rule)]

    # --- answers with other runs' top-k ----------------------------------------------------------

    def run_answer_context(self, dataset: str, run: str) -> str:
        """The answers with a run's top-k: ``topk`` for the configured retriever (the same call), else
        ``run_<run>``."""
        return "topk" if run == self.data.pool_retriever(dataset) else run_context(run)

    def run_answer_jobs(self) -> list[dict[str, str]]:
        """(dataset, llm, run) of every answer_run job."""
        if not self.data.run_rag:
            return []
        return [
            {"dataset": d, "llm": llm, "run": r}
            for d in self.datasets
            for llm in self.llms
            for r in self.data.other_runs(d)
        ]

    # --- answer contexts ----------------------------------------------------------------------------

    def gold_sources(self, candidates: str) -> dict[str, str]:
        """Every LLM's gold set among ``candidates`` as a context: context -> the LLM whose gold set
        it is (an LLM's own: from itself)."""
        return {gold_context(candidates, source): source for source in self.llms}

    def gold_contexts(self, candidates: str) -> list[str]:
        return list(self.gold_sources(candidates))

    def own_gold_contexts(self, llm: str) -> list[str]:
        return [gold_context("C", llm), gold_context("U", llm)]

    def selection_sources(self) -> dict[str, tuple[str, str]]:
        """RAG with selections: every rag method's selections of every LLM, context -> (the LLM that
        selected, its method)."""
        return {selected_context(m, source): (source, m) for m in self.judgments["rag_methods"] for source in self.llms}

    def selected_contexts(self) -> list[str]:
        return list(self.selection_sources())

    def reranked_sources(self) -> dict[str, str]:
        """RAG with the top passages of the LLM's own rag rankings, context -> ranking method."""
        return {reranked_context(m, self.rankings["rag_top"]): m for m in self.rankings["rag_methods"]}

    def reranked_contexts(self) -> list[str]:
        return list(self.reranked_sources())

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
