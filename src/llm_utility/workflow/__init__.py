"""The Snakemake glue: what ``rules/*.smk`` and ``workflow/scripts/*.py`` share, and nothing a user
of the library from Python needs. No module here imports Snakemake at import time.

- ``plan``: what a config asks the workflow to make (methods per job, contexts per table, model jobs);
- ``checks``: the config checks the schema cannot express;
- ``canonical``: the config in one form for one meaning (key order does not rerun jobs);
- ``keys``: keyed inputs (a rule names each input by its key, its job reads the keys back);
- ``operational``: where the generation store and the GPU locks live, and which Python runs an
  LLM's jobs;
- ``parts``: query shards of a dataset's model jobs (which queries part i of n holds);
- ``estimates``: each model job's expected time from token counts, and the shards a dataset needs;
- ``by_hand``: ``mock_snakemake``, to run any job's script by hand.
"""

import importlib
from typing import Any

# Each name's submodule, imported on first use: every job's script imports this package (for
# ``keyed_inputs`` or ``store_root``), and ``plan`` pulls in the findings and scipy, seconds per job.
_SUBMODULE_OF = {
    "mock_snakemake": "by_hand",
    "canonical_config": "canonical",
    "canonicalize_config": "canonical",
    "check_config": "checks",
    "input_key": "keys",
    "keyed_inputs": "keys",
    "gpu_lock_dir": "operational",
    "store_root": "operational",
    "run_in_llm_python": "operational",
    "job_part_queries": "parts",
    "part_queries": "parts",
    "Plan": "plan",
}


def __getattr__(name: str) -> Any:
    if name not in _SUBMODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_SUBMODULE_OF[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBMODULE_OF])


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
    "run_in_llm_python",
    "store_root",
]
