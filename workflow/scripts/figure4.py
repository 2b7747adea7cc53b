"""Rule figure4: paper Figure 4, perplexity of human passages in and out of gold sets; RAG with them on known and unknown queries.

By hand:  python workflow/scripts/figure4.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("figure4")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import figure4_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

figure4_job(
    perplexity=keyed_inputs(snakemake.input, "perplexity"),
    answers=keyed_inputs(snakemake.input, "answers"),
    known=keyed_inputs(snakemake.input, "known"),
    style=snakemake.params.style,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    csv=snakemake.output.csv,
)
