"""Data sources: the embedded worldfacts demo, bring-your-own files and the paper's benchmarks.

Submodules (imported on use, so ``files`` stays importable without polars, e.g. by the Snakefile):
``worldfacts`` (demo generator), ``local`` (passage TSV and query JSONL), ``kilt``, ``twowiki``,
``msmarco`` (benchmark loaders), ``mapping`` (human passages and coverage), ``files`` (file specs and
downloads), ``readers`` (strict line/JSON reading) and ``sources`` (a corpus or query set from its
source). The jobs the data rules run are ``llm_utility.pipeline.data``.
"""
