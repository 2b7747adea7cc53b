"""One shard: a writer's SQLite file of stored calls. Its name, its schema, how it is created (a
rollback journal, no locking: its writer is its only writer), opened read-only by everyone else
(``immutable``: no lock, no shared memory, safe on network file systems), sealed, listed and counted,
and every SQLite error raised as a ``StoreError`` that names the file and the way out.

Names: ``<job>.<token>.open.sqlite`` while its job writes it, ``<job>.<token>.sqlite`` once sealed;
the token (UTC time and 48 random bits) is new for every opening, so no two writers share a file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import liveness

# Version 3 added the row checksum, the lease table and the writer of each shard.
SCHEMA_VERSION = 3
# The statements' text is stored in each file (sqlite_master): kept as version 3 wrote it.
SCHEMA = (
    """
    CREATE TABLE calls (
        key TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        backend TEXT NOT NULL,
        params TEXT NOT NULL,
        prompt TEXT NOT NULL,
        target TEXT NOT NULL,
        value TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        seconds REAL NOT NULL,
        created REAL NOT NULL,
        checksum TEXT NOT NULL
    )
    """,
    # The keys this writer is computing now (one batch), and when it leased them (leases.py: the
    # table keeps the name version 3 gave it, so writers of every version 3 release see each other).
    "CREATE TABLE claims (key TEXT PRIMARY KEY, claimed REAL NOT NULL)",
    # Who writes the shard: lets a job on the same machine tell whether that process still runs.
    "CREATE TABLE writer (host TEXT NOT NULL, boot TEXT NOT NULL, pidns TEXT NOT NULL, pid INTEGER NOT NULL, "
    "started TEXT NOT NULL)",
)
COLUMNS = (
    "key, kind, fingerprint, backend, params, prompt, target, value, prompt_tokens, output_tokens, seconds, created, "
    "checksum"
)
INSERT = f"INSERT OR IGNORE INTO calls ({COLUMNS}) VALUES ({','.join('?' * 13)})"
OPEN = ".open.sqlite"
JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")
_TOKEN = r"\d{8}T\d{6}-[0-9a-f]{12}"
SHARD_NAME = re.compile(rf"^(?P<job>.+)\.(?P<token>{_TOKEN})(?P<open>\.open)?\.sqlite$")
MAINTENANCE = "python -m llm_utility.generation.store"


class StoreError(RuntimeError):
    """A store file that cannot be used; the message names it and says how to recover."""


def new_token() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:12]


def is_open(path: Path) -> bool:
    return path.name.endswith(OPEN)


def sealed_path(path: Path) -> Path:
    """The name of an open shard once sealed."""
    return path.with_name(path.name[: -len(OPEN)] + ".sqlite")


def shards(root: str | os.PathLike) -> list[Path]:
    """Every shard file of one model's store, sealed and open."""
    return sorted(Path(root).glob("*.sqlite"))


# ---------------------------------------------------------------------------------------------------
# Errors that name the file and the way out


def recovery(path: Path) -> str:
    return (
        f"run `{MAINTENANCE} verify {path.parent}`, then delete {path} or move it "
        f"aside (the calls it holds are recomputed on the next run)"
    )


def version_message(path: Path, version: Any) -> str:
    if version == 2:
        return (
            f"generation store file {path} has schema version 2 (no checksums), this code reads version "
            f"{SCHEMA_VERSION}: when no job of this store runs, `{MAINTENANCE} migrate "
            f"{path.parent}` adds checksums to its rows (values damaged before cannot be told), or delete it "
            f"(its calls are recomputed)"
        )
    return (
        f"generation store file {path} has schema version {version}, this code reads version {SCHEMA_VERSION}: "
        f"delete it or move it aside (its calls are recomputed on the next run)"
    )


def free_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def mib(n: int | float) -> str:
    return f"{n / 2**20:.1f} MiB"


def os_cause(err: OSError) -> str:
    return os.strerror(err.errno) if err.errno else str(err)


