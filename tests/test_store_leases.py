"""The writers' protocol of the generation store (``generation.store.leases``), on its own: leases
seen by other writers and dropped, the leases of gone writers ignored, the patience, and two writers
that lease one key at once settling on the smaller token. tests/test_store.py runs it end to end
(concurrent jobs, two workflows on one store, a writer on another host)."""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from llm_utility.generation.store import liveness, shard
from llm_utility.generation.store.leases import Leases
from llm_utility.generation.store.peers import OtherShards

SMALL, LARGE, THIRD = "20260101T000000-000000000001", "20260101T000000-000000000002", "20260101T000000-000000000003"


@pytest.fixture
def open_writer(tmp_path):
    """A writer's open shard in one store folder and its Leases, by token; closed at the end."""
    dbs: list[sqlite3.Connection] = []

    def make(token: str) -> tuple[Leases, sqlite3.Connection, Path]:
        path = tmp_path / f"job.{token}{shard.OPEN}"
        db = shard.open_writer(path)
        dbs.append(db)
        return Leases(db, path, token, OtherShards(tmp_path, path)), db, path

    yield make
    for db in dbs:
        db.close()


def test_a_lease_is_seen_by_the_other_writers_until_it_is_replaced_or_released(open_writer):
    a, _, _ = open_writer(SMALL)
    b, _, _ = open_writer(LARGE)
    before = time.time()
    a.take(["k1", "k2"])
    seen = b.of_others()
    assert set(seen) == {"k1", "k2"} and {token for token, _ in seen.values()} == {SMALL}
    assert all(before <= when <= time.time() for _, when in seen.values())
    assert a.of_others() == {}  # a writer's own leases are not another's
    a.take(["k3"])  # the next batch replaces the last
    assert set(b.of_others()) == {"k3"}
    a.release()
    assert b.of_others() == {}


def test_storing_a_batch_drops_its_lease_in_the_same_commit(open_writer):
    a, db, _ = open_writer(SMALL)
    b, _, _ = open_writer(LARGE)
    a.take(["k1"])
    with shard.transaction(db):
        db.execute("INSERT INTO writer VALUES ('stand-in', 'for', 'a', 0, 'row')")
        a.drop_in_transaction()
        assert set(b.of_others()) == {"k1"}  # not committed yet: still leased
    assert b.of_others() == {}


def test_several_writers_leasing_one_key_show_the_smallest_token_and_the_earliest_time(open_writer):
    first, _, _ = open_writer(LARGE)
    second, _, _ = open_writer(SMALL)
    reader, _, _ = open_writer(THIRD)
    first.take(["k"])
    time.sleep(0.01)
    second.take(["k"])
    ((token, when),) = reader.of_others().values()
    assert token == SMALL and when <= time.time() - 0.01


def test_the_leases_of_a_writer_that_is_gone_do_not_count(open_writer):
    a, db, _ = open_writer(SMALL)
    b, _, _ = open_writer(LARGE)
    a.take(["k"])
    assert set(b.of_others()) == {"k"}
    # The writer row now names a process of this machine that has ended (its pid no longer runs).
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert liveness.on_this_machine(liveness.this_process())
    db.execute("UPDATE writer SET pid = ?", (ended.pid,))
    c, _, _ = open_writer(THIRD)  # a new reader (each reads a shard's writer once: it never changes)
    assert c.of_others() == {}


def test_a_lease_holds_for_the_patience_which_grows_with_the_slowest_batch(open_writer, monkeypatch):
    b, _, _ = open_writer(LARGE)
    now = time.time()
    assert not b.holds(None)
    assert b.holds((SMALL, now)) and b.patience == liveness.STALE_SECONDS
    assert not b.holds((SMALL, now - liveness.STALE_SECONDS - 1))
    b.note_batch(liveness.STALE_SECONDS)  # a batch as slow as that: four of them are waited for
    assert b.patience == 4 * liveness.STALE_SECONDS and b.holds((SMALL, now - liveness.STALE_SECONDS - 1))
    c, _, _ = open_writer(THIRD)
    monkeypatch.setattr(liveness, "STALE_SECONDS", 1.0)  # read when asked
    c.note_batch(0.1)
    assert c.patience == 1.0 and not c.holds((SMALL, now - 1.5))


def test_two_writers_that_lease_a_key_at_once_settle_on_the_smaller_token(open_writer):
    small, _, _ = open_writer(SMALL)
    large, _, _ = open_writer(LARGE)
    small.take(["k", "only-small"])
    large.take(["k", "only-large"])
    # Each committed its lease before reading the other's: both see the clash on k.
    seen_by_small, seen_by_large = small.of_others(), large.of_others()
    assert large.yields_to(seen_by_large["k"]) and not large.yields_to(seen_by_large.get("only-large"))
    assert not small.yields_to(seen_by_small["k"]) and small.holds(seen_by_small["k"])  # small waits
    large.take(["only-large"])  # large gives k up
    looks = []
    small.wait_until_released(["k"], lambda: looks.append(1))
    assert looks == [1] and "k" not in small.of_others()


def test_waiting_ends_when_the_lease_outlasts_the_patience(open_writer, monkeypatch):
    monkeypatch.setattr(liveness, "STALE_SECONDS", 0.2)
    small, _, _ = open_writer(SMALL)
    large, _, _ = open_writer(LARGE)
    large.take(["k"])  # and never gives it up (a hung writer that still touches its shard)
    started = time.monotonic()
    small.wait_until_released(["k"], lambda: time.sleep(0.05))
    assert 0.15 < time.monotonic() - started < 5
    assert "k" in small.of_others()  # still leased, no longer holding


def test_leases_live_in_the_table_schema_version_3_named_claims(open_writer):
    """Writers of every release of schema version 3 share a store: a lease written as the releases
    before the rename wrote it is seen, and the table keeps its name and columns."""
    a, db, path = open_writer(SMALL)
    b, _, _ = open_writer(LARGE)
    db.execute("INSERT INTO claims (key, claimed) VALUES ('k', ?)", (time.time(),))
    assert set(b.of_others()) == {"k"}
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'claims'").fetchone()[0]
    assert sql == "CREATE TABLE claims (key TEXT PRIMARY KEY, claimed REAL NOT NULL)"
    assert db.execute("PRAGMA user_version").fetchone()[0] == shard.SCHEMA_VERSION == 3
