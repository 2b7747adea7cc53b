"""The column schemas of every Parquet file the workflow writes or reads (polars dtypes; pyarrow
schemas where a file is written in streamed row groups). They are part of the user interface:
docs/outputs.md lists the same columns."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

# --- data: what every dataset and corpus is normalized to ----------------------------------------
TASKS = ("qa", "fact")
QUERIES_SCHEMA = {
    "qid": pl.String,
    "question": pl.String,
    "answers": pl.List(pl.String),
    "human_pids": pl.List(pl.String),
    "task": pl.String,
}
PASSAGES_SCHEMA = {"pid": pl.String, "title": pl.String, "text": pl.String}
PASSAGES_ARROW = pa.schema([("pid", pa.string()), ("title", pa.string()), ("text", pa.string())])

# --- data: benchmark loaders, before human passages are mapped onto a corpus (data.evidence) ------
SOURCE_QUERIES_SCHEMA = {
    "qid": pl.String,
    "question": pl.String,
    "answers": pl.List(pl.String),
    "task": pl.String,
}
EVIDENCE_SCHEMA = {
    "qid": pl.String,
    "ref": pl.String,
    "wikipedia_id": pl.String,
    "title": pl.String,
    "start_paragraph": pl.Int32,
    "start_char": pl.Int32,
    "end_paragraph": pl.Int32,
    "end_char": pl.Int32,
    "text": pl.String,
    "pid": pl.String,
}
# Human annotations mapped onto passage ids, and the ones that map to none (data.mapping).
HUMAN_SCHEMA = {"qid": pl.String, "ref": pl.String, "pid": pl.String}
UNMAPPED_SCHEMA = {"qid": pl.String, "ref": pl.String, "reason": pl.String}
# MS MARCO-FQA's short answers, extracted from the long ones by an LLM (data.msmarco).
EXTRACTION_SCHEMA = {
    "qid": pl.String,
    "long_answer": pl.String,
    "output": pl.String,
    "short_answer": pl.String,
    "kept": pl.Boolean,
}
# A KILT corpus: each passage's place in its Wikipedia page, and a chunking shard (data.kilt).
SPANS_ARROW = pa.schema(
    [
        ("pid", pa.string()),
        ("wikipedia_id", pa.string()),
        ("start_paragraph", pa.int32()),
        ("start_char", pa.int32()),
        ("end_paragraph", pa.int32()),
        ("end_char", pa.int32()),
    ]
)
SHARD_ARROW = pa.schema([("pid", pa.string()), ("title", pa.string()), ("text", pa.string())] + list(SPANS_ARROW)[1:])

# --- retrieval -----------------------------------------------------------------------------------
RUN_SCHEMA = {"qid": pl.String, "pid": pl.String, "rank": pl.Int32, "score": pl.Float32}
# A run's top-k with its passages' texts (results/{dataset}/runs/{run}/topk.parquet), rank order.
RUN_TOPK_SCHEMA = {"qid": pl.String, "pid": pl.String, "rank": pl.Int32, "title": pl.String, "text": pl.String}

# --- the method: candidates, answers, gold sets, judgments, rankings, perplexity ------------------
CANDIDATES_SCHEMA = {
    "qid": pl.String,
    "pid": pl.String,
    "rank": pl.Int32,
    "in_C": pl.Boolean,
    "human": pl.Boolean,
    "title": pl.String,
    "text": pl.String,
}
ANSWERS_SCHEMA = {"qid": pl.String, "pids": pl.List(pl.String), "output": pl.String, "correct": pl.Boolean}
GOLD_SCHEMA = {"qid": pl.String, "pid": pl.String}
# parsed: the output states a judgment of its own; echo: it repeats the prompt (method.parsing),
# which counts as unparsed. Neither: unparsed.
JUDGMENTS_SCHEMA = {
    "qid": pl.String,
    "pid": pl.String,
    "selected": pl.Boolean,
    "parsed": pl.Boolean,
    "echo": pl.Boolean,
    "output": pl.String,
}
RANKINGS_SCHEMA = {
    "qid": pl.String,
    "pid": pl.String,
    "rank": pl.Int32,
    "score": pl.Float64,
    "parsed": pl.Boolean,
    "echo": pl.Boolean,
}
PERPLEXITY_SCHEMA = {
    "qid": pl.String,
    "pid": pl.String,
    "in_gold": pl.Boolean,
    "ppl_passage": pl.Float64,
    "ppl_query_passage": pl.Float64,
}
