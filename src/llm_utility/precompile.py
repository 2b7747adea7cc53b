"""Byte-compile the modules a workflow run imports, once, at install time: ``python -m llm_utility.precompile``.

The Makefile installs with ``pip install --no-compile``: pip's byte-compilation of every file of every
package (16,000 files, most never imported) was two thirds of the demo's install on 2 cores. What the
jobs do import is compiled here instead, by importing it, in two processes side by side, so no job
compiles torch again. That matters where ``PYTHONDONTWRITEBYTECODE`` is set: there no import writes
its compiled file, and every job would compile its imports anew (~10 s of a job's start). A module
left out of these lists still works; it is compiled on each import.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import time

# The torch stack in one process; in the other, the rest of the third-party modules the workflow's
# scripts and the library import (those imported inside functions too), then the library's own.
TORCH_STACK = (
    "torch",
    "transformers",
    "transformers.models.llama.modeling_llama",  # SmolLM2
    "transformers.models.gemma3.modeling_gemma3",  # Gemma 3
    "transformers.models.bert.modeling_bert",  # MiniLM, the demo's dense retriever
    "transformers.integrations.ggml",  # reading the GGUF checkpoints
    "transformers.integrations.sdpa_attention",
    "transformers.masking_utils",
    "transformers.cache_utils",
    "gguf",
)
OTHERS = (
    "snakemake",
    "snakemake.script",
    "numpy",
    "pandas",
    "polars",
    "pyarrow.parquet",
    "scipy.stats",
    "matplotlib.pyplot",
    "faiss",
    "bm25s",
    "Stemmer",
    "ir_measures",
    "itables",
    "yaml",
    "tqdm.auto",
)
GROUPS = {"torch": TORCH_STACK, "others": OTHERS}


def library_modules() -> list[str]:
    """Every module of this library but the ones that run a command when imported (``__main__``)."""
    import llm_utility

    return [
        m.name
        for m in pkgutil.walk_packages(llm_utility.__path__, "llm_utility.")
        if not m.name.endswith(("__main__", "store_maintenance", "precompile"))
    ]


def compile_group(group: str) -> list[str]:
    """Import every module of ``group`` with bytecode writing on; return the ones that did not import."""
    sys.dont_write_bytecode = False  # overrides PYTHONDONTWRITEBYTECODE for this process only
    names = list(GROUPS[group]) + (library_modules() if group == "others" else [])
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # an optional package not installed: compiled on its first import, if ever
            failed.append(f"{name} ({type(error).__name__}: {error})")
    return failed


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--group":
        for line in compile_group(sys.argv[2]):
            print(f"precompile: not imported: {line}", file=sys.stderr)
        return 0
    start = time.perf_counter()
    workers = [subprocess.Popen([sys.executable, "-m", "llm_utility.precompile", "--group", g]) for g in GROUPS]
    codes = [w.wait() for w in workers]
    print(f"precompile: the workflow's imports byte-compiled in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return max(codes)


if __name__ == "__main__":
    raise SystemExit(main())