@contextlib.contextmanager
def sqlite_errors(path: Path, doing: str) -> Iterator[None]:
    """Raise every SQLite error as a StoreError naming ``path``, what was being done, the cause and
    the remedy (a full file system is named as such, whatever SQLite reports)."""
    try:
        yield
    except sqlite3.Error as err:
        name = getattr(err, "sqlite_errorname", "") or ""
        free = free_bytes(path.parent)
        # A full disk can also surface as a failed write or a journal that cannot be created.
        nearly_full = free is not None and free < 1 << 20
        if name == "SQLITE_FULL" or (nearly_full and name.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN"))):
            raise StoreError(
                f"generation store file {path}: {doing} failed: the file system is full ({err}; "
                f"{mib(free or 0)} free). Free space there or set store_dir to a larger file system; every "
                f"batch committed before is kept, and the next run resumes from it"
            ) from None
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
            raise StoreError(
                f"generation store file {path} is corrupt ({err}) while {doing}: {recovery(path)}"
            ) from None
        if name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_IOERR")):
            raise StoreError(
                f"generation store file {path}: {doing} failed ({err}): check that its folder is writable and its "
                f"file system mounted"
            ) from None
        raise StoreError(f"generation store file {path}: {doing} failed ({err}): {recovery(path)}") from None


def check_free_space(root: Path, kind: str, n_calls: int, need: int) -> None:
    """Stop before computing when the store's file system cannot hold the ``need`` bytes of rows."""
    free = free_bytes(root)
    if free is not None and free < need:
        raise StoreError(
            f"generation store {root}: the {n_calls} {kind} calls this job computes need about "
            f"{mib(need)} there, and its file system has {mib(free)} free: free space on it, or set "
            f"store_dir to a larger file system (nothing was computed or written)"
        )


# ---------------------------------------------------------------------------------------------------
# Opening, creating, sealing


def connect_immutable(path: Path) -> sqlite3.Connection | None:
    """A read-only connection that takes no lock and reads no journal; None if the file is gone."""
    try:
        # mode=ro: never create the file (another writer may have just sealed or removed it)
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.OperationalError:
        if not path.exists():
            return None
        with sqlite_errors(path, "opening the shard"):
            raise


def check_version(db: sqlite3.Connection, path: Path) -> None:
    """The shard is a store file of this schema version."""
    with sqlite_errors(path, "opening the shard"):
        version = db.execute("PRAGMA user_version").fetchone()[0]
        has_table = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'calls'").fetchone()
    if version != SCHEMA_VERSION or not has_table:
        raise StoreError(version_message(path, version))


def writer_of(db: sqlite3.Connection) -> tuple | None:
    """The shard's `writer` row (``liveness.Writer``), None when it has none (a merged file)."""
    row = db.execute("SELECT host, boot, pidns, pid, started FROM writer").fetchone()
    return tuple(row) if row else None


def open_writer(path: Path) -> sqlite3.Connection:
    """A new shard for this writer: rollback journal (atomic commits on any file system), no locking
    (``unix-none``: this writer is its only writer), created with the schema."""
    db = None
    try:
        with sqlite_errors(path, "creating the shard"):
            db = sqlite3.connect(f"{path.resolve().as_uri()}?vfs=unix-none", uri=True, isolation_level=None)
            db.execute("PRAGMA journal_mode = DELETE")
            # NORMAL survives a killed process; a power cut may lose the last commits, never corrupt.
            db.execute("PRAGMA synchronous = NORMAL")
            with transaction(db):
                for statement in SCHEMA:
                    db.execute(statement)
                if is_open(path):
                    db.execute("INSERT INTO writer VALUES (?, ?, ?, ?, ?)", liveness.this_process())
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        # The file is new (its name is unique): leave nothing of it behind.
        if db is not None:
            db.close()
        for leftover in (path, Path(f"{path}-journal")):
            with contextlib.suppress(OSError):
                leftover.unlink(missing_ok=True)
        raise
    return db


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        # SQLite rolls back by itself after some errors (a full disk among them): a second rollback
        # would fail and hide the cause.
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        raise


def seal_dead_shard(path: Path) -> Path:
    """Seal the open shard of a writer that is gone: roll back the commit it was killed in (if any,
    with SQLite's own locking, in case two jobs do this at once), then rename it."""
    if Path(f"{path}-journal").exists():
        with sqlite_errors(path, "rolling back the commit its writer was killed in"):
            db = sqlite3.connect(path)
            try:
                db.execute("SELECT COUNT(*) FROM calls").fetchone()
            finally:
                db.close()
    sealed = sealed_path(path)
    os.rename(path, sealed)
    return sealed


def count_rows(root: str | os.PathLike, kind: str | None = None) -> int:
    """Distinct keys over all shards of ``root`` (of one ``kind``, if given)."""
    keys: set[str] = set()
    for path in shards(root):
        db = connect_immutable(path)
        if db is None:
            continue
        try:
            with sqlite_errors(path, "counting stored calls"):
                where = " WHERE kind = ?" if kind else ""
                keys.update(k for (k,) in db.execute(f"SELECT key FROM calls{where}", (kind,) if kind else ()))
        finally:
            db.close()
    return len(keys)
