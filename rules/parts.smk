# Query parts of the model jobs (docs/architecture.md, "Query parts"). Where a dataset gives a model
# rule n > 1 parts (datasets.<name>.shards, a count or one per rule), it runs once per part, writing
# under results/{dataset}/parts/<i>-of-<n>/ (its `part_dir` wildcard), and `<rule>_gather`
# (rules/gather.smk) concatenates the parts' tables, in part order, into the paths one job writes
# where the dataset is not split (`part_dir` empty), which every consumer reads unchanged. So there
# is one rule per model stage, and a config without parts has no gather job.

# Each model rule's file patterns (output, log, benchmark), for its gather and the cost table.
MODEL_RULE_FILES = {}


def in_part(pattern):
    """A dataset's path pattern (or a mapping of them) with the query part folder after the
    dataset's: .../{dataset}/{part_dir}..., the whole dataset's path when `part_dir` is empty.
    """
    if isinstance(pattern, dict):
        return {k: in_part(v) for k, v in pattern.items()}
    if "{dataset}/" not in pattern:
        raise ValueError(
            f"{pattern}: a path in query parts needs a {{dataset}}/ folder"
        )
    return pattern.replace("{dataset}/", "{dataset}/{part_dir}", 1)


def whole_dataset(pattern):
    """A pattern (or mapping) of a model rule's files as one job of the whole dataset writes them."""
    if isinstance(pattern, dict):
        return {k: whole_dataset(v) for k, v in pattern.items()}
    return fill(pattern, part_dir="")


def model_rule_files(name, output, log, benchmark):
    """Rule ``name``'s files (a row of the model rules table, llm_utility.workflow.model_rules): in
    query parts when its row says it may run in them. Registered for its gather and the cost table.
    """
    files = {"output": output, "log": log, "benchmark": benchmark}
    if model_rule(name).query_parts:
        files = {kind: in_part(pattern) for kind, pattern in files.items()}
    MODEL_RULE_FILES[name] = files
    return files


def sharded(rule):
    """The datasets where ``rule`` runs in query parts (a constraint)."""
    return alternatives(MODEL_PLAN.sharded_datasets(rule))
