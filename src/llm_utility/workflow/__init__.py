"""The Snakemake glue: what ``rules/*.smk`` and ``workflow/scripts/*.py`` share, and nothing a user
of the library from Python needs. No module here imports Snakemake at import time, nor the report
layer.

- ``data_plan``, ``model_plan``: what a config asks the data and the model stages to make (the
  report's is in the report layer: ``report.plan`` and each table's module);
- ``model_rules``: the table of model rules (priority, jobs, runtime estimator: each rule's calls
  per query, query parts, the output the cost table waits for);
- ``checks``: the config checks the schema cannot express;
- ``canonical``: the config in one form for one meaning (key order does not rerun jobs);
- ``keys``: keyed inputs (a rule names each input by its key, its job reads the keys back);
- ``operational``: where the generation store and the GPU locks live, and which Python runs an
  LLM's jobs;
- ``parts``: query parts of a dataset's model jobs (which queries part i of n holds);
- ``estimates``: each model job's expected time from token counts, and the parts a dataset needs;
- ``by_hand``: ``mock_snakemake``, to run any job's script by hand.
"""

# What every job's script takes from here, imported at once: none of it imports more than the
# standard library and the project's own foundation (the plans, the checks and the estimates are
# imported from their modules, by the rule files and the tests).
from .by_hand import mock_snakemake
from .canonical import canonical_config, canonicalize_config
from .keys import input_key, keyed_inputs
from .operational import gpu_lock_dir, run_in_llm_python, store_root
from .parts import job_part_queries, job_wildcards, part_queries

__all__ = [
    "canonical_config",
    "canonicalize_config",
    "gpu_lock_dir",
    "input_key",
    "job_part_queries",
    "job_wildcards",
    "keyed_inputs",
    "mock_snakemake",
    "part_queries",
    "run_in_llm_python",
    "store_root",
]
