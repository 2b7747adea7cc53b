"""What a first paper-scale run needs before its first job (issue 19, items 2, 4, 5, 6, 8, 9), checked
on what the workflow and the profiles instruct, not on their comments: the environment each paper job
gets, the sbatch options the SLURM plugin builds from the profile, which jobs stay on the machine
that runs Snakemake, that conda sees CONDA_OVERRIDE_CUDA, and the one-command paper launch.

Conda, SLURM and Docker are not installed here, so the paper DAG is resolved by Snakemake itself
(its API, in this process, or a dry-run), the SLURM plugin's own functions turn each job's resources
into its sbatch options, and the conda that Snakemake calls is a stand-in that records its environment.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from test_profiles import JobResources, slurm_partition, slurm_partitions
from workflow_runner import snakemake_cmd

REPO = Path(__file__).resolve().parents[1]


def _yaml(path: str) -> dict:
    return yaml.safe_load((REPO / path).read_text())


def _dag(configfile: str | None) -> SimpleNamespace:
    """The workflow and the jobs of its full DAG, resolved by Snakemake's API with conda as the
    deployment method (nothing is created: no conda needed), and the CONDA_OVERRIDE_CUDA that loading
    the workflow left in the environment (unset before; restored after)."""
    saved = dict(os.environ)  # the workflow sets variables (PYTHONPATH, HF_HOME, ...) when it loads
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CONDA_OVERRIDE_CUDA", raising=False)
        mp.chdir(REPO)
        try:
            workflow, jobs = _resolve(configfile)
            override = os.environ.get("CONDA_OVERRIDE_CUDA")
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return SimpleNamespace(workflow=workflow, jobs=jobs, cuda_override=override)


def _resolve(configfile: str | None) -> tuple[object, list]:
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import RerunTrigger
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        DeploymentMethod,
        DeploymentSettings,
        OutputSettings,
        ResourceSettings,
        StorageSettings,
    )

    configs = [Path(configfile)] if configfile else []
    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=configs),
            storage_settings=StorageSettings(),
            deployment_settings=DeploymentSettings(deployment_method={DeploymentMethod.CONDA}),
            snakefile=REPO / "Snakefile",
            workdir=REPO,
        )
        # Not the software-env trigger: in a checkout that has run the demo, Snakemake would compare
        # the existing outputs' environments by calling `conda info`, and conda is not installed.
        triggers = set(RerunTrigger) - {RerunTrigger.SOFTWARE_ENV}
        workflow_api.dag(DAGSettings(rerun_triggers=triggers))
        workflow = workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        return workflow, list(workflow.dag.jobs)


@pytest.fixture(scope="module")
def paper():
    return _dag("config/paper.yaml")


def _envs_by_rule(jobs) -> dict[str, set[str]]:
    envs: dict[str, set[str]] = {}
    for job in jobs:
        spec = job.conda_env_spec
        envs.setdefault(job.rule.name, set()).add(
            Path(str(spec.file.get_path_or_uri(secret_free=True))).name if spec else None
        )
    return envs


def _conda_packages(env_file: str) -> list[str]:
    deps = _yaml(f"envs/{env_file}")["dependencies"]
    return [re.split(r"[<>=! ]", d)[0] for d in deps if isinstance(d, str)]


@pytest.mark.slow
def test_the_paper_index_is_built_in_faiss_gpu_and_the_demo_s_in_faiss_cpu(paper):
    envs = _envs_by_rule(paper.jobs)
    assert envs["build_index"] == {"index-gpu.yaml"}
    assert "faiss-gpu" in _conda_packages("index-gpu.yaml") and "faiss-cpu" not in _conda_packages("index-gpu.yaml")
    # Encoding and retrieval of BGE-M3 run in FlagEmbedding's environment, which has faiss-gpu too.
    assert envs["retrieve"] == envs["encode_corpus_shard"] == {"encode-flagembedding.yaml"}
    assert "faiss-gpu" in _conda_packages("encode-flagembedding.yaml")
    # What the container image creates for the paper run (containers/Dockerfile says so).
    assert set().union(*envs.values()) - {None} == {
        "llm-vllm.yaml",
        "encode-flagembedding.yaml",
        "index-gpu.yaml",
        "base.yaml",
    }
    # conda-forge's faiss-gpu solves on a machine without a driver only with CONDA_OVERRIDE_CUDA,
    # which loading the paper workflow filled in.
    assert paper.cuda_override == "12.8"

    demo = _dag(None)
    assert _envs_by_rule(demo.jobs)["build_index"] == {"encode.yaml"}
    assert "faiss-cpu" in _conda_packages("encode.yaml")
    assert demo.cuda_override is None  # the demo has no GPU retriever: nothing to stand in for


def test_a_build_index_job_with_gpus_refuses_to_run_on_the_cpu(tmp_path):
    """The job passes use_gpu=bool(gpu) (workflow/scripts/build_index.py): with faiss-cpu that stops
    at once, instead of k-means over 65,536 lists on the CPU for days."""
    from llm_utility.retrieval.index import build_index

    np.save(tmp_path / "0.npy", np.eye(4, 8, dtype=np.float32))
    script = (REPO / "workflow/scripts/build_index.py").read_text()
    assert "use_gpu=bool(gpus)" in script and "gpus = snakemake.resources.gpu" in script
    with pytest.raises(RuntimeError, match="use_gpu=True but FAISS sees no GPU"):
        build_index([tmp_path / "0.npy"], tmp_path / "index.faiss", index_factory="Flat", use_gpu=True)


@pytest.mark.slow
def test_downloads_and_materializations_stay_on_the_machine_with_network(paper):
    # What the SLURM and Kubernetes executors keep on the machine that runs Snakemake (the local
    # executor runs everything there, so Workflow.is_local's own first test is left out).
    local = {job.rule.name for job in paper.jobs if job.rule.name in paper.workflow._localrules}
    assert {"download_data", "materialize_model", "materialize_retriever"} <= local
    # ... and nothing that needs a GPU or hours of CPU does.
    assert not local & {
        "encode_corpus_shard",
        "build_index",
        "retrieve",
        "answer_candidates",
        "judge",
        "prepare_corpus",
    }


@pytest.mark.slow
def test_conda_sees_the_cuda_override_when_snakemake_calls_it(tmp_path):
    """A stand-in conda records the environment Snakemake runs it with, then fails (no conda here)."""
    shim = tmp_path / "bin" / "conda"
    shim.parent.mkdir()
    record = tmp_path / "conda-env.txt"
    shim.write_text(f"#!/bin/sh\nenv > {record}\nexit 1\n")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CONDA_OVERRIDE_CUDA"}
    env["PATH"] = f"{shim.parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        snakemake_cmd("-n", "--configfile", "config/paper.yaml", "--sdm", "conda"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and record.is_file(), done.stderr[-2000:]
    assert "CONDA_OVERRIDE_CUDA=12.8" in record.read_text().splitlines()


def _dry_run_jobs(*args: str) -> list[dict]:
    """(rule, resources) of every job of a dry-run, as Snakemake prints them."""
    out = subprocess.run(snakemake_cmd("-n", *args), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    jobs = []
    for block in re.split(r"\n(?=\[[^\]]+\]\n)", out.stdout + out.stderr):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        if rule and resources:
            values = dict(item.split("=", 1) for item in resources.group(1).split(", "))
            jobs.append(
                {"rule": rule.group(1), "resources": values, "wildcards": wildcards.group(1) if wildcards else ""}
            )
    return jobs


def _resources(job: dict) -> dict:
    """A dry-run job's resources as numbers where they are (the plugin compares them)."""
    return {k: int(v) if v.isdigit() else v for k, v in job["resources"].items() if v != "<TBD>"}


