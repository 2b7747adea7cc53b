import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Subprocesses the tests start (workers, snakemake, scripts) import this checkout's library too.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def snakemake_cmd(*args: str) -> list[str]:
    """The snakemake of the running interpreter's environment, run from the repository root."""
    return [str(Path(sys.executable).with_name("snakemake")), *args]


@pytest.fixture(scope="session")
def env_no_gpu() -> dict:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env
