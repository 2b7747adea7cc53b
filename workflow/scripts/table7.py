"""Rule table7: paper Table 7, RAG with the top passages of the utility rankings.

By hand:  python workflow/scripts/table7.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("table7")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import table7_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

table7_job(
    answers=keyed_inputs(snakemake.input, "answers"),
    known=keyed_inputs(snakemake.input, "known"),
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    tex=snakemake.output.tex,
    intervals=snakemake.params.intervals,
)
