"""The report plan: what the findings and the figures read, and the report's settings, as pure
functions of the validated config and the model plan (``model_stage.ModelStage``). What each table
reads is beside the table's code: ``analysis.table1_contexts`` (Table 1, the empty answers),
``judgments.table3_contexts`` and the others (Tables 3, 5, 7, 8, Figure 9). Nothing here knows a path.
"""

from __future__ import annotations

import functools
from typing import Any

from ..data.paper import paper_datasets_of
from ..method.answers import reask_context
from .analysis import TABLE1_CONTEXTS
from .judgments import figure9_contexts
from .model_stage import ModelStage


class ReportPlan:
    """The report's plan, on the model plan ``model`` of the same config."""

    def __init__(self, model: ModelStage) -> None:
        self.model = model
        self.config = model.config
        self.datasets = model.datasets
        self.llms = model.llms
        self.rankings = model.rankings

    # --- findings -----------------------------------------------------------------------------------

    def findings_contexts(self) -> list[str]:
        """The answers a finding reads, for every LLM: Table 1's that need no gold set, every LLM's
        gold sets among C and U (the transfer findings), every LLM's selections with Figure 9's
        method (Tables 3 and 9) and the reranked top passages (Table 7)."""
        no_gold = [c for c in TABLE1_CONTEXTS.values() if "{llm}" not in c]
        gold = self.model.gold_contexts("C") + self.model.gold_contexts("U")
        return list(dict.fromkeys(no_gold + gold + figure9_contexts(self.model) + self.model.reranked_contexts()))

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
