"""Rule qrels_agreement: whether each judge's metric of a run's top-k predicts the LLM's answer with it.

By hand:  python workflow/scripts/qrels_agreement.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("qrels_agreement")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import qrels_agreement_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

qrels_agreement_job(
    runs=keyed_inputs(snakemake.input, "runs"),
    qrels=keyed_inputs(snakemake.input, "qrels"),
    queries=keyed_inputs(snakemake.input, "queries"),
    answers=keyed_inputs(snakemake.input, "answers"),
    known=keyed_inputs(snakemake.input, "known"),
    k=snakemake.params.k,
    bootstrap=snakemake.params.bootstrap,
    csv=snakemake.output.csv,
    md=snakemake.output.md,
    pairs=snakemake.output.pairs,
    log=log,
)
