"""The paper's RAG analyses as pure polars computations (Table 1, Figures 1, 2, 3 and 8).

Inputs are the workflow's tables, already read:

- ``answers[(dataset, llm)][context]``: one LLM's answers under one context, columns qid, pids
  (list), output, correct (``metrics.score_answer``); one row per query for every context used here.
- ``gold[(dataset, llm, candidates)]``: the LLM's gold utilitarian passages from candidates ``C`` or
  ``U``, a long table (qid, pid); a query with an empty gold set has no row.
- ``queries[dataset]``: qid, question, answers, human_pids, task.

Every average is taken over all queries of the dataset (an empty set counts as size 0), which is
what the paper's own code does for gold set sizes (``gold_utility_computing.py`` appends
``len(utility)`` for every query) and what reproduces the 3.0 human passages per query on NQ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from ..method.answers import CANDIDATE_CONTEXTS, reask_context
from .model_stage import ModelStage

Answers = Mapping[tuple[str, str], Mapping[str, pl.DataFrame]]
Gold = Mapping[tuple[str, str, str], pl.DataFrame]

HUMAN = "Human"
CANDIDATES = ("C", "U")
# Table 1's columns and the answer context behind each, in the paper's order.
TABLE1_CONTEXTS: dict[str, str] = {
    "None": "none",
    "C": "topk",
    "U": "union",
    "Human": "human",
    "G(C)": "gold_C_from_{llm}",
    "G(U)": "gold_U_from_{llm}",
}
TABLE1_COLUMNS = tuple(TABLE1_CONTEXTS)
# Table 1's blocks: the answers under the answer prompt, and their re-ask (method.answers: the
# paraphrased instruction, the passages in reverse order), the same columns.
ANSWER_BLOCK, REASK_BLOCK = "answer", "reask"


def table1_context(column: str, llm: str, block: str = ANSWER_BLOCK) -> str:
    """The answer context behind a Table 1 cell (``G(C)``, ``reask`` -> ``reask_gold_C_from_<llm>``)."""
    context = TABLE1_CONTEXTS[column].format(llm=llm)
    if block == ANSWER_BLOCK:
        return context
    if block == REASK_BLOCK:
        return reask_context(context)
    raise ValueError(f"unknown Table 1 block '{block}' (expected '{ANSWER_BLOCK}' or '{REASK_BLOCK}')")


def table1_contexts(llm: str) -> list[str]:
    """Table 1's columns as the answer contexts of ``llm`` (its own gold sets)."""
    return [context.format(llm=llm) for context in TABLE1_CONTEXTS.values()]


def table1_reask_contexts(model: ModelStage, llm: str) -> list[str]:
    """Table 1's re-ask block: the re-ask of each of its columns (none when the re-ask is off)."""
    return [reask_context(c) for c in table1_contexts(llm)] if model.reask else []


def empty_answers_contexts(model: ModelStage, llm: str) -> list[str]:
    """The empty-answers table beside Table 1: every context answered before any judgment, the
    candidates' and the LLM's own gold sets."""
    return list(CANDIDATE_CONTEXTS) + model.own_gold_contexts(llm)


TRANSFER_INDEX = "gold_from"
OVERLAP_INDEX = "set"


def _check_candidates(candidates: str) -> None:
    if candidates not in CANDIDATES:
        raise ValueError(f"candidates must be one of {CANDIDATES}, got {candidates!r}")


def _context(answers: Answers, dataset: str, llm: str, context: str) -> pl.DataFrame:
    try:
        return answers[(dataset, llm)][context]
    except KeyError:
        raise KeyError(f"no answers for dataset={dataset!r}, llm={llm!r}, context={context!r}") from None


def correct_pct(frame: pl.DataFrame, qids: pl.Series | None = None, name: str = "answers") -> float:
    """Percentage of queries answered correctly in a one-row-per-query answers frame.

    With ``qids``, the frame must hold exactly those queries, so that every cell of a table shares
    one denominator.
    """
    if frame["qid"].is_duplicated().any():
        raise ValueError(f"{name}: expected one row per query, found duplicated qids")
    if qids is not None and set(frame["qid"].to_list()) != set(qids.to_list()):
        raise ValueError(f"{name}: its queries differ from the dataset's ({frame.height} vs {qids.len()})")
    if frame.height == 0:
        return float("nan")
    return 100.0 * frame["correct"].cast(pl.Float64).mean()


def set_sizes(gold_frame: pl.DataFrame, qids: pl.Series) -> float:
    """Average number of distinct gold passages per query, over all of ``qids`` (empty sets count 0)."""
    if qids.len() == 0:
        return float("nan")
    n = gold_frame.filter(pl.col("qid").is_in(qids.to_list())).unique(["qid", "pid"]).height
    return n / qids.len()


