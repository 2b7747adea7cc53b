"""The generation store, with a fake generator: keys, dedup, persistence, concurrency, kill safety."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from llm_utility.generation.store import GenerationStore, make_key

# A deterministic stand-in for a model: shared by the tests and the subprocesses they start.
FAKE = textwrap.dedent("""
    import time

    class FakeGenerator:
        backend = "fake"
        dtype = "float32"

        def __init__(self, fingerprint="fake-model", delay=0.0):
            self.fingerprint = fingerprint
            self.delay = delay
            self.calls = []

        def count_tokens(self, prompts):
            return [len(p.split()) for p in prompts]

        def generate(self, prompts, max_new_tokens, stop=()):
            self.calls.append(list(prompts))
            time.sleep(self.delay)
            return [f"{p[::-1]}|{max_new_tokens}" for p in prompts]
    """)
namespace: dict = {}
exec(FAKE, namespace)
FakeGenerator = namespace["FakeGenerator"]


def prompts_of(n: int) -> list[str]:
    # Different lengths, so sorting by token count matters.
    return [f"prompt {i} " + "word " * (i % 7) for i in range(n)]


def test_dedup_served_and_made(tmp_path):
    gen = FakeGenerator()
    store = GenerationStore(tmp_path / "m.sqlite")
    prompts = ["a", "b b b", "a", "c c", "b b b"]
    outs = store.generate(gen, prompts, max_new_tokens=8, stop=["\n"], batch_size=2)
    assert outs == [gen.generate([p], 8)[0] for p in prompts]
    assert store.stats == {"made": 3, "served": 0}
    # Longest first, two at a time, each unique prompt once.
    assert gen.calls[:2] == [["b b b", "c c"], ["a"]]
    again = store.generate(gen, ["c c", "a", "d"], max_new_tokens=8, stop=["\n"], batch_size=2)
    assert again == [gen.generate([p], 8)[0] for p in ["c c", "a", "d"]]
    assert store.stats == {"made": 4, "served": 2}
    assert "4 made, 2 served" in store.summary()
    assert len(store) == 4


def test_persists_across_instances_and_wal(tmp_path):
    path = tmp_path / "m.sqlite"
    with GenerationStore(path) as store:
        first = store.generate(FakeGenerator(), prompts_of(10), 8, ["\n"], batch_size=4)
    gen = FakeGenerator()
    with GenerationStore(path) as store:
        assert store.generate(gen, prompts_of(10), 8, ["\n"], batch_size=4) == first
        assert store.stats == {"made": 0, "served": 10}
    assert gen.calls == []
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    row = db.execute("SELECT prompt, output, prompt_tokens, created, params FROM generations LIMIT 1").fetchone()
    assert row[1] == FakeGenerator().generate([row[0]], 8)[0]
    assert row[2] == len(row[0].split()) and abs(row[3] - time.time()) < 600


def test_key_covers_model_backend_prompt_and_params(tmp_path):
    store = GenerationStore(tmp_path / "m.sqlite")
    store.generate(FakeGenerator(), ["p"], 8, ["\n"])
    for gen, max_new, stop in [
        (FakeGenerator(), 9, ["\n"]),  # max_new_tokens
        (FakeGenerator(), 8, ["\n", "."]),  # stop strings
        (FakeGenerator(fingerprint="other-model"), 8, ["\n"]),  # model
    ]:
        store.generate(gen, ["p"], max_new, stop)
        assert gen.calls == [["p"]]
    other_backend = FakeGenerator()
    other_backend.backend = "vllm"
    store.generate(other_backend, ["p"], 8, ["\n"])
    assert other_backend.calls == [["p"]]
    assert store.stats == {"made": 5, "served": 0}
    # Stop strings are a set: order and repeats do not make a new key.
    same = FakeGenerator()
    store.generate(same, ["p"], 8, ["\n", "\n"])
    assert same.calls == [] and store.stats["served"] == 1
    assert make_key("m", "b", "p", {"x": 1}) != make_key("m", "b", "p ", {"x": 1})


def test_empty_and_all_served(tmp_path):
    store = GenerationStore(tmp_path / "m.sqlite")
    assert store.generate(FakeGenerator(), [], 8) == []
    assert store.stats == {"made": 0, "served": 0}


WORKER = FAKE + textwrap.dedent("""
    import json, sys
    from llm_utility.generation.store import GenerationStore

    path, first, count, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
    delay = float(sys.argv[4])
    prompts = [f"prompt {i} " + "word " * (i % 7) for i in range(first, first + count)]
    store = GenerationStore(path)
    outs = store.generate(FakeGenerator(delay=delay), prompts, 8, ["\\n"], batch_size=batch)
    print(json.dumps({"outs": outs, "stats": store.stats}), flush=True)
    """)


def _worker(path: Path, first: int, count: int, delay: float, batch: int) -> subprocess.Popen:
    args = [sys.executable, "-c", WORKER, str(path), str(first), str(count), str(delay), str(batch)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _rows(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        return sqlite3.connect(path, timeout=10).execute("SELECT COUNT(*) FROM generations").fetchone()[0]
    except sqlite3.OperationalError:  # table not created yet
        return 0


def test_concurrent_writers(tmp_path):
    path = tmp_path / "m.sqlite"
    # Two processes, overlapping prompt ranges (20-39 asked by both), small batches: many commits.
    a, b = _worker(path, 0, 40, 0.01, 3), _worker(path, 20, 40, 0.01, 3)
    (out_a, err_a), (out_b, err_b) = (p.communicate(timeout=120) for p in (a, b))
    assert a.returncode == 0 and b.returncode == 0, err_a + err_b
    res_a, res_b = json.loads(out_a), json.loads(out_b)
    expected = FakeGenerator().generate(prompts_of(60), 8)
    assert res_a["outs"] == expected[:40] and res_b["outs"] == expected[20:60]
    assert _rows(path) == 60
    # Every prompt was made by one of them or found in the store (a race may make one twice).
    for res in (res_a, res_b):
        assert res["stats"]["made"] + res["stats"]["served"] == 40


def test_killed_job_loses_at_most_the_batch_in_flight(tmp_path):
    n, batch = 40, 4
    reference = FakeGenerator().generate(prompts_of(n), 8)
    path = tmp_path / "m.sqlite"
    proc = _worker(path, 0, n, 0.3, batch)
    deadline = time.monotonic() + 60
    while _rows(path) < 2 * batch:  # at least two batches committed
        assert proc.poll() is None, "the job finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    committed = _rows(path)
    assert 2 * batch <= committed < n and committed % batch == 0  # whole batches only
    rerun = _worker(path, 0, n, 0.0, batch)
    res = json.loads(rerun.communicate(timeout=120)[0])
    assert res["outs"] == reference
    assert res["stats"] == {"made": n - committed, "served": committed}
    assert _rows(path) == n


def test_generator_must_return_one_output_per_prompt(tmp_path):
    class Broken(FakeGenerator):
        def generate(self, prompts: Sequence[str], max_new_tokens: int, stop=()):
            return []

    store = GenerationStore(tmp_path / "m.sqlite")
    with pytest.raises(RuntimeError, match="0 outputs for 1"):
        store.generate(Broken(), ["p"], 8)
    assert len(store) == 0
