"""The judgment benchmark's analyses as tidy polars frames (paper Tables 2, 3, 4, 5, 7, 8, Figures 4
and 9). Inputs are the workflow's tables, already read and keyed by (dataset, llm[, method]).

Every judgment and ranking is evaluated against the LLM's own gold set among C (``gold_C``), on the
queries that were judged (all, or the first ``judgments.max_queries``). Known queries are those the
LLM answers correctly without passages (``known.parquet``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from ..method.answers import selected_context
from ..method.judgments import counterpart
from ..method.parsing import ECHO, GENUINE, STATUSES, UNPARSED
from ..metrics import ranking_metrics, set_metrics
from .analysis import correct_pct
from .model_stage import ModelStage

Keyed = Mapping[tuple[str, ...], pl.DataFrame]

# Table 8 compares these two selection methods when both are judged.
KNOWN_REJECTION = ("listwise_pa", "listwise_pa_reject")
# Figure 9 shows the transfer of the paper's best selection method when it is a rag method.
FIGURE9_PREFERRED = "listwise_pa"


# --- what each table reads, from the model plan -----------------------------------------------------


def table3_contexts(model: ModelStage, llm: str) -> list[str]:
    """Table 3: the top-k, and the LLM's own selections with every rag method."""
    return ["topk"] + [selected_context(m, llm) for m in model.judgments["rag_methods"]]


def table7_contexts(model: ModelStage) -> list[str]:
    """Table 7: the top-k, and the top passages of the LLM's own rag rankings."""
    return ["topk"] + model.reranked_contexts()


def known_rejection_methods(model: ModelStage) -> list[str]:
    """Table 8's two methods, or none when either is not judged."""
    return list(KNOWN_REJECTION) if set(KNOWN_REJECTION) <= set(model.judge_methods) else []


def table5_methods(model: ModelStage, dataset: str, llm: str) -> list[str]:
    """Table 5: the thinking methods and their counterparts without thinking."""
    if (dataset, llm) not in model.thinking_pairs:
        return []
    return list(dict.fromkeys(counterpart(m) for m in model.thinking_methods)) + model.thinking_methods


def figure9_method(model: ModelStage) -> str:
    """The rag method whose selections Figure 9 transfers across LLMs."""
    rag = model.judgments["rag_methods"]
    return FIGURE9_PREFERRED if FIGURE9_PREFERRED in rag else rag[0]


def figure9_contexts(model: ModelStage) -> list[str]:
    """Figure 9: the selections of every LLM with ``figure9_method``."""
    method = figure9_method(model)
    return [selected_context(method, source) for source in model.llms]


# --- the analyses -------------------------------------------------------------------------------------


def gold_of(gold: pl.DataFrame, qids: Sequence[str]) -> dict[str, set[str]]:
    """qid -> gold pids, for exactly ``qids`` (an empty set where the gold set is empty)."""
    out: dict[str, set[str]] = {q: set() for q in qids}
    for qid, pid in gold.select("qid", "pid").iter_rows():
        if qid in out:
            out[qid].add(pid)
    return out


