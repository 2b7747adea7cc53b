"""Parsers of LLM judgment outputs: listwise selection, pointwise Yes/No and listwise ranking.

Every parser is total: it returns a result for any string (and for ``None``) and never raises, so a
judgment output that does not parse becomes a recorded row (``parsed = False``), not a failed job.
Identifiers are the 1-based numbers of the candidates in the prompt ([1]..[k]).

Shared rules
------------
* **Thinking.** A ``<think>...</think>`` block is dropped: everything up to the last ``</think>``
  goes (a template that opens the block in the prompt leaves only the closing tag). A ``<think>``
  with no ``</think>`` after it (cut off by the token limit) means nothing parsed.
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
"""

from __future__ import annotations

import re

__all__ = ["parse_selection", "parse_yes_no", "parse_ranking", "strip_think"]

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


def strip_think(output: str) -> str | None:
    """The output without its thinking block, or None when a ``<think>`` block is left unterminated."""
    close = output.rfind("</think>")
    if output.find("<think>", close + 1 if close != -1 else 0) != -1:
        return None
    return output[close + len("</think>") :] if close != -1 else output


def _to_id(digits: str) -> int:
    return int(digits) if len(digits) <= _MAX_ID_DIGITS else 0


def _explicit_ids(text: str) -> list[int]:
    ids: list[int] = []
    for match in _EXPLICIT.finditer(text):
        group = match.group("bracket") or match.group("keyword") or ""
        ids.extend(_to_id(d) for d in _NUMBER.findall(group))
    return ids


def _list_like_ids(text: str) -> list[int]:
    """Numbers from the lines that hold nothing but numbers and separators (see the module doc)."""
    ids: list[int] = []
    for line in text.splitlines():
        line = _BULLET.sub("", _LABEL.sub("", line.strip().strip("*_`").strip()))
        tokens = _LIST_TOKEN.findall(line)
        numbers = [t for t in tokens if t.isascii() and t.isdigit()]
        if numbers and all(
            (t.isascii() and t.isdigit()) or t in _LIST_SEPARATORS or t.lower() in _LIST_WORDS for t in tokens
        ):
            ids.extend(_to_id(t) for t in numbers)
    return ids


def _valid_unique(ids: list[int], k: int) -> list[int]:
    seen: set[int] = set()
    out = []
    for i in ids:
        if 1 <= i <= k and i not in seen:
            seen.add(i)
            out.append(i)
    return out


def _identifiers(text: str, k: int) -> list[int]:
    """Explicit identifiers if there are any, else bare numbers of list-like lines; in range, unique."""
    ids = _explicit_ids(text) or _list_like_ids(text)
    return _valid_unique(ids, k)


def parse_selection(output: str, k: int) -> tuple[list[int], bool]:
    """The 1-based identifiers a listwise-selection output selects, in the order given, and whether it parsed.

    Returns ``(ids, True)`` when some identifier in 1..k is found; ``([], True)`` when the output says
    explicitly that nothing is selected ("None", "none of the passages", "No passage has utility",
    "[]", "I do not select any"); ``([], False)`` otherwise (no identifier, only out-of-range ones,
    or an unterminated think block). Identifiers win over a "none" phrase in the same output.
    """
    text = strip_think(output) if isinstance(output, str) else None
    if text is None:
        return [], False
    ids = _identifiers(text, k)
    if ids:
        return ids, True
    return [], _EXPLICIT_NONE.search(text) is not None


def _yes_no_word(body: str) -> str | None:
    words = _WORD.findall(body)
    first = words[0].lower() if words else None
    return first if first in ("yes", "no") and not _YES_NO_ECHO.match(body) else None


def parse_yes_no(output: str) -> tuple[bool, bool]:
    """A pointwise judgment as ``(selected, parsed)``.

    The first word decides when it is "yes" or "no" (any case, after markdown and punctuation, or
    after a short label such as "Answer:"), unless the output starts by echoing the choice ("Yes or
    No", "Yes/No"). Otherwise the output decides when exactly one of the two words occurs in it as a
    whole word; both or neither gives ``(False, False)``, as does an unterminated think block.
    """
    text = strip_think(output) if isinstance(output, str) else None
    if text is None:
        return False, False
    body = text.strip().lstrip("*_`#> \t\r\n")
    first = _yes_no_word(body) or _yes_no_word(_LABEL.sub("", body).lstrip("*_`#> \t\r\n"))
    if first is not None:
        return first == "yes", True
    found = {w.lower() for w in _WORD.findall(text)} & {"yes", "no"}
    if len(found) == 1:
        return found == {"yes"}, True
    return False, False


def parse_ranking(output: str, k: int) -> tuple[list[int], bool]:
    """A listwise ranking ("[2] > [1] > [3]", "2 > 1 > 3", "[2],[1]", one id per line) as a permutation of 1..k.

    Identifiers the output leaves out are appended in the original (retrieval) order; an output with
    no identifier in 1..k (or an unterminated think block) gives ``(list(range(1, k + 1)), False)``.
    """
    retrieval_order = list(range(1, k + 1))
    text = strip_think(output) if isinstance(output, str) else None
    ids = _identifiers(text, k) if text is not None else []
    if not ids:
        return retrieval_order, False
    given = set(ids)
    return ids + [i for i in retrieval_order if i not in given], True
