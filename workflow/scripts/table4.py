"""Rule table4: paper Table 4, NDCG@k and Recall@k of the utility rankings.

By hand:  python workflow/scripts/table4.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("table4")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import table4_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

table4_job(
    rankings=keyed_inputs(snakemake.input, "rankings"),
    gold=keyed_inputs(snakemake.input, "gold"),
    k=snakemake.params.k,
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    tex=snakemake.output.tex,
    intervals=snakemake.params.intervals,
)
