"""config/vllm-cpu.yaml, the overlay that runs one demo dataset on vLLM's CPU build (docs/cluster.md,
"vLLM without a GPU"), as documented: ``--configfile config/config.yaml config/vllm-cpu.yaml``.

- Its DAG resolves (``snakemake -n``) with the one dataset and every rule of the demo's DAG, so
  every table and figure of that dataset.
- Every model job of it gets ``backend: vllm`` with ``gpu: 0`` (vLLM's CPU build), the CPU build's
  conda environment and ``.venv-vllm`` as its interpreter, and asks for no GPU; the judge job's
  attention ranking stays on the transformers backend. Read from the jobs Snakemake builds, with
  the parameters their scripts get.
- A model job's script run by hand moves to ``.venv-vllm``, builds its job there again, and that
  interpreter's vLLM is the CPU build, which the job's spec passes (``vllm_backend.check_build``);
  vLLM's scan of every module at engine start does not trip over what building the job left behind.
  Skipped where ``.venv-vllm`` is not built (``make install-vllm``).

What the overlay's run gives against the transformers backend is measured by
benchmarks/backend_agreement.py (docs/performance.md, "vLLM on a CPU").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_runner import snakemake_cmd

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
CONFIGS = ("config/config.yaml", "config/vllm-cpu.yaml")
DATASET = "wf-claims"
# The rules whose jobs load an LLM (rules/generation.smk, judgments.smk, runs.smk).
MODEL_RULES = ("answer_candidates", "answer_gold", "answer_reask", "judge", "answer_judgments", "answer_run")


def _dry_run(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        snakemake_cmd("-n", "--cores", "2", *args), cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    return out.stdout + out.stderr


def _job_counts(text: str) -> dict[str, int]:
    block = text.split("Job stats:")[1].split("Reasons:")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", block, re.M)}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the workflow with no results (a dry-run must not depend on what results/ holds)."""
    root = tmp_path_factory.mktemp("overlay")
    for name in ("Snakefile", "rules", "config", "workflow", "report", "envs", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    return root


@pytest.fixture(scope="module")
def dags(checkout) -> dict[str, str]:
    return {"demo": _dry_run(checkout), "overlay": _dry_run(checkout, "--configfile", *CONFIGS)}


def test_overlay_runs_one_dataset_through_every_rule_of_the_demo(dags):
    demo, overlay = _job_counts(dags["demo"]), _job_counts(dags["overlay"])
    # Every rule of the demo's DAG, so every table and figure (each has a rule of its own).
    assert set(overlay) == set(demo)
    for rule in MODEL_RULES:
        assert overlay[rule] == 2 and demo[rule] == 6, rule  # one job per LLM, of one dataset
    assert overlay["materialize_model"] == 2 and overlay["table1"] == 1
    assert f"results/{DATASET}/" in dags["overlay"]
    assert not re.search(r"results/wf-(single|twohop)/", dags["overlay"])
    # Model jobs ask for no GPU: vLLM's CPU build.
    model_jobs = re.findall(rf"rule ({'|'.join(MODEL_RULES)}):.*?resources: ([^\n]*)", dags["overlay"], re.S)
    assert len(model_jobs) == 12 and all("gpu=0" in r for _, r in model_jobs)


def _jobs(workdir: Path, configfiles: list[Path]) -> dict[tuple[str, str], object]:
    """The Job Snakemake builds for each (model rule, LLM) of the overlay's dataset."""
    from snakemake.api import SnakemakeApi
    from snakemake.dag import DAG
    from snakemake.jobs import Job
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    here = Path.cwd()
    try:
        with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
            workflow_api = api.workflow(
                resource_settings=ResourceSettings(cores=2),
                config_settings=ConfigSettings(configfiles=configfiles),
                snakefile=workdir / "Snakefile",
                workdir=workdir,
            )
            workflow_api.dag()  # sets the DAG settings a DAG reads
            workflow = workflow_api._workflow
            jobs = {}
            for rule in MODEL_RULES:
                target = workflow.get_rule(rule)
                for llm in workflow.config["llms"]:
                    wildcards = {"dataset": DATASET, "llm": llm}
                    if rule == "answer_run":
                        wildcards["run"] = "bm25"
                    if "part_dir" in target.wildcard_names:  # a whole dataset: no query part
                        wildcards["part_dir"] = ""
                    jobs[rule, llm] = Job(target, DAG(workflow, rules=[target]), wildcards_dict=wildcards)
            return jobs
    finally:
        os.chdir(here)


def test_model_jobs_run_vllm_on_the_cpu_under_venv_vllm_and_attention_on_transformers(checkout):
    jobs = _jobs(checkout, [checkout / c for c in CONFIGS])
    assert len(jobs) == 2 * len(MODEL_RULES)
    for (rule, llm), job in jobs.items():
        spec = job.params.spec
        assert (spec["backend"], spec["gpu"], spec["dtype"]) == ("vllm", 0, "float32"), (rule, llm)
        assert "python" not in spec  # operational: where a job runs changes no result
        assert job.rule.workflow.config["llms"][llm]["python"] == ".venv-vllm/bin/python"
        assert str(job.conda_env_spec.file).endswith("envs/llm-vllm-cpu.yaml"), (rule, llm)
        assert job.resources.get("gpu", 0) == 0
    for llm in ("smollm2-135m", "gemma3-270m"):
        rankings = jobs["judge", llm].params.rankings
        assert "attention" in rankings["methods"] and rankings["attention_backend"] == "transformers"


# A model job's script run by hand, as docs/running.md shows: it builds its job (mock_snakemake),
# moves to llms.<llm>.python, builds it again there, then checks what the job would load.
PROBE = """
from llm_utility.workflow import mock_snakemake, run_in_llm_python

snakemake = mock_snakemake("answer_candidates")
run_in_llm_python(snakemake.config, snakemake.wildcards.llm)
import sys

import vllm
from vllm.platforms import current_platform
from vllm.triton_utils import dispatcher

from llm_utility.generation.specs import normalize_spec
from llm_utility.generation.vllm_backend import check_build, engine_kwargs, on_cpu

spec = normalize_spec(snakemake.params.spec, snakemake.wildcards.llm)
check_build(vllm, spec, snakemake.wildcards.llm)
kwargs = engine_kwargs("/m", spec, "float32")
assert on_cpu(spec) and kwargs["enforce_eager"] and kwargs["kv_cache_memory_bytes"] == 1 << 30, kwargs
# The scan of every module an engine start runs (it failed on Snakemake's storage registry).
dispatcher._rebind_kernels([])
print(sys.prefix, vllm.__version__, current_platform.device_type)
"""


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=".venv-vllm is not built (make install-vllm)")
def test_a_model_job_run_by_hand_moves_to_venv_vllm_whose_vllm_is_the_cpu_build(checkout):
    (checkout / ".venv-vllm").symlink_to(ROOT / ".venv-vllm")  # llms.<llm>.python is relative to the workflow
    probe = checkout / "workflow" / "scripts" / "probe_vllm_job.py"
    probe.write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    args = ["dataset=wf-claims", "llm=gemma3-270m", "--configfile", *CONFIGS]
    out = subprocess.run(
        [sys.executable, str(probe), *args], cwd=checkout, capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    prefix, version, device = out.stdout.split()[-3:]
    assert Path(prefix).resolve() == (ROOT / ".venv-vllm").resolve() and device == "cpu" and version.startswith("0.32")
