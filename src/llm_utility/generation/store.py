"""The generation store: every model call, computed once, kept in SQLite.

A model call is one of three kinds, all greedy and deterministic, so each is a pure function of its key:

- ``generate``: the output text of a rendered prompt;
- ``score``: the log-probability of each token of a given ``target`` after a rendered prompt
  (likelihood of a pseudo-answer, perplexity of a passage);
- ``attention``: the attention mass an answer's tokens put on each of several passages of a prompt.

A row is keyed by sha256 over (kind, model fingerprint, backend, rendered prompt, target, parameters),
so a call asked for by two rules, by a rerun, or by another workflow sharing the store is served
instead of recomputed. Each row also carries a checksum of its key and value, checked whenever it is
served: a row that fails it (bytes changed on disk) is a miss, computed again, with a warning that
names the file.

Layout: one directory per model, one SQLite file (a *shard*) per *writer*, i.e. per opening of a
``GenerationStore``. A writer's name is the job's (rule and wildcards) and a unique token (UTC time
and 48 random bits), so the same job run by two workflows, or run again, never shares a file:

- ``<job>.<token>.open.sqlite``: the shard a running job writes, in batches, each committed on its
  own (a rollback journal, no file locking: the writer is its only writer);
- ``<job>.<token>.sqlite``: *sealed*, renamed so when the job ends, never written again.

What a job reads, and why each is safe:

- sealed shards, with SQLite's ``immutable`` flag (no lock, no shared memory): safe on any file
  system, network ones included, since nothing writes them;
- the open shards of other writers (other workflows' live jobs, and killed jobs), read the same way
  while they change. A page read in the middle of another writer's commit, or a stale page from a
  network file system's cache, can hide rows or make SQLite report an error (the shard is then
  skipped until the next batch), but it cannot serve a wrong value: a row is served only when its
  checksum matches. So reading them needs no lock and is correct on NFS too; what it cannot promise
  there is *when* a row becomes visible (clients cache), which only costs recomputation.

Two writers that need the same calls at the same time split them: before computing a batch a writer
commits *claims* on its keys; the others skip keys claimed by a live writer (and take them over if
it dies: on the same machine its process is checked; elsewhere a writer whose shard has not changed
for ``STALE_SECONDS`` counts as dead, and a live one touches its shard every
``HEARTBEAT_SECONDS``). Each writer commits its claim before it reads the others', so of two
writers claiming a key at once at least one sees the other's claim; the key goes to the smaller
token (the other gives it up, the smaller waits until the other's claim has gone). Where a network
file system's caching hides a claim, or a writer is taken for dead, a call is computed twice, never
served wrong.

A killed job's rerun is a new writer: it is served what the killed one committed and, when the dead
writer ran on this machine, seals its shard. ``compact`` merges sealed shards (and, with
``include_open``, those of writers that are gone) into one; ``verify`` checks a whole store; both
are also commands: ``python -m llm_utility.generation.store_maintenance {verify,compact,migrate} <dir>``.

Every SQLite error is raised as ``StoreError`` naming the file, what failed (a full file system is
named as such) and how to recover. Before a job computes, the store checks that the free space of its
file system holds the rows the job will write (an estimate from the prompts and output limits).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

log = logging.getLogger("llm_utility.store")

# Version 3 added the row checksum, the claims and the writer of each shard.
SCHEMA_VERSION = 3
KINDS = ("generate", "score", "attention")
_SCHEMA = (
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
    # The keys this writer is computing now (one batch), and when it claimed them.
    "CREATE TABLE claims (key TEXT PRIMARY KEY, claimed REAL NOT NULL)",
    # Who writes the shard: lets a job on the same machine tell whether that process still runs.
    "CREATE TABLE writer (host TEXT NOT NULL, boot TEXT NOT NULL, pidns TEXT NOT NULL, pid INTEGER NOT NULL, started TEXT NOT NULL)",
)
_COLUMNS = (
    "key, kind, fingerprint, backend, params, prompt, target, value, prompt_tokens, output_tokens, seconds, created, checksum"
)
_INSERT = f"INSERT OR IGNORE INTO calls ({_COLUMNS}) VALUES ({','.join('?' * 13)})"
_LOOKUP_CHUNK = 500  # keys per SELECT ... IN (...), well under SQLite's variable limit
_OPEN = ".open.sqlite"
_PEER_READ_TRIES = 5  # reads of another writer's open shard caught mid-commit, before giving up for now
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")
_TOKEN = r"\d{8}T\d{6}-[0-9a-f]{12}"
_SHARD_NAME = re.compile(rf"^(?P<job>.+)\.(?P<token>{_TOKEN})(?P<open>\.open)?\.sqlite$")

# A live writer touches its open shard this often; one unchanged for STALE_SECONDS is taken for dead
# (a network file system may show a modification time a minute late).
HEARTBEAT_SECONDS = 10.0
STALE_SECONDS = 120.0
# Rough bytes per stored row beyond its prompt, target and value (columns, b-tree and key index).
_ROW_OVERHEAD = 400


class StoreError(RuntimeError):
    """A store file that cannot be used; the message names it and says how to recover."""


class SupportsCalls(Protocol):
    """The part of a generator (``models.Generator``) that the store uses."""

    fingerprint: str
    backend: str

    def count_tokens(self, texts: Sequence[str], special: bool = True) -> list[int]: ...

    def store_key_extras(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class AttentionRequest:
    """One attention call: a rendered prompt, the character spans of its passages, and the answer
    whose tokens attend to them (the answer the model generated for that prompt)."""

    prompt: str
    spans: tuple[tuple[int, int], ...]
    answer: str


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def make_key(kind: str, fingerprint: str, backend: str, prompt: str, target: str, params: dict[str, Any]) -> str:
    """sha256 hex key of one call."""
    payload = canonical_json([kind, fingerprint, backend, prompt, target, params])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def row_checksum(key: str, value: str) -> str:
    """sha256 hex of a row's key and stored value: what is checked before a row is served."""
    return hashlib.sha256(f"{key}\n{value}".encode()).hexdigest()


