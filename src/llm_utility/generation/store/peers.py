"""What other writers hold: the sealed shards (opened once, read-only and immutable: nothing writes
them) and the open shards of other writers (live jobs of other workflows, killed jobs), read afresh
at each look while they change.

A page of an open shard read in the middle of its writer's commit, or a stale page from a network
file system's cache, can hide rows or make SQLite report an error (the shard is then skipped until
the next look), but it cannot serve a wrong value: a row is served only when its checksum matches.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import liveness
from .keys import row_checksum
from .shard import (
    MAINTENANCE,
    SCHEMA_VERSION,
    StoreError,
    check_version,
    connect_immutable,
    is_open,
    seal_dead_shard,
    shards,
    sqlite_errors,
    version_message,
    writer_of,
)

log = logging.getLogger("llm_utility.store")

LOOKUP_CHUNK = 500  # keys per SELECT ... IN (...), well under SQLite's variable limit
PEER_READ_TRIES = 5  # reads of another writer's open shard caught mid-commit, before giving up for now


def select_verified(db: sqlite3.Connection, keys: Sequence[str]) -> tuple[dict[str, str], int]:
    """(the values of ``keys`` in one shard whose rows match their checksum, how many rows did not)."""
    found: dict[str, str] = {}
    bad = 0
    for i in range(0, len(keys), LOOKUP_CHUNK):
        chunk = keys[i : i + LOOKUP_CHUNK]
        marks = ",".join("?" * len(chunk))
        for key, value, checksum in db.execute(f"SELECT key, value, checksum FROM calls WHERE key IN ({marks})", chunk):
            if checksum == row_checksum(key, value):
                found[key] = value
            else:
                bad += 1
    return found, bad


def warn_bad_rows(path: Path, n: int) -> None:
    log.warning(
        "generation store file %s: %d stored call(s) fail their checksum (changed on disk) and are "
        "computed again; `%s verify %s` lists them, `compact` drops them",
        path,
        n,
        MAINTENANCE,
        path.parent,
    )


class OtherShards:
    """The shards of the store at ``root`` other than this writer's own (``own``)."""

    def __init__(self, root: Path, own: Path) -> None:
        self.root = root
        self.own = own
        self.sealed: dict[Path, sqlite3.Connection] = {}
        self._last_rowid: dict[Path, int] = {}  # the last row read of each other writer's open shard
        self._writers: dict[Path, tuple | None] = {}
        self._warned: set[Path] = set()

    def close(self) -> None:
        for db in self.sealed.values():
            db.close()

    # -- sealed shards -------------------------------------------------------------------------------

    def open_new_sealed(self) -> list[Path]:
        """Open the sealed shards not opened yet (other jobs seal while this one runs); return them."""
        new = []
        for path in shards(self.root):
            if is_open(path) or path in self.sealed:
                continue
            db = connect_immutable(path)
            if db is None:  # removed by a compaction since the listing
                continue
            try:
                check_version(db, path)
            except BaseException:
                db.close()
                raise
            self.sealed[path] = db
            new.append(path)
        return new

    def select_sealed(self, path: Path, keys: Sequence[str]) -> dict[str, str]:
        """Verified values of ``keys`` in the sealed shard ``path`` (a failed checksum is warned of)."""
        with sqlite_errors(path, "reading a stored call"):
            found, bad = select_verified(self.sealed[path], keys)
        if bad:
            warn_bad_rows(path, bad)
        return found

    # -- other writers' open shards ------------------------------------------------------------------

    def open_shards(self) -> list[Path]:
        return [p for p in shards(self.root) if is_open(p) and p != self.own]

    def read_open(self, path: Path, read: Callable[[sqlite3.Connection], Any]) -> Any:
        """``read(db)`` on a fresh connection to another writer's open shard; None when it cannot
        be read now. A read caught in the middle of that writer's commit fails (SQLite errors are
        expected there), so it is tried again a few times before it is given up until the next look;
        a shard being created reads as version 0."""
        for attempt in range(PEER_READ_TRIES):
            if attempt:
                time.sleep(0.005 * attempt)
            db = connect_immutable(path)
            if db is None:  # sealed or removed meanwhile
                return None
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version == SCHEMA_VERSION:
                    return read(db)
                if version != 0:
                    raise StoreError(version_message(path, version))
            except sqlite3.DatabaseError as err:
                error = err
            else:
                error = None
            finally:
                db.close()
        if error is not None and path not in self._warned:
            self._warned.add(path)
            log.info("open shard %s of another writer not readable now (%s); it is read again later", path, error)
        return None

    def writer(self, path: Path, db: sqlite3.Connection) -> tuple | None:
        """The writer of an open shard (read once: it never changes)."""
        if path not in self._writers:
            self._writers[path] = writer_of(db)
        return self._writers[path]

    def writer_is_dead(self, path: Path, db: sqlite3.Connection) -> bool:
        return liveness.writer_is_dead(path, self.writer(path, db))

    def adopt_dead_shards(self) -> None:
        """Seal the open shards of writers that ran on this machine and are gone (killed jobs), so
        they are read as sealed shards. Only where their death is certain: elsewhere they stay open
        (and are read as such) until ``compact(include_open=True)``."""
        for path in self.open_shards():
            writer = self.read_open(path, lambda db, path=path: self.writer(path, db))
            if writer is None or not liveness.on_this_machine(writer) or liveness.process_alive(writer[3], writer[4]):
                continue
            with contextlib.suppress(FileNotFoundError):  # another job adopted it first
                seal_dead_shard(path)
                log.info("sealed %s: its writer (pid %s on this machine) is gone", path.name, writer[3])
        self.open_new_sealed()

    # -- looking up calls ----------------------------------------------------------------------------

    def lookup(self, keys: Sequence[str], found: dict[str, str]) -> dict[str, str]:
        """Add to ``found`` the verified values of the other ``keys`` that a sealed shard holds, then
        those another writer's open shard holds (shards in that order: the first to hold a key serves
        it). Marks where each open shard was read to, for ``news``."""
        self.open_new_sealed()
        for path in self.sealed:
            wanted = [k for k in keys if k not in found]
            if not wanted:
                return found
            found.update(self.select_sealed(path, wanted))
        for path in self.open_shards():
            wanted = [k for k in keys if k not in found]
            if not wanted:
                break

            def read(db: sqlite3.Connection, wanted: list[str] = wanted) -> tuple[int, dict[str, str]]:
                last = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM calls").fetchone()[0]
                # Another writer's rows read mid-commit fail their checksum too: no warning for them.
                return last, select_verified(db, wanted)[0]

            got = self.read_open(path, read)
            if got is not None:
                last, values = got
                found.update(values)
                self._last_rowid[path] = max(self._last_rowid.get(path, 0), last)
        return found

    def news(self, wanted: set[str]) -> dict[str, str]:
        """Verified values of ``wanted`` keys that other writers stored since the last look: rows
        appended to their open shards and shards sealed since."""
        found: dict[str, str] = {}
        for path in self.open_new_sealed():
            found.update(self.select_sealed(path, [k for k in wanted if k not in found]))
        for path in self.open_shards():
            last = self._last_rowid.get(path, 0)
            rows = self.read_open(
                path,
                lambda db, last=last: db.execute(
                    "SELECT rowid, key, value, checksum FROM calls WHERE rowid > ?", (last,)
                ).fetchall(),
            )
            if rows is not None:
                for rowid, key, value, checksum in rows:
                    last = max(last, rowid)
                    if key in wanted and key not in found and checksum == row_checksum(key, value):
                        found[key] = value
                self._last_rowid[path] = last
        return found
