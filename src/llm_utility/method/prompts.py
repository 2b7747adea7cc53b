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
    # The re-ask (method.answers' reask_* contexts): the answer instruction paraphrased.
    "reask.qa.no_passages": ("{question}",),
    "reask.qa.with_passages": ("{question}", "{passages}"),
    "reask.fact.no_passages": ("{question}",),
    "reask.fact.with_passages": ("{question}", "{passages}"),
    # Utility judgments (paper Section 3.3, Appendix A; method.judgments renders them).
    "judgment.definition": (),
    "judgment.pseudo_answer": ("{answer}",),
    "judgment.reject_known": (),
    # The example output each instruction shows ({output_format}); the parser reads outputs by it.
    "judgment.output_format.pointwise": (),
    "judgment.output_format.select": (),
    "judgment.output_format.rank": (),
    "judgment.pointwise": ("{question}", "{passage}", "{definition}", "{pseudo_answer}", "{output_format}"),
    "judgment.listwise.system": (),
    "judgment.listwise.system_ack": (),
    "judgment.listwise.intro": ("{num}", "{question}"),
    "judgment.listwise.intro_ack": (),
    "judgment.listwise.passage": ("{i}", "{passage}"),
    "judgment.listwise.passage_ack": ("{i}",),
    "judgment.listwise.select": ("{question}", "{definition}", "{pseudo_answer}", "{reject_known}", "{output_format}"),
    "judgment.listwise.rank": ("{question}", "{definition}", "{pseudo_answer}", "{output_format}"),
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


def _merge(base: dict, overlay: Mapping) -> dict:
    """``overlay`` deep-merged over ``base`` (mappings merge, anything else replaces)."""
    out = dict(base)
    for key, value in overlay.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) else value
        )
    return out


def load_prompts(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> dict:
    """Load and check the prompt wordings: one file, or several merged in order (a later file
    overrides the keys it sets, e.g. a demo's wording of one prompt over ``config/prompts.yaml``).
    Every required key must exist and keep its placeholders."""
    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    prompts: dict = {}
    for path in files:
        with open(path, encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh)
        if not isinstance(loaded, Mapping):
            raise ValueError(f"{path}: expected a mapping of prompt names to wordings")
        prompts = _merge(prompts, loaded)
    where = " + ".join(str(f) for f in files)
    for key, placeholders in _REQUIRED.items():
        try:
            value = _lookup(prompts, key)
        except KeyError:
            raise ValueError(f"{where}: missing prompt '{key}'") from None
        if not isinstance(value, str):
            raise ValueError(f"{where}: prompt '{key}' must be a string")
        for ph in placeholders:
            if ph not in value:
                raise ValueError(f"{where}: prompt '{key}' must contain the placeholder {ph}")
    return prompts


def render_passages(prompts: Mapping, passages: Sequence[Passage]) -> str:
    """Render passages as ``{title} {text}`` joined by the configured separator."""
    return prompts["passage_separator"].join(prompts["passage"].format(title=p.title, text=p.text) for p in passages)


def answer_prompt(
    prompts: Mapping, task: str, question: str, passages: Sequence[Passage], wording: str = "answer"
) -> str:
    """The answer-generation instruction for ``question`` given ``passages`` (none: no-passage
    prompt), in the ``answer`` wording or its paraphrase ``reask``."""
    if wording not in ("answer", "reask"):
        raise ValueError(f"unknown answer wording '{wording}' (expected 'answer' or 'reask')")
    try:
        templates = prompts[wording][task]
    except KeyError:
        raise ValueError(
            f"no {wording} prompt for task '{task}' (expected one of {sorted(prompts[wording])})"
        ) from None
    if not passages:
        return templates["no_passages"].format(question=question)
    return templates["with_passages"].format(question=question, passages=render_passages(prompts, passages))