# Version of the stop-string rule, part of every generation key: outputs cut under an older rule
# (version 1 cut Gemma's answers that began with a newline to nothing) are never served again.
STOP_RULE = 2
# Version of the scoring rule, part of every score key: version 1 read the transformers backend's
# logits one position off after an empty prompt without a BOS token (SmolLM2's and Qwen3's passage
# perplexities were in the tens of thousands), so its scores are never served again.
SCORE_RULE = 2


def generation_params(generator: Any, max_new_tokens: int, stop: Iterable[str]) -> dict[str, Any]:
    """The parameters that are part of a generation's key. The dtype changes outputs, so it is one,
    and so is whatever the backend adds (``store_key_extras``: e.g. the vLLM version)."""
    return {
        "decoding": "greedy",
        "max_new_tokens": int(max_new_tokens),
        "stop": sorted(set(stop)),  # a set of strings: order and repeats do not change outputs
        "stop_rule": STOP_RULE,
        "dtype": getattr(generator, "dtype", None),
        **_extras(generator),
    }


def scoring_params(generator: Any, **options: Any) -> dict[str, Any]:
    """The parameters of a score or attention call's key."""
    return {"dtype": getattr(generator, "dtype", None), **options, **_extras(generator)}


def _extras(generator: Any) -> dict[str, Any]:
    extras = getattr(generator, "store_key_extras", None)
    return dict(extras()) if callable(extras) else {}


def job_name(rule: str, wildcards: dict[str, str] | None = None) -> str:
    """The job part of a shard's name for the job of ``rule`` with ``wildcards``."""
    parts = [rule] + [f"{k}={v}" for k, v in sorted((wildcards or {}).items())]
    return "+".join(parts).replace("/", "-")


def _new_token() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:12]


# ---------------------------------------------------------------------------------------------------
# The store


