# LLM-specific utility for retrieval-augmented generation.
# This file only loads and validates the configuration, includes the stages and names the final
# targets; each stage lives in rules/<stage>.smk, its logic in src/llm_utility.

from snakemake.utils import min_version, validate

min_version("9.0")


# The embedded default, unless the command line names a config file (--configfile config/paper.yaml):
# merging the two would mix demo and paper datasets. --config KEY=VALUE overrides apply either way.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# Several files (--configfile config/config.yaml config/vllm-cpu.yaml) merge in order; an overlay
# removes an entry of corpora, datasets, retrievers or llms by setting it to null.
for _section in ("corpora", "datasets", "retrievers", "llms"):
    for _name in [n for n, v in (config.get(_section) or {}).items() if v is None]:
        del config[_section][_name]

validate(config, "config/schema.yaml")


# The opening page of `snakemake --report`: what the workflow does and how to read its results.
report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/paths.smk"
include: "rules/resources.smk"
include: "rules/parts.smk"
include: "rules/data.smk"
include: "rules/retrieval.smk"
include: "rules/generation.smk"
include: "rules/gold.smk"
include: "rules/judgments.smk"
include: "rules/runs.smk"
include: "rules/gather.smk"
include: "rules/report.smk"
include: "rules/findings.smk"


rule all:
    default_target: True
    input:
        final_targets(),
