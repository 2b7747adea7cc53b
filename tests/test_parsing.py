import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llm_utility.method.parsing import (
    ECHO,
    GENUINE,
    STATUSES,
    UNPARSED,
    JudgmentPrompt,
    parse_ranking,
    parse_selection,
    parse_yes_no,
    strip_think,
)


def _status(parsed: bool) -> str:
    """The cases below were written as (value, parsed): without a prompt nothing is an echo."""
    return GENUINE if parsed else UNPARSED


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
    ids, parsed = expected
    assert parse_selection(output, 5) == (ids, _status(parsed))


def test_parse_selection_respects_k():
    assert parse_selection("[12], [3]", 20) == ([12, 3], GENUINE)
    assert parse_selection("[12], [3]", 5) == ([3], GENUINE)
    assert parse_selection("Answer: 12", 20) == ([12], GENUINE)  # the documented ambiguity of bare numbers
    assert parse_selection("[1]", 0) == ([], UNPARSED)


def test_parse_selection_non_string():
    assert parse_selection(None, 5) == ([], UNPARSED)  # a null output row
    assert parse_selection(None, 5).parsed is False


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
    selected, parsed = expected
    assert parse_yes_no(output) == (selected, _status(parsed))


def test_parse_yes_no_non_string():
    assert parse_yes_no(None) == (False, UNPARSED)


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
    ranking, parsed = expected
    assert parse_ranking(output, 5) == (ranking, _status(parsed))


def test_parse_ranking_edge_k():
    assert parse_ranking("[1]", 0) == ([], UNPARSED)
    assert parse_ranking(None, 3) == ([1, 2, 3], UNPARSED)


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


# A prompt for the fuzz: random text and format, or the authors' formats over random passages.
_FORMATS = st.one_of(
    st.sampled_from(
        [
            "",
            "My selection:[[i],[j],...].",
            "[i]>[j]>...",
            "Utility judgment: Yes/No.",
            "[1], [3]",
            "[2] > [1] > [3]",
            ":",
            "[]",
        ]
    ),
    _TEXT,
)
_PROMPTS = st.one_of(st.none(), st.builds(JudgmentPrompt, st.lists(_TEXT, max_size=4), _FORMATS))


@settings(max_examples=300, deadline=None)
@given(_TEXT, _K, _PROMPTS)
@example("[1] [1] [2]", 1, None)
@example("Received passage [1]. [1] [2]", 2, JudgmentPrompt(["Received passage [1]."], "[1], [2]"))
def test_fuzz_parse_selection(output, k, prompt):
    ids, status = parse_selection(output, k, prompt)
    assert all(isinstance(i, int) and 1 <= i <= k for i in ids)
    assert len(ids) == len(set(ids))
    assert status in STATUSES
    assert status == GENUINE or not ids
    assert prompt is not None or status != ECHO


@settings(max_examples=300, deadline=None)
@given(_TEXT, _PROMPTS)
def test_fuzz_parse_yes_no(output, prompt):
    selected, status = parse_yes_no(output, prompt)
    assert isinstance(selected, bool) and status in STATUSES
    assert status == GENUINE or not selected


@settings(max_examples=300, deadline=None)
@given(_TEXT, _K, _PROMPTS)
def test_fuzz_parse_ranking(output, k, prompt):
    ranking, status = parse_ranking(output, k, prompt)
    assert sorted(ranking) == list(range(1, k + 1))
    assert status in STATUSES
    if status != GENUINE:
        assert ranking == list(range(1, k + 1))


# ---------------------------------------------------------------------------------------------------
# Echoes: an output that repeats its prompt is never a judgment (issue 26). The real outputs below
# are the demo's listwise judgments under the wording the project used before the authors' formats
# (OLD_WORDING), read against the prompts they answered.

