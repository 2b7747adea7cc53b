"""The findings' framework: the inputs a finding reads, the resampling settings, the claims and the
registry's ``Finding`` (with its re-ask twin), and how cells and entries are built from bootstrap
effects (see ``llm_utility.report.findings`` for an entry's fields and what a verdict means).

A finding function builds its ``Claim``, one cell per (dataset, LLM, ...) with ``make_cell``, and
collects the same per-query values into a ``Pool`` (or the ``PooledDifferences`` of paired
per-query differences); ``make_entry(claim, cells, pool, rs, inputs=inputs)`` then marks each
cell in or out of the claim's scope, pools the in-scope datasets (each weighted equally, queries
resampled within their dataset) and gives the verdict, or the description of a finding that
cannot fail. ``difference_entry`` does all of it for paired per-query values, ``beats_every_entry``
for "A beats every competitor". A ``Finding`` pairs a claim with that computation: the registry
(``registry.FINDINGS``) lists them, and ``all_findings`` evaluates each, then its re-ask twin where
its claim declares one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

# The names a claim's scope is given in (report.claim_scope), re-exported.
from ...data.paper import PAPER_DATASETS as PAPER_DATASETS
from ..bootstrap import Effect, paired_difference, ratio, stratified_interval, verdict

Keyed = Mapping[Any, pl.DataFrame]
NOT_RUN = "not run"
# What an entry that computed nothing (not run, out of scope) says of its result.
NO_RESULT = {"overall": None, "effect": None, "lo": None, "hi": None, "n": 0, "interval": "none", "verdict": NOT_RUN}
# The verdict of an effect measured on fewer than ``report.min_queries`` queries: its interval is
# shown, not judged (a bootstrap over a handful of values only knows those values: too narrow).
TOO_FEW = "too few queries"
VERDICTS = ("holds", "reversed", "inconclusive", TOO_FEW)
# The verdict of a finding that cannot fail by construction: its effect is described, not tested.
BY_CONSTRUCTION = "by construction"
# Whether the way a finding's quantities are built decides its verdict.
CONSTRUCTIONS = ("can_fail", "partly_built_in", "cannot_fail")
# Answer contexts the re-ask stage answers again (``answers/reask_<context>.parquet``).
REASK_PREFIX = "reask_"

# Scopes (``Claim.scope``, ``report.claim_scope``): the paper's datasets each claim is stated for.
SINGLE_HOP = "single_hop"  # Sections 4-5 (Table 1, Figures 1-4 and 8): NQ, TriviaQA, MS MARCO-FQA
HUMAN_SHARE = "human_share"  # "about half ... for both the NQ and MS MARCO-FQA datasets"
ALL = "all"  # Section 6 (Tables 2-4, 7, 8): all six datasets
TRIVIAQA = "triviaqa"  # Table 4: likelihood ranks best on TriviaQA

# What builds part of a verdict in (``Claim.construction_reason``): the replays of selecting calls.
REPLAY_ONE = "a one-passage gold set is answered with the very call that made it gold (correct by construction)"
REPLAY_KNOWN = (
    "the empty gold set of a known query replays the no-passage call that made it known (correct by definition)"
)
REASK_REASON = (
    "re-ask answers (a paraphrased instruction, passages in reverse order): no evaluated call is the call that "
    "selected its passages or made its query known"
)
REASK_MISSING = (
    "no re-ask answers (answers/reask_<context>.parquet) among the inputs: the re-ask stage is off or not configured"
)


@dataclass(frozen=True)
class Resampling:
    """How every interval is computed: ``n_resamples`` bootstrap resamples, ``seed``, ``confidence``;
    and ``min_queries``, the fewest queries a finding's verdict may rest on."""

    n_resamples: int
    seed: int
    confidence: float = 0.95
    min_queries: int = 10  # findings only: fewer queries give an interval and the verdict TOO_FEW

    @classmethod
    def from_config(cls, report: Mapping[str, Any]) -> Resampling:
        """From the validated ``report`` config section (resamples, bootstrap_seed, confidence and,
        where given, min_queries)."""
        return cls(
            int(report["resamples"]),
            int(report["bootstrap_seed"]),
            float(report["confidence"]),
            int(report.get("min_queries", cls.min_queries)),
        )

    def kwargs(self) -> dict[str, Any]:
        return {"n_resamples": self.n_resamples, "seed": self.seed, "confidence": self.confidence}


