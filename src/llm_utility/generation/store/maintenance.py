"""Keeping a generation store sound: ``verify`` checks every shard and row, ``compact`` merges shards,
``migrate`` rewrites shards of schema version 2. Each is also a command,
``python -m llm_utility.generation.store {verify,compact,migrate} <store_dir>/<llm>...``.
Run ``compact`` and ``migrate`` when no job of any workflow sharing the store is running."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .keys import make_key, row_checksum
from .liveness import writer_is_dead
from .shard import (
    COLUMNS,
    INSERT,
    MAINTENANCE,
    StoreError,
    check_version,
    connect_immutable,
    is_open,
    new_token,
    open_writer,
    seal_dead_shard,
    shards,
    sqlite_errors,
    transaction,
    writer_of,
)

log = logging.getLogger("llm_utility.store")


def _writer_or_none(db: sqlite3.Connection) -> tuple | None:
    """The shard's writer, None when it has none or its table cannot be read."""
    with contextlib.suppress(sqlite3.Error):
        return writer_of(db)
    return None


@dataclass
class ShardReport:
    """What ``verify`` found in one shard: ``bad_keys`` fail their checksum or their key."""

    path: Path
    state: str  # "sealed", "open (writer gone)", "open (being written)"
    rows: int = 0
    bad_keys: list[str] = field(default_factory=list)
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None and not self.bad_keys


def _bad_rows(db: sqlite3.Connection) -> tuple[int, list[str]]:
    """(rows, keys of rows whose checksum, or whose key recomputed from its columns, does not match)."""
    rows, bad = 0, []
    for key, kind, fingerprint, backend, params, prompt, target, value, checksum in db.execute(
        "SELECT key, kind, fingerprint, backend, params, prompt, target, value, checksum FROM calls"
    ):
        rows += 1
        try:
            same_key = key == make_key(kind, fingerprint, backend, prompt, target, json.loads(params))
        except ValueError:
            same_key = False
        if checksum != row_checksum(key, value) or not same_key:
            bad.append(key)
    return rows, bad


def verify(root: str | os.PathLike) -> list[ShardReport]:
    """Check every shard of one model's store: the file (SQLite's integrity check), its schema
    version, and every row against its checksum and its key. Open shards of live writers change
    while read, so they are listed but not checked."""
    reports = []
    for path in shards(root):
        db = connect_immutable(path)
        if db is None:
            continue
        try:
            if is_open(path) and not writer_is_dead(path, _writer_or_none(db)):
                reports.append(ShardReport(path, "open (being written)"))
                continue
            report = ShardReport(path, "open (writer gone)" if is_open(path) else "sealed")
            try:
                check_version(db, path)
                with sqlite_errors(path, "checking the file"):
                    problems = [r for (r,) in db.execute("PRAGMA integrity_check")]
                    if problems != ["ok"]:
                        report.problem = "damaged file: " + "; ".join(problems[:3])
                    report.rows, report.bad_keys = _bad_rows(db)
            except StoreError as err:
                report.problem = str(err)
            reports.append(report)
        finally:
            db.close()
    return reports


def compact(root: str | os.PathLike, include_open: bool = False) -> Path | None:
    """Merge the sealed shards of ``root`` into one and delete them; return the merged file.

    Rows that fail their checksum are dropped (the next run computes them again). Run it when no
    job of this store is running: a job that started before keeps reading the files it opened.
    ``include_open`` also merges the open shards of writers that are gone (killed jobs whose shard
    no rerun sealed); those of live writers are left alone.
    """
    root = Path(root)
    inputs = []
    for path in shards(root):
        if is_open(path):
            if not include_open:
                continue
            db = connect_immutable(path)
            if db is None:
                continue
            try:
                alive = not writer_is_dead(path, _writer_or_none(db))
            finally:
                db.close()
            if alive:
                log.info("compact: %s is being written by a live job; left as it is", path.name)
                continue
            if Path(f"{path}-journal").exists():
                path = seal_dead_shard(path)
        inputs.append(path)
    if len(inputs) < 2:
        return None
    token = new_token()
    tmp = root / f".compact-{token}.tmp"
    out = open_writer(tmp)
    dropped = 0
    try:
        for path in inputs:
            src = connect_immutable(path)
            if src is None:
                continue
            try:
                check_version(src, path)
                with sqlite_errors(path, "reading it for compaction"):
                    rows = src.execute(f"SELECT {COLUMNS} FROM calls").fetchall()
            finally:
                src.close()
            good = [r for r in rows if r[12] == row_checksum(r[0], r[7])]
            dropped += len(rows) - len(good)
            with sqlite_errors(tmp, "writing the merged shard"), transaction(out):
                out.executemany(INSERT, good)
        with sqlite_errors(tmp, "writing the merged shard"):
            out.execute("VACUUM")
    except BaseException:
        out.close()
        tmp.unlink(missing_ok=True)
        raise
    out.close()
    if dropped:
        log.warning("compact %s: dropped %d call(s) that failed their checksum", root, dropped)
    merged = root / f"compacted.{token}.sqlite"
    os.replace(tmp, merged)
    for path in inputs:
        path.unlink(missing_ok=True)
    return merged


