"""The generation store, with a stand-in model: keys, dedup, the three kinds of call, shards that are
sealed and read immutable, concurrent jobs and workflows sharing one store, kill-and-resume,
compaction, checksums and damaged files, full file systems, verify and migrate."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

import llm_utility.generation.store as store_module
from llm_utility.generation.store import (
    AttentionRequest,
    GenerationStore,
    StoreError,
    count_rows,
    job_name,
    liveness,
    make_key,
    shard,
    shards,
)
from llm_utility.generation.store.maintenance import compact, main, verify

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
        assert (store.sections["listwise"]["generate"]["made"], store.sections["listwise"]["generate"]["served"]) == (
            1,
            1,
        )
        assert list(store.sections) == ["listwise"] and store.stats["generate"]["made"] == 6


def test_sections_named_per_prompt_count_each_prompts_call_in_its_own(tmp_path):
    """One call carrying several methods' prompts (a judge job's methods decoded together): each
    prompt's call is counted in the section named for it (a prompt given twice in its first), not in
    the enclosing block's; the sections' seconds add up to the call's."""
    gen = FakeGenerator()
    with GenerationStore(tmp_path, "job-a") as store:
        store.generate(gen, ["a"], max_new_tokens=8, stop=["\n"], batch_size=2)
        before = store.stats["generate"]["seconds"]
        with store.section("outer"):
            outs = store.generate(
                gen,
                ["a", "b b", "c c c", "b b"],
                max_new_tokens=8,
                stop=["\n"],
                batch_size=2,
                sections=["one", "two", "one", "one"],
            )
        batches = gen.calls[1:]
        assert outs == [gen.generate([p], 8)[0] for p in ["a", "b b", "c c c", "b b"]]
        counts = {
            name: (s["generate"]["made"], s["generate"]["served"], s["generate"]["prompt_tokens"])
            for name, s in store.sections.items()
        }
        assert counts == {"one": (1, 1, 3), "two": (1, 0, 2)}
        assert batches == [["c c c", "b b"]]  # both sections' prompts in one batch
        seconds = sum(s["generate"]["seconds"] for s in store.sections.values())
        assert seconds == pytest.approx(store.stats["generate"]["seconds"] - before) and seconds > 0
        with pytest.raises(ValueError, match="2 sections for 1 prompts"):
            store.generate(gen, ["e"], 8, ["\n"], batch_size=2, sections=["one", "two"])


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
    row = db.execute(
        "SELECT kind, prompt, target, value, prompt_tokens, output_tokens, created FROM calls LIMIT 1"
    ).fetchone()
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
    import json, os, sys, time
    from llm_utility.generation.store import GenerationStore

    root, job, first, count, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[6])
    delay, go = float(sys.argv[5]), sys.argv[7]
    while go and not os.path.exists(go):  # a start line, so that "together" means together
        time.sleep(0.001)
    prompts = [f"prompt {i} " + "word " * (i % 7) for i in range(first, first + count)]
    with GenerationStore(root, job) as store:
        outs = store.generate(FakeGenerator(delay=delay), prompts, 8, ["\\n"], batch_size=batch)
        print(json.dumps({"outs": outs, "stats": store.stats["generate"]}), flush=True)
    """)


def _worker(
    root: Path,
    job: str,
    first: int,
    count: int,
    delay: float,
    batch: int,
    cwd: Path | None = None,
    go: Path | None = None,
) -> subprocess.Popen:
    args = [sys.executable, "-c", WORKER, str(root), job, str(first), str(count), str(delay), str(batch), str(go or "")]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)


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


def _open_shard(root: Path, job: str, timeout: float = 60) -> Path:
    deadline = time.monotonic() + timeout
    while not (found := list(root.glob(f"{job}.*.open.sqlite"))):
        assert time.monotonic() < deadline, f"no open shard of {job}"
        time.sleep(0.01)
    (path,) = found
    return path


def test_killed_job_loses_at_most_the_batch_in_flight_and_resumes(tmp_path):
    n, batch = 40, 4
    reference = FakeGenerator().generate(prompts_of(n), 8)
    proc = _worker(tmp_path, "job-a", 0, n, 0.3, batch)
    shard = _open_shard(tmp_path, "job-a")
    deadline = time.monotonic() + 60
    while _rows(shard) < 2 * batch:  # at least two batches committed
        assert proc.poll() is None, "the job finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    committed = _rows(shard)
    assert 2 * batch <= committed < n and committed % batch == 0  # whole batches only
    # The rerun (a new writer) is served what the killed one committed, and computes the rest at
    # once: the killed writer's lease on its batch in flight does not hold (its process is gone).
    started = time.monotonic()
    rerun = _worker(tmp_path, "job-a", 0, n, 0.0, batch)
    res = _result(rerun)
    assert time.monotonic() - started < liveness.STALE_SECONDS
    assert res["outs"] == reference
    assert res["stats"]["made"] == n - committed and res["stats"]["served"] == committed
    # The killed writer ran on this machine, so the rerun sealed its shard.
    assert count_rows(tmp_path) == n and not shard.exists()
    assert not list(tmp_path.glob("*.open.sqlite")) and len(shards(tmp_path)) == 2


@pytest.mark.parametrize("start", ["together", "staggered"])
def test_two_workflows_share_one_store_and_compute_every_call_once(tmp_path, start):
    """The same job of two workflows (two working directories, one store_dir) at the same time:
    each writes a shard of its own, is served what the other committed, skips what the other is
    computing, and neither crashes; every call is computed once across the two."""
    n, batch, delay = 60, 3, 0.05
    store = tmp_path / "store"
    go = tmp_path / "go"
    job = job_name("answer_candidates", {"dataset": "wf-single", "llm": "smollm2-135m"})
    workdirs = [tmp_path / "workflow-1", tmp_path / "workflow-2"]
    for d in workdirs:
        d.mkdir()
    # Both processes start Python and import the store first, then wait at their start line.
    go_second = go if start == "together" else tmp_path / "go-second"
    first = _worker(store, job, 0, n, delay, batch, cwd=workdirs[0], go=go)
    second = _worker(store, job, 0, n, delay, batch, cwd=workdirs[1], go=go_second)
    time.sleep(1.0)
    go.touch()
    committed_at_start = 0
    if start == "staggered":  # the second starts when the first has computed a third
        shard = _open_shard(store, job)
        deadline = time.monotonic() + 60
        while (committed_at_start := _rows(shard)) < n // 3:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        go_second.touch()
    results = [_result(first), _result(second)]
    expected = FakeGenerator().generate(prompts_of(n), 8)
    made = [r["stats"]["made"] for r in results]
    served = [r["stats"]["served"] for r in results]
    print(f"{start}: made {made}, served {served}")  # the numbers the issue asks for (pytest -s)
    for r in results:
        assert r["outs"] == expected
        assert r["stats"]["made"] + r["stats"]["served"] == n
    assert sum(made) == n  # computed once across the two
    assert all(m > 0 for m in made)  # they split the work
    if start == "staggered":
        assert served[1] >= committed_at_start
    sealed = shards(store)
    assert len(sealed) == 2 and len({p.name for p in sealed}) == 2
    assert not any(p.name.endswith(".open.sqlite") for p in sealed) and count_rows(store) == n


def test_a_live_writers_leases_hold_until_its_shard_goes_stale(tmp_path, monkeypatch):
    """A writer elsewhere (another host: its process cannot be checked) that leased calls: they are
    left to it while its shard changes, and taken over once it has not changed for STALE_SECONDS."""
    monkeypatch.setattr(liveness, "STALE_SECONDS", 1.0)
    gen = FakeGenerator()
    prompts = prompts_of(6)
    params = store_module.generation_params(gen, 8, ["\n"])
    keys = [make_key("generate", gen.fingerprint, gen.backend, p, "", params) for p in prompts]
    other = tmp_path / f"job.{shard.new_token()}.open.sqlite"
    db = shard.open_writer(other)
    db.execute("UPDATE writer SET host = 'elsewhere', boot = 'another-boot'")
    db.executemany("INSERT INTO claims VALUES (?, ?)", [(k, time.time()) for k in keys[:2]])
    db.close()
    started = time.monotonic()
    with GenerationStore(tmp_path, "job") as store:
        outs = store.generate(gen, prompts, 8, ["\n"], batch_size=2)
    waited = time.monotonic() - started
    assert outs == [FakeGenerator().generate([p], 8)[0] for p in prompts]
    # The four unleased calls first, the two leased ones once the other writer went stale.
    assert [c for batch in gen.calls for c in batch][-2:] == sorted(prompts[:2], key=lambda p: -len(p.split()))
    assert waited >= 0.9 and store.stats["generate"]["made"] == 6


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
    with pytest.raises(StoreError, match=r"v1.sqlite has schema version 1, this code reads version 3"):
        GenerationStore(tmp_path, "job")
    assert not list(tmp_path.glob("job.*"))  # the failed job left no shard behind


def test_job_names_are_file_safe():
    assert job_name("answer_gold_U", {"llm": "smollm2-135m", "dataset": "wf-single"}) == (
        "answer_gold_U+dataset=wf-single+llm=smollm2-135m"
    )
    with pytest.raises(ValueError, match="must match"):
        GenerationStore("/tmp/unused", "a/b")


# -- corruption: every row is checked, every SQLite error names its file -----------------------------


def _sealed_store(root: Path, n: int, out_chars: int = 0) -> tuple[Path, list[str], list[str]]:
    """One sealed shard holding ``n`` generations (outputs padded to ``out_chars``)."""

    class Long(FakeGenerator):
        def generate(self, prompts, max_new_tokens, stop=()):
            return [o.ljust(out_chars, "~") for o in super().generate(prompts, max_new_tokens, stop)]

    prompts = prompts_of(n)
    with GenerationStore(root, "job-a") as store:
        outs = store.generate(Long(), prompts, 8, ["\n"], batch_size=16)
    (sealed,) = shards(root)
    return sealed, prompts, outs


def test_three_changed_bytes_in_a_value_are_caught_recomputed_and_reported(tmp_path, caplog):
    sealed, prompts, outs = _sealed_store(tmp_path, 10)
    victim = outs[3]
    data = bytearray(sealed.read_bytes())
    at = data.find(victim.encode())
    assert at > 0 and data.count(victim.encode()) == 1
    data[at : at + 3] = b"XYZ"  # same length: SQLite's structure is intact, only the value differs
    sealed.write_bytes(bytes(data))
    assert (tmp_path / "job-a").exists() is False and verify(tmp_path)[0].bad_keys  # verify finds it
    gen = FakeGenerator()
    with caplog.at_level(logging.WARNING, logger="llm_utility"):
        with GenerationStore(tmp_path, "job-b") as store:
            again = store.generate(gen, prompts, 8, ["\n"], batch_size=16)
    assert again == outs  # the right value, not the damaged one
    assert gen.calls == [[prompts[3]]] and store.stats["generate"]["served"] == 9
    assert sealed.name in caplog.text and "fail their checksum" in caplog.text
    # verify names the shard and the row; the next run serves the recomputed row from its own shard.
    reports = {r.path: r for r in verify(tmp_path)}
    params = store_module.generation_params(gen, 8, ["\n"])
    assert reports[sealed].bad_keys == [make_key("generate", "fake-model", "fake", prompts[3], "", params)]
    assert sum(r.ok for r in reports.values()) == 1
    gen = FakeGenerator()
    with GenerationStore(tmp_path, "job-c") as store:
        assert store.generate(gen, prompts, 8, ["\n"], batch_size=16) == outs
    assert gen.calls == []
    # compact drops the damaged row; the merged store verifies clean.
    merged = compact(tmp_path)
    assert shards(tmp_path) == [merged] and all(r.ok for r in verify(tmp_path)) and count_rows(tmp_path) == 10


def test_verify_command_reports_bad_rows_and_exits_1(tmp_path, capsys):
    sealed, _, outs = _sealed_store(tmp_path, 4)
    assert main(["verify", str(tmp_path)]) == 0
    assert f"ok   {sealed}: 4 calls (sealed)" in capsys.readouterr().out
    data = bytearray(sealed.read_bytes())
    at = data.find(outs[0].encode())
    data[at] ^= 0x01
    sealed.write_bytes(bytes(data))
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"BAD  {sealed}: 1 of 4 calls fail their checksum" in out


@pytest.mark.parametrize("module", ["llm_utility.generation.store", "llm_utility.generation.store_maintenance"])
def test_the_maintenance_command_runs_under_its_name_and_its_former_one(tmp_path, module):
    sealed, _, _ = _sealed_store(tmp_path, 2)
    out = subprocess.run(
        [sys.executable, "-m", module, "verify", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and f"ok   {sealed}: 2 calls (sealed)" in out.stdout, out.stderr[-2000:]


def test_damaged_data_pages_name_the_shard_and_the_remedy(tmp_path):
    sealed, prompts, _ = _sealed_store(tmp_path, 200, out_chars=300)
    page = 4096
    data = bytearray(sealed.read_bytes())
    assert len(data) > 20 * page
    for p in range(2, len(data) // page - 1, 3):  # every third page after the first (the header)
        data[p * page : (p + 1) * page] = os.urandom(page)
    sealed.write_bytes(bytes(data))
    with pytest.raises(StoreError) as err:
        with GenerationStore(tmp_path, "job-b") as store:
            store.generate(FakeGenerator(), prompts, 8, ["\n"], batch_size=16)
    message = str(err.value)
    assert str(sealed) in message and "corrupt" in message and "verify" in message and "delete" in message
    (report,) = [r for r in verify(tmp_path) if r.path == sealed]
    assert not report.ok and (report.problem or report.bad_keys)


def test_header_damage_names_the_shard_and_the_remedy(tmp_path):
    sealed, prompts, _ = _sealed_store(tmp_path, 10)
    data = bytearray(sealed.read_bytes())
    data[:16] = b"not sqlite at all"[:16]  # the file's magic string
    sealed.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=rf"{sealed.name} is corrupt \(file is not a database\).*verify.*delete"):
        GenerationStore(tmp_path, "job-b")
    assert not list(tmp_path.glob("job-b.*"))
    assert main(["verify", str(tmp_path)]) == 1


def _write_v2_shard(path: Path, rows: list[tuple]) -> None:
    """A shard as version 2 of the store wrote it (no checksum, leases or writer)."""
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE calls (key TEXT PRIMARY KEY, kind TEXT NOT NULL, fingerprint TEXT NOT NULL, "
        "backend TEXT NOT NULL, params TEXT NOT NULL, prompt TEXT NOT NULL, target TEXT NOT NULL, value TEXT NOT NULL, "
        "prompt_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, seconds REAL NOT NULL, created REAL NOT NULL)"
    )
    db.executemany("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()


def test_version_2_shards_stop_the_job_until_migrated(tmp_path, capsys):
    gen = FakeGenerator()
    params = store_module.generation_params(gen, 8, ["\n"])
    params_json = store_module.canonical_json(params)
    prompts = prompts_of(3)
    rows = [
        (
            make_key("generate", "fake-model", "fake", p, "", params),
            "generate",
            "fake-model",
            "fake",
            params_json,
            p,
            "",
            gen.generate([p], 8)[0],
            1,
            1,
            0.1,
            0.0,
        )
        for p in prompts
    ]
    rows[2] = ("0" * 64, *rows[2][1:])  # a key that does not match its columns
    old = tmp_path / "answer_candidates+llm=x.20250101T000000-abcdef12.sqlite"
    _write_v2_shard(old, rows)
    with pytest.raises(StoreError, match=r"schema version 2 \(no checksums\).*migrate"):
        GenerationStore(tmp_path, "job")
    assert main(["migrate", str(tmp_path)]) == 0
    assert "2 calls kept, 1 dropped" in capsys.readouterr().out
    (new,) = shards(tmp_path)
    assert new.name.startswith("answer_candidates+llm=x.") and not old.exists()
    gen = FakeGenerator()
    with GenerationStore(tmp_path, "job") as store:
        assert store.generate(gen, prompts, 8, ["\n"], batch_size=4) == FakeGenerator().generate(prompts, 8)
    assert gen.calls == [[prompts[2]]]


# -- full file systems ----------------------------------------------------------------------------------

FULL_DISK = FAKE + textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from llm_utility.generation.store import GenerationStore, StoreError, count_rows, shards
    from llm_utility.io import write_text

    tiny = Path(sys.argv[1])
    report = {}

    # 1. A job whose rows cannot fit is stopped before it computes anything.
    gen = FakeGenerator()
    try:
        with GenerationStore(tiny / "store-a", "job") as store:
            store.generate(gen, [f"prompt {i} " + "word " * 400 for i in range(600)], 8, [], batch_size=4)
    except StoreError as err:
        report["precheck"] = str(err)
    report["precheck_calls"] = len(gen.calls)
    report["precheck_files"] = sorted(p.name for p in (tiny / "store-a").iterdir())

    # 2. Outputs far longer than the estimate fill the disk mid-job.
    class Verbose(FakeGenerator):
        def generate(self, prompts, max_new_tokens, stop=()):
            return [p * 40 for p in prompts]

    gen = Verbose()
    prompts = [f"prompt {i} " + "word " * 10 for i in range(400)]
    try:
        with GenerationStore(tiny / "store-b", "job") as store:
            store.generate(gen, prompts, 8, [], batch_size=4)
    except StoreError as err:
        report["midjob"] = str(err)
    report["midjob_batches"] = len(gen.calls)
    report["midjob_rows"] = count_rows(tiny / "store-b")
    report["midjob_files"] = sorted(p.name for p in (tiny / "store-b").iterdir())
    # What was committed is whole and served.
    with GenerationStore(tiny / "store-b", "job-again") as store:
        again = Verbose()
        outs = store.generate(again, prompts[:4], 8, [], batch_size=4)
        report["served_after"] = store.stats["generate"]["served"]
        report["served_right"] = outs == Verbose().generate(prompts[:4], 8)

    # 3. A result file under results/ on the full disk.
    target = tiny / "results" / "table.md"
    try:
        write_text("x" * 10_000_000, target)
    except OSError as err:
        report["results"] = str(err)
    import numpy as np, polars as pl
    from llm_utility.io import write_parquet
    try:  # polars words it its own way (a ComputeError)
        write_parquet(pl.DataFrame({"x": np.random.default_rng(0).random(500_000)}), tiny / "results" / "t.parquet")
    except OSError as err:
        report["parquet"] = str(err)
    report["results_files"] = sorted(p.name for p in target.parent.iterdir())
    print(json.dumps(report))
    """)


