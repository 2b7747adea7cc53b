"""Rule missing_data_file: a configured local file is absent; fail with where to get it and where to put it.

stderr is not sent to the log here, so the message shows in Snakemake's own output.

By hand:  python workflow/scripts/missing_data_file.py missing=<name> --configfile config/paper.yaml
"""

if "snakemake" not in globals():
    from llm_utility.workflow import mock_snakemake

    snakemake = mock_snakemake("missing_data_file")

from pathlib import Path

from llm_utility.data.files import MissingDataError

Path(snakemake.log[0]).parent.mkdir(parents=True, exist_ok=True)
Path(snakemake.log[0]).write_text(snakemake.params.message + "\n", encoding="utf-8")
raise MissingDataError(snakemake.params.message)
