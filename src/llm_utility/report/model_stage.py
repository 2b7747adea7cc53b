"""What the report asks the model plan (``workflow.model_plan.ModelPlan``, which answers it; this layer
does not import the workflow's): the LLMs, the methods judged, the contexts answered. Each table's
inputs are a function of it, beside the table's own code (``analysis.table1_contexts``,
``judgments.table3_contexts``, ...)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class ModelStage(Protocol):
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
