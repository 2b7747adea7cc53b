"""Parsers of LLM judgment outputs: listwise selection, pointwise Yes/No and listwise ranking.

Every parser is total: it returns a ``Reading`` for any string (and for ``None``) and never raises,
so a judgment output that does not parse becomes a recorded row, not a failed job. Identifiers are
the 1-based numbers of the candidates in the prompt ([1]..[k]). A reading's ``status`` is one of

* ``genuine``: the output states a judgment in its own words (``parsed``);
* ``unparsed``: no judgment can be read from it;
* ``echo``: it repeats the prompt (see *Echoes*); it counts as unparsed, reported apart.

Shared rules
------------
* **Thinking.** A ``<think>...</think>`` block is dropped: everything up to the last ``</think>``
  goes (a template that opens the block in the prompt leaves only the closing tag). A ``<think>``
  with no ``</think>`` after it (cut off by the token limit) means nothing parsed.
* **Marker.** Where the output format has a marker (the text before its first colon,
  ``My selection:``, ``Utility judgment:``), the output is read after the marker's last occurrence
  that has text after it; without one in the output, the whole output is read.
* **Explicit identifiers** are, in order of appearance: bracketed ids (``[3]``, ``[1], [4]``,
  ``[[1],[3]]``, ``[1, 4]``, also ``【3】``/``［3］``) and ids named with a keyword (``Passage 3``,
  ``passage [2]``, ``Passages 1, 3 and 4``, ``Document #2``).
* **Bare numbers** count only when there is no explicit identifier, and only on *list-like* lines:
  after an optional short label (``Answer:``, ``My selection:``), a leading bullet and markdown
  emphasis, the line holds nothing but numbers and separators (``,`` ``;`` ``>`` ``/`` ``&`` ``|``
  ``→`` whitespace, the words ``and``/``then``, a final period). So ``1, 3 and 4`` and ``2 > 1 > 3``
  count, while ``The 2 passages ...`` does not. ``Answer: 1990`` is list-like, but 1990 is out of
  range, so it is dropped like any out-of-range id.
* Out-of-range (not in 1..k) and repeated identifiers are dropped; the first occurrence keeps its
  place. An output parses when at least one identifier survives (or, for a selection, when it says
  explicitly that nothing is selected). Ids given only out of range do not parse.

Echoes
------
Given the prompt the output answers (a ``JudgmentPrompt``: the text the model was shown and the
output format its instruction gives), a judgment is read only from what the model wrote itself.
Small models copy their prompt: the instruction's example, an acknowledgement turn ("Received
passage [1]."), a passage with its identifier ("[1] Canada The ISO 3166-1 codes of Canada ..."),
the instruction. So:

* **Copied text.** A word of the output is copied when it lies in a run of at least
  ``COPY_NGRAM`` consecutive words (casefolded letters and digits) that also occurs in the prompt,
  the run holding at least one word with a letter (a list of numbers alone is never copied text);
  the punctuation after a copied word belongs to the copy. A passage's header, its bracketed id and
  the first word after it in the prompt (``[1] Peru``: its title), is copied text too, however short.
  An identifier or a "none" phrase inside copied text is the prompt's, not the model's, and does
  not count.
* **The example.** An output whose own identifiers are exactly the example of the output format
  (``[1], [3]`` when the instruction says "for example: [1], [3]") is an echo, even where a model
  meant it: a format with placeholders (``[[i],[j],...]``, the authors') never costs a selection.
* **The format.** An output that writes the format's placeholders (``[i]``, ``[j]``) or its choice
  (``Yes/No``, ``Yes or No``) and no judgment of its own is an echo.
* An output whose identifiers are all copied, or that states no judgment and is mostly (at least
  ``COPY_SHARE`` of its words) copied text, is an echo. One with a judgment of its own is genuine,
  whatever else it copies: ``Received passage [1]. My selection:[[2]]`` selects [2].

Without a prompt, nothing is an echo: the parsers read outputs as they did before echoes existed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

__all__ = [
    "ECHO",
    "GENUINE",
    "STATUSES",
    "UNPARSED",
    "JudgmentPrompt",
    "Reading",
    "parse_ranking",
    "parse_selection",
    "parse_yes_no",
    "strip_think",
]

GENUINE, UNPARSED, ECHO = "genuine", "unparsed", "echo"
STATUSES = (GENUINE, UNPARSED, ECHO)
# A run of this many words shared with the prompt is copied text: "Received passage [1]" is three.
COPY_NGRAM = 3
# An output without a judgment of its own is an echo when at least this share of its words is copied.
COPY_SHARE = 0.5

# Longer digit runs are never candidate ids; the bound also keeps int() far from its digit limit.
_MAX_ID_DIGITS = 9

_EXPLICIT = re.compile(
    # [3]  [1, 4]  【3】  ［3］
    r"[\[【［]\s*(?P<bracket>[0-9]+(?:\s*[,;，、]\s*[0-9]+)*)\s*[\]】］]"
    # Passage 3 / passages 1, 3 and 4 / passage [2] / Document #2 / psg no. 5
    # (every optional part starts with a mandatory character, so whitespace runs cannot backtrack)
    r"|\b(?:passages?|documents?|docs?|psgs?|candidates?)\s*(?:(?:[-_:#]|no\.?|number)\s*)?(?:[\[(]\s*)?"
    r"(?P<keyword>[0-9]+(?:(?:\s*[\])])?\s*(?:,|;|&|\band\b)\s*(?:[\[(]\s*)?[0-9]+)*)",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"[0-9]+")

# Tokens of a list-like line: numbers, separators, and the words "and"/"then".
_LIST_TOKEN = re.compile(r"[0-9]+|[^\W\d_]+|\S", re.UNICODE)
_LIST_SEPARATORS = frozenset(",;>/&|→≻⟩»，、.()[]{}#*`_")
_LIST_WORDS = frozenset({"and", "then"})
# "Answer:", "My selection:", "The ranking is:" (a short prefix without digits or brackets).
_LABEL = re.compile(r"^[^0-9\[\]:\n]{0,40}:\s*")
_BULLET = re.compile(r"^\s*(?:[-*•]\s+)+")

_EXPLICIT_NONE = re.compile(
    r"\bnone\b|\bnothing\b|\bempty\b|\[\s*\]"
    r"|\bno\s+(?:\w+\s+){0,2}(?:passages?|documents?|candidates?|ids?|identifiers?|selection)\b"
    r"|(?:\bnot|n[’']t)\s+(?:\w+\s+){0,3}any\b",
    re.IGNORECASE,
)

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_YES_NO_ECHO = re.compile(r"^\W*(?:yes\s*(?:or|/)\s*no|no\s*(?:or|/)\s*yes)\b", re.IGNORECASE)
# A format's marker: the short text before its first colon ("My selection:", "Utility judgment:").
_MARKER = re.compile(r"^\s*([^\[\]:0-9\n]{1,40}):")
# A placeholder identifier of a format: "[i]", "[j]".
_PLACEHOLDER = re.compile(r"[\[【［]\s*([^\W\d_])\s*[\]】］]")
# A passage's header as the prompt numbers it: its bracketed id and the first word after it.
_HEADER = re.compile(r"[\[【［]\s*([0-9]+)\s*[\]】］][ \t]*([^\W_]+)")


class Reading(NamedTuple):
    """A parsed judgment: ``value`` (selected ids, a Yes as True, or a ranking) and ``status``
    (``genuine``, ``unparsed`` or ``echo``). Only a genuine reading is a judgment (``parsed``)."""

    value: Any
    status: str

    @property
    def parsed(self) -> bool:
        return self.status == GENUINE

    @property
    def echo(self) -> bool:
        return self.status == ECHO


def _words(text: str) -> list[re.Match]:
    return list(_WORD.finditer(text))


class JudgmentPrompt:
    """What a judgment's prompt showed the model, as far as reading its output needs: ``texts``
    (the rendered prompt, or its turns) and ``output_format``, the example output its instruction
    gives (``judgment.output_format`` of the prompt wordings: ``My selection:[[i],[j],...].``).

    It gives the format's ``marker`` (None without one), its ``example_ids`` (the concrete ids of
    an example such as ``[1], [3]``; none for placeholders), its ``placeholders`` (``i``, ``j``),
    whether it offers a Yes/No choice, and the prompt's word runs that count as copied text.
    """

    def __init__(self, texts: str | Iterable[str] = (), output_format: str = "") -> None:
        self.texts = (texts,) if isinstance(texts, str) else tuple(texts)
        self.output_format = output_format
        found = _MARKER.match(output_format)
        self.marker = found.group(1).strip() + ":" if found and found.group(1).strip() else None
        body = output_format[found.end() :] if found else output_format
        self.example_ids = tuple(_to_id(d) for _, d in _explicit_numbers(body))
        self.placeholders = frozenset(m.group(1).casefold() for m in _PLACEHOLDER.finditer(body))
        self.yes_no_choice = bool(_YES_NO_ECHO.match(body))
        self._marker_re = _marker_pattern(self.marker) if self.marker else None
        self.runs: frozenset[tuple[str, ...]] = frozenset(
            run for text in (*self.texts, output_format) for run in _runs([w.group().casefold() for w in _words(text)])
        )
        self.headers = frozenset(
            (m.group(1), m.group(2).casefold()) for text in self.texts for m in _HEADER.finditer(text)
        )

    def __repr__(self) -> str:
        return f"JudgmentPrompt({len(self.texts)} texts, output_format={self.output_format!r})"

    def read_part(self, text: str) -> str:
        """The part of ``text`` a judgment is read from: after the marker's last occurrence that
        has text after it, else all of it."""
        if self._marker_re is None:
            return text
        for match in reversed(list(self._marker_re.finditer(text))):
            if text[match.end() :].strip():
                return text[match.end() :]
        return text

    def copied(self, text: str) -> list[tuple[int, int]]:
        """Character spans of ``text`` copied from the prompt (see the module doc), merged, each
        running on over the punctuation after its last word."""
        words = _words(text)
        keys = [w.group().casefold() for w in words]
        hit = [False] * len(words)
        for i in range(len(words) - COPY_NGRAM + 1):
            if tuple(keys[i : i + COPY_NGRAM]) in self.runs:
                hit[i : i + COPY_NGRAM] = [True] * COPY_NGRAM
        spans: list[tuple[int, int]] = []
        for i, word in enumerate(words):
            if not hit[i]:
                continue
            end = words[i + 1].start() if i + 1 < len(words) else len(text)
            if i > 0 and hit[i - 1]:
                spans[-1] = (spans[-1][0], end)  # the run goes on
            else:
                spans.append((word.start(), end))
        # "[n] <the first word of passage n>": a passage's header, however short the copy.
        spans += [
            (m.start(), m.end()) for m in _HEADER.finditer(text) if (m.group(1), m.group(2).casefold()) in self.headers
        ]
        return sorted(spans)

    def copied_share(self, text: str, spans: Sequence[tuple[int, int]]) -> float:
        words = _words(text)
        if not words:
            return 0.0
        return sum(_inside(w.start(), w.end(), spans) for w in words) / len(words)

    def format_echo(self, text: str) -> bool:
        """Whether ``text`` writes the format's placeholders or its Yes/No choice."""
        placeholder = any(m.group(1).casefold() in self.placeholders for m in _PLACEHOLDER.finditer(text))
        return placeholder or (self.yes_no_choice and bool(_YES_NO_ECHO.match(text.strip().lstrip("*_`#> \t\r\n"))))


