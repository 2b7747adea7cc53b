"""The Snakemake glue: what ``rules/*.smk`` and ``workflow/scripts/*.py`` share, and nothing a user
of the library from Python needs. No module here imports Snakemake at import time.

- ``plan``: what a config asks the workflow to make (methods per job, contexts per table, model jobs);
- ``checks``: the config checks the schema cannot express;
- ``canonical``: the config in one form for one meaning (key order does not rerun jobs);
- ``keys``: keyed inputs (a rule names each input by its key, its job reads the keys back);
- ``operational``: where the generation store and the GPU locks live;
- ``parts``: query shards of a dataset's model jobs (which queries part i of n holds);
- ``estimates``: each model job's expected time from token counts, and the shards a dataset needs;
- ``by_hand``: ``mock_snakemake``, to run any job's script by hand.
"""

from .by_hand import mock_snakemake
from .canonical import canonical_config, canonicalize_config
from .checks import check_config
from .keys import input_key, keyed_inputs
from .operational import gpu_lock_dir, store_root
from .parts import job_part_queries, part_queries
from .plan import Plan

__all__ = [
    "Plan",
    "canonical_config",
    "canonicalize_config",
    "check_config",
    "gpu_lock_dir",
    "input_key",
    "keyed_inputs",
    "mock_snakemake",
    "job_part_queries",
    "part_queries",
    "store_root",
]
