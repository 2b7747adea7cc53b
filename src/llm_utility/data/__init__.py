"""Data sources: the embedded worldfacts demo data and the bring-your-own file formats.

``worldfacts`` builds the demo corpus and query sets from PyPI packages (``build_corpus``,
``build_queries``); ``local`` reads a DPR-style passage TSV and a JSONL query file. Both return
tables in the schemas of ``llm_utility.io`` and write nothing.
"""

from llm_utility.data import local, worldfacts
from llm_utility.data.local import DataFormatError, load_corpus_tsv, load_queries_jsonl

__all__ = ["DataFormatError", "load_corpus_tsv", "load_queries_jsonl", "local", "worldfacts"]