def _marker_pattern(marker: str) -> re.Pattern:
    parts = re.findall(r"\w+|[^\w\s]", marker)
    return re.compile(r"\s*".join(re.escape(p) for p in parts), re.IGNORECASE)


def _runs(keys: Sequence[str]) -> Iterable[tuple[str, ...]]:
    """The prompt's runs of ``COPY_NGRAM`` words that hold a word with a letter."""
    for i in range(len(keys) - COPY_NGRAM + 1):
        run = tuple(keys[i : i + COPY_NGRAM])
        if any(not k.isdigit() for k in run):
            yield run


def _inside(start: int, end: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(a <= start and end <= b for a, b in spans)


def strip_think(output: str) -> str | None:
    """The output without its thinking block, or None when a ``<think>`` block is left unterminated."""
    close = output.rfind("</think>")
    if output.find("<think>", close + 1 if close != -1 else 0) != -1:
        return None
    return output[close + len("</think>") :] if close != -1 else output


def _to_id(digits: str) -> int:
    return int(digits) if len(digits) <= _MAX_ID_DIGITS else 0


def _explicit_numbers(text: str) -> list[tuple[tuple[int, int], str]]:
    """(span, digits) of every explicit identifier, in order."""
    out = []
    for match in _EXPLICIT.finditer(text):
        name = "bracket" if match.group("bracket") is not None else "keyword"
        base = match.start(name)
        out += [((base + n.start(), base + n.end()), n.group()) for n in _NUMBER.finditer(match.group(name))]
    return out


def _list_like_numbers(text: str) -> list[tuple[tuple[int, int], str]]:
    """(span, digits) of the numbers of the lines that hold nothing but numbers and separators (see
    the module doc). Labels, bullets and emphasis hold no digit, so a line's numbers are the same
    before and after they are cut."""
    out = []
    offset = 0
    for raw in text.splitlines(keepends=True):
        line = _BULLET.sub("", _LABEL.sub("", raw.strip().strip("*_`").strip()))
        tokens = _LIST_TOKEN.findall(line)
        numbers = [t for t in tokens if t.isascii() and t.isdigit()]
        if numbers and all(
            (t.isascii() and t.isdigit()) or t in _LIST_SEPARATORS or t.lower() in _LIST_WORDS for t in tokens
        ):
            out += [((offset + n.start(), offset + n.end()), n.group()) for n in _NUMBER.finditer(raw)]
        offset += len(raw)
    return out


def _valid_unique(ids: Iterable[int], k: int) -> list[int]:
    seen: set[int] = set()
    out = []
    for i in ids:
        if 1 <= i <= k and i not in seen:
            seen.add(i)
            out.append(i)
    return out


def _identifiers(text: str, k: int, copied: Sequence[tuple[int, int]] = ()) -> tuple[list[int], list[int]]:
    """(own, all): the in-range, unique identifiers ``text`` names outside copied text, and all it
    names. Explicit identifiers win over bare numbers of list-like lines, in each of the two."""

    def first_kind(with_copied: bool) -> list[int]:
        for found in (_explicit_numbers(text), _list_like_numbers(text)):
            kept = [d for span, d in found if with_copied or not _inside(*span, copied)]
            if kept:
                return _valid_unique(map(_to_id, kept), k)
        return []

    return first_kind(False), first_kind(True)


def _read(output: Any, prompt: JudgmentPrompt | None) -> tuple[str | None, list[tuple[int, int]]]:
    """The text a judgment is read from (None: nothing can be read) and its copied spans."""
    text = strip_think(output) if isinstance(output, str) else None
    if text is None:
        return None, []
    if prompt is None:
        return text, []
    text = prompt.read_part(text)
    return text, prompt.copied(text)


def _no_judgment(text: str, copied: Sequence[tuple[int, int]], prompt: JudgmentPrompt | None, named_ids: bool) -> str:
    """The status of an output with no judgment of its own: an echo when it named identifiers only
    inside copied text, writes the format, or is mostly copied text; else unparsed."""
    if prompt is None:
        return UNPARSED
    mostly_copied = bool(copied) and prompt.copied_share(text, copied) >= COPY_SHARE
    return ECHO if named_ids or mostly_copied or prompt.format_echo(text) else UNPARSED


def parse_selection(output: str, k: int, prompt: JudgmentPrompt | None = None) -> Reading:
    """The 1-based identifiers a listwise-selection output selects, in the order given, and its status.

    ``(ids, genuine)`` when some identifier in 1..k is found; ``([], genuine)`` when the output says
    explicitly that nothing is selected ("None", "none of the passages", "No passage has utility",
    "[]", "I do not select any"); ``([], unparsed)`` otherwise (no identifier, only out-of-range
    ones, or an unterminated think block). Identifiers win over a "none" phrase in the same output.
    With ``prompt``, identifiers and "none" phrases inside text copied from it do not count, and an
    output that repeats the prompt is ``([], echo)`` (module doc, *Echoes*).
    """
    text, copied = _read(output, prompt)
    if text is None:
        return Reading([], UNPARSED)
    own, named = _identifiers(text, k, copied)
    if own:
        if prompt is not None and tuple(own) == prompt.example_ids:
            return Reading([], ECHO)
        return Reading(own, GENUINE)
    if any(not _inside(m.start(), m.end(), copied) for m in _EXPLICIT_NONE.finditer(text)):
        return Reading([], GENUINE)
    return Reading([], _no_judgment(text, copied, prompt, bool(named)))


def _yes_no_word(body: str) -> str | None:
    words = _WORD.findall(body)
    first = words[0].lower() if words else None
    return first if first in ("yes", "no") and not _YES_NO_ECHO.match(body) else None


def _yes_no(text: str) -> bool | None:
    body = text.strip().lstrip("*_`#> \t\r\n")
    first = _yes_no_word(body) or _yes_no_word(_LABEL.sub("", body).lstrip("*_`#> \t\r\n"))
    if first is not None:
        return first == "yes"
    found = {w.lower() for w in _WORD.findall(text)} & {"yes", "no"}
    return found == {"yes"} if len(found) == 1 else None


def _mask(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with its copied spans blanked out (same length)."""
    for a, b in spans:
        text = text[:a] + " " * (b - a) + text[b:]
    return text


def parse_yes_no(output: str, prompt: JudgmentPrompt | None = None) -> Reading:
    """A pointwise judgment as ``(selected, status)``.

    The first word decides when it is "yes" or "no" (any case, after markdown and punctuation, or
    after a short label such as "Answer:"), unless the output starts by echoing the choice ("Yes or
    No", "Yes/No"). Otherwise the output decides when exactly one of the two words occurs in it as a
    whole word; both or neither gives ``(False, unparsed)``, as does an unterminated think block.
    With ``prompt``, words copied from it do not decide, and an output that repeats it (the Yes/No
    choice of its format, or mostly copied text) is ``(False, echo)``.
    """
    text, copied = _read(output, prompt)
    if text is None:
        return Reading(False, UNPARSED)
    decision = _yes_no(_mask(text, copied))
    if decision is not None:
        return Reading(decision, GENUINE)
    return Reading(False, _no_judgment(text, copied, prompt, False))


def parse_ranking(output: str, k: int, prompt: JudgmentPrompt | None = None) -> Reading:
    """A listwise ranking ("[2] > [1] > [3]", "2 > 1 > 3", "[2],[1]", one id per line) as a permutation of 1..k.

    Identifiers the output leaves out are appended in the original (retrieval) order; an output with
    no identifier in 1..k (or an unterminated think block) gives ``(list(range(1, k + 1)), unparsed)``,
    and one that repeats the prompt (``prompt``: module doc, *Echoes*) the retrieval order as an echo.
    """
    retrieval_order = list(range(1, k + 1))
    text, copied = _read(output, prompt)
    if text is None:
        return Reading(retrieval_order, UNPARSED)
    own, named = _identifiers(text, k, copied)
    if not own or (prompt is not None and tuple(own) == prompt.example_ids):
        status = ECHO if own else _no_judgment(text, copied, prompt, bool(named))
        return Reading(retrieval_order, status)
    given = set(own)
    return Reading(own + [i for i in retrieval_order if i not in given], GENUINE)
