"""Rule prepare_corpus: the worldfacts demo corpus, a passage TSV (local, DPR, MS MARCO) streamed into
Parquet, or the shards of a chunked KILT knowledge source concatenated, as passages.parquet.

By hand:  python workflow/scripts/prepare_corpus.py corpus=worldfacts
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("prepare_corpus")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline.data import prepare_corpus_job  # noqa: E402

prepare_corpus_job(
    name=snakemake.wildcards.corpus,
    cfg=snakemake.params.corpus,
    inputs={k: (list(v) if k == "shards" else v) for k, v in snakemake.input.items()},
    output=snakemake.output.passages,
    seed=snakemake.params.seed,
    log=log,
)