def selection_scores(judgments: Keyed, gold_C: Keyed, known: Keyed | None = None) -> pl.DataFrame:
    """Table 2 (and 5, 8) in tidy form: one row per (dataset, llm, method) with ``metrics.set_metrics``'
    keys (in percent where a share) and each judged query's outcome (``outcomes_of``) as shares that
    sum to 100: ``genuine`` (every output a judgment of the model's own), ``unparsed`` (an output
    without a judgment) and ``echo`` (an output that repeats its prompt). Unparsed and echoed outputs
    are failures: they select nothing (a miss for precision and recall) and are never a correct
    rejection (Acc); the shares of each metric's queries stand beside it (``unparsed_nonempty``,
    ``echo_nonempty``; ``unparsed_empty``, ``echo_empty``).

    With ``known`` ((dataset, llm) -> qid, known), the paper's Table 8 split too: ``n_unknown``,
    ``n_known``, the average number of passages selected on each (``avg_selected_unknown``,
    ``avg_selected_known``) and the unparsed and echo shares of each (``unparsed_unknown``, ...).
    """
    rows = []
    for (dataset, llm, method), table in judgments.items():
        qids, selected = selected_of(table)
        outcome = outcomes_of(table)
        gold = gold_of(gold_C[(dataset, llm)], qids)
        m = set_metrics(selected, gold, unparsed_of(table))
        row = {
            "dataset": dataset,
            "llm": llm,
            "method": method,
            **{k: 100 * m[k] for k in ("precision", "recall", "f1", "f1_per_query", "accuracy_empty")},
            **{k: m[k] for k in ("n_nonempty", "n_empty", "avg_selected_nonempty", "avg_selected_empty")},
            **outcome_shares(outcome, qids),
            **outcome_shares(outcome, [q for q in qids if gold[q]], "_nonempty", (UNPARSED, ECHO)),
            **outcome_shares(outcome, [q for q in qids if not gold[q]], "_empty", (UNPARSED, ECHO)),
        }
        if known is not None:
            flags = _known_of(known[(dataset, llm)], qids)
            for side, flag in (("unknown", False), ("known", True)):
                side_q = [q for q in qids if flags[q] == flag]
                row[f"n_{side}"] = len(side_q)
                row[f"avg_selected_{side}"] = _mean([len(selected[q]) for q in side_q])
                row |= outcome_shares(outcome, side_q, f"_{side}", (UNPARSED, ECHO))
        rows.append(row)
    schema = _SELECTION_SCHEMA | (_KNOWN_SPLIT_SCHEMA if known is not None else {})
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def outcomes_of(table: pl.DataFrame) -> dict[str, str]:
    """qid -> the outcome of a judgments (or rankings) table's query, one of ``parsing.STATUSES``:
    ``genuine`` when every output of it (a listwise method has one, a pointwise one one per
    candidate) is a judgment of the model's own, else ``echo`` when one of them repeats its prompt,
    else ``unparsed``. A table written before echoes were told apart (no ``echo`` column) has none."""
    echo = pl.col("echo") if "echo" in table.columns else pl.lit(False)
    per_query = table.group_by("qid", maintain_order=True).agg(
        pl.col("parsed").all().alias("genuine"), echo.any().alias("echo")
    )
    return {q: GENUINE if ok else ECHO if copied else UNPARSED for q, ok, copied in per_query.iter_rows()}


def outcome_shares(
    outcome: Mapping[str, str], qids: Sequence[str], suffix: str = "", statuses: Sequence[str] = STATUSES
) -> dict[str, float]:
    """The percent of ``qids`` with each outcome of ``statuses`` (NaN over no query), keyed
    ``<status><suffix>``."""
    return {f"{s}{suffix}": 100 * _mean([float(outcome[q] == s) for q in qids]) for s in statuses}


def unparsed_of(table: pl.DataFrame) -> set[str]:
    """The qids of a judgments table with an output that is no judgment (unparsed or an echo): the
    failures of the set metrics."""
    return set(table.filter(~pl.col("parsed"))["qid"].to_list())


def _known_of(known: pl.DataFrame, qids: Sequence[str]) -> dict[str, bool]:
    """qid -> known flag for exactly ``qids``; a judged query without a flag is an error."""
    flags = dict(known.select("qid", "known").iter_rows())
    missing = [q for q in qids if q not in flags]
    if missing:
        raise ValueError(
            f"no known flag for {len(missing)} judged queries (e.g. {missing[:3]}): "
            "known.parquet must cover every query"
        )
    return {q: bool(flags[q]) for q in qids}


_SELECTION_SCHEMA = {
    "dataset": pl.String,
    "llm": pl.String,
    "method": pl.String,
    "precision": pl.Float64,
    "recall": pl.Float64,
    "f1": pl.Float64,
    "f1_per_query": pl.Float64,
    "accuracy_empty": pl.Float64,
    "n_nonempty": pl.Int64,
    "n_empty": pl.Int64,
    "avg_selected_nonempty": pl.Float64,
    "avg_selected_empty": pl.Float64,
    "genuine": pl.Float64,
    "unparsed": pl.Float64,
    "echo": pl.Float64,
    "unparsed_nonempty": pl.Float64,
    "echo_nonempty": pl.Float64,
    "unparsed_empty": pl.Float64,
    "echo_empty": pl.Float64,
}
_KNOWN_SPLIT_SCHEMA = {
    "n_unknown": pl.Int64,
    "n_known": pl.Int64,
    "avg_selected_unknown": pl.Float64,
    "avg_selected_known": pl.Float64,
    "unparsed_unknown": pl.Float64,
    "echo_unknown": pl.Float64,
    "unparsed_known": pl.Float64,
    "echo_known": pl.Float64,
}


