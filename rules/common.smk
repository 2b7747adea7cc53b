# What every stage shares: the environment jobs run in, the checked config and the plan of each
# stage (data, model, report), config access and the wildcard constraints. Every file pattern is in
# rules/paths.smk, what jobs ask a scheduler for in rules/resources.smk, the query parts of the model
# jobs in rules/parts.smk; a stage's own input functions sit beside its rules.

import os
import re
import sys
from pathlib import Path

# Jobs import the llm_utility library from this checkout, also inside per-rule conda environments;
# so does this file (the plans and the config checks are the library's).
_SRC = str(Path(workflow.basedir) / "src")
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_SRC, os.environ.get("PYTHONPATH")) if p
)
sys.path.insert(0, _SRC)

from llm_utility.logs import clear_data_errors, print_data_errors  # noqa: E402
from llm_utility.report.plan import ReportPlan  # noqa: E402
from llm_utility.workflow.canonical import canonicalize_config  # noqa: E402
from llm_utility.workflow.checks import check_config  # noqa: E402
from llm_utility.workflow.estimates import check_job_lengths  # noqa: E402
from llm_utility.workflow.failures import memory_kills  # noqa: E402
from llm_utility.workflow.data_plan import DataPlan  # noqa: E402
from llm_utility.workflow.keys import input_key  # noqa: E402
from llm_utility.workflow.model_plan import ModelPlan  # noqa: E402
from llm_utility.workflow.model_rules import model_rule, all_parts  # noqa: E402
from llm_utility.workflow.parts import part_dir  # noqa: E402

# HF_TOKEN (gated models) and HF_HOME (the hub cache) reach remote jobs. Snakemake requires declared
# variables to exist, so unset ones get the hub's own defaults: no token ("" counts as none).
os.environ.setdefault("HF_TOKEN", "")
os.environ.setdefault(
    "HF_HOME",
    os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    ),
)


envvars:
    "PYTHONPATH",
    "HF_TOKEN",
    "HF_HOME",


# Params built from the config are then the same for a config whose keys were only reordered.
canonicalize_config(config)


# --- the config check and the plans ---------------------------------------------------------------
# What the schema cannot express stops the run here, naming the key; what is allowed but likely a
# mistake (a model job expected to outlive the scheduler's limit) is a warning.
check_config(config)
# TREC runs a user dropped in resources/runs/<dataset>/<name>.trec are scored beside runs.files.
DROPPED_RUNS = {
    d: {
        path.stem: str(path)
        for path in sorted(Path("resources/runs", d).glob("*.trec"))
    }
    for d in config["datasets"]
}
# What each stage makes, as names that the stages' files turn into paths. The data and retrieval
# stages: llm_utility.workflow.data_plan; the model stages: model_plan (and the table of their rules,
# model_rules); the findings and figures: llm_utility.report.plan (each table's inputs are beside
# the table's code: report.analysis, report.judgments).
DATA_PLAN = DataPlan(config, dropped_runs=DROPPED_RUNS)
MODEL_PLAN = ModelPlan(DATA_PLAN)
REPORT_PLAN = ReportPlan(MODEL_PLAN)
check_job_lengths(MODEL_PLAN)
DATASETS, LLMS = DATA_PLAN.datasets, MODEL_PLAN.llms
JUDGE = config["judgments"]
RANK = config["rankings"]


# A job that stops on bad input prints one line (llm_utility.logs); the run's last lines repeat them
# (onerror, below).
onstart:
    clear_data_errors()


# --- config access --------------------------------------------------------------------------------
def dataset_cfg(wildcards):
    return config["datasets"][wildcards.dataset]


def dataset_spec(wildcards):
    """The dataset's entry as a job's param: without the keys that only schedule (shards)."""
    return DATA_PLAN.dataset_spec(wildcards.dataset)


def llm_spec(wildcards):
    """The LLM's entry as a model job's `spec` param: without the runtime estimate's throughputs."""
    return MODEL_PLAN.llm_spec(wildcards.llm)


def weights_spec(wildcards):
    """The LLM's entry as materialize_model's `spec` param: its weights and prompt format only."""
    return MODEL_PLAN.weights_spec(wildcards.llm)


def llm_cfg(wildcards):
    return config["llms"][wildcards.llm]


def retriever_cfg(wildcards):
    return config["retrievers"][wildcards.retriever]


def corpus_of(wildcards):
    return dataset_cfg(wildcards)["corpus"]


def retriever_of(wildcards):
    return dataset_cfg(wildcards)["retriever"]


# --- wildcard constraints -------------------------------------------------------------------------
def alternatives(names):
    """A constraint matching exactly ``names`` (nothing at all when there are none)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


wildcard_constraints:
    dataset=alternatives(DATASETS),
    llm=alternatives(LLMS),
    corpus=alternatives(DATA_PLAN.corpora),
    retriever=alternatives(DATA_PLAN.retrievers),
    run=alternatives(sorted({r for d in DATASETS for r in DATA_PLAN.runs_of(d)})),
    # C (the top-k candidates) or U (C and the human passages): a gold set's or a qrels' pool.
    pool="C|U",
    # One of a KILT corpus's corpora.<name>.shards chunks (data) and its embeddings (retrieval).
    corpus_shard=r"\d+",
    # A model job's query part folder (parts/2-of-4/, rules/parts.smk); empty for a whole dataset.
    part_dir=f"(?:{alternatives([part_dir(p) for p in all_parts(MODEL_PLAN)])})?",


# --- when a run fails -----------------------------------------------------------------------------
# What the failed jobs died of, where the run ends (Snakemake keeps one onerror handler): each bad
# input file's one line; each job SLURM killed for its memory, which fails like any other job and
# whose memory is only in its SLURM log.
onerror:
    print_data_errors(sys.stderr)
    for kill in memory_kills(log):
        print(f"Killed for its memory: {kill.message()}", file=sys.stderr)
