"""The findings summary, read first: what this run establishes, in a few plain sentences per part of
the paper, naming the effect and interval each sentence rests on. A pure function of findings.json's
entries (``summarize``), rendered as Markdown (the top of findings.md), HTML (findings.html) and
reStructuredText (the Snakemake report's opening page).

Each headline finding (neither a re-ask twin nor a control: those are read with the finding they
belong to) is told once, as one of:

- established: it holds, and nothing built in decides it: it ``can_fail``, or its re-ask twin
  holds (``survives``); where it has a control on the queries unknown to both LLMs, that control
  holds as well, and is itself established;
- holds, not established: it holds, but only where its construction builds part of it in (the
  twin does not hold, did not run, or there is none), or its control does not hold;
- reversed: the interval lies entirely on the other side of the claim;
- undecided: the interval contains the value the claim is tested against;
- not judged here, with the reasons: too few queries (``report.min_queries``), outputs that are
  mostly not judgments (``mostly_non_genuine``: unparsed, or the prompt repeated), not run or out
  of scope (the entry's reason), or a sign fixed by construction (``cannot_fail``) that its re-ask
  twin does not confirm.

The controls the workflow has are the transfer findings' on the queries unknown to both LLMs of a
pair (``control_of``), and the sentences name them so.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .framework import BY_CONSTRUCTION, TOO_FEW

Entry = Mapping[str, Any]

ESTABLISHED, BUILT_IN, REVERSED, UNDECIDED, NOT_JUDGED = (
    "established",
    "holds, not established",
    "reversed",
    "undecided",
    "not judged",
)
# Why a finding cannot be judged here, in the order the summary gives the reasons.
FEW, NON_GENUINE, NOT_RUN_REASON, OUT_OF_SCOPE, FIXED = "too few", "not judgments", "not run", "out of scope", "fixed"


@dataclass(frozen=True)
class Paragraph:
    """One paragraph of the summary: ``title`` (empty for the opening one) and its sentences, plain
    text with finding ids in backticks."""

    title: str
    sentences: tuple[str, ...]


@dataclass(frozen=True)
class Reading:
    """How one headline finding reads: its ``kind`` and what the sentence says of it beside its own
    numbers (``why``: the twin's or the control's numbers; ``reasons``: why it is not judged)."""

    entry: Entry
    kind: str
    why: str = ""
    reasons: tuple[str, ...] = ()


# --- numbers and words --------------------------------------------------------------------------------


def _figure(x: float, decimals: int) -> str:
    return f"{x:.{decimals}f}"


def numbers(e: Entry) -> str:
    """An entry's effect and interval: ``40.0 [20.0, 65.0]`` (three decimals where every number is
    below 1, e.g. an AUC), ``93.8, no interval``, or, for a verdict read from its cells, what they say."""
    if e.get("effect") is None:
        if e.get("overall") == "cells":
            counts = ", ".join(f"{k} {v}" for v, k in (e.get("cell_verdicts") or {}).items() if k)
            return f"no pooled effect (cells: {counts})" if counts else "no pooled effect"
        return "no effect"
    bounds = [e["effect"]] + ([e["lo"], e["hi"]] if e.get("lo") is not None else [])
    decimals = 3 if 0 < max(abs(x) for x in bounds) < 1 else 1
    if e.get("lo") is None:
        return f"{_figure(e['effect'], decimals)}, no interval"
    return f"{_figure(e['effect'], decimals)} [{_figure(e['lo'], decimals)}, {_figure(e['hi'], decimals)}]"


def short(text: str) -> str:
    """``text`` without a parenthesis that closes it (a claim's gloss, a reason's detail)."""
    text = text.strip()
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text[:i].rstrip() if text[:i].strip() else text
    return text


def unit_head(unit: str) -> str:
    """What a unit measures, without how it is compared: ``correct answers (%)`` of ``correct
    answers (%), own gold set minus Human, paired per query``."""
    depth = 0
    for i, ch in enumerate(unit):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            return unit[:i]
    return unit


def _code(finding_id: str) -> str:
    return f"`{finding_id}`"


def _queries(n: int) -> str:
    return f"{n} quer{'y' if n == 1 else 'ies'}"


def _tested(e: Entry) -> str:
    """`` (expected > 50)`` where a claim is tested against another value than 0."""
    expected = str(e.get("expected", ""))
    return "" if expected in ("> 0", "< 0", "") else f" (expected {expected})"


def _with_unit(e: Entry) -> str:
    """``table1_human_over_u``: 40.0 [20.0, 65.0], correct answers (%)."""
    return (
        f"{_code(e['id'])}: {numbers(e)}, {unit_head(e['unit'])}"
        if e.get("unit")
        else f"{_code(e['id'])}: {numbers(e)}"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _verb(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


# --- reading each finding -----------------------------------------------------------------------------


def _established_alone(e: Entry, twin: Entry | None) -> bool:
    """Whether a finding that holds (or is described) owes nothing to its construction: it can fail,
    or its re-ask twin holds."""
    return e.get("construction") == "can_fail" or bool(twin and twin.get("survives"))


def _twin_text(twin: Entry | None) -> str:
    """What a finding's re-ask twin says, where the finding is partly built in."""
    if twin is None:
        return "it is partly built in and has no re-ask control"
    if twin["status"] != "run":
        return f"its re-ask twin is {twin['verdict']} ({short(twin['reason'])})"
    return f"its re-ask twin reads {numbers(twin)}, {twin['verdict']}"


