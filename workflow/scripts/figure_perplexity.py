"""Rule figure_perplexity: paper Figure 4, perplexity of human passages in and out of gold sets; RAG with
them on known and unknown queries.

By hand:  python workflow/scripts/figure_perplexity.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("figure_perplexity")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import perplexity_figure_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

perplexity_figure_job(
    perplexity=keyed_inputs(snakemake.input, "perplexity"),
    answers=keyed_inputs(snakemake.input, "answers"),
    known=keyed_inputs(snakemake.input, "known"),
    style=snakemake.params.style,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
    csv=snakemake.output.csv,
)
