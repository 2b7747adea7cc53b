"""Utility judgments (paper Section 3.3): an LLM judging which candidates of C have utility for it.

Selection methods (Tables 2, 3, 5, 8) and the verbalized ranking methods (Table 4) are generations
with judgment prompts; likelihood and attention rankings are scorings (``method.rankings``). Every
method is a fixed recipe named in config (``judgments.methods``, ``rankings.methods``):

    pointwise            one passage at a time, Yes/No
    listwise             all candidates numbered [1]..[k], the model lists the ones it selects
    ..._pa               with the pseudo-answer: the model's own answer given C (its ``topk`` answer)
    ..._pat              with the pseudo-answer generated with thinking on (``topk_think``)
    ..._think            judged with thinking on (models with a thinking switch only)
    ..._reject           the known-rejection instruction added (Appendix E)

Prompt rendering is deterministic, so the store serves every repeated judgment. A judge job's
methods all read one ``JudgeTask``: the judged queries, their candidates, the pseudo-answers, the
prompt wordings and the model session.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..generation.generator import strip_thinking
from ..schemas import JUDGMENTS_SCHEMA
from .parsing import ECHO, GENUINE, JudgmentPrompt, parse_selection, parse_yes_no
from .prompts import Passage, render_passages


@dataclass(frozen=True)
class JudgmentMethod:
    """One verbalized judgment recipe."""

    name: str
    form: str  # "pointwise" | "listwise" (selection) | "rank" (listwise ranking)
    pseudo_answer: str | None = None  # None | "direct" (topk) | "thinking" (topk_think)
    thinking: bool = False  # judge with thinking on
    reject_known: bool = False

    @property
    def pseudo_context(self) -> str | None:
        """The answer context the pseudo-answer comes from."""
        return {None: None, "direct": "topk", "thinking": "topk_think"}[self.pseudo_answer]


def _selection_methods() -> dict[str, JudgmentMethod]:
    methods = {}
    for form in ("pointwise", "listwise"):
        for suffix, pa, think in [
            ("", None, False),
            ("_pa", "direct", False),
            ("_think", None, True),
            ("_pa_think", "direct", True),
            ("_pat_think", "thinking", True),
        ]:
            name = form + suffix
            methods[name] = JudgmentMethod(name, form, pa, think)
    for name, pa in [("listwise_reject", None), ("listwise_pa_reject", "direct")]:
        methods[name] = JudgmentMethod(name, "listwise", pa, False, True)
    return methods


SELECTION_METHODS: dict[str, JudgmentMethod] = _selection_methods()
# Verbalized listwise ranking (Eq. 5); the rankings' own names are listwise and listwise_pa.
VERBAL_RANKING_METHODS: dict[str, JudgmentMethod] = {
    "listwise": JudgmentMethod("listwise", "rank"),
    "listwise_pa": JudgmentMethod("listwise_pa", "rank", "direct"),
}


def selection_method(name: str) -> JudgmentMethod:
    """The selection method called ``name``; an unknown name stops with the list of valid ones."""
    try:
        return SELECTION_METHODS[name]
    except KeyError:
        raise ValueError(f"unknown judgment method {name!r}; valid: {', '.join(SELECTION_METHODS)}") from None


# ---------------------------------------------------------------------------------------------------
# Prompts


def counterpart(method: str) -> str:
    """The method without thinking that a thinking method is compared with in Table 5."""
    return method.replace("_pat_think", "_pa").replace("_think", "")


def _clean(text: str) -> str:
    """Drop the lines an absent optional part (no pseudo-answer, no known-rejection) left empty."""
    return "\n".join(line for line in text.split("\n") if line.strip())


# A method's form -> its key among the wordings' output formats and completion cues.
_FORMAT_KEYS = {"pointwise": "pointwise", "listwise": "select", "rank": "rank"}


def output_format(prompts: Mapping, form: str) -> str:
    """The example output the instruction of a ``form`` (pointwise, listwise, rank) shows the model
    (``judgment.output_format``), by which its outputs are read."""
    return prompts["judgment"]["output_format"][_FORMAT_KEYS[form]]


def _parts(prompts: Mapping, method: JudgmentMethod, pseudo_answer: str | None) -> dict[str, str]:
    wording = prompts["judgment"]
    if method.pseudo_answer and pseudo_answer is None:
        raise ValueError(f"method {method.name} needs a pseudo-answer")
    return {
        "definition": wording["definition"],
        "pseudo_answer": wording["pseudo_answer"].format(answer=pseudo_answer) if method.pseudo_answer else "",
        "reject_known": wording["reject_known"] if method.reject_known else "",
        "output_format": output_format(prompts, method.form),
    }


def pointwise_prompt(
    prompts: Mapping, method: JudgmentMethod, question: str, passage: Passage, pseudo_answer: str | None = None
) -> str:
    """The Yes/No instruction for one candidate (Eq. 3), as one user turn."""
    text = prompts["judgment"]["pointwise"].format(
        question=question, passage=render_passages(prompts, [passage]), **_parts(prompts, method, pseudo_answer)
    )
    return _clean(text)


def listwise_messages(
    prompts: Mapping,
    method: JudgmentMethod,
    question: str,
    passages: Sequence[Passage],
    pseudo_answer: str | None = None,
) -> list[dict[str, str]]:
    """RankGPT-style chat turns for a listwise selection (Eq. 4) or ranking (Eq. 5): the task, each
    passage in its own user turn acknowledged by the assistant, then the final instruction."""
    w = prompts["judgment"]["listwise"]
    final = w["rank"] if method.form == "rank" else w["select"]
    messages = [
        {"role": "user", "content": w["system"]},
        {"role": "assistant", "content": w["system_ack"]},
        {"role": "user", "content": w["intro"].format(num=len(passages), question=question)},
        {"role": "assistant", "content": w["intro_ack"]},
    ]
    for i, passage in enumerate(passages, start=1):
        messages.append(
            {"role": "user", "content": w["passage"].format(i=i, passage=render_passages(prompts, [passage]))}
        )
        messages.append({"role": "assistant", "content": w["passage_ack"].format(i=i)})
    content = final.format(question=question, num=len(passages), **_parts(prompts, method, pseudo_answer))
    messages.append({"role": "user", "content": _clean(content)})
    return messages


def render_judgment(prompts: Mapping, method: JudgmentMethod, generator, content: str | list[dict[str, str]]) -> str:
    """The model's prompt string for a judgment: for a chat model, the turns through its chat
    template; for a completion model, the user turns as one block followed by the completion cue."""
    chat = generator.prompt_format == "chat"
    cue = prompts["judgment"]["completion_cue"][_FORMAT_KEYS[method.form]]
    if isinstance(content, str):
        return generator.render(content) if chat else f"{content}\n{cue}"
    if chat:
        return generator.render_chat(content)
    return "\n".join(m["content"] for m in content if m["role"] == "user") + f"\n{cue}"


# "[i],[j],..." in a format: the first two placeholder ids, what separates them, and the ellipsis.
_PLACEHOLDER_LIST = re.compile(r"\[\s*[^\W\d_]\s*\](?P<sep>[^\[\]]*?)\[\s*[^\W\d_]\s*\](?P=sep)?\s*(?:\.\.\.|…)")


def full_answer(form: str, k: int, fmt: str | None = None) -> str:
    """The longest answer the instruction asks for: every one of ``k`` candidates' identifiers in
    the output format ``fmt`` (``My selection:[[1],[2],...,[k]].``, ``[1]>[2]>...>[k]``), or, for
    a pointwise judgment, the format with its choice made (``Utility judgment: Yes.``). Without a
    format, or one without a placeholder list, the ids joined as ``[1], [2], ...`` (``[1] > [2] >
    ...`` for a ranking)."""
    if form == "pointwise":
        return re.sub(r"(?i)yes\s*/\s*no", "Yes", fmt or "Yes")
    found = _PLACEHOLDER_LIST.search(fmt or "")
    if found is None:
        separator = " > " if form == "rank" else ", "
        return separator.join(f"[{i}]" for i in range(1, k + 1))
    ids = found.group("sep").join(f"[{i}]" for i in range(1, k + 1))
    return fmt[: found.start()] + ids + fmt[found.end() :]


def check_output_cap(generator, form: str, k: int, max_new_tokens: int, key: str, fmt: str | None = None) -> None:
    """Raise ValueError when ``max_new_tokens`` cannot hold the longest answer the instruction asks
    for (``full_answer``: all ``k`` candidates' identifiers in the output format ``fmt``, or a
    pointwise verdict) in ``generator``'s tokens: such an output is cut off, does not parse, and would
    be counted as a failure wherever the model answers in full. ``key`` is the config key of the cap,
    for the message."""
    answer = full_answer(form, k, fmt)
    needed = generator.count_tokens([answer], special=False)[0]
    if max_new_tokens < needed:
        shown = answer if len(answer) <= 40 else answer[:37] + "..."
        raise ValueError(
            f"{key} is {max_new_tokens}, but the full answer ({shown}) takes {needed} tokens of "
            f"{generator.slug}'s tokenizer: raise {key} to fit it and a sentence"
        )


# ---------------------------------------------------------------------------------------------------
# Judging


@dataclass(frozen=True)
class JudgeTask:
    """What every judgment and ranking of one (dataset, LLM) job reads.

    ``queries``: the judged queries (qid, question, task); ``pools``: each judged query's candidates
    C in retrieval order; ``passages``: their text as the prompts hold it (cut to the model's
    ``max_passage_tokens``); ``pseudo_answers``: answer context (``topk``, ``topk_think``) -> qid ->
    the model's answer; ``prompts``: the wordings (``config/prompts.yaml``); ``spec``: the model spec;
    ``generator`` and ``calls``: the loaded model and its generation-store session.
    """

    dataset: str
    queries: pl.DataFrame
    pools: Mapping[str, Sequence[str]]
    passages: Mapping[str, Passage]
    pseudo_answers: Mapping[str, Mapping[str, str]]
    prompts: Mapping
    spec: Mapping[str, Any]
    generator: Any
    calls: Any

    def questions(self) -> dict[str, str]:
        return dict(self.queries.select("qid", "question").iter_rows())

    def tasks(self) -> dict[str, str]:
        return dict(self.queries.select("qid", "task").iter_rows())


@dataclass(frozen=True)
class Generations:
    """One method's generation calls, prepared before any is made so that a judge job can make
    several methods' calls together (``generate_together``): ``section`` names the method in the
    cost table, ``read`` turns the outputs, in the order of ``prompts``, into the method's table."""

    section: str
    prompts: list[str]
    max_new_tokens: int
    read: Callable[[list[str]], pl.DataFrame]


