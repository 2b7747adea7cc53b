"""How much of a judgment finding's cells rests on genuine judgments: the shares of genuine,
unparsed and echo outputs of each judgment a cell compares (Sections 6.1 and 6.2's findings)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from ...method.judgments import VERBAL_RANKING_METHODS
from ...method.parsing import GENUINE
from ..judgments import outcome_shares, outcomes_of
from .framework import FindingInputs

# A cell rests mostly on non-genuine outputs when fewer than this share (%) of the judgments it
# compares are the model's own (the rest did not parse or repeated the prompt).
GENUINE_MAJORITY = 50.0

# (label, judgments or rankings table, the cell's qids or None for every judged query)
Side = tuple[str, pl.DataFrame, "set[str] | None"]


def judged_sides(
    inputs: FindingInputs, cell: dict[str, Any], sides: list[tuple[str, str, str]], qids: set[str] | None = None
) -> list[Side]:
    """(label, table, qids) of each (kind, llm, method) side a cell compares: kind ``judgments`` or
    ``rankings`` (verbalized ones only: the others are scores, never echoes); ``qids`` the cell's
    queries (None: every judged query)."""
    out = []
    for kind, llm, method in sides:
        if kind == "rankings" and method not in VERBAL_RANKING_METHODS:
            continue
        table = getattr(inputs, kind).get((cell["dataset"], llm, method))
        if table is not None:
            label = method if llm == cell.get("llm") else f"{method} of {llm}"
            out.append((label if kind == "judgments" else f"{label} ranking", table, qids))
    return out


def nonempty_gold(inputs: FindingInputs, dataset: str, llm: str) -> set[str]:
    """The queries with a non-empty gold set (C) of ``llm`` on ``dataset``."""
    gold = inputs.gold.get((dataset, llm, "C"))
    return set() if gold is None else set(gold["qid"].cast(pl.String).to_list())


def with_parse_shares(entry: dict[str, Any], sides_of: Callable[[dict[str, Any]], list[Side]]) -> dict[str, Any]:
    """A judgment finding's entry with, in each cell, ``parse``: the shares (%) of genuine, unparsed
    and echo outputs of each judgment it compares (``sides_of(cell)`` -> [(label, judgments or
    rankings table, the cell's qids or None for all judged)]), and a note on every cell where fewer
    than ``GENUINE_MAJORITY`` % of them are genuine. ``non_genuine_cells`` counts those in scope, and
    ``mostly_non_genuine`` says (as does the entry's note) whether they are most of its in-scope
    cells with parse shares: its verdict then compares failures to judge, not judgments of utility."""
    if entry["status"] != "run":
        return entry
    cells, flagged, counted = [], 0, 0
    for cell in entry["cells"]:
        parse = {}
        for label, table, qids in sides_of(cell):
            outcome = outcomes_of(table)
            chosen = [q for q in (outcome if qids is None else qids) if q in outcome]
            if chosen:
                parse[label] = {k: round(v, 1) for k, v in outcome_shares(outcome, chosen).items()}
        if not parse:
            cells.append(cell)
            continue
        cell = {**cell, "parse": parse}
        genuine = float(np.mean([s[GENUINE] for s in parse.values()]))
        if cell.get("in_scope", True):
            counted += 1
        if genuine < GENUINE_MAJORITY:
            flagged += cell.get("in_scope", True)
            # The shares themselves are the cell's ``parse`` (a column of findings.md's cell tables).
            cell["note"] = "; ".join(t for t in ("rests mostly on non-genuine outputs", cell.get("note")) if t)
        cells.append(cell)
    mostly = bool(counted) and flagged > counted / 2
    entry = {**entry, "cells": cells, "non_genuine_cells": flagged, "mostly_non_genuine": mostly}
    if mostly:
        # What "non-genuine" means (did not parse, or repeated the prompt) is the legend's.
        note = f"{flagged} of {counted} in-scope cells mostly non-genuine: not a test of utility judgment"
        entry["note"] = "; ".join(t for t in (note, entry.get("note")) if t)
    return entry
