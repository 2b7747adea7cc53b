"""Rule table5: paper Table 5, utility selection with thinking on and off.

By hand:  python workflow/scripts/table5.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("table5")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import table5_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

table5_job(
    judgments=keyed_inputs(snakemake.input, "judgments"),
    gold=keyed_inputs(snakemake.input, "gold"),
    note=snakemake.params.note,
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    tex=snakemake.output.tex,
    intervals=snakemake.params.intervals,
)