def generate_together(task: JudgeTask, methods: Sequence[Generations]) -> list[pl.DataFrame]:
    """Each method's table, in order; the calls of all methods with the same output limit are made
    in one store call, so their rows decode together: a decoding step reads every weight once,
    however many rows it carries (the demo's three listwise methods: 3 rows a step each, 9 together).
    The store keys every call without its batch, as the CPU engine computes it (a row decodes the
    same alone and in any batch), so each method gets what it would get alone; its counts stay its
    own (the store's ``sections``)."""
    gen = task.generator
    tables: list[pl.DataFrame | None] = [None] * len(methods)
    by_limit: dict[int, list[int]] = {}
    for i, m in enumerate(methods):
        by_limit.setdefault(m.max_new_tokens, []).append(i)
    for limit, group in by_limit.items():
        outputs = task.calls.generate(
            gen,
            [p for i in group for p in methods[i].prompts],
            max_new_tokens=limit,
            stop=task.spec["stop"],
            batch_size=task.spec["batch_size"],
            desc=f"{gen.slug} {task.dataset} {' + '.join(methods[i].section for i in group)}",
            sections=[methods[i].section for i in group for _ in methods[i].prompts],
        )
        at = 0
        for i in group:
            n = len(methods[i].prompts)
            tables[i] = methods[i].read(outputs[at : at + n])
            at += n
    return tables


