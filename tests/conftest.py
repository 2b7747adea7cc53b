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


# The whole-DAG runs first: each is one module on one worker (--dist loadfile) and the longest chain
# of the suite, so starting them at once lets the other worker run everything else meanwhile.
LONGEST_FIRST = ("test_workflow_e2e.py", "test_benchmarks_e2e.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
