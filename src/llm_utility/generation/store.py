"""The generation store: every LLM call, computed once, kept in SQLite.

One file per model. A row is keyed by sha256 over (model fingerprint, backend, rendered prompt,
decoding parameters), so a prompt asked for by two rules, or by a rerun, is served instead of
recomputed. Missing prompts are computed in batches, each committed in its own transaction as soon
as it finishes: a killed job loses at most the batch in flight. WAL mode and a busy timeout let
several processes (parallel Snakemake jobs) read and write the same file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS generations (
    key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    backend TEXT NOT NULL,
    params TEXT NOT NULL,
    prompt TEXT NOT NULL,
    output TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    created REAL NOT NULL
)
"""
_LOOKUP_CHUNK = 500  # keys per SELECT ... IN (...), well under SQLite's variable limit


class SupportsGenerate(Protocol):
    """The part of a generator (``models.Generator``) that the store uses."""

    fingerprint: str
    backend: str

    def count_tokens(self, prompts: Sequence[str]) -> list[int]: ...

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = ()) -> list[str]: ...


def decoding_params(generator: Any, max_new_tokens: int, stop: Iterable[str]) -> dict[str, Any]:
    """The decoding parameters that are part of a key. The dtype changes outputs, so it is one."""
    return {
        "decoding": "greedy",
        "max_new_tokens": int(max_new_tokens),
        "stop": sorted(set(stop)),  # a set of strings: order and repeats do not change outputs
        "dtype": getattr(generator, "dtype", None),
    }


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def make_key(fingerprint: str, backend: str, prompt: str, params: dict[str, Any]) -> str:
    """sha256 hex key of one generation."""
    return hashlib.sha256(canonical_json([fingerprint, backend, prompt, params]).encode("utf-8")).hexdigest()


class GenerationStore:
    """A SQLite-backed cache of greedy generations (see the module docstring).

    ``stats`` counts, since this instance was opened, the unique prompts ``made`` (computed by the
    model) and ``served`` (found in the store, including rows another process wrote meanwhile).
    """

    def __init__(self, path: str | os.PathLike, timeout: float = 120.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: transactions are opened explicitly, one per committed batch.
        self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        self._db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        self._setup(timeout)
        self.stats: dict[str, int] = {"made": 0, "served": 0}
        self._seconds = 0.0

    def _setup(self, timeout: float) -> None:
        """WAL mode and the table. Switching to WAL can answer SQLITE_BUSY without waiting for the
        busy timeout while another process opens the same new file, so retry for a while."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                # NORMAL is durable across process kills in WAL mode; a power cut may drop the last commits.
                self._db.execute("PRAGMA synchronous = NORMAL")
                self._db.execute(_SCHEMA)
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # -- lookups -------------------------------------------------------------------------------------

    def lookup(self, keys: Sequence[str]) -> dict[str, str]:
        """Outputs of those ``keys`` that are stored."""
        found: dict[str, str] = {}
        for i in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = list(keys[i : i + _LOOKUP_CHUNK])
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(f"SELECT key, output FROM generations WHERE key IN ({marks})", chunk)
            found.update(rows.fetchall())
        return found

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM generations").fetchone()[0]

    # -- generation ----------------------------------------------------------------------------------

    def generate(
        self,
        generator: SupportsGenerate,
        prompts: Sequence[str],
        max_new_tokens: int,
        stop: Sequence[str] = (),
        batch_size: int = 16,
        desc: str = "",
    ) -> list[str]:
        """Outputs for rendered ``prompts``, in input order: served from the store or computed.

        Unique missing prompts are sorted by token length (longest first, so batches pad little and
        an out-of-memory error shows up in the first batch) and computed ``batch_size`` at a time;
        each batch is committed on its own.
        """
        started = time.perf_counter()
        params = decoding_params(generator, max_new_tokens, stop)
        params_json = canonical_json(params)
        unique = list(dict.fromkeys(prompts))
        keys = {p: make_key(generator.fingerprint, generator.backend, p, params) for p in unique}
        stored = self.lookup(list(keys.values()))
        outputs = {p: stored[k] for p, k in keys.items() if k in stored}
        self.stats["served"] += len(outputs)
        missing = [p for p in unique if p not in outputs]
        if missing:
            lengths = dict(zip(missing, generator.count_tokens(missing)))
            missing.sort(key=lambda p: -lengths[p])  # stable: ties keep input order
            with tqdm(total=len(missing), desc=desc or "generate", unit="prompt", dynamic_ncols=True) as bar:
                for i in range(0, len(missing), batch_size):
                    batch = missing[i : i + batch_size]
                    # Another job may have made some of these meanwhile (same prompt, parallel rules).
                    done = self.lookup([keys[p] for p in batch])
                    for p in batch:
                        if keys[p] in done:
                            outputs[p] = done[keys[p]]
                    self.stats["served"] += sum(keys[p] in done for p in batch)
                    todo = [p for p in batch if keys[p] not in done]
                    if todo:
                        made = generator.generate(todo, max_new_tokens, stop)
                        if len(made) != len(todo):
                            raise RuntimeError(f"generator returned {len(made)} outputs for {len(todo)} prompts")
                        self._insert(generator, todo, made, keys, lengths, params_json)
                        outputs.update(zip(todo, made))
                        self.stats["made"] += len(todo)
                    bar.update(len(batch))
        self._seconds += time.perf_counter() - started
        return [outputs[p] for p in prompts]

    def _insert(
        self,
        generator: SupportsGenerate,
        prompts: Sequence[str],
        outputs: Sequence[str],
        keys: dict[str, str],
        lengths: dict[str, int],
        params_json: str,
    ) -> None:
        now = time.time()
        rows = [
            (keys[p], generator.fingerprint, generator.backend, params_json, p, out, int(lengths[p]), now)
            for p, out in zip(prompts, outputs)
        ]
        # BEGIN IMMEDIATE takes the write lock up front, so a busy database waits (busy_timeout)
        # here instead of failing halfway. OR IGNORE: a concurrent job may have stored the same key.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT OR IGNORE INTO generations VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    # -- reporting -----------------------------------------------------------------------------------

    def summary(self) -> str:
        """One line for logs: prompts made and served, time spent, rows in the file."""
        made, served = self.stats["made"], self.stats["served"]
        return (
            f"{made} made, {served} served from the store ({made + served} unique prompts) "
            f"in {self._seconds:.1f} s; {len(self)} rows in {self.path}"
        )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> GenerationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
