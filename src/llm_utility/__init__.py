"""LLM-specific utility for retrieval-augmented generation.

The importable library behind the Snakemake workflow: every piece of logic lives here and is tested
without Snakemake; the scripts in ``workflow/scripts`` only read their inputs, call into this package
and write their outputs.
"""

__version__ = "0.1.0"