# The candidates C of seven demo queries (results/<dataset>/candidates.parquet, top-5, retrieval order).
DEMO_QUERIES = {
    "sh-0001": (
        "In which country is the city of Nanjing?",
        [
            (
                "Nanjing",
                "Nanjing is the tenth-largest city of China. It has a population of 9,314,685 according to GeoNames. "
                "Nanjing lies in Eastern Asia, a subregion of Asia, at 32.06° N, 118.78° E. Local time follows the "
                "Asia/Shanghai time zone. GeoNames lists 2,106 places in China with at least 15,000 inhabitants.",
            ),
            (
                "Shenyang",
                "Shenyang is the 16th-largest city of China. GeoNames records a population of 7,050,000 for the city. "
                "Shenyang lies in Eastern Asia, a subregion of Asia, at 41.79° N, 123.43° E. Local time follows the "
                "Asia/Shanghai time zone. GeoNames lists 2,106 places in China with at least 15,000 inhabitants.",
            ),
            (
                "Shenzhen",
                "Shenzhen is the third-largest city of China. GeoNames records a population of 17,494,398 for the "
                "city. Shenzhen lies in Eastern Asia, a subregion of Asia, at 22.55° N, 114.07° E. Local time follows "
                "the Asia/Shanghai time zone. GeoNames lists 2,106 places in China with at least 15,000 inhabitants.",
            ),
            (
                "Jiangmen",
                "Jiangmen is the 79th-largest city of China. It has a population of 1,795,459 according to GeoNames. "
                "Jiangmen lies in Eastern Asia, a subregion of Asia, at 22.58° N, 113.08° E. Local time follows the "
                "Asia/Shanghai time zone. GeoNames lists 2,106 places in China with at least 15,000 inhabitants.",
            ),
            (
                "Tianjin",
                "Tianjin is the sixth-largest city of China. GeoNames records a population of 11,090,314 for the "
                "city. Tianjin lies in Eastern Asia, a subregion of Asia, at 39.14° N, 117.18° E. Local time follows "
                "the Asia/Shanghai time zone. GeoNames lists 2,106 places in China with at least 15,000 inhabitants.",
            ),
        ],
    ),
    "sh-0002": (
        "What is the capital of Bhutan?",
        [
            (
                "Bhutan",
                "The capital of Bhutan is Thimphu. Bhutan lies in Southern Asia, a subregion of Asia. Thimphu "
                "is located at 27.47° N, 89.63° E. The geographic centre of Bhutan is near 27.50° N, 90.50° E. "
                "Other countries and territories of Southern Asia include Afghanistan, Bangladesh and India.",
            ),
            (
                "Bhutan",
                "Bhutan shares land borders with 2 countries and territories: China and India. It lies "
                "in Southern Asia, a subregion of Asia. Its most populous neighbour is China, with "
                "about 1,367,110,000 inhabitants. Some of its neighbours lie outside Southern Asia.",
            ),
            (
                "Bhutan",
                "Bhutan has an estimated population of 755,030. It covers a total area of 38,394 square "
                "kilometres, which gives a population density of about 20 inhabitants per square "
                "kilometre. Among the 9 countries and territories of Southern Asia, it ranks 8th by "
                "population and 8th by area. The most populous country of Southern Asia is India.",
            ),
            (
                "Bhutan",
                "The official language of Bhutan is Dzongkha. The demonym for the people of Bhutan "
                "is Bhutanese. In its own official language, the name of Bhutan is འབྲུགཡུལ་. Bhutan "
                "has about 755,030 inhabitants, less than 0.1% of the population of Southern Asia.",
            ),
            (
                "Bhutan",
                "Bhutan has 2 official currencies: the Ngultrum (BTN) and the Indian Rupee (INR). Prices, wages "
                "and public accounts in the country are expressed in these currencies, and their three-letter "
                "ISO 4217 codes are used in banking, trade and foreign-exchange markets. The Indian Rupee is "
                "also the official currency of 1 other country or territory. Bhutan is located in Southern Asia.",
            ),
        ],
    ),
    "sh-0003": (
        "Which country or territory has the internet country code top-level domain .cx?",
        [
            (
                "Canada",
                "The ISO 3166-1 codes of Canada are CA (alpha-2) and CAN (alpha-3). Its "
                "international calling code is +1. The country code top-level domain for Canada on "
                "the internet is .ca. Canada spans 6 time zones, from UTC−08:00 to UTC−03:30. These "
                "codes identify Canada in international standards, telephony and web addresses.",
            ),
            (
                "China",
                "The ISO 3166-1 codes of China are CN (alpha-2) and CHN (alpha-3). Its international calling code is "
                "+86. The country code top-level domain for China on the internet is .cn. China uses the time zone "
                "UTC+08:00. These codes identify China in international standards, telephony and web addresses.",
            ),
            (
                "Christmas Island",
                "The ISO 3166-1 codes of Christmas Island are CX (alpha-2) and CXR (alpha-3). Its international "
                "calling code is +61. The country code top-level domain for Christmas Island on the internet is .cx. "
                "These codes identify Christmas Island in international standards, telephony and web addresses.",
            ),
            (
                "Seychelles",
                "The ISO 3166-1 codes of the Seychelles are SC (alpha-2) and SYC (alpha-3). Its "
                "international calling code is +248. The country code top-level domain for the "
                "Seychelles on the internet is .sc. The Seychelles uses the time zone UTC+04:00. These "
                "codes identify the Seychelles in international standards, telephony and web addresses.",
            ),
            (
                "United Kingdom",
                "The ISO 3166-1 codes of the United Kingdom are GB (alpha-2) and GBR (alpha-3). Its "
                "international calling code is +44. The country code top-level domain for the United Kingdom on "
                "the internet is .uk. The United Kingdom spans 9 time zones, from UTC−08:00 to UTC+06:00. These "
                "codes identify the United Kingdom in international standards, telephony and web addresses.",
            ),
        ],
    ),
    "th-0001": (
        "What is the demonym for people from the country whose capital is Kathmandu?",
        [
            (
                "Nepal",
                "The official language of Nepal is Nepali. The demonym for the people of Nepal "
                "is Nepalese. In its own official language, the name of Nepal is नेपाल. Nepal "
                "has about 27,646,053 inhabitants, 1.6% of the population of Southern Asia.",
            ),
            (
                "Nepal",
                "The capital of Nepal is Kathmandu. Nepal lies in Southern Asia, a subregion of Asia. Kathmandu "
                "is located at 27.71° N, 85.32° E. The geographic centre of Nepal is near 28.00° N, 84.00° E. "
                "Other countries and territories of Southern Asia include Afghanistan, Iran and Sri Lanka.",
            ),
            (
                "Nepal",
                "The population of Nepal is estimated at 27,646,053 people. It covers a total area of "
                "147,181 square kilometres, which gives a population density of about 188 inhabitants "
                "per square kilometre. Among the 9 countries and territories of Southern Asia, it ranks "
                "5th by population and 6th by area. The most populous country of Southern Asia is India.",
            ),
            (
                "Nepal",
                "Nepal shares land borders with 2 countries and territories: China and India. It lies "
                "in Southern Asia, a subregion of Asia. Its most populous neighbour is China, with "
                "about 1,367,110,000 inhabitants. Some of its neighbours lie outside Southern Asia.",
            ),
            (
                "Nepal",
                "The official currency of Nepal is the Nepalese Rupee (NPR). Prices, wages and public "
                "accounts in the country are expressed in this currency, and its three-letter ISO 4217 code "
                "is used in banking, trade and foreign-exchange markets. Nepal is located in Southern Asia.",
            ),
        ],
    ),
    "th-0002": (
        "What is the demonym for people from the country whose capital is Doha?",
        [
            (
                "Qatar",
                "Doha is the capital of Qatar. Qatar lies in Western Asia, a subregion of Asia. Doha is "
                "located at 25.29° N, 51.53° E. The geographic centre of Qatar is near 25.50° N, 51.25° E. "
                "Other countries and territories of Western Asia include Armenia, Bahrain and Kuwait.",
            ),
            (
                "Qatar",
                "The official language of Qatar is Arabic. The demonym for the people of Qatar is Qatari. Arabic is "
                "also an official language in 24 other countries and territories. In its own official language, the "
                "name of Qatar is قطر. Qatar has about 2,269,672 inhabitants, 0.9% of the population of Western Asia.",
            ),
            (
                "Qatar",
                "Qatar has an estimated population of 2,269,672. It covers a total area of 11,586 square "
                "kilometres, which gives a population density of about 196 inhabitants per square "
                "kilometre. Among the 18 countries and territories of Western Asia, it ranks 16th by "
                "population and 14th by area. The most populous country of Western Asia is Turkey.",
            ),
            (
                "Qatar",
                "Qatar shares a land border with one country or territory, Saudi Arabia. It "
                "lies in Western Asia, a subregion of Asia. Its only neighbour Saudi Arabia has "
                "about 30,770,375 inhabitants. All of its neighbours are also in Western Asia.",
            ),
            (
                "Qatar",
                "The official currency of Qatar is the Qatari Rial (QAR). Prices, wages and public accounts "
                "in the country are expressed in this currency, and its three-letter ISO 4217 code is used "
                "in banking, trade and foreign-exchange markets. Qatar is located in Western Asia.",
            ),
        ],
    ),
    "th-0003": (
        "Which country shares a land border with both Panama and Peru?",
        [
            (
                "Peru",
                "Peru shares land borders with 5 countries and territories: Bolivia, Brazil, Chile, "
                "Colombia and Ecuador. It lies in Latin America and the Caribbean, a subregion of "
                "the Americas. Its most populous neighbour is Brazil, with about 203,586,000 "
                "inhabitants. All of its neighbours are also in Latin America and the Caribbean.",
            ),
            (
                "Panama",
                "Panama shares land borders with 2 countries and territories: Colombia and Costa "
                "Rica. It lies in Latin America and the Caribbean, a subregion of the Americas. "
                "Its most populous neighbour is Colombia, with about 47,907,800 inhabitants. All "
                "of its neighbours are also in Latin America and the Caribbean.",
            ),
            (
                "Uruguay",
                "Uruguay shares land borders with 2 countries and territories: Argentina and Brazil. It lies in Latin "
                "America and the Caribbean, a subregion of the Americas. Its most populous neighbour is Brazil, with "
                "about 203,586,000 inhabitants. All of its neighbours are also in Latin America and the Caribbean.",
            ),
            (
                "Paraguay",
                "Paraguay shares land borders with 3 countries and territories: Argentina, "
                "Bolivia and Brazil. It lies in Latin America and the Caribbean, a subregion of "
                "the Americas. Its most populous neighbour is Brazil, with about 203,586,000 "
                "inhabitants. All of its neighbours are also in Latin America and the Caribbean.",
            ),
            (
                "Bolivia",
                "Bolivia shares land borders with 5 countries and territories: Argentina, Brazil, "
                "Chile, Paraguay and Peru. It lies in Latin America and the Caribbean, a subregion "
                "of the Americas. Its most populous neighbour is Brazil, with about 203,586,000 "
                "inhabitants. All of its neighbours are also in Latin America and the Caribbean.",
            ),
        ],
    ),
    "cl-0002": (
        "The official currency of Thailand is the Baht.",
        [
            (
                "Thailand",
                "Thailand uses the Baht (THB) as its official currency. Prices, wages and public accounts "
                "in the country are expressed in this currency, and its three-letter ISO 4217 code is used "
                "in banking, trade and foreign-exchange markets. Thailand is located in South-eastern Asia.",
            ),
            (
                "Thailand",
                "The official language of Thailand is Thai. The demonym for the people of Thailand "
                "is Thai. In its own official language, the name of Thailand is ประเทศไทย. Thailand "
                "has about 64,871,000 inhabitants, 10.5% of the population of South-eastern Asia.",
            ),
            (
                "Laos",
                "Laos uses the Lao Kip (LAK) as its official currency. Prices, wages and public accounts "
                "in the country are expressed in this currency, and its three-letter ISO 4217 code is used "
                "in banking, trade and foreign-exchange markets. Laos is located in South-eastern Asia.",
            ),
            (
                "Cambodia",
                "Cambodia uses the Riel (KHR) as its official currency. Prices, wages and public accounts "
                "in the country are expressed in this currency, and its three-letter ISO 4217 code is used "
                "in banking, trade and foreign-exchange markets. Cambodia is located in South-eastern Asia.",
            ),
            (
                "Pakistan",
                "The official currency of Pakistan is the Pakistan Rupee (PKR). Prices, wages and public "
                "accounts in the country are expressed in this currency, and its three-letter ISO 4217 code is "
                "used in banking, trade and foreign-exchange markets. Pakistan is located in Southern Asia.",
            ),
        ],
    ),
}
# The demo models' top-k answers (the pseudo-answers of listwise_pa), int8 run of 2026-12-02.
PSEUDO_ANSWERS = {
    "smollm2-135m": {
        "sh-0001": "Shenzhen",
        "sh-0002": "Bhutan is the capital of Bhutan.",
        "sh-0003": "The United Kingdom has the internet country code top-level domain .uk.",
        "th-0001": "Nepal",
        "th-0002": "The demonym for people from Qatar is Qatari.",
        "th-0003": "Peru",
        "cl-0002": "The official currency of Thailand is the Baht.",
    },
    "gemma3-270m": {
        "sh-0001": "Nanjing is the 16th-largest city of China.",
        "sh-0002": "Thimphu",
        "sh-0003": "Canada",
        "th-0001": "Nepal",
        "th-0002": "Qatar",
        "th-0003": "Panama",
        "cl-0002": "The official currency of Thailand is the Baht.",
    },
}
# The judgment wording before the authors' formats: a concrete example ("[1], [3]") and "None".
OLD_WORDING = {
    "passage": "{title} {text}",
    "passage_separator": "\n",
    "judgment": {
        "definition": "A passage has utility for you only if it helps you give a correct answer "
        "to the question and gives you information that you do not already know: a "
        "passage that only repeats what you already know has no utility for you.",
        "pseudo_answer": "Your answer to the question, given all the passages: {answer}",
        "reject_known": "If you can answer the question without the passages, "
        "all the passages do not have utility for you.",
        "output_format": {"pointwise": "Yes or No", "select": "[1], [3]", "rank": "[2] > [1] > [3]"},
        "pointwise": "Judge whether the passage has utility for you in answering the question.\n"
        "{definition}\nQuestion: {question}\nPassage: {passage}\n{pseudo_answer}\n"
        "Does the passage have utility for you? Answer Yes or No.",
        "listwise": {
            "system": "You are the utility judge, an assistant that finds the "
            "passages that have utility for you in answering a question.",
            "system_ack": "Yes, I am the utility judge.",
            "intro": "I will give you {num} passages, each with a numerical identifier "
            "[]. They are candidates for answering the question: {question}",
            "intro_ack": "Okay, please provide the passages.",
            "passage": "[{i}] {passage}",
            "passage_ack": "Received passage [{i}].",
            "select": "Question: {question}\n{pseudo_answer}\n{definition}\n{reject_known}\nSelect "
            "the passages that have utility for you. Output only their identifiers, for "
            "example: [1], [3]. If no passage has utility, output: None.",
            "rank": "Question: {question}\n{pseudo_answer}\n{definition}\nRank the {num} passages by their utility "
            "for you, most useful first. Output only the identifiers, for example: [2] > [1] > [3].",
        },
        "completion_cue": {"pointwise": "Answer:", "select": "Selection:", "rank": "Ranking:"},
    },
}


