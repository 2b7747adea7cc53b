"""Rule retrieve_bm25: search a BM25 index with every query and write the run (qid, pid, rank, score).

By hand:  python workflow/scripts/retrieve_bm25.py dataset=wf-single retriever=bm25
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("retrieve_bm25")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import retrieve_bm25_job  # noqa: E402

retrieve_bm25_job(
    queries=snakemake.input.queries,
    passages=snakemake.input.passages,
    index=snakemake.input.index,
    spec=snakemake.params.spec,
    depth=snakemake.params.depth,
    output=snakemake.output.run,
    log=log,
)
