"""The paper's datasets: their names, their query counts (Table 6), and which of them a configured
dataset stands for (the scope of a finding, and a runtime estimate's query count)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The paper's benchmarks, as findings.json names them.
PAPER_DATASETS = ("nq", "triviaqa", "hotpotqa", "2wikiqa", "msmarco-fqa", "fever")
# The paper's query counts (Table 6), for the runtime estimates of a dataset that stands for one.
PAPER_QUERY_COUNTS = {
    "nq": 2837,
    "hotpotqa": 5600,
    "2wikiqa": 12576,
    "triviaqa": 5359,
    "msmarco-fqa": 3199,
    "fever": 10245,
}
# The paper's datasets a demo (worldfacts) flavour stands for: single-hop questions like NQ and
# TriviaQA, two-hop ones like HotpotQA and 2WikiQA, true/false claims like FEVER.
WORLDFACTS_STANDS_FOR = {"single_hop": ["nq", "triviaqa"], "two_hop": ["hotpotqa", "2wikiqa"], "claim": ["fever"]}
# A KILT file's name says its task (nq-dev-kilt.jsonl, triviaqa-dev_id-kilt.jsonl, ...).
KILT_FILE_PREFIXES = {"nq-": "nq", "triviaqa-": "triviaqa", "hotpotqa-": "hotpotqa", "fever-": "fever"}


def paper_datasets_of(name: str, spec: Mapping[str, Any]) -> list[str] | None:
    """The paper's datasets a configured dataset (``name``, its config ``spec``) stands for, or None
    (``datasets.<name>.paper_dataset``, else by its name or its source)."""
    if spec.get("paper_dataset") is not None:
        return list(spec["paper_dataset"])
    if name in PAPER_DATASETS:
        return [name]
    source = spec["source"]
    if source == "worldfacts":
        return list(WORLDFACTS_STANDS_FOR[spec["flavour"]])
    if source == "2wiki":
        return ["2wikiqa"]
    if source == "msmarco-qa":
        return ["msmarco-fqa"]
    if source == "kilt":
        file = spec["file"]
        location = str(file.get("url") or file.get("path") or "") if isinstance(file, Mapping) else str(file)
        base = location.rsplit("/", 1)[-1].lower()
        for prefix, paper in KILT_FILE_PREFIXES.items():
            if base.startswith(prefix):
                return [paper]
    return None
