"""The report plan: what each table, figure and finding reads, as pure functions of the validated config
and the model plan (``workflow.model_plan.ModelPlan``, which answers the questions of ``ModelStage``
below: this layer does not import the workflow's): the answer contexts and methods of each table,
the figures' datasets, the findings' scopes and the bootstrap settings. Nothing here knows a path.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Protocol

from ..data.paper import paper_datasets_of
from ..method.answers import CANDIDATE_CONTEXTS, reask_context, selected_context
from ..method.judgments import counterpart
from .analysis import TABLE1_CONTEXTS

# Table 8 compares these two selection methods when both are judged.
KNOWN_REJECTION = ("listwise_pa", "listwise_pa_reject")
# Figure 9 shows the transfer of the paper's best selection method when it is a rag method.
FIGURE9_PREFERRED = "listwise_pa"


class ModelStage(Protocol):
    """What the report plan asks the model plan: the LLMs, the methods judged, the contexts answered."""

    config: Mapping[str, Any]
    datasets: list[str]
    llms: list[str]
    judgments: Mapping[str, Any]
    rankings: Mapping[str, Any]
    reask: bool
    judge_methods: list[str]
    thinking_methods: list[str]
    thinking_llms: list[str]
    thinking_pairs: list[tuple[str, str]]

    def gold_contexts(self, candidates: str) -> list[str]: ...
    def own_gold_contexts(self, llm: str) -> list[str]: ...
    def reranked_contexts(self) -> list[str]: ...


class ReportPlan:
    """The report's plan, on the model plan ``model`` of the same config."""

    def __init__(self, model: ModelStage) -> None:
        self.model = model
        self.config = model.config
        self.datasets = model.datasets
        self.llms = model.llms
        self.judgments = model.judgments
        self.rankings = model.rankings

    # --- Table 1 and the empty answers beside it ---------------------------------------------------

    def table1_contexts(self, llm: str) -> list[str]:
        """Table 1's columns as the answer contexts of ``llm`` (its own gold sets)."""
        return [context.format(llm=llm) for context in TABLE1_CONTEXTS.values()]

    def table1_reask_contexts(self, llm: str) -> list[str]:
        """Table 1's re-ask block: the re-ask of each of its columns (none when the re-ask is off)."""
        return [reask_context(c) for c in self.table1_contexts(llm)] if self.model.reask else []

    def empty_answers_contexts(self, llm: str) -> list[str]:
        """Every context answered before any judgment: the candidates' and the LLM's own gold sets."""
        return list(CANDIDATE_CONTEXTS) + self.model.own_gold_contexts(llm)

    # --- the judgment tables: Tables 3, 7, 8, 5 and Figure 9 ---------------------------------------

    def table3_contexts(self, llm: str) -> list[str]:
        """Table 3: the top-k, and the LLM's own selections with every rag method."""
        return ["topk"] + [selected_context(m, llm) for m in self.judgments["rag_methods"]]

    def table7_contexts(self) -> list[str]:
        """Table 7: the top-k, and the top passages of the LLM's own rag rankings."""
        return ["topk"] + self.model.reranked_contexts()

    @functools.cached_property
    def known_rejection_methods(self) -> list[str]:
        """Table 8's two methods, or none when either is not judged."""
        return list(KNOWN_REJECTION) if set(KNOWN_REJECTION) <= set(self.model.judge_methods) else []

    def table5_methods(self, dataset: str, llm: str) -> list[str]:
        """Table 5: the thinking methods and their counterparts without thinking."""
        if (dataset, llm) not in self.model.thinking_pairs:
            return []
        return list(dict.fromkeys(counterpart(m) for m in self.model.thinking_methods)) + self.model.thinking_methods

    @functools.cached_property
    def figure9_method(self) -> str:
        """The rag method whose selections Figure 9 transfers across LLMs."""
        rag = self.judgments["rag_methods"]
        return FIGURE9_PREFERRED if FIGURE9_PREFERRED in rag else rag[0]

    def figure9_contexts(self) -> list[str]:
        """Figure 9: the selections of every LLM with ``figure9_method``."""
        return [selected_context(self.figure9_method, source) for source in self.llms]

    # --- findings -----------------------------------------------------------------------------------

    def findings_contexts(self) -> list[str]:
        """The answers a finding reads, for every LLM: Table 1's that need no gold set, every LLM's
        gold sets among C and U (the transfer findings), every LLM's selections with Figure 9's
        method (Tables 3 and 9) and the reranked top passages (Table 7)."""
        no_gold = [c for c in TABLE1_CONTEXTS.values() if "{llm}" not in c]
        gold = self.model.gold_contexts("C") + self.model.gold_contexts("U")
        return list(dict.fromkeys(no_gold + gold + self.figure9_contexts() + self.model.reranked_contexts()))

    def findings_reask_contexts(self) -> list[str]:
        """The re-ask answers the re-ask twins read, for every LLM (the contract with the re-ask
        stage: ``reask_<context>`` for none, human, topk, union and every LLM's gold sets C and U);
        none when the re-ask is off (the twins are then not run)."""
        if not self.model.reask:
            return []
        gold = [*self.model.gold_contexts("C"), *self.model.gold_contexts("U")]
        return [reask_context(c) for c in ["none", "human", "topk", "union", *gold]]

    def findings_rankings(self) -> list[str]:
        """The rankings a finding reads (Table 4's: every configured ranking method)."""
        return list(self.rankings["methods"])

    @functools.cached_property
    def paper_datasets(self) -> dict[str, list[str] | None]:
        """The paper's datasets each configured dataset stands for (the scope of a claim,
        ``report.claim_scope``): ``datasets.<name>.paper_dataset`` where given; else the dataset's
        own name when it is one of the paper's; else by its source (``data.paper.paper_datasets_of``: a 2wiki
        file is 2WikiQA, msmarco-qa MS MARCO-FQA, a KILT file by its file name, a worldfacts flavour
        by its kind of query); else None (a dataset of the user's own: in every claim's scope)."""
        return {d: paper_datasets_of(d, spec) for d, spec in self.config["datasets"].items()}

    def claim_scope(self) -> dict[str, list[str]]:
        """``report.claim_scope``: the paper's datasets each scope of claims covers."""
        return {name: list(v) for name, v in self.config["report"]["claim_scope"].items()}

    # --- figures and intervals ----------------------------------------------------------------------

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
