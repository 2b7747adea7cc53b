"""The config in one form for one meaning: Snakemake reruns a job when the ``repr`` of one of its
params changed, and a dict's ``repr`` follows its key order, so a config file whose keys were merely
reordered would rerun the retriever, the index and every LLM job after them. The workflow puts its
config in canonical form right after validation, and rules build their params from that."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The collections whose entries' order is the order of the tables' rows and columns (and whose first
# dataset is Figure 1's default): reordering them changes the report, so it stays as written.
ORDERED_COLLECTIONS = ("datasets", "llms")


def canonical_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the keys of every mapping in it sorted, at any depth, except the order of the
    entries of ``ORDERED_COLLECTIONS`` (each entry's own keys are sorted). Lists keep their order."""

    def canonical(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: canonical(value[k]) for k in sorted(value, key=str)}
        if isinstance(value, list):
            return [canonical(v) for v in value]
        return value

    return {
        k: {name: canonical(entry) for name, entry in config[k].items()}
        if k in ORDERED_COLLECTIONS and isinstance(config[k], Mapping)
        else canonical(config[k])
        for k in sorted(config, key=str)
    }


def canonicalize_config(config: dict[str, Any]) -> None:
    """Put ``config`` (Snakemake's own dict, which jobs get too) in its canonical form, in place."""
    canonical = canonical_config(config)
    config.clear()
    config.update(canonical)
