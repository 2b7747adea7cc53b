"""Rule external_runs: every TREC run in resources/runs/<dataset>/ scored against each LLM's gold set and the human passages.

By hand:  python workflow/scripts/external_runs.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("external_runs")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import external_runs_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

external_runs_job(
    runs=keyed_inputs(snakemake.input, "runs"),
    qrels=keyed_inputs(snakemake.input, "qrels"),
    queries=keyed_inputs(snakemake.input, "queries"),
    k=snakemake.params.k,
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    log=log,
)
