"""Rule corpus_spans: the span side table (pid, wikipedia_id, paragraph/character span) of a KILT corpus.

By hand:  python workflow/scripts/corpus_spans.py corpus=kilt-wiki --configfile config/paper.yaml
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("corpus_spans")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline.data import corpus_spans_job  # noqa: E402

n = corpus_spans_job(shards=list(snakemake.input.shards), output=snakemake.output.spans)
log.info("%d passage spans", n)