def is_reask_context(context: str) -> bool:
    """Whether ``context`` names re-ask answers (``reask_<context>``)."""
    return context.startswith(REASK_PREFIX)


@dataclass
class FindingInputs:
    """The workflow's files a finding reads, already read; every mapping may be empty (not configured).

    ``answers`` (dataset, llm, context) -> answers (qid, pids, output, correct), the re-ask answers
    among them as contexts ``reask_<context>``; ``known`` (dataset, llm) -> (qid, known); ``gold``
    (dataset, llm, candidates) -> (qid, pid); ``queries`` dataset -> queries; ``perplexity``
    (dataset, llm) -> (qid, pid, in_gold, ppl_passage, ppl_query_passage); ``judgments`` /
    ``rankings`` (dataset, llm, method) -> judgments (qid, pid, selected, parsed) / rankings (qid,
    pid, rank, ...). ``llms`` is the configured order, ``families`` maps an LLM to its
    ``llms.<name>.family`` (None where unset), ``k`` is the ranking cutoff (``rankings.k``).

    The scope of a claim: ``claim_scope`` maps a scope name (``Claim.scope``) to the paper's
    datasets the claim covers (``report.claim_scope``), ``paper_datasets`` maps a configured
    dataset to the paper's datasets it stands for (``report.plan.ReportPlan.paper_datasets``; None: a
    dataset of the user's own, in every scope). Left empty, every dataset is in every scope.
    ``figure9_method`` is the selection method whose answers Tables 3 and 7 and Figure 9 read,
    ``rag_top`` the number of reranked passages of Table 7's answers.
    """

    llms: Sequence[str]
    answers: Keyed = field(default_factory=dict)
    known: Keyed = field(default_factory=dict)
    gold: Keyed = field(default_factory=dict)
    queries: Keyed = field(default_factory=dict)
    perplexity: Keyed = field(default_factory=dict)
    judgments: Keyed = field(default_factory=dict)
    rankings: Keyed = field(default_factory=dict)
    families: Mapping[str, str | None] = field(default_factory=dict)
    k: int = 5
    paper_datasets: Mapping[str, Sequence[str] | None] = field(default_factory=dict)
    claim_scope: Mapping[str, Sequence[str]] = field(default_factory=dict)
    figure9_method: str = "listwise_pa"
    rag_top: int = 5
    # The runs stage's per-(dataset, run, LLM answering, judge, query) metrics with the LLM's
    # correctness (``report.runs.rag_pairs``); None where no run was answered with.
    run_pairs: pl.DataFrame | None = None

    @property
    def datasets(self) -> list[str]:
        keys = [
            *self.queries,
            *(k[0] for k in self.answers),
            *(k[0] for k in self.judgments),
            *(k[0] for k in self.perplexity),
        ]
        return list(dict.fromkeys(keys))

    def scope_of(self, claim: Claim) -> list[str] | None:
        """The paper's datasets ``claim`` covers, or None when no scope is configured (every dataset)."""
        scope = self.claim_scope.get(claim.scope)
        return None if scope is None else list(scope)

    def in_scope(self, dataset: str, claim: Claim) -> bool:
        """Whether ``dataset`` stands for one of the paper's datasets ``claim`` covers (a dataset that
        stands for none of the paper's named ones, None, is in every scope)."""
        scope, stands_for = self.scope_of(claim), self.paper_datasets.get(dataset)
        return scope is None or stands_for is None or bool(set(stands_for) & set(scope))

    def has_reask(self) -> bool:
        return any(is_reask_context(k[2]) for k in self.answers)

    def reasked(self) -> FindingInputs:
        """These inputs with every re-asked context's answers replaced by its re-ask answers: a
        finding computed on them evaluates its claim on calls that did not select their passages
        (gold sets and known flags stay those of the answer prompt). A context the re-ask stage
        answers again but whose re-ask answers are missing is left out (its findings say not run);
        contexts it never re-asks (selections, reranked passages) are kept."""
        reask = {
            (d, llm, ctx[len(REASK_PREFIX) :]): frame
            for (d, llm, ctx), frame in self.answers.items()
            if is_reask_context(ctx)
        }
        kept = {
            key: frame
            for key, frame in self.answers.items()
            if not is_reask_context(key[2]) and not _reasked_kind(key[2])
        }
        return replace(self, answers={**kept, **reask})


