"""Rule figure_topk: paper Figure 1 (left).

By hand:  python workflow/scripts/figure_topk.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("figure_topk")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.pipeline import topk_figure_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

topk_figure_job(
    answers=keyed_inputs(snakemake.input, "answers"),
    style=snakemake.params.style,
    png=snakemake.output.png,
    pdf=snakemake.output.pdf,
)
