"""Rule table8: paper Table 8, known-rejection in listwise selection.

By hand:  python workflow/scripts/table8.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("table8")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import table8_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

table8_job(
    judgments=keyed_inputs(snakemake.input, "judgments"),
    gold=keyed_inputs(snakemake.input, "gold"),
    known=keyed_inputs(snakemake.input, "known"),
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    tex=snakemake.output.tex,
    intervals=snakemake.params.intervals,
    note=snakemake.params.note,
)
