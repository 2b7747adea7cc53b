import os
from pathlib import Path

import pytest

from workflow_runner import REPO

# One thread per test process: pytest-xdist runs one worker per core, and torch's default of a
# thread per core in each (two workers, and the whole-DAG run's jobs beside them) oversubscribes
# the cores; its OpenMP threads then spin waiting for each other. Measured on 2 cores: the three
# model-test files took 223 s of CPU and 128 s without this, 108 s and 88 s with it. Jobs that run
# more threads set theirs (torch.set_num_threads(snakemake.threads)), as the workflow's do.
os.environ.setdefault("OMP_NUM_THREADS", "1")

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
