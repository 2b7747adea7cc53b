"""Prompt wordings (``config/prompts.yaml``) and their rendering into plain text.

Rendering is deterministic: the same question and passages always give the same text, which is what
lets the generation store recognise a call it has already made (a gold set of one passage is the
``single`` call again; an empty gold set is the ``none`` call again).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

_REQUIRED = {
    "passage": ("{title}", "{text}"),
    "passage_separator": (),
    "answer.qa.no_passages": ("{question}",),
    "answer.qa.with_passages": ("{question}", "{passages}"),
    "answer.fact.no_passages": ("{question}",),
    "answer.fact.with_passages": ("{question}", "{passages}"),
    # Utility judgments (paper Section 3.3, Appendix A; method.judgments renders them).
    "judgment.definition": (),
    "judgment.pseudo_answer": ("{answer}",),
    "judgment.reject_known": (),
    "judgment.pointwise": ("{question}", "{passage}", "{definition}", "{pseudo_answer}"),
    "judgment.listwise.system": (),
    "judgment.listwise.system_ack": (),
    "judgment.listwise.intro": ("{num}", "{question}"),
    "judgment.listwise.intro_ack": (),
    "judgment.listwise.passage": ("{i}", "{passage}"),
    "judgment.listwise.passage_ack": ("{i}",),
    "judgment.listwise.select": ("{question}", "{definition}", "{pseudo_answer}", "{reject_known}"),
    "judgment.listwise.rank": ("{question}", "{definition}", "{pseudo_answer}", "{num}"),
    "judgment.completion_cue.pointwise": (),
    "judgment.completion_cue.select": (),
    "judgment.completion_cue.rank": (),
}


@dataclass(frozen=True)
class Passage:
    pid: str
    title: str
    text: str


def _lookup(tree: Mapping, dotted: str):
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def load_prompts(path: str | os.PathLike) -> dict:
    """Load and check the prompt file: every required key exists and keeps its placeholders."""
    with open(path, encoding="utf-8") as fh:
        prompts = yaml.safe_load(fh)
    if not isinstance(prompts, Mapping):
        raise ValueError(f"{path}: expected a mapping of prompt names to wordings")
    for key, placeholders in _REQUIRED.items():
        try:
            value = _lookup(prompts, key)
        except KeyError:
            raise ValueError(f"{path}: missing prompt '{key}'") from None
        if not isinstance(value, str):
            raise ValueError(f"{path}: prompt '{key}' must be a string")
        for ph in placeholders:
            if ph not in value:
                raise ValueError(f"{path}: prompt '{key}' must contain the placeholder {ph}")
    return dict(prompts)


def render_passages(prompts: Mapping, passages: Sequence[Passage]) -> str:
    """Render passages as ``{title} {text}`` joined by the configured separator."""
    return prompts["passage_separator"].join(
        prompts["passage"].format(title=p.title, text=p.text) for p in passages
    )


def answer_prompt(prompts: Mapping, task: str, question: str, passages: Sequence[Passage]) -> str:
    """The answer-generation instruction for ``question`` given ``passages`` (none: no-passage prompt)."""
    try:
        wording = prompts["answer"][task]
    except KeyError:
        raise ValueError(f"no answer prompt for task '{task}' (expected one of {sorted(prompts['answer'])})") from None
    if not passages:
        return wording["no_passages"].format(question=question)
    return wording["with_passages"].format(question=question, passages=render_passages(prompts, passages))
