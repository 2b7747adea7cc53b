# Every path of the workflow, written once, and the helpers that fill them in: the keyed inputs of
# the report rules and the final targets.


# --- file patterns --------------------------------------------------------------------------------
# Data (rules/data.smk): benchmark files loaded, human passages mapped, then the normalized tables.
SOURCE_QUERIES = "results/{dataset}/source/queries.parquet"
EVIDENCE = "results/{dataset}/source/evidence.parquet"
SOURCE_SUMMARY = "results/{dataset}/source/summary.json"
SHORT_ANSWERS = "results/{dataset}/source/short_answers.parquet"
HUMAN_PASSAGES = "results/{dataset}/human_passages.parquet"
HUMAN_COVERAGE = "results/{dataset}/human_coverage.json"
CORPUS_SHARD = "results/corpora/{corpus}/shards/{corpus_shard}.parquet"
CORPUS_SPANS = "results/corpora/{corpus}/spans.parquet"
QUERIES = "results/{dataset}/queries.parquet"
PASSAGES = "results/corpora/{corpus}/passages.parquet"
# Retrieval (rules/retrieval.smk).
RETRIEVER_MANIFEST = "resources/retrievers/{retriever}/manifest.json"
RETRIEVER_WEIGHTS = "{models_dir}/retrievers/{retriever}"
EMBEDDINGS = "results/corpora/{corpus}/{retriever}/embeddings/{corpus_shard}.npy"
INDEX = "results/corpora/{corpus}/{retriever}/index.faiss"
BM25_INDEX = "results/corpora/{corpus}/{retriever}/bm25"
RUN = "results/{dataset}/{retriever}/run.parquet"
# Every run scored on a dataset (rules/runs.smk): its top-k with texts.
RUN_TOPK = "results/{dataset}/runs/{run}/topk.parquet"
# Per (dataset, run, LLM answering, judge, query): the judge's metrics and the answer's correctness.
RUN_PAIRS = "results/runs/qrels_agreement_pairs.parquet"
# The model stages (rules/generation.smk, gold.smk, judgments.smk).
MANIFEST = "resources/models/{llm}/manifest.json"
LLM_WEIGHTS = "{models_dir}/llms/{llm}"
# Every passage any LLM call of a dataset can get (U, C marked), with its text.
CANDIDATES_TABLE = "results/{dataset}/candidates.parquet"
ANSWERS = "results/{dataset}/{llm}/answers/{context}.parquet"
GOLD = "results/{dataset}/{llm}/gold_{pool}.parquet"
KNOWN = "results/{dataset}/{llm}/known.parquet"
JUDGMENTS = "results/{dataset}/{llm}/judgments/{method}.parquet"
RANKINGS = "results/{dataset}/{llm}/rankings/{method}.parquet"
PERPLEXITY = "results/{dataset}/{llm}/perplexity.parquet"
QRELS = "results/{dataset}/{llm}/qrels_{pool}.txt"
# The report (rules/report.smk, findings.smk).
TABLE = "results/tables/{name}.{ext}"
FIGURE = "results/figures/{name}.{ext}"
FINDINGS_JSON = "results/findings.json"
FINDINGS_SUMMARY = "results/tables/findings_summary.rst"
EXPLORER = "results/explorer/{dataset}.html"
RESULTS_CONFIG = "results/config.yaml"
# The report's tables and figures by rule: the file name of each (its caption: report/<rule>.rst).
TABLE_NAMES = {
    "retrieval_table": "retrieval",
    "table1": "table1_rag",
    "empty_answers": "empty_answers",
    "table6": "table6_datasets",
    "table2": "table2_selection",
    "table3": "table3_rag_selection",
    "table4": "table4_ranking",
    "table5": "table5_thinking",
    "table7": "table7_rag_reranked",
    "table8": "table8_known_rejection",
    "external_runs": "external_runs",
    "qrels_agreement": "qrels_agreement",
}
FIGURE_NAMES = {
    "figure_topk": "fig1_left_topk",
    "figure_overlap": "fig3_overlap",
    "figure_perplexity": "fig4_perplexity",
    "figure_selection_transfer": "fig9_selection_transfer",
    "external_runs": "external_runs",
}


# --- filling them in ------------------------------------------------------------------------------
def fill(pattern, **values):
    """``pattern`` with only the named fields filled in; other wildcards stay as they are."""
    return re.sub(
        r"\{(\w+)\}",
        lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0),
        pattern,
    )


def passages_of_dataset(wildcards):
    return fill(PASSAGES, corpus=corpus_of(wildcards))