def _demo_prompt(wording, qid, llm="smollm2-135m", method="listwise_pa", rank=False, cue=False):
    """The listwise prompt of a demo query (a selection ``method``, or with ``rank`` the verbalized
    ranking of that name) as a JudgmentPrompt: its turns, a completion model's cue with ``cue``,
    and the wording's output format."""
    from llm_utility.method.judgments import SELECTION_METHODS, VERBAL_RANKING_METHODS, listwise_messages, output_format
    from llm_utility.method.prompts import Passage

    m = VERBAL_RANKING_METHODS[method] if rank else SELECTION_METHODS[method]
    question, passages = DEMO_QUERIES[qid]
    pool = [Passage(f"p{i}", title, text) for i, (title, text) in enumerate(passages, 1)]
    answer = PSEUDO_ANSWERS[llm][qid] if m.pseudo_answer else None
    turns = [t["content"] for t in listwise_messages(wording, m, question, pool, answer)]
    if cue:
        turns.append(wording["judgment"]["completion_cue"]["rank" if rank else "select"])
    return JudgmentPrompt(turns, output_format(wording, m.form))


def _current_wording():
    from pathlib import Path

    from llm_utility.method.prompts import load_prompts

    return load_prompts(Path(__file__).resolve().parents[1] / "config" / "prompts.yaml")


