"""The generation store, with a stand-in model: keys, dedup, the three kinds of call, shards that are
sealed and read immutable, concurrent jobs, kill-and-resume, compaction, and bad files."""

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

from llm_utility.generation.store import (
    AttentionRequest,
    GenerationStore,
    StoreError,
    compact,
    count_rows,
    job_name,
    make_key,
    shards,
)

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

        def store_key_extras(self):
            return {}

        def count_tokens(self, texts, special=True):
            return [len(t.split()) for t in texts]

        def generate(self, prompts, max_new_tokens, stop=()):
            self.calls.append(list(prompts))
            time.sleep(self.delay)
            return [f"{p[::-1]}|{max_new_tokens}" for p in prompts]

        def score(self, pairs):
            self.calls.append(list(pairs))
            return [[-float(len(w)) for w in target.split()] for _, target in pairs]

        def attention(self, requests, pooling="mean"):
            self.calls.append(list(requests))
            return [[float(b - a) for a, b in r.spans] for r in requests]
    """)
namespace: dict = {}
exec(FAKE, namespace)
FakeGenerator = namespace["FakeGenerator"]


def prompts_of(n: int) -> list[str]:
    # Different lengths, so sorting by token count matters.
    return [f"prompt {i} " + "word " * (i % 7) for i in range(n)]


def test_dedup_served_and_made(tmp_path):
    gen = FakeGenerator()
    with GenerationStore(tmp_path, "job-a") as store:
        prompts = ["a", "b b b", "a", "c c", "b b b"]
        outs = store.generate(gen, prompts, max_new_tokens=8, stop=["\n"], batch_size=2)
        assert outs == [gen.generate([p], 8)[0] for p in prompts]
        assert store.stats["generate"]["made"] == 3 and store.stats["generate"]["served"] == 0
        # Longest first, two at a time, each unique prompt once.
        assert gen.calls[:2] == [["b b b", "c c"], ["a"]]
        again = store.generate(gen, ["c c", "a", "d"], max_new_tokens=8, stop=["\n"], batch_size=2)
        assert again == [gen.generate([p], 8)[0] for p in ["c c", "a", "d"]]
        assert (store.stats["generate"]["made"], store.stats["generate"]["served"]) == (4, 2)
        assert store.stats["generate"]["prompt_tokens"] == 3 + 2 + 1 + 1
        assert "generate: 4 made, 2 served" in store.summary()
        assert len(store) == 4
        # Calls inside a section are counted there too (a judge job's methods in the cost table).
        with store.section("listwise"):
            store.generate(gen, ["a", "e e"], max_new_tokens=8, stop=["\n"], batch_size=2)
        store.generate(gen, ["f"], max_new_tokens=8, stop=["\n"], batch_size=2)
        assert (store.sections["listwise"]["generate"]["made"], store.sections["listwise"]["generate"]["served"]) == (1, 1)
        assert list(store.sections) == ["listwise"] and store.stats["generate"]["made"] == 6


def test_a_sealed_shard_serves_later_jobs_and_is_never_written(tmp_path):
    with GenerationStore(tmp_path, "job-a") as store:
        first = store.generate(FakeGenerator(), prompts_of(10), 8, ["\n"], batch_size=4)
    (sealed,) = shards(tmp_path)
    assert sealed.name.startswith("job-a.") and not sealed.name.endswith(".open.sqlite")
    before = sealed.read_bytes()
    gen = FakeGenerator()
    with GenerationStore(tmp_path, "job-b") as store:
        assert store.generate(gen, prompts_of(10), 8, ["\n"], batch_size=4) == first
        assert store.stats["generate"]["served"] == 10 and store.stats["generate"]["made"] == 0
        store.generate(gen, ["new prompt"], 8, ["\n"], batch_size=4)
    assert gen.calls == [["new prompt"]]
    assert sealed.read_bytes() == before  # read immutable: not a byte changed
    assert len(shards(tmp_path)) == 2 and count_rows(tmp_path) == 11
    db = sqlite3.connect(sealed)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # no WAL: safe on NFS
    row = db.execute("SELECT kind, prompt, target, value, prompt_tokens, output_tokens, created FROM calls LIMIT 1").fetchone()
    assert row[0] == "generate" and row[2] == "" and row[3] == FakeGenerator().generate([row[1]], 8)[0]
    assert row[4] == len(row[1].split()) and row[5] == len(row[3].split()) and abs(row[6] - time.time()) < 600


def test_an_empty_job_leaves_no_shard(tmp_path):
    with GenerationStore(tmp_path, "job-a") as store:
        assert store.generate(FakeGenerator(), [], 8, [], batch_size=4) == []
    assert shards(tmp_path) == []


def test_key_covers_kind_model_backend_prompt_target_and_params(tmp_path):
    with GenerationStore(tmp_path, "job") as store:
        store.generate(FakeGenerator(), ["p"], 8, ["\n"], batch_size=4)
        for gen, max_new, stop in [
            (FakeGenerator(), 9, ["\n"]),  # max_new_tokens
            (FakeGenerator(), 8, ["\n", "."]),  # stop strings
            (FakeGenerator(fingerprint="other-model"), 8, ["\n"]),  # model
        ]:
            store.generate(gen, ["p"], max_new, stop, batch_size=4)
            assert gen.calls == [["p"]]
        other_backend = FakeGenerator()
        other_backend.backend = "vllm"
        store.generate(other_backend, ["p"], 8, ["\n"], batch_size=4)
        assert other_backend.calls == [["p"]]
        versioned = FakeGenerator()
        versioned.store_key_extras = lambda: {"vllm": "0.33.0", "tensor_parallel_size": 2}
        store.generate(versioned, ["p"], 8, ["\n"], batch_size=4)  # what the backend adds to the key counts too
        assert versioned.calls == [["p"]]
        # Stop strings are a set: order and repeats do not make a new key.
        same = FakeGenerator()
        store.generate(same, ["p"], 8, ["\n", "\n"], batch_size=4)
        assert same.calls == []
        # A score of "p" is another call than its generation.
        scorer = FakeGenerator()
        store.score(scorer, [("p", "a b")], batch_size=4)
        assert scorer.calls == [[("p", "a b")]]
    assert make_key("generate", "m", "b", "p", "", {"x": 1}) != make_key("generate", "m", "b", "p ", "", {"x": 1})
    assert make_key("score", "m", "b", "p", "t", {}) != make_key("score", "m", "b", "p", "t ", {})


def test_score_and_attention_are_stored_and_served(tmp_path):
    gen = FakeGenerator()
    pairs = [("q", "a bb"), ("q", "ccc"), ("q", "a bb")]
    attn = [AttentionRequest("prompt", ((0, 2), (3, 9)), "ans"), AttentionRequest("prompt", ((0, 2),), "ans")]
    with GenerationStore(tmp_path, "job-a") as store:
        assert store.score(gen, pairs, batch_size=4) == [[-1.0, -2.0], [-3.0], [-1.0, -2.0]]
        assert store.attention(gen, attn, pooling="mean") == [[2.0, 6.0], [2.0]]
    gen2 = FakeGenerator()
    with GenerationStore(tmp_path, "job-b") as store:
        assert store.score(gen2, pairs[:2], batch_size=4) == [[-1.0, -2.0], [-3.0]]
        assert store.attention(gen2, attn, pooling="mean") == [[2.0, 6.0], [2.0]]
        assert store.stats["score"]["served"] == 2 and store.stats["attention"]["served"] == 2
        store.attention(gen2, attn[:1], pooling="max")  # the pooling is part of the key
    assert len(gen2.calls) == 1
    assert count_rows(tmp_path, "score") == 2 and count_rows(tmp_path, "attention") == 3


WORKER = FAKE + textwrap.dedent("""
    import json, sys
    from llm_utility.generation.store import GenerationStore

    root, job, first, count, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[6])
    delay = float(sys.argv[5])
    prompts = [f"prompt {i} " + "word " * (i % 7) for i in range(first, first + count)]
    with GenerationStore(root, job) as store:
        outs = store.generate(FakeGenerator(delay=delay), prompts, 8, ["\\n"], batch_size=batch)
        print(json.dumps({"outs": outs, "stats": store.stats["generate"]}), flush=True)
    """)


def _worker(root: Path, job: str, first: int, count: int, delay: float, batch: int) -> subprocess.Popen:
    args = [sys.executable, "-c", WORKER, str(root), job, str(first), str(count), str(delay), str(batch)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _rows(path: Path) -> int:
    """Rows committed in a shard another process is writing (retrying a read caught mid-commit)."""
    for _ in range(50):
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
            try:
                return db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
            finally:
                db.close()
        except sqlite3.DatabaseError:  # not created yet, or a page read mid-commit
            time.sleep(0.01)
    return 0


def test_concurrent_jobs_each_write_their_own_shard(tmp_path):
    # Three processes (as jobs on three hosts would), overlapping prompt ranges, small batches.
    procs = [_worker(tmp_path, f"job-{i}", 10 * i, 30, 0.005, 3) for i in range(3)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    expected = FakeGenerator().generate(prompts_of(50), 8)
    for i, res in enumerate(results):
        assert res["outs"] == expected[10 * i : 10 * i + 30]
        assert res["stats"]["made"] + res["stats"]["served"] == 30
    # One sealed shard per job that made a call (a job that starts after the others have sealed is
    # served everything and leaves no shard, which a busy machine can make happen).
    writers = sum(res["stats"]["made"] > 0 for res in results)
    assert len(shards(tmp_path)) == writers >= 1 and not any(p.name.endswith(".open.sqlite") for p in shards(tmp_path))
    assert count_rows(tmp_path) == 50
    # A later job is served everything, from all three shards.
    later = _worker(tmp_path, "job-later", 0, 50, 0.0, 7)
    res = json.loads(later.communicate(timeout=120)[0])
    assert res["outs"] == expected and res["stats"]["served"] == 50 and res["stats"]["made"] == 0


def test_killed_job_loses_at_most_the_batch_in_flight_and_resumes(tmp_path):
    n, batch = 40, 4
    reference = FakeGenerator().generate(prompts_of(n), 8)
    shard = tmp_path / "job-a.open.sqlite"
    proc = _worker(tmp_path, "job-a", 0, n, 0.3, batch)
    deadline = time.monotonic() + 60
    while _rows(shard) < 2 * batch:  # at least two batches committed
        assert proc.poll() is None, "the job finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    committed = _rows(shard)
    assert 2 * batch <= committed < n and committed % batch == 0  # whole batches only
    # The rerun of the same job reopens its shard and computes only what is missing.
    rerun = _worker(tmp_path, "job-a", 0, n, 0.0, batch)
    res = json.loads(rerun.communicate(timeout=120)[0])
    assert res["outs"] == reference
    assert res["stats"]["made"] == n - committed and res["stats"]["served"] == committed
    assert count_rows(tmp_path) == n and not shard.exists()


def test_compact_merges_sealed_shards(tmp_path):
    for i in range(3):
        with GenerationStore(tmp_path, f"job-{i}") as store:
            store.generate(FakeGenerator(), prompts_of(5 * (i + 1)), 8, [], batch_size=4)  # overlapping ranges
    assert len(shards(tmp_path)) == 3
    merged = compact(tmp_path)
    assert shards(tmp_path) == [merged] and count_rows(tmp_path) == 15
    gen = FakeGenerator()
    with GenerationStore(tmp_path, "job-after") as store:
        assert store.generate(gen, prompts_of(15), 8, [], batch_size=4) == FakeGenerator().generate(prompts_of(15), 8)
    assert gen.calls == []
    assert compact(tmp_path) is None  # nothing to merge


def test_generator_must_return_one_output_per_prompt(tmp_path):
    class Broken(FakeGenerator):
        def generate(self, prompts: Sequence[str], max_new_tokens: int, stop=()):
            return []

    with GenerationStore(tmp_path, "job") as store:
        with pytest.raises(RuntimeError, match="0 results for 1 calls"):
            store.generate(Broken(), ["p"], 8, [], batch_size=4)
        assert len(store) == 0


def test_corrupt_or_foreign_files_name_the_file_and_the_remedy(tmp_path):
    bad = tmp_path / "old-job.20250101T000000-abcd.sqlite"
    bad.write_bytes(b"this is not a database, just bytes " * 200)
    with pytest.raises(StoreError, match=rf"{bad.name} is corrupt.*delete"):
        GenerationStore(tmp_path, "job")
    bad.unlink()
    old = sqlite3.connect(tmp_path / "v1.sqlite")  # a store file of another schema version
    old.execute("CREATE TABLE generations (key TEXT)")
    old.execute("PRAGMA user_version = 1")
    old.commit()
    old.close()
    with pytest.raises(StoreError, match=r"v1.sqlite has schema version 1, this code reads version 2"):
        GenerationStore(tmp_path, "job")


def test_job_names_are_file_safe():
    assert job_name("answer_gold_U", {"llm": "smollm2-135m", "dataset": "wf-single"}) == (
        "answer_gold_U+dataset=wf-single+llm=smollm2-135m"
    )
    with pytest.raises(ValueError, match="must match"):
        GenerationStore("/tmp/unused", "a/b")