def _reasked_kind(context: str) -> bool:
    """The contexts the re-ask stage answers again: none, human, topk, union and every gold set."""
    return context in ("none", "human", "topk", "union") or context.startswith(("gold_C_from_", "gold_U_from_"))


class NotRun(Exception):
    """A finding's inputs are not configured; the message says which."""


@dataclass(frozen=True)
class Claim:
    """What a finding tests. ``expected``: +1 when the claim holds for an effect above ``null``, -1
    below; with ``band`` (lo, hi) instead, it holds when the interval lies inside the band (an
    "about" claim, e.g. about half) and is reversed when it lies entirely outside.

    ``construction`` says whether the way the compared quantities are built decides the verdict:
    ``can_fail`` (nothing built in), ``partly_built_in`` (part of the effect is fixed by how its
    inputs are made, e.g. a gold set replays the call that selected it; the verdict stands, with
    ``construction_reason``), ``cannot_fail`` (its sign is fixed: no verdict, the effect is
    described). ``scope`` names the entry of ``report.claim_scope`` that lists the paper's datasets
    the claim covers. ``reask_twin``: the finding is followed by its twin on the re-ask answers
    (``twin_claim``), which takes out what the construction builds in.
    """

    id: str
    claim: str
    source: str
    unit: str
    expected: int = +1  # +1: effect > null; -1: effect < null
    null: float = 0.0
    construction: str = "can_fail"
    construction_reason: str = ""
    scope: str = "all"
    band: tuple[float, float] | None = None
    reask_twin: bool = False

    def __post_init__(self) -> None:
        if self.construction not in CONSTRUCTIONS:
            raise ValueError(f"claim {self.id}: construction must be one of {CONSTRUCTIONS}, got {self.construction!r}")
        if self.construction != "can_fail" and not self.construction_reason:
            raise ValueError(f"claim {self.id}: a {self.construction} claim needs its construction_reason")

    @property
    def expected_text(self) -> str:
        if self.band is not None:
            return f"within [{self.band[0]:.3g}, {self.band[1]:.3g}]"
        return f"{'>' if self.expected > 0 else '<'} {self.null:g}"

    def verdict_of(self, effect: Effect) -> str:
        if self.construction == "cannot_fail":
            return BY_CONSTRUCTION
        if self.band is None:
            return verdict(
                Effect(effect.effect - self.null, effect.lo - self.null, effect.hi - self.null, effect.n), self.expected
            )
        lo, hi = effect.lo, effect.hi
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return "inconclusive"
        if self.band[0] <= lo and hi <= self.band[1]:
            return "holds"
        if hi < self.band[0] or lo > self.band[1]:
            return "reversed"
        return "inconclusive"


# --- per-query columns ----------------------------------------------------------------------------


def correct_values(frame: pl.DataFrame) -> pl.DataFrame:
    """qid, value (100 x correct) of a one-row-per-query answers frame."""
    return frame.select(pl.col("qid").cast(pl.String), (100.0 * pl.col("correct").cast(pl.Float64)).alias("value"))


def paired(a: pl.DataFrame, b: pl.DataFrame, qids: Sequence[str] | None = None) -> pl.DataFrame:
    """qid, a, b: two (qid, value) frames on their common queries (optionally only ``qids``), in a's order."""
    joined = a.rename({"value": "a"}).join(b.rename({"value": "b"}), on="qid", how="inner", maintain_order="left")
    if qids is not None:
        joined = joined.filter(pl.col("qid").is_in(list(qids)))
    return joined