# (llm, method, qid, output, what the parser read before echoes existed): the listwise outputs
# issue 26 quotes from a clean-clone demo (float32; "..." there cuts the text, so the quoted opening
# is used) and the complete ones of the demo of 2026-12-02 (int8 arithmetic), under OLD_WORDING.
REAL_ECHOES = [
    # the instruction's example, Gemma's answer on 10 of its 12 parsed judgments (issue 26)
    ("gemma3-270m", "listwise_pa", "sh-0002", "[1], [3].", [1, 3]),
    ("gemma3-270m", "listwise_pa_reject", "sh-0003", "[1], [3].", [1, 3]),
    # SmolLM2 copying the acknowledgement turn, passage 1's header with its text, the instruction (issue 26)
    ("smollm2-135m", "listwise_pa", "sh-0002", "Received passage [1].", [1]),
    ("smollm2-135m", "listwise_pa", "sh-0003", "[1] Canada The ISO 3166-1 codes of Canada", [1]),
    ("smollm2-135m", "listwise_pa", "sh-0002", "You can select the passages that have utility", []),
    # the int8 demo: the instruction with the example, parsed as [1], [3]; the pseudo-answer line; the definition
    (
        "smollm2-135m",
        "listwise_pa",
        "th-0001",
        "A passage has utility for you only if it helps you answer the question. "
        "Output only its identifiers, for example: [1], [3]. If no passage has utility, output: None.",
        [1, 3],
    ),
    ("smollm2-135m", "listwise_pa", "th-0002", "The demonym for people from Qatar is Qatari.", []),
    (
        "smollm2-135m",
        "listwise_pa_reject",
        "th-0001",
        "A passage has utility for you if it is a passage that has utility for you.",
        [],
    ),
    (
        "smollm2-135m",
        "listwise_pa",
        "cl-0002",
        "1. The official currency of Thailand is the Baht.",
        [],
    ),  # the claim again
    # passage 1's header, its id and title, cut at the newline that stops SmolLM2's answers
    ("smollm2-135m", "listwise_pa", "th-0003", "[1] Peru", [1]),
    ("smollm2-135m", "listwise_pa_reject", "sh-0001", "[1] Nanjing", [1]),
]


