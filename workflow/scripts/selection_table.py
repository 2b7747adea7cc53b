"""Rules table2, table5 and table8: paper Tables 2 (utility-based selection), 5 (thinking in utility
judgments) and 8 (known-rejection), each laid out as ``pipeline.report.SELECTION_TABLES`` says
(CSV, Markdown, LaTeX).

By hand:  python workflow/scripts/selection_table.py table2
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("table2")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import selection_table_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

selection_table_job(
    table=snakemake.rule,
    judgments=keyed_inputs(snakemake.input, "judgments"),
    gold=keyed_inputs(snakemake.input, "gold"),
    known=keyed_inputs(snakemake.input, "known"),
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    tex=snakemake.output.tex,
    intervals=snakemake.params.intervals,
    note=snakemake.params.note,
)
