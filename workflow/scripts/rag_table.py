"""Rules table3 and table7: paper Tables 3 (RAG with the LLMs' own selections, with the shares of
genuine, unparsed and echo selections) and 7 (RAG with the top passages of their utility rankings)
against the top-k, on unknown and known queries, each laid out as ``pipeline.report.RAG_TABLES``
says (CSV, Markdown, LaTeX).

By hand:  python workflow/scripts/rag_table.py table3
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("table3")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import rag_table_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

rag_table_job(
    table=snakemake.rule,
    answers=keyed_inputs(snakemake.input, "answers"),
    known=keyed_inputs(snakemake.input, "known"),
    judgments=keyed_inputs(snakemake.input, "judgments"),
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    tex=snakemake.output.tex,
    intervals=snakemake.params.intervals,
)
