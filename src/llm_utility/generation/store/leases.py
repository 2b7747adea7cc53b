"""The writers' protocol: two writers that need the same calls at the same time split them.

Before a writer computes a batch it commits a *lease* on the batch's keys in its own shard; the
other writers skip keys under the lease of a live writer (``liveness``) and take them over when that
writer dies or its lease outlasts the patience (``STALE_SECONDS``, or four times this writer's
slowest batch). A writer commits its lease before it reads the others', so of two writers leasing a
key at once at least one sees the other's lease; the key goes to the smaller token: the other gives
it up (``yields_to``), the smaller waits until the other's lease on it has gone (``holds``). Storing a
batch and dropping its lease are one transaction, so another writer sees a leased batch either
leased or stored. Where a network file system's caching hides a lease, or a live writer is taken for
dead, a call is computed twice, never served wrong.

On disk the leases are the table ``claims (key, claimed)`` of each shard, the names schema version
3 gave them: writers of every version-3 release share a store and see each other's leases.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import liveness
from .peers import OtherShards
from .shard import SHARD_NAME, StoreError, sqlite_errors, transaction

# A lease as other writers see it: (the smallest leasing writer's token, the earliest lease time).
Lease = tuple[str, float]


class Leases:
    """This writer's leases (in its shard ``db`` at ``path``, its name's ``token``) and what it
    makes of the other writers' (read through ``others``)."""

    def __init__(self, db: sqlite3.Connection, path: Path, token: str, others: OtherShards) -> None:
        self._db = db
        self._path = path
        self.token = token
        self._others = others
        self._slowest_batch = 0.0

    def take(self, keys: Sequence[str]) -> None:
        """Replace this writer's leases with ``keys`` (the batch it computes next), committed."""
        now = time.time()
        with sqlite_errors(self._path, "leasing a batch of calls"), transaction(self._db):
            self._db.execute("DELETE FROM claims")
            self._db.executemany("INSERT INTO claims (key, claimed) VALUES (?, ?)", [(k, now) for k in keys])

    def drop_in_transaction(self) -> None:
        """Drop this writer's leases inside the caller's transaction (the one storing the batch)."""
        self._db.execute("DELETE FROM claims")

    def release(self) -> None:
        """Drop this writer's leases (on an error, or closing): best effort, never raises."""
        with contextlib.suppress(sqlite3.Error, StoreError), transaction(self._db):
            self._db.execute("DELETE FROM claims")

    def of_others(self) -> dict[str, Lease]:
        """The keys live writers are leasing now."""
        leases: dict[str, Lease] = {}
        for path in self._others.open_shards():
            match = SHARD_NAME.match(path.name)
            if match is None:
                continue

            def read(db: sqlite3.Connection, path: Path = path) -> list[tuple[str, float]]:
                if self._others.writer_is_dead(path, db):
                    return []
                return db.execute("SELECT key, claimed FROM claims").fetchall()

            for key, leased in self._others.read_open(path, read) or []:
                token, first = leases.get(key, (match["token"], leased))
                leases[key] = (min(token, match["token"]), min(first, leased))
        return leases

    def note_batch(self, seconds: float) -> None:
        """A batch took ``seconds``: a lease is not given up on before four times the slowest."""
        self._slowest_batch = max(self._slowest_batch, seconds)

    @property
    def patience(self) -> float:
        return max(liveness.STALE_SECONDS, 4 * self._slowest_batch)

    def holds(self, lease: Lease | None) -> bool:
        """Whether another (live) writer's ``lease`` keeps this writer off the key: it is recent enough."""
        return lease is not None and time.time() - lease[1] <= self.patience

    def yields_to(self, lease: Lease | None) -> bool:
        """Whether this writer gives a key it leased too up to the writer of ``lease`` (the smaller token)."""
        return self.holds(lease) and lease[0] < self.token

    def wait_until_released(self, keys: Iterable[str], sleep) -> None:
        """Wait (``sleep()`` between looks) until no other writer's lease holds any of ``keys``."""
        waiting = set(keys)
        while waiting:
            sleep()
            leases = self.of_others()
            waiting = {k for k in waiting if self.holds(leases.get(k))}
