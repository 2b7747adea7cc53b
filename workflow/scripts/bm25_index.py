"""Rule bm25_index: a BM25 index (bm25s) over every passage of a corpus.

By hand:  python workflow/scripts/bm25_index.py corpus=worldfacts retriever=bm25
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("bm25_index")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import bm25_index_job  # noqa: E402

bm25_index_job(passages=snakemake.input.passages, spec=snakemake.params.spec, output=snakemake.output.index, log=log)
