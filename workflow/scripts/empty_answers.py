"""Rule empty_answers: the share of empty outputs per dataset, LLM and context, beside Table 1.

By hand:  python workflow/scripts/empty_answers.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("empty_answers")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import empty_answers_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

empty_answers_job(
    answers=keyed_inputs(snakemake.input, "answers"), csv=snakemake.output.csv, md=snakemake.output.md, log=log
)