def ranking_scores(rankings: Keyed, gold_C: Keyed, k: int) -> pl.DataFrame:
    """Table 4 in tidy form: NDCG@k and Recall@k (percent) per (dataset, llm, method) through
    ``metrics.ranking_metrics``, with the shares of queries whose ranking output did not parse
    (``unparsed``) or repeated its prompt (``echo``): both are ranked in retrieval order."""
    rows = []
    for (dataset, llm, method), table in rankings.items():
        ordered = table.sort(["qid", "rank"]).group_by("qid", maintain_order=True).agg(pl.col("pid"))
        ranked = dict(ordered.iter_rows())
        m = ranking_metrics(ranked, gold_of(gold_C[(dataset, llm)], list(ranked)), k=k)
        shares = (
            outcome_shares(outcomes_of(table), list(ranked), statuses=(UNPARSED, ECHO))
            if ranked
            else {UNPARSED: 0.0, ECHO: 0.0}
        )
        rows.append((dataset, llm, method, 100 * m["ndcg"], 100 * m["recall"], shares[UNPARSED], shares[ECHO]))
    schema = {
        "dataset": pl.String,
        "llm": pl.String,
        "method": pl.String,
        "ndcg": pl.Float64,
        "recall": pl.Float64,
        "unparsed": pl.Float64,
        "echo": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def known_split(answers: Keyed, known: Keyed, baseline: str = "topk") -> pl.DataFrame:
    """Tables 3 and 7: percent correct per (dataset, llm, context) on the LLM's unknown and known
    queries, over the queries the context answered (the judged ones), with the ``baseline`` context
    on the same queries.

    ``answers`` maps (dataset, llm, context) to answers; ``known`` maps (dataset, llm) to the known flags.
    """
    rows = []
    for (dataset, llm, context), frame in answers.items():
        if context == baseline:
            continue
        flags = known[(dataset, llm)]
        qids = frame["qid"]
        for name, data in [
            (context, frame),
            (baseline, answers[(dataset, llm, baseline)].filter(pl.col("qid").is_in(qids.to_list()))),
        ]:
            joined = data.join(flags, on="qid", how="inner")
            unknown = joined.filter(~pl.col("known"))
            known_q = joined.filter(pl.col("known"))
            rows.append(
                (
                    dataset,
                    llm,
                    context,
                    name,
                    correct_pct(unknown),
                    correct_pct(known_q),
                    unknown.height,
                    known_q.height,
                )
            )
    schema = {
        "dataset": pl.String,
        "llm": pl.String,
        "context": pl.String,
        "source": pl.String,
        "unknown": pl.Float64,
        "known": pl.Float64,
        "n_unknown": pl.Int64,
        "n_known": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row").unique(
        ["dataset", "llm", "source"], keep="first", maintain_order=True
    )


def with_selection_outcomes(split: pl.DataFrame, answers: Keyed, judgments: Keyed) -> pl.DataFrame:
    """``known_split``'s rows (Tables 3 and 7) with, on each row that answers with an LLM's judgments,
    the outcome shares of those judgments over the queries it answers (``outcome_shares``: genuine,
    unparsed, echo, percent; null on the other rows and where the judgments are not given).
    ``judgments`` maps (dataset, llm, method) to a judgments or rankings table: a
    ``selected_<method>_from_<source>`` row reads the source LLM's selections (a query whose
    selection is not genuine selects nothing, so it is answered with no passage), a
    ``reranked_<method>_top<n>`` row the row LLM's own ranking (one that is not genuine keeps the
    retriever's order)."""
    from ..method.answers import CONTEXT_PATTERNS

    rows = []
    for dataset, llm, source in split.select("dataset", "llm", "source").iter_rows():
        selected = CONTEXT_PATTERNS["selected"].match(source)
        reranked = CONTEXT_PATTERNS["reranked"].match(source)
        key = (
            (dataset, selected["source"], selected["method"])
            if selected
            else (dataset, llm, reranked["method"])
            if reranked
            else None
        )
        table = judgments.get(key) if key else None
        frame = answers.get((dataset, llm, source))
        shares = {}
        if table is not None and frame is not None:
            outcome = outcomes_of(table)
            shares = outcome_shares(outcome, [q for q in frame["qid"].to_list() if q in outcome])
        rows.append({"dataset": dataset, "llm": llm, "source": source, **{s: shares.get(s) for s in STATUSES}})
    schema = {"dataset": pl.String, "llm": pl.String, "source": pl.String} | dict.fromkeys(STATUSES, pl.Float64)
    return split.join(
        pl.DataFrame(rows, schema=schema), on=["dataset", "llm", "source"], how="left", maintain_order="left"
    )


def selection_transfer(answers: Keyed, llms: Sequence[str], dataset: str, method: str) -> pl.DataFrame:
    """Figure 9: percent correct of each LLM (columns) answering with each LLM's (rows) selections
    by ``method``; row ``selected_from``, one column per answering LLM."""
    data = {}
    for col in llms:
        data[col] = [correct_pct(answers[(dataset, col, f"selected_{method}_from_{row}")]) for row in llms]
    return pl.DataFrame({"selected_from": list(llms), **data}, schema_overrides={c: pl.Float64 for c in llms})


def perplexity_summary(perplexities: Keyed) -> pl.DataFrame:
    """Figure 4 (top): mean perplexity per (dataset, llm) of human passages in (G) and out of (H)
    the LLM's gold set, alone and after the query, with how many passages each mean covers."""
    rows = []
    for (dataset, llm), table in perplexities.items():
        for in_gold, part in [(True, table.filter(pl.col("in_gold"))), (False, table.filter(~pl.col("in_gold")))]:
            rows.append(
                (
                    dataset,
                    llm,
                    "G" if in_gold else "H",
                    part["ppl_passage"].mean() if part.height else None,
                    part["ppl_query_passage"].mean() if part.height else None,
                    part.height,
                )
            )
    schema = {
        "dataset": pl.String,
        "llm": pl.String,
        "passages": pl.String,
        "ppl_passage": pl.Float64,
        "ppl_query_passage": pl.Float64,
        "n": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


# --- bootstrap intervals of the judgment tables ---------------------------------------------------
# Each returns the table's keys and, for each value column v, ``v_lo`` and ``v_hi`` (same units),
# from ``report.bootstrap`` with the queries as the resampling unit, to join onto the table.


def selected_of(table: pl.DataFrame) -> tuple[list[str], dict[str, set[str]]]:
    """(the judged qids in table order, qid -> the pids selected for it): a judgments table as sets."""
    qids = table["qid"].unique(maintain_order=True).to_list()
    selected: dict[str, set[str]] = {q: set() for q in qids}
    for qid, pid in table.filter(pl.col("selected")).select("qid", "pid").iter_rows():
        selected[qid].add(pid)
    return qids, selected


def _bounds(name: str, effect) -> dict[str, float | None]:
    def finite(x: float) -> float | None:
        return x if x == x else None  # NaN (no interval) becomes null

    return {f"{name}_lo": finite(effect.lo), f"{name}_hi": finite(effect.hi)}


def selection_intervals(
    judgments: Keyed, gold_C: Keyed, n_resamples: int, seed: int, confidence: float = 0.95, known: Keyed | None = None
) -> pl.DataFrame:
    """Intervals of ``selection_scores``' values (Tables 2, 5, 8): precision, recall, f1 (the F1 of the
    averaged P and R recomputed on resampled queries), f1_per_query, accuracy_empty (percent, an
    unparsed output a failure) and avg_selected_nonempty / avg_selected_empty (passages); with
    ``known``, avg_selected_unknown / avg_selected_known too. Keys: dataset, llm, method."""
    from ..metrics import set_metrics_per_query
    from .bootstrap import f1_of_means, mean_interval, statistic_interval

    rs = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence}
    rows = []
    for (dataset, llm, method), table in judgments.items():
        qids, selected = selected_of(table)
        per_query = set_metrics_per_query(selected, gold_of(gold_C[(dataset, llm)], qids), unparsed_of(table))
        nonempty = per_query.filter(pl.col("n_gold") > 0)
        empty = per_query.filter(pl.col("n_gold") == 0)
        p, r = (100 * nonempty[c].to_numpy().astype(float) for c in ("precision", "recall"))
        row = {
            "dataset": dataset,
            "llm": llm,
            "method": method,
            **_bounds("precision", mean_interval(p, **rs)),
            **_bounds("recall", mean_interval(r, **rs)),
            **_bounds("f1", statistic_interval((p, r), f1_of_means, **rs)),
            **_bounds("f1_per_query", mean_interval(100 * nonempty["f1"].to_numpy().astype(float), **rs)),
            **_bounds("accuracy_empty", mean_interval(100 * empty["correct_empty"].to_numpy().astype(float), **rs)),
            **_bounds("avg_selected_nonempty", mean_interval(nonempty["n_selected"].to_numpy().astype(float), **rs)),
            **_bounds("avg_selected_empty", mean_interval(empty["n_selected"].to_numpy().astype(float), **rs)),
        }
        if known is not None:
            flags = _known_of(known[(dataset, llm)], qids)
            for side, flag in (("unknown", False), ("known", True)):
                counts = [float(len(selected[q])) for q in qids if flags[q] == flag]
                row |= _bounds(f"avg_selected_{side}", mean_interval(counts, **rs))
        rows.append(row)
    columns = [
        "precision",
        "recall",
        "f1",
        "f1_per_query",
        "accuracy_empty",
        "avg_selected_nonempty",
        "avg_selected_empty",
    ]
    columns += ["avg_selected_unknown", "avg_selected_known"] if known is not None else []
    schema = {"dataset": pl.String, "llm": pl.String, "method": pl.String} | {
        f"{c}_{b}": pl.Float64 for c in columns for b in ("lo", "hi")
    }
    return pl.DataFrame(rows, schema=schema)


def ranking_intervals(
    rankings: Keyed, gold_C: Keyed, k: int, n_resamples: int, seed: int, confidence: float = 0.95
) -> pl.DataFrame:
    """Intervals of ``ranking_scores``' ndcg and recall (percent, per-query values resampled).
    Keys: dataset, llm, method."""
    from ..metrics import ranking_metrics_per_query
    from .bootstrap import mean_interval

    rs = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence}
    rows = []
    for (dataset, llm, method), table in rankings.items():
        ranked = dict(table.sort(["qid", "rank"]).group_by("qid", maintain_order=True).agg(pl.col("pid")).iter_rows())
        per_query = ranking_metrics_per_query(ranked, gold_of(gold_C[(dataset, llm)], list(ranked)), k=k)
        rows.append(
            {
                "dataset": dataset,
                "llm": llm,
                "method": method,
                **_bounds("ndcg", mean_interval(100 * per_query["ndcg"].to_numpy(), **rs)),
                **_bounds("recall", mean_interval(100 * per_query["recall"].to_numpy(), **rs)),
            }
        )
    schema = {"dataset": pl.String, "llm": pl.String, "method": pl.String} | {
        f"{c}_{b}": pl.Float64 for c in ("ndcg", "recall") for b in ("lo", "hi")
    }
    return pl.DataFrame(rows, schema=schema)


