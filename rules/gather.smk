# The gather of every model rule that may run in query parts (rules/parts.smk): where a dataset
# gives the rule n > 1 parts, `<rule>_gather` concatenates the parts' tables, in part order, into
# the paths one job of the whole dataset writes. Where the rule has 1 part there is no gather job
# (its `dataset` constraint matches only the datasets where the rule runs in parts).


# --- shared by the rules below (input functions are lambdas: `snakemake --lint` wants no `def`
# beside rules; a rule's own sit right above it) ----------------------------------------------------
# Every part of every output, named <part>/<output name> (gather_parts.py reads them in part order).
gather_inputs = lambda rule, outputs: lambda wc: {
    f"{part}/{key}": fill(pattern, part_dir=part_dir(part), **dict(wc.items()))
    for key, pattern in outputs.items()
    for part in MODEL_PLAN.parts(wc.dataset, rule)
}
# A rule's parts of a dataset (a factory: a lambda in the loop below would see only the last rule).
parts_of = lambda rule: lambda wc: MODEL_PLAN.parts(wc.dataset, rule)


# --- rules ----------------------------------------------------------------------------------------
for _rule, _files in MODEL_RULE_FILES.items():
    if not model_rule(_rule).query_parts:
        continue

    rule:
        name:
            f"{_rule}_gather"
        input:
            unpack(gather_inputs(_rule, _files["output"])),
        output:
            **whole_dataset(_files["output"]),
        log:
            whole_dataset(_files["log"]).replace("logs/", "logs/gather/", 1),
        wildcard_constraints:
            dataset=sharded(_rule),
        localrule: True
        conda:
            BASE_ENV
        resources:
            **LIGHT,
        params:
            parts=parts_of(_rule),
        script:
            "../workflow/scripts/gather_parts.py"

    # A whole dataset's file of a dataset in parts is the gather's, never the rule's own (whose
    # part_dir may be empty).
    workflow.ruleorder(f"{_rule}_gather", _rule)