def table1(
    answers: Answers, gold: Gold, queries: Mapping[str, pl.DataFrame], blocks: Sequence[str] = (ANSWER_BLOCK,)
) -> pl.DataFrame:
    """Table 1 in tidy form: correct answers (%) per block, dataset, LLM and passage list.

    Returns columns block (``answer``, or ``reask``: the same passage lists re-asked), dataset, llm,
    column (one of ``TABLE1_COLUMNS``: None, C, U, Human, G(C), G(U)), correct (percent), avg_size
    and n_queries, block by block in the order datasets and LLMs appear in ``answers``.
    ``avg_size`` is the average number of human passages (Human) or of the LLM's gold passages
    (G(C), G(U)) per query, over *all* queries of the dataset, empty gold sets counting 0 (the
    paper's code does the same); null for the other columns. A re-ask reverses the order of the
    passages, not the sets, so both blocks have the same sizes.
    """
    rows: list[dict] = []
    for block, (dataset, llm) in ((b, key) for b in blocks for key in answers):
        q = queries[dataset]
        qids = q["qid"]
        human_size = float(q["human_pids"].list.unique().list.len().mean()) if q.height else float("nan")
        for column in TABLE1_CONTEXTS:
            context = table1_context(column, llm, block)
            frame = _context(answers, dataset, llm, context)
            if column == HUMAN:
                size: float | None = human_size
            elif column.startswith("G("):
                cand = column[2]
                if (dataset, llm, cand) not in gold:
                    raise KeyError(f"no gold set for dataset={dataset!r}, llm={llm!r}, candidates={cand!r}")
                size = set_sizes(gold[(dataset, llm, cand)], qids)
            else:
                size = None
            rows.append(
                {
                    "block": block,
                    "dataset": dataset,
                    "llm": llm,
                    "column": column,
                    "correct": correct_pct(frame, qids, f"{dataset}/{llm}/{context}"),
                    "avg_size": size,
                    "n_queries": q.height,
                }
            )
    schema = {
        "block": pl.String,
        "dataset": pl.String,
        "llm": pl.String,
        "column": pl.String,
        "correct": pl.Float64,
        "avg_size": pl.Float64,
        "n_queries": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def topk_gain(answers: Answers) -> pl.DataFrame:
    """Figure 1 (left): correct answers (%) of each LLM without passages and with the top-k.

    Returns columns dataset, llm, none, topk, gain (= topk - none, in points) and k (the largest
    number of passages given in the top-k context), one row per (dataset, llm) in input order.
    """
    rows = []
    for dataset, llm in answers:
        none = _context(answers, dataset, llm, "none")
        topk = _context(answers, dataset, llm, "topk")
        p_none = correct_pct(none, name=f"{dataset}/{llm}/none")
        p_topk = correct_pct(topk, none["qid"], f"{dataset}/{llm}/topk")
        k = topk["pids"].list.len().max() if topk.height else 0
        rows.append((dataset, llm, p_none, p_topk, p_topk - p_none, int(k or 0)))
    schema = {
        "dataset": pl.String,
        "llm": pl.String,
        "none": pl.Float64,
        "topk": pl.Float64,
        "gain": pl.Float64,
        "k": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def transfer_matrix(answers: Answers, llms: Sequence[str], dataset: str, candidates: str) -> pl.DataFrame:
    """Gold-set transfer (Figures 1 right, 2 and 8): correct answers (%) of each LLM with each gold set.

    Rows are whose passages are given (column ``gold_from``: each LLM, then ``"Human"`` = the
    human-annotated passages), columns are the answering LLMs. Cell (row r, column c) is LLM c
    answering with r's gold set from ``candidates``: cells are c's ``gold_{X}_from_{r}`` context (the
    diagonal: c's own gold set), the Human row is c's ``human`` context.
    """
    _check_candidates(candidates)
    data: dict[str, list[float]] = {}
    for col in llms:
        values = []
        for row in [*llms, HUMAN]:
            if row == HUMAN:
                context = "human"
            else:
                context = f"gold_{candidates}_from_{row}"  # row == col: the LLM's own gold set
            values.append(correct_pct(_context(answers, dataset, col, context), name=f"{dataset}/{col}/{context}"))
        data[col] = values
    return pl.DataFrame({TRANSFER_INDEX: [*llms, HUMAN], **data}, schema_overrides={c: pl.Float64 for c in llms})


def gold_overlap(
    gold: Gold,
    queries: Mapping[str, pl.DataFrame],
    llms: Sequence[str],
    dataset: str,
    candidates: str = "U",
) -> pl.DataFrame:
    """Figure 3: average number of passages shared by two sets per query.

    The sets are each LLM's gold set from ``candidates`` and the human-annotated passages (``"Human"``).
    Returns a square, symmetric matrix with the set names in column ``set`` and as columns, in the
    order ``[*llms, "Human"]``; the diagonal is the average set size. Averages run over all queries of
    the dataset, a query where either set is empty contributing 0.
    """
    _check_candidates(candidates)
    q = queries[dataset]
    names = [*llms, HUMAN]
    qids = q["qid"].to_list()
    parts = [
        q.select("qid", pl.col("human_pids").alias("pid"))
        .explode("pid")
        .drop_nulls("pid")
        .with_columns(owner=pl.lit(HUMAN))
    ]
    for llm in llms:
        if (dataset, llm, candidates) not in gold:
            raise KeyError(f"no gold set for dataset={dataset!r}, llm={llm!r}, candidates={candidates!r}")
        g = gold[(dataset, llm, candidates)].select(pl.col("qid").cast(pl.String), pl.col("pid").cast(pl.String))
        parts.append(g.filter(pl.col("qid").is_in(qids)).with_columns(owner=pl.lit(llm)))
    members = pl.concat([p.select("owner", "qid", pl.col("pid").cast(pl.String)) for p in parts]).unique()
    # A self-join on (qid, pid) pairs every shared passage with both of its owners, so counting the
    # pairs per (owner, owner) gives the intersection sizes summed over queries in one pass.
    counts = (
        members.join(members, on=["qid", "pid"], suffix="_b")
        .group_by("owner", "owner_b")
        .len()
        .with_columns(avg=pl.col("len") / max(q.height, 1))
    )
    lookup = {(a, b): v for a, b, v in counts.select("owner", "owner_b", "avg").iter_rows()}
    return pl.DataFrame(
        {OVERLAP_INDEX: names, **{b: [lookup.get((a, b), 0.0) for a in names] for b in names}},
        schema_overrides={b: pl.Float64 for b in names},
    )


def matrices_long(matrices: Mapping[str, pl.DataFrame], value: str) -> pl.DataFrame:
    """Stack square-ish matrices keyed by dataset into a tidy frame: dataset, row, column, ``value``."""
    frames = []
    for dataset, m in matrices.items():
        index = m.columns[0]
        frames.append(
            m.unpivot(index=index, variable_name="column", value_name=value)
            .rename({index: "row"})
            .select(pl.lit(dataset).alias("dataset"), "row", "column", value)
        )
    if not frames:
        return pl.DataFrame(schema={"dataset": pl.String, "row": pl.String, "column": pl.String, value: pl.Float64})
    return pl.concat(frames)


def empty_answers(answers: Answers) -> pl.DataFrame:
    """Per (dataset, llm, context): calls, empty outputs and their share in percent.

    A model that says nothing scores 0 everywhere; this table makes that visible beside Table 1.
    """
    rows = [
        (dataset, llm, context, frame.height, int((frame["output"].str.strip_chars() == "").sum()))
        for (dataset, llm), contexts in answers.items()
        for context, frame in contexts.items()
    ]
    schema = {"dataset": pl.String, "llm": pl.String, "context": pl.String, "calls": pl.Int64, "empty": pl.Int64}
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    return frame.with_columns(
        empty_pct=pl.when(pl.col("calls") > 0).then(100.0 * pl.col("empty") / pl.col("calls")).otherwise(None)
    )


def table1_intervals(
    answers: Answers, n_resamples: int, seed: int, confidence: float = 0.95, blocks: Sequence[str] = (ANSWER_BLOCK,)
) -> pl.DataFrame:
    """Bootstrap interval of every Table 1 cell (percent correct, queries resampled, ``report.bootstrap``).

    Returns columns block, dataset, llm, column, lo, hi (percent), one row per cell of ``table1``; a
    cell's interval is over the same queries as its value. Join it on (block, dataset, llm, column).
    """
    from .bootstrap import mean_interval

    rows = []
    for block, (dataset, llm) in ((b, key) for b in blocks for key in answers):
        for column in TABLE1_CONTEXTS:
            frame = _context(answers, dataset, llm, table1_context(column, llm, block))
            e = mean_interval(100.0 * frame["correct"].cast(pl.Float64).to_numpy(), n_resamples, seed, confidence)
            rows.append((block, dataset, llm, column, e.lo, e.hi))
    schema = {
        "block": pl.String,
        "dataset": pl.String,
        "llm": pl.String,
        "column": pl.String,
        "lo": pl.Float64,
        "hi": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row").fill_nan(None)