class GenerationStore:
    """One model's store (see the module docstring): ``root`` is the model's directory, ``job`` the
    name of the job writing (its shard is ``root/<job>.<token>.open.sqlite``).

    ``stats`` counts, since this instance was opened, the unique calls ``made`` (computed by the
    model) and ``served`` (found in the store, also while this job ran) per kind, with the tokens
    and seconds they took; ``sections`` counts the same for the calls made inside
    ``with store.section(name):`` blocks (a judge job's methods). Use it as a context manager:
    leaving the block seals the shard.
    """

    def __init__(self, root: str | os.PathLike, job: str = "adhoc") -> None:
        if not _JOB_NAME.match(job):
            raise ValueError(f"store job name {job!r} must match {_JOB_NAME.pattern}")
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"generation store folder {self.root} cannot be created ({_os_cause(err)})") from None
        self.job = job
        self.token = _new_token()
        self.path = self.root / f"{job}.{self.token}{_OPEN}"
        self.stats: dict[str, dict[str, float]] = {}
        self.sections: dict[str, dict[str, dict[str, float]]] = {}
        self._section: str | None = None
        self._closed = False
        self._sealed: dict[Path, sqlite3.Connection] = {}
        self._peer_rowid: dict[Path, int] = {}  # the last row read of each other writer's open shard
        self._peer_writer: dict[Path, tuple | None] = {}
        self._warned: set[Path] = set()
        self._claim_time = 0.0
        self._slowest_batch = 0.0
        try:
            self._open_sealed()
            self._db = _open_writer(self.path)
        except BaseException:
            for db in self._sealed.values():
                db.close()
            raise
        self._heartbeat = _Heartbeat(self.path)
        try:
            self._adopt_dead_shards()
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Count the calls made inside the block under ``sections[name]`` too."""
        previous, self._section = self._section, name
        try:
            yield
        finally:
            self._section = previous

    def _counters(self, kind: str) -> list[dict[str, float]]:
        zero = dict.fromkeys(("made", "served", "prompt_tokens", "output_tokens", "seconds"), 0)
        counters = [self.stats.setdefault(kind, dict(zero))]
        if self._section is not None:
            counters.append(self.sections.setdefault(self._section, {}).setdefault(kind, dict(zero)))
        return counters

    # -- what other writers hold ---------------------------------------------------------------------

    def _open_sealed(self) -> list[Path]:
        """Open the sealed shards not opened yet (other jobs seal while this one runs); return them."""
        new = []
        for path in shards(self.root):
            if path.name.endswith(_OPEN) or path in self._sealed:
                continue
            db = _connect_immutable(path)
            if db is None:  # removed by a compaction since the listing
                continue
            try:
                _check(db, path)
            except BaseException:
                db.close()
                raise
            self._sealed[path] = db
            new.append(path)
        return new

    def _other_open_shards(self) -> list[Path]:
        return [p for p in shards(self.root) if p.name.endswith(_OPEN) and p != self.path]

    def _read_peer(self, path: Path, read: Callable[[sqlite3.Connection], Any]) -> Any:
        """``read(db)`` on a fresh connection to another writer's open shard; None when it cannot
        be read now. A read caught in the middle of that writer's commit fails (SQLite errors are
        expected there), so it is tried again a few times before it is given up until the next look;
        a shard being created reads as version 0."""
        for attempt in range(_PEER_READ_TRIES):
            if attempt:
                time.sleep(0.005 * attempt)
            db = _connect_immutable(path)
            if db is None:  # sealed or removed meanwhile
                return None
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version == SCHEMA_VERSION:
                    return read(db)
                if version != 0:
                    raise StoreError(_version_message(path, version))
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

    def _writer_of(self, path: Path, db: sqlite3.Connection) -> tuple | None:
        if path not in self._peer_writer:
            row = db.execute("SELECT host, boot, pidns, pid, started FROM writer").fetchone()
            self._peer_writer[path] = tuple(row) if row else None
        return self._peer_writer[path]

    def _peer_is_dead(self, path: Path, db: sqlite3.Connection) -> bool:
        return _writer_is_dead(path, self._writer_of(path, db))

    def _adopt_dead_shards(self) -> None:
        """Seal the open shards of writers that ran on this machine and are gone (killed jobs), so
        they are read as sealed shards. Only where their death is certain: elsewhere they stay open
        (and are read as such) until ``compact(include_open=True)``."""
        for path in self._other_open_shards():
            writer = self._read_peer(path, lambda db, path=path: self._writer_of(path, db))
            if writer is None or not _on_this_machine(writer) or _process_alive(writer[3], writer[4]):
                continue
            with contextlib.suppress(FileNotFoundError):  # another job adopted it first
                _seal_dead_shard(path)
                log.info("sealed %s: its writer (pid %s on this machine) is gone", path.name, writer[3])
        self._open_sealed()

    def _select(self, db: sqlite3.Connection, path: Path, keys: Sequence[str], live: bool = False) -> dict[str, str]:
        """Verified values of ``keys`` in one shard (rows failing their checksum are left out, with a
        warning unless the shard is ``live``: another writer's, where a row read mid-commit fails too)."""
        found: dict[str, str] = {}
        bad = 0
        for i in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[i : i + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            for key, value, checksum in db.execute(f"SELECT key, value, checksum FROM calls WHERE key IN ({marks})", chunk):
                if checksum == row_checksum(key, value):
                    found[key] = value
                else:
                    bad += 1
        if bad and not live:
            self._warn_bad_rows(path, bad)
        return found

    def _warn_bad_rows(self, path: Path, n: int) -> None:
        log.warning(
            "generation store file %s: %d stored call(s) fail their checksum (changed on disk) and are "
            "computed again; `python -m llm_utility.generation.store_maintenance verify %s` lists them, `compact` drops them",
            path, n, path.parent,
        )

    def lookup(self, keys: Sequence[str]) -> dict[str, str]:
        """Stored values of those ``keys`` that this job's shard or any other shard holds, each
        checked against its checksum."""
        found: dict[str, str] = {}
        self._open_sealed()
        for path, db in [(self.path, self._db), *self._sealed.items()]:
            wanted = [k for k in keys if k not in found]
            if not wanted:
                return found
            with _sqlite_errors(path, "reading a stored call"):
                found.update(self._select(db, path, wanted))
        for path in self._other_open_shards():
            wanted = [k for k in keys if k not in found]
            if not wanted:
                break

            def read(db: sqlite3.Connection, path: Path = path, wanted: list[str] = wanted) -> tuple[int, dict[str, str]]:
                last = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM calls").fetchone()[0]
                return last, self._select(db, path, wanted, live=True)

            got = self._read_peer(path, read)
            if got is not None:
                last, values = got
                found.update(values)
                self._peer_rowid[path] = max(self._peer_rowid.get(path, 0), last)
        return found

    def _news(self, wanted: set[str]) -> dict[str, str]:
        """Verified values of ``wanted`` keys that other writers stored since the last look: rows
        appended to their open shards and shards sealed since."""
        found: dict[str, str] = {}
        for path in self._open_sealed():
            with _sqlite_errors(path, "reading a stored call"):
                found.update(self._select(self._sealed[path], path, [k for k in wanted if k not in found]))
        for path in self._other_open_shards():
            last = self._peer_rowid.get(path, 0)
            rows = self._read_peer(
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
                self._peer_rowid[path] = last
        return found

    def _claims_of_others(self) -> dict[str, tuple[str, float]]:
        """Keys live writers are computing now: key -> (the smallest claiming writer's token, the
        earliest time it was claimed)."""
        claims: dict[str, tuple[str, float]] = {}
        for path in self._other_open_shards():
            match = _SHARD_NAME.match(path.name)
            if match is None:
                continue

            def read(db: sqlite3.Connection, path: Path = path) -> list[tuple[str, float]]:
                return [] if self._peer_is_dead(path, db) else db.execute("SELECT key, claimed FROM claims").fetchall()

            for key, claimed in self._read_peer(path, read) or []:
                token, first = claims.get(key, (match["token"], claimed))
                claims[key] = (min(token, match["token"]), min(first, claimed))
        return claims

    def _claim(self, keys: Sequence[str]) -> None:
        """Replace this writer's claims with ``keys`` (the batch it computes next)."""
        self._claim_time = time.time()
        with _sqlite_errors(self.path, "claiming a batch of calls"), _transaction(self._db):
            self._db.execute("DELETE FROM claims")
            self._db.executemany("INSERT INTO claims (key, claimed) VALUES (?, ?)", [(k, self._claim_time) for k in keys])

    def _release_claims(self) -> None:
        with contextlib.suppress(sqlite3.Error, StoreError), _transaction(self._db):
            self._db.execute("DELETE FROM claims")

    def __len__(self) -> int:
        """Rows in this job's shard and the sealed shards (a key in two shards counts twice)."""
        total = 0
        for path, db in [(self.path, self._db), *self._sealed.items()]:
            with _sqlite_errors(path, "counting stored calls"):
                total += db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        return total

    # -- the three kinds of call ---------------------------------------------------------------------

    def generate(
        self,
        generator: Any,
        prompts: Sequence[str],
        max_new_tokens: int,
        stop: Sequence[str],
        batch_size: int,
        desc: str = "",
    ) -> list[str]:
        """Outputs for rendered ``prompts``, in input order: served from the store or computed."""
        params = generation_params(generator, max_new_tokens, stop)

        def compute(batch: list[str]) -> list[str]:
            return generator.generate(batch, max_new_tokens, list(stop))

        return self._calls(
            "generate", generator, [(p, "") for p in prompts], params, compute,
            encode=lambda out: out, decode=lambda value: value,
            output_tokens=lambda outs: generator.count_tokens(outs, special=False),
            value_bytes=lambda request: 3 * int(max_new_tokens),  # ~3 bytes per output token
            batch_size=batch_size, desc=desc,
        )

    def score(
        self, generator: Any, pairs: Sequence[tuple[str, str]], batch_size: int, desc: str = ""
    ) -> list[list[float]]:
        """Per-token log-probabilities of each ``target`` after its rendered ``prompt``."""
        params = scoring_params(generator, score_rule=SCORE_RULE)
        return self._calls(
            "score", generator, list(pairs), params,
            lambda batch: generator.score(batch),
            encode=canonical_json, decode=json.loads,
            output_tokens=lambda values: [len(v) for v in values],
            value_bytes=lambda request: 6 * len(request[1]),  # ~22 bytes of JSON per ~4-character token
            batch_size=batch_size, desc=desc,
        )

    def attention(
        self, generator: Any, requests: Sequence[AttentionRequest], pooling: str, desc: str = ""
    ) -> list[list[float]]:
        """Per-passage attention masses (``Generator.attention``) of each request, one at a time."""
        params = scoring_params(generator, pooling=pooling)
        by_pair = {(r.prompt, canonical_json([r.spans, r.answer])): r for r in requests}
        return self._calls(
            "attention", generator, list(by_pair), params,
            lambda batch: generator.attention([by_pair[p] for p in batch], pooling=pooling),
            encode=canonical_json, decode=json.loads,
            output_tokens=lambda values: [0] * len(values),
            value_bytes=lambda request: 24 * len(by_pair[request].spans),
            batch_size=1, desc=desc,
        )

    def _calls(
        self,
        kind: str,
        generator: Any,
        requests: list[tuple[str, str]],
        params: dict[str, Any],
        compute: Callable[[list[tuple[str, str]]], list[Any]] | Callable[[list[str]], list[Any]],
        *,
        encode: Callable[[Any], str],
        decode: Callable[[str], Any],
        output_tokens: Callable[[list[Any]], list[int]],
        value_bytes: Callable[[tuple[str, str]], int],
        batch_size: int,
        desc: str,
    ) -> list[Any]:
        """Serve or compute ``(prompt, target)`` requests of one kind, in input order.

        Unique missing requests are sorted by prompt length (longest first, so batches pad little and
        an out-of-memory error shows up in the first batch) and computed ``batch_size`` at a time;
        each batch is claimed, computed and committed on its own, and before each one what other
        writers stored meanwhile is served instead. ``compute`` gets prompts for ``generate`` and
        (prompt, target) pairs otherwise.
        """
        counters = self._counters(kind)

        def count(key: str, value: float) -> None:
            for counter in counters:
                counter[key] += value

        started = time.perf_counter()
        params_json = canonical_json(params)
        unique = list(dict.fromkeys(requests))
        keys = {r: make_key(kind, generator.fingerprint, generator.backend, r[0], r[1], params) for r in unique}
        stored = self.lookup(list(keys.values()))
        values = {r: decode(stored[k]) for r, k in keys.items() if k in stored}
        count("served", len(values))
        missing = [r for r in unique if r not in values]
        if missing:
            self._check_space(kind, missing, params_json, value_bytes)
            lengths = dict(zip(missing, generator.count_tokens([r[0] for r in missing])))
            missing.sort(key=lambda r: -lengths[r])  # stable: ties keep input order
            with tqdm(total=len(missing), desc=desc or kind, unit="call", dynamic_ncols=True) as bar:
                self._compute_missing(
                    kind, generator, missing, keys, lengths, values, compute, count, bar,
                    params_json=params_json, encode=encode, decode=decode, output_tokens=output_tokens,
                    batch_size=batch_size,
                )
        count("seconds", time.perf_counter() - started)
        return [values[r] for r in requests]

    def _compute_missing(
        self, kind, generator, order, keys, lengths, values, compute, count, bar, *,
        params_json, encode, decode, output_tokens, batch_size,
    ) -> None:
        """Compute the requests of ``order`` (in that order) that nobody stores meanwhile.

        Each batch is claimed before it is computed; keys a live writer claimed are held back (and
        waited for at the end) unless its claim is older than the patience. A key two writers claim
        at once goes to the writer with the smaller token: the other gives it up, and the smaller
        one waits until the other's claim on it has gone (given up, or stored: then it is served).
        Since each writer commits its claim before it reads the others', at least one of two sees
        the other's claim, so a key is computed once. Cost per batch: a few reads of the other
        writers' open shards, however many requests are left.
        """
        pending = set(order)
        pending_keys = {keys[r] for r in order}
        request_of = {keys[r]: r for r in order}
        cursor = 0
        held: list[tuple[str, str]] = []  # pending requests claimed by another writer
        wait = _Backoff()

        def serve(found: dict[str, str]) -> None:
            done = [request_of[k] for k in found if k in pending_keys]
            for r in done:
                values[r] = decode(found[keys[r]])
                pending.discard(r)
                pending_keys.discard(keys[r])
            count("served", len(done))
            bar.update(len(done))

        def holds(claim: tuple[str, float] | None) -> bool:
            """A live writer's claim (the caller checked it is live) that is recent enough."""
            patience = max(STALE_SECONDS, 4 * self._slowest_batch)
            return claim is not None and time.time() - claim[1] <= patience

        while pending:
            claims = self._claims_of_others()
            batch, still_held = [], []
            for r in held:
                if r in pending:
                    (still_held if holds(claims.get(keys[r])) or len(batch) >= batch_size else batch).append(r)
            held = still_held
            while len(batch) < batch_size and cursor < len(order):
                r = order[cursor]
                cursor += 1
                if r in pending:
                    (held if holds(claims.get(keys[r])) else batch).append(r)
            if not batch:  # every call left is being computed by another writer
                wait.sleep()
                serve(self._news(pending_keys))
                continue
            self._claim([keys[r] for r in batch])
            # The others' claims, then what they stored: a batch another writer stores (its rows and
            # the end of its claim commit together) is seen as one or the other.
            claims = self._claims_of_others()
            serve(self._news(pending_keys))
            batch = [r for r in batch if r in pending]
            given_up = [r for r in batch if holds(claims.get(keys[r])) and claims[keys[r]][0] < self.token]
            if given_up:
                held.extend(given_up)
                batch = [r for r in batch if r not in set(given_up)]
                self._claim([keys[r] for r in batch])
            waiting = {keys[r] for r in batch if holds(claims.get(keys[r]))}
            if waiting:  # claimed by writers with larger tokens too: they give these up or store them
                while waiting:
                    wait.sleep()
                    claims = self._claims_of_others()
                    waiting = {k for k in waiting if holds(claims.get(k))}
                serve(self._news(pending_keys))
                batch = [r for r in batch if r in pending]
            if not batch:
                continue
            wait.reset()
            t0 = time.perf_counter()
            try:
                made = compute([r[0] for r in batch] if kind == "generate" else batch)
                if len(made) != len(batch):
                    raise RuntimeError(f"{kind}: the model returned {len(made)} results for {len(batch)} calls")
            except BaseException:
                self._release_claims()
                raise
            seconds = time.perf_counter() - t0
            self._slowest_batch = max(self._slowest_batch, seconds)
            n_out = output_tokens(list(made))
            self._insert(kind, generator, batch, made, keys, lengths, n_out, seconds, params_json, encode)
            values.update(zip(batch, made))
            for r in batch:
                pending.discard(r)
                pending_keys.discard(keys[r])
            count("made", len(batch))
            count("prompt_tokens", sum(lengths[r] for r in batch))
            count("output_tokens", sum(n_out))
            bar.update(len(batch))

    def _insert(self, kind, generator, batch, made, keys, lengths, n_out, seconds, params_json, encode) -> None:
        """Store a computed batch and drop its claims, in one transaction."""
        now = time.time()
        each = seconds / max(1, len(batch))
        rows = []
        for r, v, n in zip(batch, made, n_out):
            value = encode(v)
            rows.append((
                keys[r], kind, generator.fingerprint, generator.backend, params_json, r[0], r[1], value,
                int(lengths[r]), int(n), each, now, row_checksum(keys[r], value),
            ))
        with _sqlite_errors(self.path, f"storing {len(rows)} computed calls"), _transaction(self._db):
            self._db.executemany(_INSERT, rows)
            self._db.execute("DELETE FROM claims")

    def _check_space(self, kind: str, missing, params_json: str, value_bytes) -> None:
        """Stop before computing when the store's file system cannot hold the rows to be written."""
        need = sum(
            len(p.encode()) + len(t.encode()) + value_bytes((p, t)) + len(params_json) + _ROW_OVERHEAD for p, t in missing
        )
        free = _free_bytes(self.root)
        if free is not None and free < need:
            raise StoreError(
                f"generation store {self.root}: the {len(missing)} {kind} calls this job computes need about "
                f"{_mib(need)} there, and its file system has {_mib(free)} free: free space on it, or set "
                f"store_dir to a larger file system (nothing was computed or written)"
            )

    # -- reporting and closing -----------------------------------------------------------------------

    def summary(self) -> str:
        """One line for logs: calls made and served per kind, time spent, where the shard is."""
        parts = [
            f"{kind}: {int(s['made'])} made, {int(s['served'])} served in {s['seconds']:.1f} s"
            for kind, s in self.stats.items()
        ]
        return f"{'; '.join(parts) or 'no calls'} (shard {self.path.name}, {len(self._sealed)} sealed shards read)"

    def close(self) -> None:
        """Close the files and seal this job's shard (an empty one is removed)."""
        if self._closed:
            return
        self._closed = True
        self._heartbeat.stop()
        for db in self._sealed.values():
            db.close()
        self._release_claims()
        try:
            with _sqlite_errors(self.path, "closing the shard"):
                rows = self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        finally:
            self._db.close()
        try:
            if rows == 0:
                self.path.unlink()
            else:
                os.replace(self.path, self.root / f"{self.job}.{self.token}.sqlite")
        except FileNotFoundError:
            # Only `compact(include_open=True)` run while this job ran (it took the job for dead)
            # removes an open shard: the rows committed until then are in its merged file.
            log.warning("generation store file %s was removed while this job wrote it (a compaction?)", self.path)

    def __enter__(self) -> GenerationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        # Sealed even after an error: every committed batch is a finished, valid call.
        self.close()


class _Backoff:
    """Sleeps that grow from 50 ms to 2 s while a job waits for calls other writers compute."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seconds = 0.05

    def sleep(self) -> None:
        time.sleep(self.seconds)
        self.seconds = min(2.0, self.seconds * 1.5)


class _Heartbeat:
    """Touches a live writer's open shard every HEARTBEAT_SECONDS, so that other writers can tell it
    from a killed one while a long batch computes."""

    def __init__(self, path: Path) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(path,), name="store-heartbeat", daemon=True)
        self._thread.start()

    def _run(self, path: Path) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with contextlib.suppress(OSError):
                os.utime(path)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------------------------------
# Files


def _recovery(path: Path) -> str:
    return (
        f"run `python -m llm_utility.generation.store_maintenance verify {path.parent}`, then delete {path} or move it "
        f"aside (the calls it holds are recomputed on the next run)"
    )


def _version_message(path: Path, version: Any) -> str:
    if version == 2:
        return (
            f"generation store file {path} has schema version 2 (no checksums), this code reads version "
            f"{SCHEMA_VERSION}: when no job of this store runs, `python -m llm_utility.generation.store_maintenance migrate "
            f"{path.parent}` adds checksums to its rows (values damaged before cannot be told), or delete it "
            f"(its calls are recomputed)"
        )
    return (
        f"generation store file {path} has schema version {version}, this code reads version {SCHEMA_VERSION}: "
        f"delete it or move it aside (its calls are recomputed on the next run)"
    )


def _free_bytes(path: Path) -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _mib(n: int | float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _os_cause(err: OSError) -> str:
    return os.strerror(err.errno) if err.errno else str(err)


@contextlib.contextmanager
def _sqlite_errors(path: Path, doing: str) -> Iterator[None]:
    """Raise every SQLite error as a StoreError naming ``path``, what was being done, the cause and
    the remedy (a full file system is named as such, whatever SQLite reports)."""
    try:
        yield
    except sqlite3.Error as err:
        name = getattr(err, "sqlite_errorname", "") or ""
        free = _free_bytes(path.parent)
        # A full disk can also surface as a failed write or a journal that cannot be created.
        nearly_full = free is not None and free < 1 << 20
        if name == "SQLITE_FULL" or (nearly_full and name.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN"))):
            raise StoreError(
                f"generation store file {path}: {doing} failed: the file system is full ({err}; "
                f"{_mib(free or 0)} free). Free space there or set store_dir to a larger file system; every "
                f"batch committed before is kept, and the next run resumes from it"
            ) from None
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
            raise StoreError(f"generation store file {path} is corrupt ({err}) while {doing}: {_recovery(path)}") from None
        if name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_IOERR")):
            raise StoreError(
                f"generation store file {path}: {doing} failed ({err}): check that its folder is writable and its "
                f"file system mounted"
            ) from None
        raise StoreError(f"generation store file {path}: {doing} failed ({err}): {_recovery(path)}") from None


def _connect_immutable(path: Path) -> sqlite3.Connection | None:
    """A read-only connection that takes no lock and reads no journal; None if the file is gone."""
    try:
        # mode=ro: never create the file (another writer may have just sealed or removed it)
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.OperationalError:
        if not path.exists():
            return None
        with _sqlite_errors(path, "opening the shard"):
            raise


def _check(db: sqlite3.Connection, path: Path) -> None:
    """The shard is a store file of this schema version."""
    with _sqlite_errors(path, "opening the shard"):
        version = db.execute("PRAGMA user_version").fetchone()[0]
        has_table = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'calls'").fetchone()
    if version != SCHEMA_VERSION or not has_table:
        raise StoreError(_version_message(path, version))


def _this_process() -> tuple[str, str, str, int, str]:
    """(host, boot id, pid namespace, pid, start time): what tells this process from any other."""
    return _identity(os.getpid())


@functools.lru_cache(maxsize=4)
def _identity(pid: int) -> tuple[str, str, str, int, str]:
    boot = pidns = ""
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    with contextlib.suppress(OSError):
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    return socket.gethostname(), boot, pidns, pid, _start_time(pid) or ""


def _start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (Linux); None if it does not run (a zombie,
    killed and not yet reaped, does not); "" if this cannot be told."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def _on_this_machine(writer: tuple) -> bool:
    host, boot, pidns, _, _ = writer
    me = _this_process()
    return bool(boot) and (host, boot, pidns) == me[:3]


def _process_alive(pid: int, started: str) -> bool:
    now = _start_time(int(pid))
    if now is None:
        return False
    return not started or not now or now == started  # a reused pid has another start time


def _writer_is_dead(path: Path, writer: tuple | None) -> bool:
    if writer is not None and _on_this_machine(writer):
        return not _process_alive(writer[3], writer[4])
    try:
        return time.time() - path.stat().st_mtime > STALE_SECONDS
    except FileNotFoundError:
        return True


def _open_writer(path: Path) -> sqlite3.Connection:
    """A new shard for this writer: rollback journal (atomic commits on any file system), no locking
    (``unix-none``: this writer is its only writer), created with the schema."""
    db = None
    try:
        with _sqlite_errors(path, "creating the shard"):
            db = sqlite3.connect(f"{path.resolve().as_uri()}?vfs=unix-none", uri=True, isolation_level=None)
            db.execute("PRAGMA journal_mode = DELETE")
            # NORMAL survives a killed process; a power cut may lose the last commits, never corrupt.
            db.execute("PRAGMA synchronous = NORMAL")
            with _transaction(db):
                for statement in _SCHEMA:
                    db.execute(statement)
                if path.name.endswith(_OPEN):
                    db.execute("INSERT INTO writer VALUES (?, ?, ?, ?, ?)", _this_process())
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
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
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


def _seal_dead_shard(path: Path) -> Path:
    """Seal the open shard of a writer that is gone: roll back the commit it was killed in (if any,
    with SQLite's own locking, in case two jobs do this at once), then rename it."""
    if Path(f"{path}-journal").exists():
        with _sqlite_errors(path, "rolling back the commit its writer was killed in"):
            db = sqlite3.connect(path)
            try:
                db.execute("SELECT COUNT(*) FROM calls").fetchone()
            finally:
                db.close()
    sealed = path.with_name(path.name[: -len(_OPEN)] + ".sqlite")
    os.rename(path, sealed)
    return sealed


def shards(root: str | os.PathLike) -> list[Path]:
    """Every shard file of one model's store, sealed and open."""
    return sorted(Path(root).glob("*.sqlite"))


def count_rows(root: str | os.PathLike, kind: str | None = None) -> int:
    """Distinct keys over all shards of ``root`` (of one ``kind``, if given)."""
    keys: set[str] = set()
    for path in shards(root):
        db = _connect_immutable(path)
        if db is None:
            continue
        try:
            with _sqlite_errors(path, "counting stored calls"):
                where = " WHERE kind = ?" if kind else ""
                keys.update(k for (k,) in db.execute(f"SELECT key FROM calls{where}", (kind,) if kind else ()))
        finally:
            db.close()
    return len(keys)
