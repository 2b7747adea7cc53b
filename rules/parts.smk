# Query shards: the gather of every model rule that opts in (rules/common.smk, `shardable`). For a
# dataset with `shards: n`, each such rule runs as `<rule>_part`, one job per part (1-of-n, ...),
# writing under results/{dataset}/parts/{part}/; `<rule>_gather` concatenates the parts' tables, in
# part order, into the paths one unsharded job writes, which every consumer reads unchanged. An
# unsharded dataset has no gather job (its `dataset` constraint matches only sharded datasets).


# --- input functions (lambdas: `snakemake --lint` wants no `def` beside rules) --------------------
# Every part of every output, named <part>/<output name> (gather_parts.py reads them in part order).
gather_inputs = lambda outputs: lambda wc: {
    f"{part}/{key}": fill(in_part(pattern), part=part, **dict(wc.items()))
    for key, pattern in outputs.items()
    for part in PLAN.parts(wc.dataset)
}


# --- rules ----------------------------------------------------------------------------------------
for _rule, _files in SHARDABLE.items():

    rule:
        name:
            f"{_rule}_gather"
        input:
            unpack(gather_inputs(_files["output"])),
        output:
            **_files["output"],
        log:
            _files["log"].replace("logs/", "logs/gather/", 1),
        wildcard_constraints:
            dataset=SHARDED,
        localrule: True
        conda:
            BASE_ENV
        resources:
            **LIGHT,
        params:
            parts=lambda wc: PLAN.parts(wc.dataset),
        script:
            "../workflow/scripts/gather_parts.py"