def _sbatch(job: dict) -> str:
    """The sbatch command line snakemake-executor-plugin-slurm builds for a job with these resources."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    fake = SimpleNamespace(resources=JobResources(_resources(job)), threads=1, name=job["rule"])
    params = {
        "run_uuid": "u",
        "slurm_logfile": "log",
        "comment_str": job["rule"],
        "account": "",
        "partition": "",
        "workdir": "",
    }
    return get_submit_command(fake, params) + set_gres_string(fake)


@pytest.mark.slow
def test_slurm_pins_every_gpu_job_to_one_node():
    jobs = _dry_run_jobs("--configfile", "config/paper.yaml", "--sdm", "env-modules", "--profile", "profiles/slurm")
    gpu_jobs = [j for j in jobs if int(j["resources"].get("gpu", 0)) > 0]
    paper = _yaml("config/paper.yaml")
    tensor_parallel = {name for name, spec in paper["llms"].items() if spec["gpu"] > 1}
    two_gpu = [j for j in gpu_jobs if any(f"llm={llm}" in j["wildcards"] for llm in tensor_parallel)]
    assert tensor_parallel == {"qwen3-32b"} and len(two_gpu) >= 6 * 5  # every dataset's answer and judge jobs
    for job in gpu_jobs:
        sbatch = _sbatch(job)
        assert "--nodes=1" in sbatch and f"--gpus={job['resources']['gpu']}" in sbatch, sbatch
    assert all("--gpus=2" in _sbatch(j) for j in two_gpu)
    # The plugin sends every job that asks for GPUs, and only those, to the GPU partition.
    partitions = slurm_partitions()
    chosen = {(j["rule"], j["wildcards"]): slurm_partition(partitions, _resources(j)) for j in jobs}
    assert {key for key, partition in chosen.items() if partition == "gpu"} == {
        (j["rule"], j["wildcards"]) for j in gpu_jobs
    }
    assert set(chosen.values()) == {"cpu", "gpu"}


@pytest.mark.slow
def test_the_paper_profile_is_the_paper_run_in_one_command():
    profile = _yaml("profiles/paper/config.yaml")
    assert profile["configfile"] == "config/paper.yaml" and profile["software-deployment-method"] == "conda"
    cap = dict(item.split("=") for item in profile["resources"])
    assert int(cap["gpu"]) >= max(spec["gpu"] for spec in _yaml("config/paper.yaml")["llms"].values())

    plain = _dry_run_jobs("--configfile", "config/paper.yaml", "--sdm", "env-modules")
    # The command as documented, with conda swapped for env-modules (no conda here): the paper DAG.
    launched = _dry_run_jobs("--profile", "profiles/paper", "--sdm", "env-modules")
    assert sorted(j["rule"] for j in launched) == sorted(j["rule"] for j in plain)
    assert any(
        j["rule"] == "judge" and "llm=qwen3-32b" in j["wildcards"] and j["resources"]["gpu"] == "2" for j in launched
    )
    if shutil.which("conda") is None:
        # Without the swap the profile's own deployment method is used: conda, which is missing here.
        out = subprocess.run(
            snakemake_cmd("-n", "--profile", "profiles/paper"), cwd=REPO, capture_output=True, text=True, timeout=300
        )
        assert out.returncode != 0 and "conda" in (out.stdout + out.stderr).lower()


def test_the_vllm_environment_and_the_image_have_a_c_compiler():
    """Triton compiles vLLM's kernel launchers with a C compiler when an engine first starts."""
    assert "c-compiler" in _conda_packages("llm-vllm.yaml")
    dockerfile = (REPO / "containers" / "Dockerfile").read_text()
    installs = re.findall(r"apt-get install[^\n]*?((?:\S+ ?)+)(?:\\\n|\n)", dockerfile)
    assert any("gcc" in line.split() for line in installs), installs


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_the_memory_table_counts_parameters_as_the_models_have_them(family):
    """benchmarks/gpu_memory.py's parameter count from a config, against a model built from that config."""
    import sys

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    sys.path.insert(0, str(REPO / "benchmarks"))
    from gpu_memory import kv_bytes_per_token, parameters

    shape = {
        "vocab_size": 320,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "tie_word_embeddings": False,
    }
    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[
        family
    ]
    model = model_class(config_class(**shape))
    assert parameters({**shape, "qk_norm": family == "qwen3"}) == sum(p.numel() for p in model.parameters())
    # One token's K and V, every layer, in bf16: what a DynamicCache holds for it.
    with torch.inference_mode():
        cache = model.to(torch.bfloat16)(torch.tensor([[1, 2, 3, 4, 5]]), use_cache=True).past_key_values
    held = sum(layer.keys.numel() * 2 + layer.values.numel() * 2 for layer in cache.layers)
    assert kv_bytes_per_token(shape) * 5 == held