@pytest.mark.parametrize(("llm", "method", "qid", "output", "before"), REAL_ECHOES)
def test_the_demos_real_echoes_are_never_judgments(llm, method, qid, output, before):
    # Without the prompt, the parser reads what it read in the demo (ids from the example or a copied turn).
    assert parse_selection(output, 5).value == before
    prompt = _demo_prompt(OLD_WORDING, qid, llm, method, cue=llm == "gemma3-270m")
    assert parse_selection(output, 5, prompt) == ([], ECHO)


def test_the_demos_real_outputs_that_are_no_echo():
    # Gemma answering the completion cue with words of its own: unparsed, not an echo.
    assert parse_selection("Select one:", 5, _demo_prompt(OLD_WORDING, "sh-0001", "gemma3-270m", cue=True)) == (
        [],
        UNPARSED,
    )
    # The instruction's words around an id of the model's own.
    assert parse_selection(
        "The utility for you is [1].", 5, _demo_prompt(OLD_WORDING, "sh-0002", method="listwise_pa_reject")
    ) == ([1], GENUINE)
    assert parse_selection(
        "The passage that has utility for you is [1].",
        5,
        _demo_prompt(OLD_WORDING, "cl-0002", method="listwise_pa_reject"),
    ) == ([1], GENUINE)


