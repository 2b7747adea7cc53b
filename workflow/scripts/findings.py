"""Rule findings: every headline finding of the paper tested on this run (findings.json, .md, .html)
and the summary of what the run establishes (findings_summary.rst, for the report's opening page).

By hand:  python workflow/scripts/findings.py
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("findings")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline import findings_job  # noqa: E402
from llm_utility.workflow import keyed_inputs  # noqa: E402

findings_job(
    **{
        kind: keyed_inputs(snakemake.input, kind)
        for kind in ("answers", "known", "gold", "queries", "perplexity", "judgments", "rankings")
    },
    llms=snakemake.params.llms,
    run_pairs=snakemake.input.get("run_pairs"),
    families=snakemake.params.families,
    k=snakemake.params.k,
    resampling=snakemake.params.resampling,
    paper_datasets=snakemake.params.paper_datasets,
    claim_scope=snakemake.params.claim_scope,
    figure9_method=snakemake.params.figure9_method,
    rag_top=snakemake.params.rag_top,
    json_path=snakemake.output.json,
    md=snakemake.output.md,
    html=snakemake.output.html,
    summary=snakemake.output.summary,
    log=log,
)
