"""The embedded worldfacts demo data: schema, determinism, human passages, flavour contracts."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys

import polars as pl
import pytest

from llm_utility.data import worldfacts as wf
from llm_utility.metrics import has_answer
from llm_utility.schemas import PASSAGES_SCHEMA, QUERIES_SCHEMA

SEED, N_CITIES, N_QUERIES = 13, 300, 60


@pytest.fixture(scope="module")
def corpus() -> pl.DataFrame:
    return wf.build_corpus(seed=SEED, n_cities=N_CITIES)


@pytest.fixture(scope="module")
def passage_text(corpus) -> dict[str, str]:
    return {pid: f"{title} {text}" for pid, title, text in corpus.iter_rows()}


@pytest.fixture(scope="module")
def queries(corpus) -> dict[str, pl.DataFrame]:
    return {f: wf.build_queries(f, N_QUERIES, seed=SEED, passages=corpus) for f in wf.FLAVOURS}


def _digest(df: pl.DataFrame) -> str:
    return hashlib.sha256(df.write_ndjson().encode()).hexdigest()


# --- corpus ------------------------------------------------------------------------------------------


def test_corpus_schema_and_pids(corpus):
    assert corpus.schema == pl.Schema(PASSAGES_SCHEMA)
    assert corpus.null_count().sum_horizontal().item() == 0
    assert corpus["pid"].n_unique() == corpus.height
    pattern = re.compile(r"[A-Z]{3}-(capital|population|currency|people|borders|codes)|city-\d+")
    bad = [p for p in corpus["pid"] if not (p.isascii() and pattern.fullmatch(p))]
    assert bad == []
    assert corpus.filter(pl.col("title").str.strip_chars() == "").is_empty()


def test_corpus_size_and_sections(corpus):
    pids = corpus["pid"].to_list()
    countries = {p.split("-")[0] for p in pids if not p.startswith("city-")}
    assert sum(p.startswith("city-") for p in pids) == N_CITIES
    assert len(countries) >= 200  # countryinfo has ~250 records; only incomplete or historical ones drop
    assert all(f"{c}-capital" in pids and f"{c}-population" in pids for c in countries)
    assert {f"FRA-{s}" for s in wf.SECTIONS} <= set(pids)


def test_passages_are_passage_sized(corpus):
    words = corpus["text"].str.split(" ").list.len()
    assert words.min() >= 30 and words.max() <= 80


def test_passages_state_the_facts(passage_text):
    assert "The capital of France is Paris" in passage_text["FRA-capital"] or (
        "Paris is the capital of France" in passage_text["FRA-capital"]
    )
    assert has_answer(passage_text["JPN-currency"], ["Yen"]) and "JPY" in passage_text["JPN-currency"]
    assert "Spain" in passage_text["FRA-borders"] and "Germany" in passage_text["FRA-borders"]
    assert ".fr" in passage_text["FRA-codes"] and "+33" in passage_text["FRA-codes"]
    assert passage_text["city-2988507"].startswith("Paris Paris is the capital of France")
    # Mid-sentence names take their article.
    assert "of the Netherlands" in passage_text["NLD-codes"]


def test_world_facts_are_consistent():
    world = wf.load_world()
    for c in world.countries:
        for b in c.borders:
            assert c.iso3 in world.by_iso3[b].borders, (c.iso3, b)  # borders are symmetric
        assert c.aliases[0] == c.name and c.capital_aliases[0] == c.capital
    # Borders need both countryinfo and GeoNames: countryinfo alone has Kuwait bordering Iran.
    assert world.by_iso3["KWT"].borders == ("IRQ", "SAU")
    assert "Bogota" in world.by_iso3["COL"].capital_aliases  # accent-free alias
    assert "United States of America" in world.by_iso3["USA"].aliases
    # "Congo" would make the DRC a correct answer for the Republic of the Congo.
    assert "Congo" not in world.by_iso3["COG"].aliases
    # Kingston is the capital of Jamaica and of Norfolk Island: no question may bridge through it.
    assert "JAM" not in world.unique_capitals and "NFK" not in world.unique_capitals
    assert ("EUR", "Euro") in world.by_iso3["DEU"].currencies
    assert all(code not in {"CHE", "CHW"} for code, _ in world.by_iso3["CHE"].currencies)  # WIR fund codes


def test_seed_changes_wording_not_pids(corpus):
    other = wf.build_corpus(seed=SEED + 1, n_cities=N_CITIES)
    assert other["pid"].to_list() == corpus["pid"].to_list()
    assert other["text"].to_list() != corpus["text"].to_list()


def test_n_cities_bounds():
    assert not any(p.startswith("city-") for p in wf.build_corpus(seed=SEED, n_cities=0)["pid"])
    with pytest.raises(ValueError, match="n_cities"):
        wf.build_corpus(seed=SEED, n_cities=10**7)


def test_n_countries_keeps_the_most_populous_countries_sections_unchanged(corpus):
    small = wf.build_corpus(seed=SEED, n_cities=N_CITIES, n_countries=5)
    countries = {p.split("-")[0] for p in small["pid"] if not p.startswith("city-")}
    # The five most populous, written out: China and India first, then the United States,
    # Indonesia and Brazil (countryinfo's figures, of about 2015).
    assert countries == {"CHN", "IND", "USA", "IDN", "BRA"}
    assert small.filter(pl.col("pid").str.starts_with("city-")).height == N_CITIES
    # The same texts as in the whole corpus, in its order: a passage does not depend on the others.
    assert small.join(corpus, on="pid", how="anti").is_empty()
    kept = set(small["pid"])
    assert small["pid"].to_list() == [p for p in corpus["pid"] if p in kept]
    assert small.join(corpus, on="pid")["text"].to_list() == small["text"].to_list()
    with pytest.raises(ValueError, match="n_countries"):
        wf.build_corpus(seed=SEED, n_cities=0, n_countries=0)


# --- queries -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", wf.FLAVOURS)
def test_queries_contract(flavour, queries, corpus):
    q = queries[flavour]
    assert q.schema == pl.Schema(QUERIES_SCHEMA)
    assert q.height == N_QUERIES
    prefix = wf.QID_PREFIX[flavour]
    assert q["qid"].to_list() == [f"{prefix}-{i:04d}" for i in range(1, N_QUERIES + 1)]
    assert q["question"].n_unique() == N_QUERIES
    assert set(q["task"]) == ({"fact"} if flavour == "claim" else {"qa"})
    pids = set(corpus["pid"])
    for answers, human in zip(q["answers"], q["human_pids"]):
        assert len(answers) > 0 and all(a.strip() for a in answers)
        assert len(human) == (2 if flavour == "two_hop" else 1)
        assert len(set(human)) == len(human)
        assert set(human) <= pids


@pytest.mark.parametrize("flavour", ["single_hop", "two_hop"])
def test_qa_answers_are_supported_and_not_given_away(flavour, queries, passage_text):
    for question, answers, human in queries[flavour].select("question", "answers", "human_pids").iter_rows():
        assert not has_answer(question, answers), question
        assert any(has_answer(passage_text[p], answers) for p in human), question


def test_single_hop_mixes_templates_and_fame(queries):
    world = wf.load_world()
    city_country = {c.pid: c.iso3 for c in world.cities}
    q = queries["single_hop"]
    iso = [city_country.get(h[0], h[0].split("-")[0]) for h in q["human_pids"]]
    famous = sum(i in world.famous for i in iso) / len(iso)
    assert 0.2 <= famous <= 0.8
    openings = {" ".join(question.split()[:3]) for question in q["question"]}
    assert len(openings) >= 6


def test_two_hop_bridges(queries):
    for question, human in queries["two_hop"].select("question", "human_pids").iter_rows():
        first, second = human
        assert first != second
        if "whose capital is" in question:
            assert first.endswith("-capital") and second.split("-")[0] == first.split("-")[0]
        if "shares a land border with both" in question:
            assert first.endswith("-borders") and second.endswith("-borders")


@pytest.mark.parametrize("n", [60, 61])
def test_claims_are_balanced(n, corpus):
    labels = wf.build_queries("claim", n, seed=SEED, passages=corpus)["answers"].list.first()
    counts = labels.value_counts().to_dict(as_series=False)
    by_label = dict(zip(counts["answers"], counts["count"]))
    assert set(by_label) == {"SUPPORTS", "REFUTES"}
    assert by_label["REFUTES"] == n // 2 and by_label["SUPPORTS"] == n - n // 2


def test_claims_are_true_or_false_as_labelled(queries, passage_text):
    world = wf.load_world()
    checked = 0
    for question, answers, human in queries["claim"].select("question", "answers", "human_pids").iter_rows():
        m = re.fullmatch(r"The capital of (.+) is (.+)\.", question)
        if m is None:
            continue
        truth = world.by_iso3[human[0].split("-")[0]].capital
        assert (m.group(2) == truth) == (answers == ["SUPPORTS"]), question
        assert truth in passage_text[human[0]]
        checked += 1
    assert checked > 0


def test_queries_only_use_passages_in_the_corpus():
    small = wf.build_corpus(seed=SEED, n_cities=0)
    for flavour in wf.FLAVOURS:
        q = wf.build_queries(flavour, 30, seed=SEED, passages=small)
        assert not any(p.startswith("city-") for h in q["human_pids"] for p in h)


def test_queries_depend_on_seed(corpus, queries):
    again = wf.build_queries("single_hop", N_QUERIES, seed=SEED, passages=corpus)
    assert again.equals(queries["single_hop"])
    other = wf.build_queries("single_hop", N_QUERIES, seed=SEED + 1, passages=corpus)
    assert other["question"].to_list() != queries["single_hop"]["question"].to_list()


def test_query_errors(corpus):
    with pytest.raises(ValueError, match="unknown worldfacts flavour 'three_hop'"):
        wf.build_queries("three_hop", 5, seed=SEED, passages=corpus)
    with pytest.raises(ValueError, match="asked for n=100000"):
        wf.build_queries("two_hop", 100_000, seed=SEED, passages=corpus)
    with pytest.raises(ValueError, match="need 50000"):
        wf.build_queries("claim", 100_000, seed=SEED, passages=corpus)
    with pytest.raises(ValueError, match="positive"):
        wf.build_queries("single_hop", 0, seed=SEED, passages=corpus)


_DIGEST_SCRIPT = """
import hashlib
from llm_utility.data import worldfacts as wf
corpus = wf.build_corpus(seed=13, n_cities=300)
frames = [corpus] + [wf.build_queries(f, 40, seed=13, passages=corpus) for f in wf.FLAVOURS]
print(" ".join(hashlib.sha256(df.write_ndjson().encode()).hexdigest() for df in frames))
"""


@pytest.mark.slow
def test_byte_identical_across_processes_and_hash_seeds(corpus):
    """Same seed, same bytes, whatever PYTHONHASHSEED (no dependence on set or dict order)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _DIGEST_SCRIPT],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            stdout=subprocess.PIPE,
            text=True,
        )
        for hash_seed in ("1", "4242")
    ]
    outputs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    expected = [_digest(corpus)] + [_digest(wf.build_queries(f, 40, seed=13, passages=corpus)) for f in wf.FLAVOURS]
    assert outputs[0] == outputs[1] == expected