def test_a_real_pointwise_echo_of_the_pseudo_answer():
    """Gemma's pointwise judgment of the Karachi passage for "People from Pakistan are called
    Pakistani." (int8 demo of 2026-12-02) repeats its pseudo-answer line, whose "Yes" answers the
    claim, not the judgment; it was read as a Yes."""
    from llm_utility.method.judgments import SELECTION_METHODS, pointwise_prompt
    from llm_utility.method.prompts import Passage

    karachi = Passage(
        "city-1174872",
        "Karachi",
        "Karachi is the second-largest city of Pakistan. GeoNames records a population of 11,624,219 for the "
        "city. Karachi lies in Southern Asia, a subregion of Asia, at 24.86° N, 67.01° E. Local time follows "
        "the Asia/Karachi time zone. GeoNames lists 370 places in Pakistan with at least 15,000 inhabitants.",
    )
    text = pointwise_prompt(
        OLD_WORDING,
        SELECTION_METHODS["pointwise_pa"],
        "People from Pakistan are called Pakistani.",
        karachi,
        "Yes, Pakistan is a country.",
    )
    prompt = JudgmentPrompt([text, OLD_WORDING["judgment"]["completion_cue"]["pointwise"]], "Yes or No")
    assert parse_yes_no("Yes, Pakistan is") == (True, GENUINE)
    assert parse_yes_no("Yes, Pakistan is", prompt) == (False, ECHO)
    assert parse_yes_no("Yes.", prompt) == (True, GENUINE) and parse_yes_no("Yes, the passage", prompt) == (
        True,
        GENUINE,
    )