def test_a_full_file_system_says_so_and_leaves_nothing_half_written(tmp_path):
    """On a real 1 MiB file system (tmpfs, mounted in a user namespace; skipped where that is not
    allowed): the free-space check, a disk that fills mid-job, and a result file."""
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: cannot mount a small file system here")
    probe = subprocess.run(
        ["unshare", "-rm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(tiny)], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {probe.stderr.decode().strip()}")
    command = f"mount -t tmpfs -o size=1m tmpfs {tiny} && exec {sys.executable} {script} {tiny}"
    out = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # 1. Named before anything is computed; the empty shard is gone.
    assert (
        "need about" in report["precheck"]
        and "MiB free" in report["precheck"]
        and str(tiny / "store-a") in report["precheck"]
    )
    assert report["precheck_calls"] == 0 and report["precheck_files"] == []
    # 2. The path and the cause, not "cannot rollback"; only whole batches stay, sealed and served.
    message = report["midjob"]
    assert (
        "file system is full" in message and "database or disk is full" in message and "cannot rollback" not in message
    )
    assert str(tiny / "store-b") in message and ".open.sqlite" in message
    assert 0 < report["midjob_rows"] < 400 and report["midjob_rows"] % 4 == 0
    assert report["midjob_rows"] >= 4 * (report["midjob_batches"] - 1)
    assert not any(name.endswith((".open.sqlite", "-journal")) for name in report["midjob_files"])
    assert report["served_after"] == 4 and report["served_right"]
    # 3. The result file's own path and the cause; no temporary file left.
    assert str(tiny / "results" / "table.md") in report["results"] and "No space left on device" in report["results"]
    assert str(tiny / "results" / "t.parquet") in report["parquet"] and "No space left on device" in report["parquet"]
    assert report["results_files"] == []


def test_a_store_folder_that_cannot_be_written_names_the_file(tmp_path, monkeypatch):
    # The shard's name taken by a directory: SQLite cannot open it (SQLITE_CANTOPEN).
    monkeypatch.setattr(shard, "new_token", lambda: "20260101T000000-000000000000")
    (tmp_path / "job.20260101T000000-000000000000.open.sqlite").mkdir()
    with pytest.raises(
        StoreError, match=r"job\.20260101T000000-000000000000\.open\.sqlite: creating the shard failed .*writable"
    ):
        GenerationStore(tmp_path, "job")
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    with pytest.raises(StoreError, match=rf"generation store folder {not_a_folder / 'm'} cannot be created"):
        GenerationStore(not_a_folder / "m", "job")
