"""Rule missing_data_file: a configured local file is absent; fail with where to get it and where to put it.

The message is one line on Snakemake's terminal (a data error: llm_utility.logs), the traceback in the log.

By hand:  python workflow/scripts/missing_data_file.py missing=<name> --configfile config/paper.yaml
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("missing_data_file")

from llm_utility.logs import log_to

log_to(snakemake.log[0])

from llm_utility.data.files import MissingDataError  # noqa: E402

raise MissingDataError(snakemake.params.message)