def read_finding(e: Entry, twins: Mapping[str, Entry], controls: Mapping[str, Entry]) -> Reading:
    """How the headline finding ``e`` reads, given the re-ask twins and the controls (by the id of
    the finding they belong to)."""
    twin = twins.get(e["id"])
    reasons: list[str] = []
    if e["verdict"] == TOO_FEW:
        reasons.append(FEW)
    if e.get("mostly_non_genuine"):
        reasons.append(NON_GENUINE)
    if e["status"] != "run":
        reasons.append(OUT_OF_SCOPE if e["status"] == OUT_OF_SCOPE else NOT_RUN_REASON)
    if e["verdict"] == BY_CONSTRUCTION and not _established_alone(e, twin):
        reasons.append(FIXED)
    if reasons:
        return Reading(e, NOT_JUDGED, _twin_text(twin) if FIXED in reasons else "", tuple(reasons))
    if e["verdict"] == "reversed":
        return Reading(e, REVERSED)
    if e["verdict"] not in ("holds", BY_CONSTRUCTION):
        return Reading(e, UNDECIDED)
    # It holds (or its fixed sign is confirmed by its twin): established only where nothing built in
    # decides it, and its control on the queries unknown to both LLMs holds as soundly.
    sound = _established_alone(e, twin)
    why = [] if sound else [_twin_text(twin)]
    if sound and e.get("construction") != "can_fail" and twin is not None:
        why.append(f"re-ask twin {numbers(twin)}")
    control = controls.get(e["id"])
    if control is not None and control["status"] == "run":
        control_twin = twins.get(control["id"])
        control_sound = control["verdict"] == "holds" and _established_alone(control, control_twin)
        text = f"on the queries unknown to both LLMs {numbers(control)}, {control['verdict']}"
        if control["verdict"] == "holds" and not control_sound:
            text += ", but " + _twin_text(control_twin).replace("its ", "that control's ", 1)
        why.append(text)
        sound = sound and control_sound
    return Reading(e, ESTABLISHED if sound else BUILT_IN, "; ".join(why))


# --- the summary --------------------------------------------------------------------------------------


def _reason_label(reasons: tuple[str, ...], min_queries: int) -> str:
    words = {
        FEW: f"fewer than {min_queries} queries",
        NON_GENUINE: "outputs mostly not judgments",
        NOT_RUN_REASON: "not run",
        OUT_OF_SCOPE: "out of scope",
        FIXED: "a sign fixed by construction",
    }
    label = ", ".join(words[r] for r in reasons)
    return label[0].upper() + label[1:]


