"""Rule corpus_spans: the span side table (pid, wikipedia_id, paragraph/character span) of a KILT corpus."""

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.data.jobs import corpus_spans_job  # noqa: E402

n = corpus_spans_job(shards=list(snakemake.input.shards), output=snakemake.output.spans)
log.info("%d passage spans", n)
