"""Rule explorer: results/explorer/<dataset>.html, one row per (query, passage of U) of the dataset
with each LLM's answers and the passage's marks, an interactive table that works offline.

By hand:  python workflow/scripts/explorer.py dataset=wf-single
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("explorer")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import explorer_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

explorer_job(
    dataset=snakemake.wildcards.dataset,
    candidates=snakemake.input.candidates,
    queries=keyed_inputs(snakemake.input, "queries"),
    answers=keyed_inputs(snakemake.input, "answers"),
    gold=keyed_inputs(snakemake.input, "gold"),
    judgments=keyed_inputs(snakemake.input, "judgments"),
    rankings=keyed_inputs(snakemake.input, "rankings"),
    llms=snakemake.params.llms,
    max_queries=snakemake.params.max_queries,
    html=snakemake.output.html,
)