def _item(r: Reading, with_reason: bool = True) -> str:
    """One finding in a list of those that cannot be judged: its numbers, queries and what its claim
    is tested against, or (``with_reason``) why it did not run."""
    e = r.entry
    if NOT_RUN_REASON in r.reasons or OUT_OF_SCOPE in r.reasons:
        return f"{_code(e['id'])} ({short(e['reason'])})" if e.get("reason") and with_reason else _code(e["id"])
    notes = [f"n={e['n']}"] if e.get("effect") is not None and FEW in r.reasons else []
    notes += [f"expected {e['expected']}"] if _tested(e) else []
    text = f"{_code(e['id'])} {numbers(e)}" + (f" ({'; '.join(notes)})" if notes else "")
    return f"{text}, and {r.why}" if r.why else text


def _section_sentences(readings: Sequence[Reading], min_queries: int) -> list[str]:
    """What one part of the paper's findings say: what is established, what holds only where it is
    built in, what is reversed, what is undecided, and what cannot be judged here and why."""
    sentences = []
    for r in readings:
        e = r.entry
        claim = short(e["claim"])
        if r.kind == ESTABLISHED:
            sentences.append(f"Established: {claim} ({_with_unit(e)}{'; ' + r.why if r.why else ''}).")
        elif r.kind == BUILT_IN:
            sentences.append(f"Holds but not established: {claim} ({_with_unit(e)}), but {r.why}.")
        elif r.kind == REVERSED:
            sentences.append(f"Reversed, the run shows the opposite of: {claim} ({_with_unit(e)}).")
    undecided = [
        f"{_code(r.entry['id'])} {numbers(r.entry)}{_tested(r.entry)}" for r in readings if r.kind == UNDECIDED
    ]
    if undecided:
        sentences.append(f"Undecided (the interval contains the tested value): {', '.join(undecided)}.")
    groups: dict[tuple[str, ...], list[Reading]] = {}
    for r in readings:
        if r.kind == NOT_JUDGED:
            groups.setdefault(r.reasons, []).append(r)
    if groups:
        sentences.append("Cannot be judged here.")
    for reasons, group in groups.items():
        label = _reason_label(reasons, min_queries)
        why = {short(r.entry.get("reason") or "") for r in group}
        if len(group) > 1 and len(why) == 1 and (NOT_RUN_REASON in reasons or OUT_OF_SCOPE in reasons):
            # One reason for all (e.g. no dataset stands for the claim's): said once.
            label += f" ({why.pop()})" if next(iter(why)) else ""
            sentences.append(f"{label}: {', '.join(_item(r, with_reason=False) for r in group)}.")
        else:
            sentences.append(f"{label}: {', '.join(_item(r) for r in group)}.")
    return sentences


