"""The paper's method, stage by stage: which passages each LLM call gets and how its prompt reads
(``prompts``, ``answers``), the gold utilitarian passages and the known flag (``gold``), the utility
judgments (``judgments``: selections; ``rankings``: the ranking methods' registry), the perplexity
of human passages (``perplexity``) and the parsing of model outputs (``parsing``).

Where a method calls a model, it is given the loaded generator and its generation-store session and
asks the store for every call; what it makes of the outputs is a pure function of them, tables in,
tables out.
"""