def known_qids(known: pl.DataFrame, flag: bool) -> set[str]:
    return set(known.filter(pl.col("known") == flag)["qid"].cast(pl.String).to_list())


# --- pooling: datasets weighted equally, queries resampled within their dataset ----------------------


class Pool:
    """The per-query values of a finding's cells, by dataset, and how one dataset's effect is
    computed from them: the pooled effect is the mean of the datasets' effects (each dataset weighted
    equally), its interval a bootstrap that resamples queries within each dataset
    (``bootstrap.stratified_interval``).

    ``add(dataset, frame)`` takes a frame of ``qid`` and ``columns``; a query's rows of one dataset
    (its values in several cells: LLMs, pairs, methods) are summed into one row, so the query is
    resampled with all its cells. ``statistic(*columns, axis=-1)`` makes one dataset's effect from
    those sums (e.g. ``ratio`` of a sum and a count: the mean over the dataset's (cell, query)
    values); a statistic with a trailing axis of components needs ``combine`` (see
    ``stratified_interval``).
    """

    def __init__(
        self, columns: Sequence[str], statistic: Callable[..., Any], combine: Callable[..., Any] | None = None
    ) -> None:
        self.columns = tuple(columns)
        self.statistic = statistic
        self.combine = combine
        self.parts: dict[str, list[pl.DataFrame]] = {}

    def add(self, dataset: str, frame: pl.DataFrame) -> None:
        if frame.height:
            part = frame.select(pl.col("qid").cast(pl.String), *(pl.col(c).cast(pl.Float64) for c in self.columns))
            self.parts.setdefault(dataset, []).append(part)

    @property
    def datasets(self) -> list[str]:
        return list(self.parts)

    def strata(self, datasets: Sequence[str] | None = None) -> list[tuple[np.ndarray, ...]]:
        chosen = self.datasets if datasets is None else [d for d in self.datasets if d in set(datasets)]
        out = []
        for d in chosen:
            units = (
                pl.concat(self.parts[d]).group_by("qid", maintain_order=True).agg(pl.col(c).sum() for c in self.columns)
            )
            out.append(tuple(units[c].to_numpy() for c in self.columns))
        return out

    def effect(self, rs: Resampling, datasets: Sequence[str] | None = None) -> Effect | None:
        """The pooled effect over ``datasets`` (None: all), or None when none has values."""
        strata = self.strata(datasets)
        if not strata:
            return None
        return stratified_interval(strata, self.statistic, combine=self.combine, **rs.kwargs())

    def pooled(self, rs: Resampling) -> Effect | None:
        return self.effect(rs)


class PooledDifferences(Pool):
    """Per-query differences of several cells, pooled: per (dataset, query), the sum of its differences
    over the cells and how many cells it counts in; a dataset's effect is the mean over its (cell,
    query) differences (a ratio estimator, queries resampled with all their cells)."""

    def __init__(self) -> None:
        super().__init__(("s", "c"), ratio)

    def add(self, dataset: str, qids: Sequence[str], values: np.ndarray) -> None:  # type: ignore[override]
        if len(qids):
            super().add(
                dataset, pl.DataFrame({"qid": list(qids), "s": np.asarray(values, float), "c": np.ones(len(qids))})
            )


# --- building an entry ----------------------------------------------------------------------------


def _number(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 4)


def make_cell(keys: Mapping[str, Any], effect: Effect, claim: Claim) -> dict[str, Any]:
    return {
        **keys,
        "effect": _number(effect.effect),
        "lo": _number(effect.lo),
        "hi": _number(effect.hi),
        "n": effect.n,
        "interval": effect.method,
        "verdict": claim.verdict_of(effect),
        "note": effect.reason,
    }