def migrate(root: str | os.PathLike) -> list[tuple[Path, int, int]]:
    """Rewrite the schema-version-2 shards of ``root`` (no checksums) in this version; return
    (new file, rows kept, rows dropped) for each. A row is kept when its key matches its columns;
    its value gets a checksum as it is, so a value damaged before the migration cannot be told.
    A shard SQLite finds damaged stops the migration with its name. Run it when no job of this
    store is running."""
    root = Path(root)
    done = []
    for path in shards(root):
        src = connect_immutable(path)
        if src is None:
            continue
        try:
            with sqlite_errors(path, "reading it for migration"):
                if src.execute("PRAGMA user_version").fetchone()[0] != 2:
                    continue
                problems = [r for (r,) in src.execute("PRAGMA integrity_check")]
                if problems != ["ok"]:
                    raise StoreError(
                        f"generation store file {path} is damaged ({problems[0]}): delete it (its calls are recomputed)"
                    )
                old = src.execute(
                    "SELECT key, kind, fingerprint, backend, params, prompt, target, value, prompt_tokens, "
                    "output_tokens, seconds, created FROM calls"
                ).fetchall()
        finally:
            src.close()
        rows = [
            (*r, row_checksum(r[0], r[7]))
            for r in old
            if r[0] == make_key(r[1], r[2], r[3], r[5], r[6], json.loads(r[4]))
        ]
        match = re.match(r"^(?P<job>.+?)(\.open|\.\d{8}T\d{6}-[0-9a-f]{8})\.sqlite$", path.name)
        job = match["job"] if match else path.stem
        token = new_token()
        tmp = root / f".migrate-{token}.tmp"
        out = open_writer(tmp)
        try:
            with sqlite_errors(tmp, "writing the migrated shard"), transaction(out):
                out.executemany(INSERT, rows)
        except BaseException:
            out.close()
            tmp.unlink(missing_ok=True)
            raise
        out.close()
        new = root / f"{job}.{token}.sqlite"
        os.replace(tmp, new)
        path.unlink()
        done.append((new, len(rows), len(old) - len(rows)))
    return done


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llm_utility.generation.store {verify,compact,migrate} <store_dir>/<llm>...``"""
    import argparse

    parser = argparse.ArgumentParser(prog=MAINTENANCE, description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("compact", help="merge a model's sealed shards into one file (when no job runs)")
    cmd.add_argument("--include-open", action="store_true", help="also merge the shards of killed jobs")
    ver = sub.add_parser("verify", help="check every shard and row; exit status 1 if anything is bad")
    mig = sub.add_parser("migrate", help="rewrite schema-version-2 shards with checksums (when no job runs)")
    for p in (cmd, ver, mig):
        p.add_argument(
            "root", nargs="+", help="a model's store directory, e.g. resources/cache/generation/smollm2-135m"
        )
    args = parser.parse_args(argv)
    status = 0
    try:
        for root in args.root:
            if not Path(root).is_dir():
                print(f"{root}: not a directory")
                status = 1
            elif args.command == "compact":
                merged = compact(root, include_open=args.include_open)
                print(f"{root}: {'merged into ' + merged.name if merged else 'nothing to merge'}")
            elif args.command == "migrate":
                for new, kept, dropped in migrate(root):
                    print(f"{root}: migrated into {new.name}: {kept} calls kept, {dropped} dropped (key mismatch)")
            else:
                for report in verify(root):
                    if report.problem:
                        status = 1
                        print(f"BAD  {report.path}: {report.problem}")
                    elif report.bad_keys:
                        status = 1
                        print(
                            f"BAD  {report.path}: {len(report.bad_keys)} of {report.rows} calls fail their checksum "
                            f"(recomputed by the next run; `compact` drops them): {', '.join(report.bad_keys[:5])}"
                        )
                    elif report.state == "open (being written)":
                        print(f"LIVE {report.path}: being written by a running job, not checked")
                    else:
                        print(f"ok   {report.path}: {report.rows} calls ({report.state})")
    except StoreError as err:
        print(f"error: {err}")
        return 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
