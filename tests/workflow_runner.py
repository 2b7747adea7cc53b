"""Running this checkout's workflow from the tests: the snakemake command of the test environment,
a run of the whole DAG in a work directory, and work directories that share the checkout's
materialized models."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def snakemake_cmd(*args: str) -> list[str]:
    """The snakemake of the running interpreter's environment, run from the repository root."""
    return [str(Path(sys.executable).with_name("snakemake")), *args]


def run_workflow(
    repo: Path, workdir: Path, cfg_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """This checkout's workflow run in ``workdir`` on ``cfg_path`` (in ``env``, else this process's)."""
    cmd = snakemake_cmd(
        "--snakefile", str(repo / "Snakefile"), "--directory", str(workdir), "--configfile", str(cfg_path), *args
    )
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env)


def workdir_sharing_models(repo: Path, factory: pytest.TempPathFactory, name: str) -> Path:
    """A fresh workflow directory whose resources/models is the checkout's: the suite and `make demo`
    dequantize the demo models once."""
    workdir = factory.mktemp(name)
    models = repo / "resources" / "models"
    models.mkdir(parents=True, exist_ok=True)
    (workdir / "resources").mkdir()
    (workdir / "resources" / "models").symlink_to(models)
    return workdir