def too_few(item: dict[str, Any], rs: Resampling) -> dict[str, Any]:
    """``TOO_FEW`` instead of a verdict read from fewer than ``rs.min_queries`` queries (but at least
    one): a bootstrap interval over a handful of values is too narrow to trust, whatever side of the
    null it lies on. The effect and interval stay."""
    if item["verdict"] in ("holds", "reversed", "inconclusive") and 0 < item["n"] < rs.min_queries:
        return {**item, "verdict": TOO_FEW}
    return item


def cells_verdict(verdicts: Sequence[str]) -> str:
    """The verdict of a finding read from its in-scope cells' ``verdicts``: holds (reversed) when
    every cell holds (is reversed); too few queries when the cells that have enough queries all
    agree and the others have too few; inconclusive otherwise."""
    seen = set(verdicts)
    if seen in ({"holds"}, {"reversed"}):
        return verdicts[0]
    if TOO_FEW in seen and (seen <= {"holds", TOO_FEW} or seen <= {"reversed", TOO_FEW}):
        return TOO_FEW
    return "inconclusive"


def _head(claim: Claim, inputs: FindingInputs | None) -> dict[str, Any]:
    """The fields every entry starts with: what is claimed, where it is read, how it is built and
    which of the paper's datasets it covers."""
    scope = inputs.scope_of(claim) if inputs is not None else None
    return {
        "id": claim.id,
        "claim": claim.claim,
        "source": claim.source,
        "unit": claim.unit,
        "expected": claim.expected_text,
        "construction": claim.construction,
        "construction_reason": claim.construction_reason,
        "paper_datasets": scope if scope is not None else "all",
    }


def _describe(claim: Claim, effect: Mapping[str, Any]) -> str:
    """The description that stands in for the verdict of a finding that cannot fail."""
    if effect.get("effect") is None:
        return f"no value: {claim.construction_reason}"
    interval = "" if effect.get("lo") is None else f" [{effect['lo']:.1f}, {effect['hi']:.1f}]"
    return (
        f"{effect['effect']:.1f}{interval} ({claim.unit}, {effect['n']} queries); "
        f"not a test: {claim.construction_reason}"
    )


def make_entry(
    claim: Claim,
    cells: list[dict[str, Any]],
    pooled: Effect | Pool | None,
    rs: Resampling,
    note: str = "",
    inputs: FindingInputs | None = None,
) -> dict[str, Any]:
    """One finding's entry from its cells and its pooled effect.

    ``pooled`` is a ``Pool`` (pooled here over the datasets in the claim's scope, each weighted
    equally), an ``Effect`` computed by the caller, or None (the verdict summarises the in-scope
    cells: ``cells_verdict``). With ``inputs``, each cell with a ``dataset`` gets ``in_scope``;
    cells out of scope are shown, not pooled.
    """
    cells = [too_few(c, rs) for c in cells]
    if inputs is not None:
        cells = [{**c, "in_scope": inputs.in_scope(c["dataset"], claim)} if "dataset" in c else c for c in cells]
    entry: dict[str, Any] = _head(claim, inputs)
    covered = list(dict.fromkeys(c["dataset"] for c in cells if "dataset" in c))
    datasets = [d for d in covered if inputs is None or inputs.in_scope(d, claim)]
    entry["datasets"] = datasets
    entry["datasets_out_of_scope"] = [d for d in covered if d not in datasets]
    scoped = [c for c in cells if c.get("in_scope", True)]
    counts = {v: sum(c["verdict"] == v for c in scoped) for v in (*VERDICTS, BY_CONSTRUCTION)}
    if covered and not datasets:
        scope = inputs.scope_of(claim) if inputs is not None else None
        reason = (
            "no configured dataset stands for one of the paper's datasets of this claim "
            f"({', '.join(scope or [])}: report.claim_scope.{claim.scope}; datasets.<name>.paper_dataset)"
        )
        entry |= {
            "status": "out of scope",
            "reason": reason,
            **NO_RESULT,
            "note": note,
        }
    elif isinstance(pooled, (Pool, Effect)):
        effect = pooled.effect(rs, datasets) if isinstance(pooled, Pool) else pooled
        if effect is None:
            effect = Effect(float("nan"), float("nan"), float("nan"), 0, "none", "no queries")
        overall = too_few(make_cell({}, effect, claim), rs)
        entry |= {
            "status": "run",
            "reason": note,
            "overall": "pooled",
            **{k: overall[k] for k in ("effect", "lo", "hi", "n", "interval", "verdict")},
        }
        entry["note"] = "; ".join(t for t in (note, overall["note"]) if t)
    else:
        if claim.construction == "cannot_fail":
            consensus = BY_CONSTRUCTION
        else:
            consensus = cells_verdict([c["verdict"] for c in scoped])
        entry |= {
            "status": "run",
            "reason": note,
            "overall": "cells",
            "effect": None,
            "lo": None,
            "hi": None,
            "n": sum(c["n"] for c in scoped),
            "interval": "none",
            "verdict": consensus,
            "note": note,
        }
        entry = too_few(entry, rs)  # the cells together may still rest on too few queries
    if claim.construction == "cannot_fail":
        entry["description"] = _describe(claim, entry)
    entry["cell_verdicts"] = counts
    entry["cells"] = cells
    return entry


