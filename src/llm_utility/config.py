"""The configuration's schema and its defaults (``config/schema.yaml``), for every layer.

The workflow validates its config with ``snakemake.utils.validate`` against the same schema, which
fills these defaults in; code that runs outside the workflow (tests, notebooks, the benchmarks) gets
them from here. The checks the schema cannot express live in ``llm_utility.workflow.checks``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parents[2] / "config" / "schema.yaml"


@functools.lru_cache(maxsize=None)
def _schema() -> dict:
    import yaml

    return yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))


def schema_defaults(section: str) -> dict[str, Any]:
    """The defaults ``config/schema.yaml`` gives the keys of one config ``section``: top-level
    mappings (``figures``, ``judgments``) or one entry of a named collection (``llms``,
    ``retrievers``, ``datasets``, ``corpora``)."""
    node = _schema()["properties"][section]
    if "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
        node = node["additionalProperties"]
    return {k: v["default"] for k, v in node.get("properties", {}).items() if "default" in v}


def with_defaults(section: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` over the schema's defaults for ``section`` (see ``schema_defaults``)."""
    return {**schema_defaults(section), **values}
