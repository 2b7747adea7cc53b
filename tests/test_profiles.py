"""The cluster profiles and the container image: what each must hold, and dry-runs of the paper config.

Docker and a cluster cannot run here, so the Dockerfile and the Kubernetes policy are checked for
the parts the workflow relies on, and both profiles dry-run the paper config with their executor
plugins installed (conda replaced by env-modules, which no rule uses, since conda is not installed).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from workflow_runner import snakemake_cmd

REPO = Path(__file__).resolve().parents[1]


def _yaml(path: str) -> dict:
    return yaml.safe_load((REPO / path).read_text())


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) of each Dockerfile instruction: comment lines dropped, continued
    lines joined, so a test reads what the image does and never a comment's words."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    return [
        (keyword.upper(), " ".join(args.split()))
        for keyword, args in re.findall(r"^\s*([A-Za-z]+)\s+(.*)$", joined, re.M)
    ]


def slurm_partition(partitions, resources: dict, threads: int = 1) -> str | None:
    """The partition snakemake-executor-plugin-slurm chooses for a job with these resources from the
    profile's partition file (its own selection function, on a stand-in job)."""
    from snakemake_executor_plugin_slurm.partitions import get_best_partition

    job = SimpleNamespace(resources=JobResources(resources), threads=threads, name="job")
    return get_best_partition(partitions, job, logging.getLogger("slurm-partitions"))


class JobResources(dict):
    """A job's resources as the plugin reads them: by key or as attributes."""

    __getattr__ = dict.get


def slurm_partitions() -> list:
    """The partitions of profiles/slurm, as the plugin reads them."""
    from snakemake_executor_plugin_slurm.partitions import read_partition_file

    return read_partition_file(REPO / "profiles/slurm" / _yaml("profiles/slurm/config.yaml")["slurm-partition-config"])


def test_slurm_profile_partitions_and_threads():
    profile = _yaml("profiles/slurm/config.yaml")
    defaults = profile["default-resources"]
    # No fixed CPU count: --cpus-per-task then equals each rule's threads, as OMP_NUM_THREADS does.
    assert "cpus_per_task" not in defaults and "cpus_per_gpu" not in defaults
    # No rule names its partition: the plugin chooses it from each job's `gpu` resource, so a new
    # model rule needs no line in the profile (every paper job: tests/test_paper_run.py).
    assert "set-resources" not in profile and "slurm_partition" not in defaults
    partitions = slurm_partitions()
    assert slurm_partition(partitions, {"gpu": 0, "mem_mb": 8000, "runtime": 120}, threads=8) == "cpu"
    assert slurm_partition(partitions, {"mem_mb": 4000}) == "cpu"
    assert slurm_partition(partitions, {"gpu": 1, "mem_mb": 40000, "runtime": 300}, threads=8) == "gpu"
    assert slurm_partition(partitions, {"gpu": 2}) == "gpu"


def test_kubernetes_profile_image_and_volume_fit_together():
    profile = _yaml("profiles/kubernetes/config.yaml")
    assert profile["executor"] == "kubernetes" and profile["container-image"]
    (volume,) = profile["kubernetes-persistent-volumes"]
    claim, mount = volume.split(":")
    assert claim and mount.startswith("/")
    # Declared files, weights and the generation store all live on the one volume.
    assert profile["default-storage-provider"] == "fs" and profile["default-storage-prefix"].startswith(mount + "/")
    settings = dict(item.split("=", 1) for item in profile["config"])
    assert settings["models_dir"].startswith(mount + "/") and settings["store_dir"].startswith(mount + "/")
    assert profile["default-resources"]["gpu_manufacturer"] == "nvidia"

    instructions = _dockerfile_instructions((REPO / "containers" / "Dockerfile").read_text())
    (base,) = [args for keyword, args in instructions if keyword == "FROM"]
    assert ":" in base and not base.endswith(":latest"), "pin the base image"
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    pip = " ".join(r for r in runs if "pip install" in r)
    assert "snakemake-executor-plugin-kubernetes" in pip and "snakemake-storage-plugin-fs" in pip
    assert any(re.search(r"apt-get install\b.*\brsync\b", r) for r in runs)
    assert ("COPY", "envs/ envs/") in instructions
    # The environments are created where the profile looks for them, for both configs.
    creates = re.findall(r"--conda-create-envs-only --conda-prefix (\S+)", " ".join(runs))
    assert len(creates) == 2 and set(creates) == {profile["conda-prefix"]}
    assert any("--configfile config/paper.yaml" in r for r in runs)
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".venv-*", "results", "resources"} <= set(ignored)


def test_kubernetes_dev_shm_policy_matches_the_plugin_s_pods():
    policy = _yaml("profiles/kubernetes/dshm-policy.yaml")
    (rule,) = policy["spec"]["rules"]
    match = rule["match"]["any"][0]["resources"]
    assert match["kinds"] == ["Pod"] and match["names"] == ["snakejob-*"]
    assert match["namespaces"] == [_yaml("profiles/kubernetes/config.yaml")["kubernetes-namespace"]]
    spec = rule["mutate"]["patchStrategicMerge"]["spec"]
    (volume,) = spec["volumes"]
    assert volume["emptyDir"]["medium"] == "Memory"
    (container,) = spec["containers"]
    assert container["(name)"] == "snakemake"  # the container name the plugin gives every job
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": "/dev/shm"}]


def _dry_run(*args: str) -> str:
    out = subprocess.run(
        snakemake_cmd("-n", "--configfile", "config/paper.yaml", "--sdm", "env-modules", *args),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    return out.stdout + out.stderr


def _total(text: str) -> int:
    return int(re.search(r"^total\s+(\d+)$", text, re.M).group(1))


@pytest.fixture(scope="module")
def plain_total() -> int:
    """The paper DAG's job count without a cluster profile."""
    return _total(_dry_run())


@pytest.mark.slow
def test_paper_config_dry_runs_with_the_slurm_profile(plain_total):
    text = _dry_run("--profile", "profiles/slurm")
    assert _total(text) == plain_total and "rule answer_candidates" in text and "rule judge" in text


@pytest.mark.slow
def test_paper_config_dry_runs_with_the_kubernetes_profile(tmp_path, plain_total):
    # The storage prefix (the volume in a real run) holds the workflow's own input files.
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "prompts.yaml", tmp_path / "config")
    text = _dry_run("--profile", "profiles/kubernetes", "--default-storage-prefix", str(tmp_path))
    assert _total(text) == plain_total and f"{tmp_path}/resources/models/qwen3-32b/manifest.json" in text


@pytest.mark.slow
def test_every_demo_job_fits_the_machine_the_demo_is_for():
    """The demo's `resources` are its machine's (2 CPUs, 24 GB): through profiles/slurm on such a node
    every job fits, and two model jobs fit side by side."""
    out = subprocess.run(
        snakemake_cmd("-n", "--forceall", "--profile", "profiles/slurm"), cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n)+)", out.stdout, re.M)
    assert len(jobs) > 50
    for rule, body in jobs:
        threads = int((re.search(r"^\s+threads: (\d+)$", body, re.M) or [0, 1])[1])
        mem_mb = int(re.search(r"\bmem_mb=(\d+)", body)[1])
        assert threads <= 2, (rule, threads)
        assert mem_mb <= 24_000 // 2, (rule, mem_mb)