def not_run(claim: Claim, reason: str, inputs: FindingInputs | None = None) -> dict[str, Any]:
    """The entry of a finding whose inputs are not configured."""
    return {
        **_head(claim, inputs),
        "datasets": [],
        "datasets_out_of_scope": [],
        "status": NOT_RUN,
        "reason": reason,
        **NO_RESULT,
        "note": "",
        "cell_verdicts": dict.fromkeys((*VERDICTS, BY_CONSTRUCTION), 0),
        "cells": [],
    }


def difference_entry(
    claim: Claim,
    pairs: list[tuple[dict[str, Any], str, pl.DataFrame]],
    rs: Resampling,
    empty_reason: str,
    inputs: FindingInputs | None = None,
) -> dict[str, Any]:
    """An entry from per-query paired values: ``pairs`` holds (cell keys, dataset, frame qid/a/b);
    each cell is the mean of a - b with a paired bootstrap interval, the whole the mean of the
    in-scope datasets' effects (with ``inputs``: the claim's scope)."""
    if not pairs:
        return not_run(claim, empty_reason, inputs)
    pool = PooledDifferences()
    cells = []
    for keys, dataset, frame in pairs:
        a, b = frame["a"].to_numpy(), frame["b"].to_numpy()
        cells.append(make_cell(keys, paired_difference(a, b, **rs.kwargs()), claim))
        pool.add(dataset, frame["qid"].to_list(), a - b)
    return make_entry(claim, cells, pool, rs, inputs=inputs)


def beats_every_entry(
    claim: Claim,
    inputs: FindingInputs,
    rs: Resampling,
    competitors: dict[str, list[tuple[dict[str, Any], str, pl.DataFrame]]],
    note: str,
    empty_reason: str,
) -> dict[str, Any]:
    """An entry for "A beats every competitor": a cell per (dataset, llm, versus) with A minus that
    competitor paired per query, and per competitor its pooled margin (``margins``: the mean of the
    in-scope datasets' mean differences). The entry's effect and interval are the smallest margin's.
    It holds when every margin's interval lies above 0 (an intersection-union test: no correction
    needed) and is reversed when the smallest margin lies below 0 even at the Bonferroni-corrected
    confidence 1 - (1 - confidence) / competitors (the smallest of several null margins is more often
    below 0 than one is)."""
    names = [m for m, pairs in competitors.items() if pairs]
    if not names:
        return not_run(claim, empty_reason, inputs)
    cells, pools = [], {}
    for name in names:
        pools[name] = PooledDifferences()
        for keys, dataset, frame in competitors[name]:
            a, b = frame["a"].to_numpy(), frame["b"].to_numpy()
            cells.append(make_cell({**keys, "versus": name}, paired_difference(a, b, **rs.kwargs()), claim))
            pools[name].add(dataset, frame["qid"].to_list(), a - b)
    scoped = [d for d in inputs.datasets if inputs.in_scope(d, claim)]
    effects = {name: e for name in names if (e := pools[name].effect(rs, scoped)) is not None}
    smallest = min(effects, key=lambda m: effects[m].effect) if effects else None
    entry = make_entry(claim, cells, effects.get(smallest), rs, note=note, inputs=inputs)
    if entry["status"] != "run" or smallest is None:
        return entry
    margins = [too_few(make_cell({"versus": m}, effects[m], claim), rs) for m in effects]
    if all(m["verdict"] == "holds" for m in margins):
        decided = "holds"
    else:
        corrected = replace(rs, confidence=1 - (1 - rs.confidence) / len(effects))
        strict = pools[smallest].effect(corrected, scoped)
        decided = "reversed" if strict is not None and strict.hi < 0 else "inconclusive"
    entry = too_few({**entry, "verdict": decided}, rs)
    return entry | {"margins": margins, "smallest_margin": smallest}