def weights_dir(pattern, **values):
    """Where materialized weights go when config `models_dir` is set (else beside the manifest)."""
    models_dir = config["models_dir"]
    return fill(pattern, models_dir=models_dir, **values) if models_dir else None


def table_outputs(rule, name=None, formats=("csv", "md", "tex"), category="2 Tables"):
    """A table's files (results/tables/<name>.<format>); its Markdown page comes with the same page
    as HTML (report.tables.write_page), which the report shows inline, the Markdown beside it.
    """
    name = name or TABLE_NAMES[rule]
    out = {ext: fill(TABLE, name=name, ext=ext) for ext in (*formats, "html")}
    for page in ("html", "md"):
        out[page] = report(
            out[page], caption=f"../report/{rule}.rst", category=category
        )
    return out


def figure_outputs(rule, name=None, csv=True):
    """A figure's PNG (in the report) and PDF, and its numbers as a CSV table."""
    name = name or FIGURE_NAMES[rule]
    png = fill(FIGURE, name=name, ext="png")
    out = {
        "png": report(png, caption=f"../report/{rule}.rst", category="3 Figures"),
        "pdf": fill(FIGURE, name=name, ext="pdf"),
    }
    if csv:
        out["csv"] = fill(TABLE, name=name, ext="csv")
    return out


def answers_named(contexts):
    """Named answer files (patterns in {dataset} and {llm}), one per context."""
    return {ctx: fill(ANSWERS, context=ctx) for ctx in contexts}


# Report jobs read many files of one kind (answers of every dataset, LLM and context). Each input is
# named by its key (`input_key("answers", dataset, llm, context)`), which the job reads back with
# `llm_utility.workflow.keyed_inputs`: the files a job reads are exactly the rule's inputs.
def answers_inputs(datasets, contexts_of):
    """Keyed answer files: ``contexts_of(llm)`` lists the contexts read for each LLM."""
    return {
        input_key("answers", d, llm, ctx): fill(
            ANSWERS, dataset=d, llm=llm, context=ctx
        )
        for d in datasets
        for llm in LLMS
        for ctx in contexts_of(llm)
    }


def gold_inputs(datasets, pools=("C", "U")):
    return {
        input_key("gold", d, llm, pool): fill(GOLD, dataset=d, llm=llm, pool=pool)
        for d in datasets
        for llm in LLMS
        for pool in pools
    }


def queries_inputs(datasets):
    return {input_key("queries", d): fill(QUERIES, dataset=d) for d in datasets}


def keyed_per_llm(kind, pattern, datasets, methods_of=None):
    """Keyed files of one pattern for every dataset and LLM (and method, if ``methods_of(d, llm)``)."""
    if methods_of is None:
        return {
            input_key(kind, d, llm): fill(pattern, dataset=d, llm=llm)
            for d in datasets
            for llm in LLMS
        }
    return {
        input_key(kind, d, llm, m): fill(pattern, dataset=d, llm=llm, method=m)
        for d in datasets
        for llm in LLMS
        for m in methods_of(d, llm)
    }


def gold_C_inputs(datasets=DATASETS):
    return keyed_per_llm("gold", fill(GOLD, pool="C"), datasets)


def known_inputs(datasets=DATASETS):
    return keyed_per_llm("known", KNOWN, datasets)


def final_targets():
    """Every table and figure, the qrels, the findings, the cost table and the config."""
    tables = [
        fill(TABLE, name=name, ext="md")
        for rule, name in TABLE_NAMES.items()
        if rule != "qrels_agreement" or DATA_PLAN.run_rag
    ]
    figures = [
        fill(FIGURE, name=name, ext="png")
        for name in [
            FIGURE_NAMES["figure_topk"],
            *REPORT_PLAN.transfer_figures,
            FIGURE_NAMES["figure_overlap"],
            FIGURE_NAMES["figure_perplexity"],
            FIGURE_NAMES["figure_selection_transfer"],
            FIGURE_NAMES["external_runs"],
        ]
    ]
    qrels = expand(QRELS, dataset=DATASETS, llm=LLMS, pool=["C", "U"])
    findings = [
        FINDINGS_JSON,
        fill(TABLE, name="findings", ext="md"),
        fill(TABLE, name="cost", ext="md"),
        *(fill(TABLE, name=f"transfer_unknown_both_{c}", ext="md") for c in ("U", "C")),
        RESULTS_CONFIG,
        *expand(EXPLORER, dataset=DATASETS),
    ]
    return tables + figures + qrels + findings
