"""Rule map_human_passages: human annotations onto corpus passage ids, with the coverage report.

By hand:  python workflow/scripts/map_human_passages.py dataset=nq --configfile config/paper.yaml
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("map_human_passages")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline.data import map_human_passages_job  # noqa: E402

map_human_passages_job(
    dataset=snakemake.wildcards.dataset,
    corpus=snakemake.params.corpus,
    rule=snakemake.params.rule,
    evidence=snakemake.input.evidence,
    queries=snakemake.input.queries,
    summary=snakemake.input.summary,
    passages=snakemake.input.passages,
    spans=snakemake.input.get("spans"),
    knowledge_source=snakemake.input.get("knowledge_source"),
    human_out=snakemake.output.human,
    coverage_out=snakemake.output.coverage,
    log=log,
)
