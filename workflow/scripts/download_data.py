"""Rule download_data: fetch one configured URL into resources/ with retries, resume and checksum.

By hand:  python workflow/scripts/download_data.py download=<name> --configfile config/paper.yaml
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("download_data")

from llm_utility.logs import log_to

log = log_to(snakemake.log[0])

from llm_utility.pipeline.data import download_job  # noqa: E402

spec = snakemake.params.spec
download_job(
    url=spec["url"],
    output=snakemake.output.file,
    sha256=spec.get("sha256"),
    md5=spec.get("md5"),
    retries=snakemake.params.retries,
    timeout=snakemake.params.timeout,
    log=log,
)