def selection_calls(task: JudgeTask, method: JudgmentMethod, max_new_tokens: int) -> Generations:
    """One selection method's calls (``section``: the method's name), read into its judgments of
    every candidate of C: columns qid, pid, selected, parsed, echo, output (the raw output; a
    listwise method's is the same on all candidates of a query). An output that does not parse, or
    repeats its prompt (``echo``), is a row with ``parsed = false`` and nothing selected."""
    gen, wordings = task.generator, task.prompts
    answers = task.pseudo_answers.get(method.pseudo_context, {}) if method.pseudo_context else None
    keys, texts = [], []
    for qid, question in task.queries.select("qid", "question").iter_rows():
        answer = answers.get(qid, "") if answers is not None else None
        pool = [task.passages[p] for p in task.pools[qid]]
        if method.form == "pointwise":
            for passage in pool:
                keys.append((qid, passage.pid))
                texts.append(
                    render_judgment(
                        wordings, method, gen, pointwise_prompt(wordings, method, question, passage, answer)
                    )
                )
        else:
            keys.append((qid, None))
            texts.append(
                render_judgment(wordings, method, gen, listwise_messages(wordings, method, question, pool, answer))
            )
    labels = [f"dataset {task.dataset}, query {qid}, judgment {method.name}" for qid, _ in keys]
    gen.check_fits(texts, labels, reserve=max_new_tokens)
    fmt = output_format(wordings, method.form)

    def read(outputs: list[str]) -> pl.DataFrame:
        rows = []
        for (qid, pid), text, raw in zip(keys, texts, outputs, strict=True):
            out = strip_thinking(raw) if "</think>" in raw else raw
            # Read against the prompt it answers: a copy of the prompt is never a judgment.
            prompt = JudgmentPrompt(text, fmt)
            if method.form == "pointwise":
                selected, status = parse_yes_no(out, prompt)
                rows.append((qid, pid, selected, status == GENUINE, status == ECHO, raw))
            else:
                pool = task.pools[qid]
                ids, status = parse_selection(out, len(pool), prompt)
                chosen = {pool[i - 1] for i in ids}
                rows += [(qid, p, p in chosen, status == GENUINE, status == ECHO, raw) for p in pool]
        return pl.DataFrame(rows, schema=JUDGMENTS_SCHEMA, orient="row")

    return Generations(method.name, texts, max_new_tokens, read)
