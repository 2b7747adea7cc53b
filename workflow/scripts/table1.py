"""Rule table1: paper Table 1 (and its re-ask block) as CSV (tidy), Markdown and LaTeX.

By hand:  python workflow/scripts/table1.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("table1")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import table1_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

table1_job(
    answers=keyed_inputs(snakemake.input, "answers"),
    gold=keyed_inputs(snakemake.input, "gold"),
    queries=keyed_inputs(snakemake.input, "queries"),
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    tex=snakemake.output.tex,
    intervals=snakemake.params.intervals,
    reask=snakemake.params.reask,
)