def _opening(readings: Sequence[Reading], llms: Sequence[str], min_queries: int) -> list[str]:
    """How many findings this run establishes, which, and why the others are not."""
    count = {k: sum(r.kind == k for r in readings) for k in (ESTABLISHED, BUILT_IN, REVERSED, UNDECIDED)}
    established = [_code(r.entry["id"]) for r in readings if r.kind == ESTABLISHED]
    sizes = [r.entry["n"] for r in readings if r.entry["status"] == "run" and r.entry.get("n")]
    on = f" on {min(sizes)} to {_queries(max(sizes))} each" if sizes and min(sizes) != max(sizes) else ""
    on = on or (f" on {_queries(sizes[0])} each" if sizes else "")
    first = (
        f"This run tests {_count(len(readings), 'finding')}{' with ' + _and(list(llms)) if llms else ''}{on}, and "
        + (f"establishes {len(established)}: {_and(established)}." if established else "establishes none of them.")
    )
    others = []
    if count[BUILT_IN]:
        others.append(f"{count[BUILT_IN]} {_verb(count[BUILT_IN], 'holds', 'hold')} only where built in")
    others.append(
        f"{count[REVERSED]} {_verb(count[REVERSED], 'is', 'are')} reversed" if count[REVERSED] else "none is reversed"
    )
    if count[UNDECIDED]:
        others.append(f"{count[UNDECIDED]} {_verb(count[UNDECIDED], 'is', 'are')} undecided")
    rest = _and(others)
    sentences = [first, f"Of the others, {rest}." if established else f"{rest[0].upper()}{rest[1:]}."]
    judged = [r for r in readings if r.kind == NOT_JUDGED]
    if judged:
        reasons = {
            FEW: (f"{{}} on fewer than {min_queries} queries (report.min_queries)", "rests", "rest"),
            NON_GENUINE: (
                "{} mostly on outputs that are not judgments (unparsed, or the prompt echoed)",
                "rests",
                "rest",
            ),
            NOT_RUN_REASON: ("{} run", "was not", "were not"),
            OUT_OF_SCOPE: ("{} out of scope (no configured dataset stands for the claim's)", "is", "are"),
            FIXED: ("{} a sign fixed by construction", "has", "have"),
        }
        why = []
        for key, (text, one, many) in reasons.items():
            n = sum(key in r.reasons for r in judged)
            if n:
                why.append(f"{n} {text.format(_verb(n, one, many))}")
        several = sum(len(r.reasons) for r in judged) > len(judged)
        sentences.append(
            f"{len(judged)} cannot be judged here{', some for two reasons' if several else ''}: {_and(why)}."
        )
    sentences.append(
        "A finding is established when it holds and nothing built in decides it: it can fail, or its re-ask twin "
        "holds too (and so does its control on the queries unknown to both LLMs, where it has one)."
    )
    return sentences


def summarize(entries: Sequence[Entry], *, min_queries: int, llms: Sequence[str] = ()) -> list[Paragraph]:
    """The summary of findings.json's ``entries``: an opening paragraph (how many findings this run
    establishes, and why the others are not), then one paragraph per part of the paper (each entry's
    ``section``, in their order). ``min_queries`` is ``report.min_queries``; ``llms`` are named."""
    twins = {e["twin_of"]: e for e in entries if "twin_of" in e}
    controls = {e["control_of"]: e for e in entries if "control_of" in e}
    headline = [e for e in entries if "twin_of" not in e and "control_of" not in e]
    readings = [read_finding(e, twins, controls) for e in headline]
    paragraphs = [Paragraph("", tuple(_opening(readings, llms, min_queries)))]
    for section in dict.fromkeys(str(e.get("section") or "Findings") for e in headline):
        part = [r for r in readings if str(r.entry.get("section") or "Findings") == section]
        paragraphs.append(Paragraph(section, tuple(_section_sentences(part, min_queries))))
    return paragraphs


# --- rendering ----------------------------------------------------------------------------------------

_CODE = re.compile(r"`([^`]+)`")


def summary_markdown(paragraphs: Sequence[Paragraph]) -> str:
    return "\n\n".join((f"**{p.title}.** " if p.title else "") + " ".join(p.sentences) for p in paragraphs) + "\n"


def _rst_text(text: str) -> str:
    return re.sub(r"([\\*_|])", r"\\\1", text)


def summary_rst(paragraphs: Sequence[Paragraph]) -> str:
    """The summary as reStructuredText paragraphs (no heading: the page that includes it has one)."""

    def line(text: str) -> str:
        pieces = _CODE.split(text)
        return "".join(f"``{p}``" if i % 2 else _rst_text(p) for i, p in enumerate(pieces))

    return (
        "\n\n".join(
            (f"**{_rst_text(p.title)}.** " if p.title else "") + line(" ".join(p.sentences)) for p in paragraphs
        )
        + "\n"
    )


def summary_html(paragraphs: Sequence[Paragraph]) -> str:
    def line(text: str) -> str:
        pieces = _CODE.split(text)
        return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(pieces))

    return "\n".join(
        "<p>" + (f"<b>{html.escape(p.title)}.</b> " if p.title else "") + line(" ".join(p.sentences)) + "</p>"
        for p in paragraphs
    )