# --- the registry's findings and their re-ask twins -------------------------------------------------


def twin_claim(claim: Claim) -> Claim:
    """The re-ask twin of ``claim``: the same claim and unit, on the re-ask answers."""
    return replace(
        claim,
        id=f"{claim.id}_reask",
        claim=f"{claim.claim} (re-ask control: every evaluated context answered again under a paraphrased "
        "instruction, passages reversed)",
        source=f"{claim.source}, on the re-ask answers (answers/reask_*.parquet)",
        construction="can_fail",
        construction_reason=REASK_REASON,
        reask_twin=False,
    )


def with_control(main: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Mark ``control`` as the control of ``main`` and say whether ``main``'s conclusion survives it:
    true when both hold, false when main holds and the control does not, null when main does not hold."""
    survives = None
    if main["verdict"] == "holds" and control["status"] == "run":
        survives = control["verdict"] == "holds"
    return {**control, "control_of": main["id"], "survives": survives}


def with_twin(main: dict[str, Any], twin: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Link ``main`` and its re-ask ``twin`` (``reask_twin`` / ``twin_of``) and say whether main's
    effect survives the re-ask: true when the twin holds, false when it does not, null when main
    neither holds nor is built in (nothing to survive) or the twin did not run."""
    survives = None
    if main["verdict"] in ("holds", BY_CONSTRUCTION) and main.get("effect") is not None and twin["status"] == "run":
        survives = twin["verdict"] == "holds"
    return {**main, "reask_twin": twin["id"]}, {**twin, "twin_of": main["id"], "survives": survives}


@dataclass(frozen=True)
class Finding:
    """One finding of the registry: the claim it tests and how its entry is computed.

    ``claim`` is a ``Claim``, or a function of the inputs that builds it where its wording names a
    configured setting (the ranking cutoff, Figure 9's method). ``compute(claim, inputs, rs)``
    returns the entry; it takes everything it states from ``claim``, so that the same computation
    on the re-ask answers (``inputs.reasked()``) with ``twin_claim(claim)`` is the twin.
    ``control_of`` names the finding whose conclusion this one controls (``with_control``). ``id``
    is the claim's (given where the claim is built from the inputs).
    """

    claim: Claim | Callable[[FindingInputs], Claim]
    compute: Callable[[Claim, FindingInputs, Resampling], dict[str, Any]]
    control_of: str | None = None
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            if not isinstance(self.claim, Claim):
                raise ValueError("a finding whose claim is built from the inputs needs its id")
            object.__setattr__(self, "id", self.claim.id)

    def claim_for(self, inputs: FindingInputs) -> Claim:
        return self.claim if isinstance(self.claim, Claim) else self.claim(inputs)

    def entry(self, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
        return self.compute(self.claim_for(inputs), inputs, rs)

    def twin_entry(self, inputs: FindingInputs, rs: Resampling) -> dict[str, Any]:
        """The entry of the re-ask twin: gold sets and known flags stay those of the answer prompt,
        every evaluated answer is a re-ask answer (not run where the inputs have none)."""
        twin = twin_claim(self.claim_for(inputs))
        if not inputs.has_reask():
            return not_run(twin, REASK_MISSING, inputs)
        return self.compute(twin, inputs.reasked(), rs)