def known_split_intervals(
    answers: Keyed, known: Keyed, baseline: str, n_resamples: int, seed: int, confidence: float = 0.95
) -> pl.DataFrame:
    """Intervals of ``known_split``'s unknown and known percentages, over the same queries (Tables 3
    and 7). Keys: dataset, llm, source."""
    from .bootstrap import mean_interval

    rs = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence}
    rows = []
    for (dataset, llm, context), frame in answers.items():
        if context == baseline:
            continue
        flags = known[(dataset, llm)]
        base = answers[(dataset, llm, baseline)].filter(pl.col("qid").is_in(frame["qid"].to_list()))
        for name, data in [(context, frame), (baseline, base)]:
            joined = data.join(flags, on="qid", how="inner")
            values = {
                side: 100 * joined.filter(pl.col("known") == (side == "known"))["correct"].cast(pl.Float64).to_numpy()
                for side in ("unknown", "known")
            }
            rows.append(
                {
                    "dataset": dataset,
                    "llm": llm,
                    "source": name,
                    **{k: v for side, x in values.items() for k, v in _bounds(side, mean_interval(x, **rs)).items()},
                }
            )
    schema = {"dataset": pl.String, "llm": pl.String, "source": pl.String} | {
        f"{c}_{b}": pl.Float64 for c in ("unknown", "known") for b in ("lo", "hi")
    }
    return pl.DataFrame(rows, schema=schema).unique(["dataset", "llm", "source"], keep="first", maintain_order=True)