def test_a_selection_that_equals_the_example_is_lost_only_to_a_concrete_example():
    """A model that means "[1], [3]" writes what a copying model writes: under a concrete example
    the parser cannot tell them apart and counts neither; under the authors' placeholder format
    ("My selection:[[i],[j],...].") the example holds no id, so the selection stands."""
    old = _demo_prompt(OLD_WORDING, "sh-0002")
    assert parse_selection("[1], [3]", 5, old) == ([], ECHO)
    assert parse_selection("[3], [1]", 5, old) == ([3, 1], GENUINE)  # not the example: its order differs
    assert parse_selection("[1], [3], [4]", 5, old) == ([1, 3, 4], GENUINE)
    new = _demo_prompt(_current_wording(), "sh-0002")
    assert new.marker == "My selection:" and new.example_ids == () and new.placeholders == {"i", "j"}
    for output in ("My selection:[[1],[3]].", "[1], [3]", "My selection: [1], [3]"):
        assert parse_selection(output, 5, new) == ([1, 3], GENUINE), output
    # The old ranking example is lost the same way; the authors' ranking format holds none.
    assert parse_ranking("[2] > [1] > [3]", 5, _demo_prompt(OLD_WORDING, "sh-0002", rank=True)) == (
        [1, 2, 3, 4, 5],
        ECHO,
    )
    assert parse_ranking("[2]>[1]>[3]", 5, _demo_prompt(_current_wording(), "sh-0002", rank=True)) == (
        [2, 1, 3, 4, 5],
        GENUINE,
    )


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        # the format itself, its placeholders without the marker, a completion model's continuation
        ("My selection:[[i],[j],...].", ([], ECHO)),
        ("[[i], [j]]", ([], ECHO)),
        # turns of the prompt: acknowledgements, the intro (its "[]" is no empty selection), the instruction
        ("Received passage [2].", ([], ECHO)),
        ("Received passage [2]. Received passage [4].", ([], ECHO)),
        ("Okay, please provide the passages.", ([], ECHO)),
        ("I will give you 5 passages, each with a numerical identifier [].", ([], ECHO)),
        (
            "Directly output the passages you selected that have utility for yourself in answering the question.",
            ([], ECHO),
        ),
        ("[3] Bhutan Bhutan has an estimated population of 755,030.", ([], ECHO)),
        # ids are read after the marker's last occurrence with text after it
        ("I think [2] matters. My selection:[[4]]", ([4], GENUINE)),
        ("My selection:[[2],[5]]. My selection:", ([2, 5], GENUINE)),
        ("Received passage [1]. My selection:[[2]]", ([2], GENUINE)),  # a judgment of its own after a copy
        ("Received passage [1]. [2]", ([2], GENUINE)),  # the copied id does not count, the own one does
        # legitimate selections that share words with the prompt
        ("My selection:[[1]]", ([1], GENUINE)),
        ("Passages [1] and [4] have utility for you.", ([1, 4], GENUINE)),
        ("[2] Thimphu", ([2], GENUINE)),  # not passage 2's header: its title is Bhutan
        ("[1] because it names the capital", ([1], GENUINE)),
        # a passage header, its id and first word (the title), is a copy however short
        ("[1] Bhutan", ([], ECHO)),
        ("My selection:[[3] Bhutan]", ([], ECHO)),
        ("[3] Bhutan, [1]", ([1], GENUINE)),
        ("[1], [2], [3], [4], [5]", ([1, 2, 3, 4, 5], GENUINE)),
        # an empty selection of the model's own, and one inside copied text
        ("My selection:[]", ([], GENUINE)),
        ("None of the passages have utility for me.", ([], GENUINE)),
        (
            "If you can answer the question without the passages, all the passages do not have utility for you.",
            ([], ECHO),
        ),
        # no judgment and little copied: unparsed
        ("Thimphu", ([], UNPARSED)),
        ("", ([], UNPARSED)),
    ],
)
def test_echoes_under_the_authors_format(output, expected):
    prompt = _demo_prompt(_current_wording(), "sh-0002", method="listwise_pa_reject")
    assert parse_selection(output, 5, prompt) == expected


