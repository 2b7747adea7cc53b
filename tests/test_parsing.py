import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llm_utility.method.parsing import parse_ranking, parse_selection, parse_yes_no, strip_think

# ---------------------------------------------------------------------------------------------------
# Listwise selection: the forms models really produce (k = 5 unless stated).


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("[3]", ([3], True)),
        ("3", ([3], True)),
        ("3.", ([3], True)),
        ("Passage 3", ([3], True)),
        ("passage [2]", ([2], True)),
        ("[1], [4]", ([1, 4], True)),
        ("[4], [1]", ([4, 1], True)),  # order as given
        ("My selection: [[1],[3]]", ([1, 3], True)),
        ("[1] [2]", ([1, 2], True)),
        ("[1, 4]", ([1, 4], True)),
        ("1, 3 and 4", ([1, 3, 4], True)),
        ("1 3 4", ([1, 3, 4], True)),
        ("1\n3\n4", ([1, 3, 4], True)),
        ("- 2\n- 4", ([2, 4], True)),
        ("**Answer:** 3", ([3], True)),
        ("Selected passages:\n2, 4", ([2, 4], True)),
        ("Passages 1, 3 and 4 are useful.", ([1, 3, 4], True)),
        ("Passages [1], [3]", ([1, 3], True)),
        ("Passage 2 and [3] help.", ([2, 3], True)),
        ("Document #2", ([2], True)),
        ("【2】", ([2], True)),
        ("Sure! After reading them, I select [2] and [5] because they name the capital.", ([2, 5], True)),
        ("[2] [2] [1]", ([2, 1], True)),  # duplicates dropped, first place kept
        ("[7], [2], [0]", ([2], True)),  # out of range dropped
        # explicit "nothing selected"
        ("None", ([], True)),
        ("None.", ([], True)),
        ("none of the passages", ([], True)),
        ("No passage has utility", ([], True)),
        ("There are no useful passages.", ([], True)),
        ("[]", ([], True)),
        ("I do not select any passage.", ([], True)),
        ("[3]. None of the others help.", ([3], True)),  # identifiers win over a "none" phrase
        # nothing usable
        ("", ([], False)),
        ("   \n ", ([], False)),
        ("The answer is Paris.", ([], False)),
        ("[7]", ([], False)),  # only out-of-range ids do not parse
        # bare numbers in chatter
        ("The 2 passages about France are the best.", ([], False)),
        ("Answer: 1990", ([], False)),  # list-like, but 1990 is out of range
        ("The 2 passages are [1] and [4].", ([1, 4], True)),  # bracketed ids preferred
        ("99999999999999999999999999", ([], False)),  # huge numbers never overflow
        # thinking
        ("<think>\nPassage [1] mentions Paris.\n</think>\n\n[3]", ([3], True)),
        ("<think></think>None", ([], True)),
        ("reasoning that the template opened ...</think>[2]", ([2], True)),
        ("<think>\nPassage [1] mentions Paris, so", ([], False)),  # unterminated: cut off
        ("<think>a</think>[1]<think>b", ([], False)),
    ],
)
def test_parse_selection_forms(output, expected):
    assert parse_selection(output, 5) == expected


def test_parse_selection_respects_k():
    assert parse_selection("[12], [3]", 20) == ([12, 3], True)
    assert parse_selection("[12], [3]", 5) == ([3], True)
    assert parse_selection("Answer: 12", 20) == ([12], True)  # the documented ambiguity of bare numbers
    assert parse_selection("[1]", 0) == ([], False)


def test_parse_selection_non_string():
    assert parse_selection(None, 5) == ([], False)  # a null output row


# ---------------------------------------------------------------------------------------------------
# Pointwise Yes/No


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("Yes", (True, True)),
        ("Yes.", (True, True)),
        ("**Yes**", (True, True)),
        ("yes, the passage is useful", (True, True)),
        ("Yes: the passage is useful", (True, True)),
        ("Answer: No", (False, True)),
        ("Judgment: **No**", (False, True)),
        ("NO", (False, True)),
        ("No.", (False, True)),
        ("<think>It says no such thing... yes?</think>\nYes", (True, True)),
        ("Yes, although it says no date.", (True, True)),  # the first word decides
        ("No, even though one could say yes.", (False, True)),
        ("The passage is useful, so yes.", (True, True)),  # exactly one of the two words
        ("The passage has no utility for me.", (False, True)),
        ("Yes/No: Yes", (True, True)),  # echoed choice, then the answer after the label
        ("Yes or No", (False, False)),  # echo only: both words, no decision
        ("It could be yes or no.", (False, False)),  # both
        ("Maybe", (False, False)),  # neither
        ("Yesterday nobody knew", (False, False)),  # whole words only
        ("", (False, False)),
        ("<think>yes, clearly", (False, False)),  # unterminated think block
    ],
)
def test_parse_yes_no_forms(output, expected):
    assert parse_yes_no(output) == expected


