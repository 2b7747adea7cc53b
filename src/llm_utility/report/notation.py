"""The notation of the tables (``report.tables``): how a cell shows its value, whether it is the best
of its comparison or carries a mark instead, and the legend that explains each notation a table file
uses. Pure Python (no pandas), so the job modules can declare table layouts at import.

Bold marks the best cell of a comparison (the paper's: the best per LLM), and only where a method
could have lost (``comparison_marks``). A cell that cannot be ranked shows a mark instead, which the
file's legend explains: ``ub`` an upper bound by construction (Table 1's gold-set columns, selected
on the very answers they report), ``ng`` a value resting mostly on outputs that are no judgment of
the model's own (unparsed or echoed), ``tie`` a comparison whose ranked cells all share one value
(a column of zeros has no best). The legend (``Legend``) names only what the file shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

# --- what a cell shows: its value, bold or a mark, a set size, an interval ----------------------------

# The marks a cell shows instead of bold where it cannot be called best (``comparison_marks``).
UPPER_BOUND, NOT_GENUINE, TIE = "ub", "ng", "tie"
BOLD = "bold"
# The other notation a legend may explain: a set size in parentheses, an interval, a missing value.
SIZE, INTERVAL, MISSING = "size", "interval", "missing"
# A cell at least this share (%) of whose queries got an unparsed or echoed output rests mostly on
# outputs that are no judgment of the model's own: it is marked NOT_GENUINE and never bold.
NOT_GENUINE_SHARE = 50.0

_BOLD = {"md": "**{}**", "tex": r"\textbf{{{}}}", "plain": "{}"}
_MARK = {"md": "<sup>{}</sup>", "tex": r"\textsuperscript{{{}}}", "plain": "^{}"}
_SMALL = {"md": " <sub>[{}, {}]</sub>", "tex": r" {{\scriptsize [{}, {}]}}", "plain": " [{}, {}]"}


def _shown(value: float | None) -> float | None:
    """A value at the printed precision (two decimals); null for a missing or NaN value."""
    return None if value is None or value != value else round(value, 2)


def comparison_marks(values: Sequence[float | None], best: str, excluded: Sequence[str] = ()) -> list[str]:
    """What each cell of one comparison shows beside its value: ``BOLD`` on the best (``best`` "max"
    or "min"; every cell of a tie for best at two decimals), ``TIE`` on every ranked cell when they
    all share one value, the cell's exclusion (``UPPER_BOUND``, ``NOT_GENUINE``: ``excluded``, one
    per cell, "" for none) where it has one, and "" otherwise. Excluded and missing cells are not
    ranked; a cell is bold only where it beats another ranked cell, so never alone, and never where
    all tie (a column of zeros has no best). With ``best`` "" nothing is ranked."""
    excluded = list(excluded) or [""] * len(values)
    if len(excluded) != len(values):
        raise ValueError(f"{len(values)} values but {len(excluded)} exclusions")
    shown = [_shown(v) for v in values]
    marks = [reason if value is not None else "" for value, reason in zip(shown, excluded)]
    ranked = [i for i, (value, reason) in enumerate(zip(shown, excluded)) if value is not None and not reason]
    if not best or len(ranked) < 2:
        return marks
    if best not in ("max", "min"):
        raise ValueError(f"best must be 'max', 'min' or '', got {best!r}")
    distinct = {shown[i] for i in ranked}
    target = max(distinct) if best == "max" else min(distinct)
    for i in ranked:
        if len(distinct) == 1:
            marks[i] = TIE
        elif shown[i] == target:
            marks[i] = BOLD
    return marks


def interval_text(lo: float | None, hi: float | None, markup: str = "md") -> str:
    """A value's interval in small type (``<sub>`` in Markdown, ``\\scriptsize`` in LaTeX), one
    decimal; empty when there is none (intervals off, or too few queries)."""
    if lo is None or hi is None or lo != lo or hi != hi:
        return ""
    return _SMALL[markup].format(f"{lo:.1f}", f"{hi:.1f}")


def cell_text(
    value: float | None,
    mark: str = "",
    markup: str = "md",
    lo: float | None = None,
    hi: float | None = None,
    size: float | None = None,
    used: set[str] | None = None,
) -> str:
    """One cell: the value (two decimals; ``-`` when missing), bold or followed by its ``mark``
    (``comparison_marks``), then the set size in parentheses and the interval in small type where
    given. ``used`` collects the notation shown, for the legend."""
    used = set() if used is None else used
    value = _shown(value)
    if value is None:
        used.add(MISSING)
        return "-"
    text = f"{value:.2f}"
    if mark == BOLD:
        text = _BOLD[markup].format(text)
    elif mark:
        text += _MARK[markup].format(mark)
    if mark:
        used.add(mark)
    if size is not None and size == size:
        text += f" ({size:.1f})"
        used.add(SIZE)
    small = interval_text(lo, hi, markup)
    if small:
        used.add(INTERVAL)
    return text + small


# --- the legend ------------------------------------------------------------------------------------

# How each notation looks in a table file, in the order the legend lists them.
_TERMS = {
    "md": {
        BOLD: "**bold**",
        UPPER_BOUND: "<sup>ub</sup>",
        NOT_GENUINE: "<sup>ng</sup>",
        TIE: "<sup>tie</sup>",
        SIZE: "(x.x)",
        INTERVAL: "<sub>[lo, hi]</sub>",
        MISSING: "-",
    },
    "tex": {
        BOLD: r"\textbf{..}",
        UPPER_BOUND: r"\textsuperscript{ub}",
        NOT_GENUINE: r"\textsuperscript{ng}",
        TIE: r"\textsuperscript{tie}",
        SIZE: "(x.x)",
        INTERVAL: r"{\scriptsize [lo, hi]}",
        MISSING: "-",
    },
}


def interval_words(intervals: Mapping[str, Any] | None) -> str:
    """What a table's bootstrap interval is, from the ``report`` config's resamples, bootstrap_seed
    and confidence (``report.bootstrap``: BCa, the percentile interval where BCa is undefined)."""
    if not intervals:
        return "the value's bootstrap confidence interval over queries"
    return (
        f"the value's {100 * float(intervals['confidence']):g}% bootstrap confidence interval: its queries "
        f"resampled {intervals['resamples']} times (seed {intervals['bootstrap_seed']}), BCa, or the percentile "
        "interval where BCa is undefined"
    )


@dataclass
class Legend:
    """The legend of one table file: what its columns mean (``glossary``: term, meaning) and the
    notation its cells use, collected into ``used`` while they are formatted (``cell_text``), each
    explained once. ``compared`` says which cells one bold comparison ranks; ``upper_bound``,
    ``size``, ``missing`` and ``not_genuine`` (added to the mark's general meaning) say what those
    mean in this table; ``intervals`` is the ``report`` config's bootstrap settings (resamples,
    bootstrap_seed, confidence) behind the intervals. ``missing_term`` is how a missing value prints."""

    glossary: Sequence[tuple[str, str]] = ()
    compared: str = "the rows of one column"
    upper_bound: str = ""
    size: str = ""
    missing: str = "no value: no query to compute it over"
    missing_term: str = "-"
    not_genuine: str = ""
    intervals: Mapping[str, Any] | None = None
    used: set[str] = field(default_factory=set)

    def _meaning(self, notation: str) -> str:
        if notation == BOLD:
            return (
                f"the best value among {self.compared}, bold only where it beats another ranked cell there (a tie "
                "for best at two decimals is bold on each); cells with a mark are not ranked"
            )
        if notation == UPPER_BOUND:
            return self.upper_bound or "an upper bound by construction: built to win, so never bold"
        if notation == NOT_GENUINE:
            text = (
                f"not genuine: at least {NOT_GENUINE_SHARE:.0f}% of the cell's queries got an output that is no "
                "judgment of the model's own (unparsed, or an echo of the prompt), so the value measures those "
                "failures under the paper's prompts (tuned to no model), not utility judgment; never bold"
            )
            return f"{text}. {self.not_genuine}" if self.not_genuine else text
        if notation == TIE:
            return f"every ranked cell among {self.compared} has this value (at two decimals): none is best, no bold"
        if notation == SIZE:
            return self.size or "the average size of the value's set"
        if notation == INTERVAL:
            return f"{interval_words(self.intervals)}; none where the value rests on a single query or none comes out"
        if notation == MISSING:
            return self.missing
        raise ValueError(f"unknown notation {notation!r}")

    def entries(self, markup: str = "md") -> list[tuple[str, str]]:
        """(term as the file shows it, meaning): the glossary, then each notation in ``used``."""
        wrap = "`{}`" if markup == "md" else "{}"
        terms = dict(_TERMS[markup], **{MISSING: wrap.format(self.missing_term)})
        out = [(wrap.format(term), meaning) for term, meaning in self.glossary]
        return out + [(terms[n], self._meaning(n)) for n in _TERMS["md"] if n in self.used]

    def markdown(self) -> str:
        """The legend as a Markdown list under a bold heading; empty when it has nothing to say."""
        lines = [f"- {term}: {meaning}" for term, meaning in self.entries("md")]
        return "**Legend**\n\n" + "\n".join(lines) + "\n" if lines else ""

    def latex(self) -> str:
        """The legend as LaTeX comment lines, to head a ``tabular``."""
        return "".join(f"% {term}: {meaning}\n" for term, meaning in self.entries("tex"))


# --- grouped tables' layouts ------------------------------------------------------------------


class Value(NamedTuple):
    """One value column of a grouped table: its tidy ``column``, the ``header`` it shows under, which
    value is ``best`` ("max", "min", or "" where no cell is bold), and ``failures``: the share
    columns (%) whose sum is the part of the cell's queries without a genuine judgment (unparsed,
    echo); at ``NOT_GENUINE_SHARE`` or more the cell is marked ``ng`` and not ranked."""

    column: str
    header: str
    best: str = ""
    failures: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupedTable:
    """A grouped table's words and layouts (``write_grouped_table``).

    LaTeX, the paper's layout: one block per ``group`` value (e.g. an LLM), rows the ``index``
    columns (e.g. method), columns each value for each value of ``across`` (``F1 NQ``,
    ``F1 HotpotQA``, then ``Acc NQ``...). Markdown: one table per dataset, rows ``md_rows`` (default:
    ``group`` or ``across``, whichever is not the dataset, then ``index``), columns the values'
    headers; ``sections`` splits a dataset's columns into narrower tables, each (heading, value
    columns). Either way, the rows of one ``group`` and one ``across`` value are compared column by
    column (``compared`` says so in words, for the legend). ``intro`` says what the table shows,
    ``glossary`` what its headers mean, ``missing`` what a ``-`` cell means, ``not_genuine`` what an
    ``ng`` cell means here beyond the general meaning; ``counts`` are the columns whose sum is a row's
    number of judged queries, for the Markdown's dataset headings."""

    title: str
    intro: str
    group: str
    index: tuple[str, ...]
    across: str
    values: tuple[Value, ...]
    glossary: tuple[tuple[str, str], ...] = ()
    compared: str = "the rows of one block, column by column"
    missing: str = "no value: no query to compute it over"
    not_genuine: str = ""
    md_rows: tuple[str, ...] = ()
    sections: tuple[tuple[str, tuple[str, ...]], ...] = ()
    counts: tuple[str, ...] = ()

    def rows(self) -> list[str]:
        """The Markdown layout's row columns."""
        return list(self.md_rows) or [c for c in (self.group, self.across) if c != "dataset"] + list(self.index)

    def legend(self, intervals: Mapping[str, Any] | None = None) -> Legend:
        return Legend(
            glossary=self.glossary,
            compared=self.compared,
            missing=self.missing,
            not_genuine=self.not_genuine,
            intervals=intervals,
        )
