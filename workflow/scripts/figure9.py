"""Rule figure9: paper Figure 9, RAG with each LLM's utility selections across LLMs.

By hand:  python workflow/scripts/figure9.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("figure9")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import figure9_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

figure9_job(
    answers=keyed_inputs(snakemake.input, "answers"),
    llms=snakemake.params.llms,
    method=snakemake.params.method,
    style=snakemake.params.style,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    csv=snakemake.output.csv,
)
