import os
from pathlib import Path

import pytest

from workflow_runner import REPO

# Subprocesses the tests start (workers, snakemake, scripts) import this checkout's library too.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def env_no_gpu() -> dict:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env
