"""The paper's method, stage by stage: which passages each LLM call gets and how its prompt reads
(``prompts``, ``answers``), the gold utilitarian passages and the known flag (``gold``), and the
utility judgments built on them. Every function here is pure: tables in, tables out."""
