"""Keyed inputs: a rule that reads many files of one kind (answers of every dataset, LLM and
context) names each input by its key, and its job reads the keys back, so the files a job reads are
exactly the rule's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_SEP = "|"


def input_key(kind: str, *parts: str) -> str:
    """The name of a keyed input, e.g. ``input_key("answers", "nq", "llama31-8b", "topk")``."""
    return _SEP.join((kind, *parts))


def keyed_inputs(named: Mapping[str, Any] | Any, kind: str) -> dict[Any, str]:
    """``{key: path}`` of the inputs of one ``kind`` in a rule's named inputs (``snakemake.input``).

    Keys with one part are strings (``queries|nq`` -> ``"nq"``), longer ones tuples
    (``answers|nq|llama31-8b|topk`` -> ``("nq", "llama31-8b", "topk")``).
    """
    items = named.items() if hasattr(named, "items") else named
    out: dict[Any, str] = {}
    for name, path in items:
        parts = name.split(_SEP)
        if parts[0] == kind and len(parts) > 1:
            out[parts[1] if len(parts) == 2 else tuple(parts[1:])] = str(path)
    return out