def test_a_completion_models_continuation_of_the_cue():
    prompt = _demo_prompt(_current_wording(), "sh-0002", "gemma3-270m", cue=True)
    assert parse_selection("[[i],[j],...].", 5, prompt) == ([], ECHO)
    assert parse_selection(" [[1]].", 5, prompt) == ([1], GENUINE)
    assert parse_selection(" [1], [3].", 5, prompt) == ([1, 3], GENUINE)


def test_pointwise_echoes():
    from llm_utility.method.judgments import SELECTION_METHODS, output_format, pointwise_prompt
    from llm_utility.method.prompts import Passage

    wording = _current_wording()
    question, passages = DEMO_QUERIES["sh-0002"]
    text = pointwise_prompt(wording, SELECTION_METHODS["pointwise"], question, Passage("p1", *passages[0]))
    prompt = JudgmentPrompt(text, output_format(wording, "pointwise"))
    assert prompt.marker == "Utility judgment:" and prompt.yes_no_choice
    assert parse_yes_no("Utility judgment: Yes.", prompt) == (True, GENUINE)
    assert parse_yes_no("Utility judgment: No.", prompt) == (False, GENUINE)
    assert parse_yes_no(" No", prompt) == (False, GENUINE)  # a completion model after the cue
    assert parse_yes_no("Utility judgment: Yes/No.", prompt) == (False, ECHO)
    assert parse_yes_no("Yes or No", prompt) == (False, ECHO)
    assert parse_yes_no(
        "Directly output your response. The format of the output is: 'Utility judgment: Yes/No.'", prompt
    ) == (False, ECHO)
    # A word copied with the passage does not decide: "no" here is the passage's (it has none), so
    # the copy of the question and passage is an echo.
    assert parse_yes_no(
        "Question: What is the capital of Bhutan? Passage: Bhutan The capital of Bhutan is Thimphu.", prompt
    ) == (False, ECHO)
    assert parse_yes_no("Maybe", prompt) == (False, UNPARSED)
    # Without a prompt the choice is unparsed, as it always was.
    assert parse_yes_no("Utility judgment: Yes/No.") == (False, UNPARSED)


def test_ranking_echoes_under_the_authors_format():
    prompt = _demo_prompt(_current_wording(), "sh-0002", rank=True)
    assert prompt.marker is None and prompt.example_ids == ()
    assert parse_ranking("[i]>[j]>...", 5, prompt) == ([1, 2, 3, 4, 5], ECHO)
    assert parse_ranking("Received passage [3].", 5, prompt) == ([1, 2, 3, 4, 5], ECHO)
    assert parse_ranking("[3]>[1]", 5, prompt) == ([3, 1, 2, 4, 5], GENUINE)
    assert parse_ranking("Bhutan", 5, prompt) == ([1, 2, 3, 4, 5], UNPARSED)


def test_judgment_prompt_reads_its_format():
    assert JudgmentPrompt((), "My selection:[[i],[j],...].").marker == "My selection:"
    assert JudgmentPrompt((), "Utility judgment: Yes/No.").marker == "Utility judgment:"
    assert JudgmentPrompt((), "[i]>[j]>...").marker is None
    assert JudgmentPrompt((), "[2] > [1] > [3]").example_ids == (2, 1, 3)
    assert JudgmentPrompt((), "").marker is None and JudgmentPrompt((), "").example_ids == ()
    # A run of numbers alone is never copied text: a list of ids is not a copy of a list in the prompt.
    prompt = JudgmentPrompt("Its calling codes are 1 2 3 4 5.", "")
    assert prompt.copied("1 2 3 4 5") == [] and parse_selection("1 2 3 4 5", 5, prompt) == ([1, 2, 3, 4, 5], GENUINE)
