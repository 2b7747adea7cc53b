# What each job asks a scheduler for (config `resources`; an LLM's own mem_mb/runtime first), the
# order in which ready jobs get the free cores, and the conda environment each rule family runs in.

from llm_utility.workflow.estimates import runtime_minutes
from llm_utility.workflow.model_rules import MODEL_RULES
from llm_utility.workflow.parts import job_wildcards

RESOURCES = config["resources"]
# Tables, figures, gold sets, qrels: no model, little memory.
LIGHT = RESOURCES["light"]
# The environment of every job that loads no model.
BASE_ENV = "../envs/base.yaml"


# --- priorities (higher first; everything else is 0) ----------------------------------------------
def model_priority(rule):
    """A model rule's priority, from the model rules table (llm_utility.workflow.model_rules)."""
    return model_rule(rule).priority


# Retrieval before every model job: each dataset's candidates wait for its run. The chain that
# leads to it (corpus, encoding, index) goes first too, before the LLMs' materialization, which no
# job needs until the candidates exist. (Priorities order ready jobs, they reserve no cores: on the
# demo's 2 cores the 2-thread encoding still waits for a 1-thread materialization to end.)
RETRIEVE_PRIORITY = max(r.priority for r in MODEL_RULES) + 1


# --- resources ------------------------------------------------------------------------------------
def llm_threads(wildcards):
    return llm_cfg(wildcards)["threads"] or 8


def llm_resources(llm_of, estimate=None):
    """What a job that loads the LLM ``llm_of(wildcards)`` asks for: the LLM's memory and GPUs, and
    its own `runtime`, else ``estimate(wildcards)`` (minutes), else resources.llm.runtime.
    """
    spec = lambda wc: config["llms"][llm_of(wc)]
    return {
        "mem_mb": lambda wc: spec(wc)["mem_mb"] or RESOURCES["llm"]["mem_mb"],
        "runtime": lambda wc: (
            spec(wc)["runtime"]
            or (estimate and estimate(wc))
            or RESOURCES["llm"]["runtime"]
        ),
        "gpu": lambda wc: spec(wc)["gpu"],
    }


def model_resources(rule):
    """The resources of a job of ``rule`` (a row of the model rules table): its LLM's, with the
    runtime its expected time needs (llm_utility.workflow.estimates: its LLM and queries, with the
    margin)."""
    model_rule(rule)  # a model rule must have a row in the table
    return llm_resources(
        lambda wc: wc.llm,
        estimate=lambda wc: runtime_minutes(MODEL_PLAN, rule, job_wildcards(wc)),
    )


# --- conda environments ---------------------------------------------------------------------------
def llm_env(llm):
    """The conda environment of an LLM's model jobs: its backend's; vLLM's CPU build with gpu 0."""
    spec = config["llms"][llm]
    if spec["backend"] == "vllm" and not spec["gpu"]:
        return "../envs/llm-vllm-cpu.yaml"
    return f"../envs/llm-{spec['backend']}.yaml"


def llm_conda_env(wildcards):
    return llm_env(wildcards.llm)


def materialize_conda_env(wildcards):
    # Dequantizing a GGUF needs transformers >= 5.23, which vLLM's environment cannot have.
    if "gguf_package" in llm_cfg(wildcards)["weights"]:
        return "../envs/llm-transformers.yaml"
    return llm_conda_env(wildcards)


def encoder_conda_env(wildcards):
    backend = retriever_cfg(wildcards)["backend"]
    return (
        "../envs/encode-flagembedding.yaml"
        if backend == "flagembedding"
        else "../envs/encode.yaml"
    )