def test_parse_yes_no_non_string():
    assert parse_yes_no(None) == (False, False)


# ---------------------------------------------------------------------------------------------------
# Listwise ranking


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("[2] > [1] > [3] > [5] > [4]", ([2, 1, 3, 5, 4], True)),
        ("[2] > [1] > [3]", ([2, 1, 3, 4, 5], True)),  # missing ids appended in retrieval order
        ("2 > 1 > 3", ([2, 1, 3, 4, 5], True)),
        ("[2],[1]", ([2, 1, 3, 4, 5], True)),
        ("2\n1\n3", ([2, 1, 3, 4, 5], True)),
        ("1. [3]\n2. [1]", ([3, 1, 2, 4, 5], True)),
        ("Ranking: [4] > [2] > [4] > [9]", ([4, 2, 1, 3, 5], True)),
        ("<think>[1] first?</think>[5] > [4]", ([5, 4, 1, 2, 3], True)),
        ("I cannot rank these.", ([1, 2, 3, 4, 5], False)),
        ("[9] > [7]", ([1, 2, 3, 4, 5], False)),
        ("<think>[5] > [4]", ([1, 2, 3, 4, 5], False)),
        ("", ([1, 2, 3, 4, 5], False)),
    ],
)
def test_parse_ranking_forms(output, expected):
    assert parse_ranking(output, 5) == expected


def test_parse_ranking_edge_k():
    assert parse_ranking("[1]", 0) == ([], False)
    assert parse_ranking(None, 3) == ([1, 2, 3], False)


def test_strip_think():
    assert strip_think("<think>x</think>\nanswer") == "\nanswer"
    assert strip_think("answer") == "answer"
    assert strip_think("<think>x") is None


# ---------------------------------------------------------------------------------------------------
# Fuzz: no string raises, results stay in 1..k without duplicates, a ranking is a permutation.

# Text that looks like judgments (brackets, digits, keywords, think tags) finds more paths than
# arbitrary unicode alone.
_PIECES = st.sampled_from(
    [
        "[",
        "]",
        "[[",
        "]]",
        ",",
        " ",
        "\n",
        ">",
        "and",
        "Passage",
        "passage ",
        "none",
        "None",
        "no",
        "yes",
        "Yes",
        ":",
        "Answer:",
        "<think>",
        "</think>",
        "*",
        "#",
        "【",
        "】",
        "0",
        "1",
        "2",
        "3",
        "7",
        "12",
        "99999999999999999999",
        "-1",
        "n't any",
        ".",
        "/",
        "（",
        "٣",
        "Ⅳ",
        "²",
    ]
)
_TEXT = st.one_of(st.text(max_size=200), st.lists(st.one_of(_PIECES, st.text(max_size=5)), max_size=30).map("".join))
_K = st.integers(min_value=0, max_value=25)


@settings(max_examples=300, deadline=None)
@given(_TEXT, _K)
@example("[1] [1] [2]", 1)
def test_fuzz_parse_selection(output, k):
    ids, parsed = parse_selection(output, k)
    assert all(isinstance(i, int) and 1 <= i <= k for i in ids)
    assert len(ids) == len(set(ids))
    assert isinstance(parsed, bool)
    assert parsed or not ids


@settings(max_examples=300, deadline=None)
@given(_TEXT)
def test_fuzz_parse_yes_no(output):
    selected, parsed = parse_yes_no(output)
    assert isinstance(selected, bool) and isinstance(parsed, bool)
    assert parsed or not selected


@settings(max_examples=300, deadline=None)
@given(_TEXT, _K)
def test_fuzz_parse_ranking(output, k):
    ranking, parsed = parse_ranking(output, k)
    assert sorted(ranking) == list(range(1, k + 1))
    assert isinstance(parsed, bool)
    if not parsed:
        assert ranking == list(range(1, k + 1))
