# Query shards: the gather of every model rule that opts in (rules/common.smk, `shardable`). Where a
# dataset gives a rule n > 1 shards (datasets.<name>.shards: n, or {<rule>: n}), the rule runs as
# `<rule>_part`, one job per part (1-of-n, ...), writing under results/{dataset}/parts/{part}/;
# `<rule>_gather` concatenates the parts' tables, in part order, into the paths one unsharded job
# writes, which every consumer reads unchanged. Where the rule has 1 shard there is no gather job
# (its `dataset` constraint matches only the datasets where this rule is sharded).


# --- input functions (lambdas: `snakemake --lint` wants no `def` beside rules) --------------------
# Every part of every output, named <part>/<output name> (gather_parts.py reads them in part order).
gather_inputs = lambda rule, outputs: lambda wc: {
    f"{part}/{key}": fill(in_part(pattern), part=part, **dict(wc.items()))
    for key, pattern in outputs.items()
    for part in PLAN.parts(wc.dataset, rule)
}
# A rule's parts of a dataset (a factory: a lambda in the loop below would see only the last rule).
parts_of = lambda rule: lambda wc: PLAN.parts(wc.dataset, rule)


# --- rules ----------------------------------------------------------------------------------------
for _rule, _files in SHARDABLE.items():

    rule:
        name:
            f"{_rule}_gather"
        input:
            unpack(gather_inputs(_rule, _files["output"])),
        output:
            **_files["output"],
        log:
            _files["log"].replace("logs/", "logs/gather/", 1),
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
