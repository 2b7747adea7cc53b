"""Rule candidate_passages: the passages any LLM call of a dataset can get (U, with C marked), read
from the corpus once.

By hand:  python workflow/scripts/candidate_passages.py dataset=wf-single
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("candidate_passages")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import candidates_job  # noqa: E402

candidates_job(
    queries=snakemake.input.queries,
    run=snakemake.input.run,
    passages=snakemake.input.passages,
    top_k=snakemake.params.top_k,
    output=snakemake.output.candidates,
    log=log,
)
