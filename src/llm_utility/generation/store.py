"""The generation store: every model call, computed once, kept in SQLite.

A model call is one of three kinds, all greedy and deterministic, so each is a pure function of its key:

- ``generate``: the output text of a rendered prompt;
- ``score``: the log-probability of each token of a given ``target`` after a rendered prompt
  (likelihood of a pseudo-answer, perplexity of a passage);
- ``attention``: the attention mass an answer's tokens put on each of several passages of a prompt.

A row is keyed by sha256 over (kind, model fingerprint, backend, rendered prompt, target, parameters),
so a call asked for by two rules, or by a rerun, is served instead of recomputed.

Layout: one directory per model, one SQLite file (a *shard*) per job. A running job writes only its
own shard ``<job>.open.sqlite``, in batches, each committed on its own, so a killed job loses at most
the batch in flight and its rerun (the same job, hence the same file) resumes where it stopped. When
the job ends its shard is *sealed*: renamed to ``<job>.<stamp>.sqlite`` and never written again.
Jobs read sealed shards with SQLite's ``immutable`` flag, which takes no lock and builds no
shared-memory index, and they write their own shard with no locking at all (one writer per file is
guaranteed by Snakemake, which never runs a job twice at once). That is what makes the store safe
when jobs of one model run on several hosts over a network file system, where SQLite's WAL mode
and POSIX locks are not. ``compact`` merges sealed shards into one when no job is running.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

SCHEMA_VERSION = 2
KINDS = ("generate", "score", "attention")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
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
    created REAL NOT NULL
)
"""
_COLUMNS = "key, kind, fingerprint, backend, params, prompt, target, value, prompt_tokens, output_tokens, seconds, created"
_LOOKUP_CHUNK = 500  # keys per SELECT ... IN (...), well under SQLite's variable limit
_OPEN = ".open.sqlite"
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$")


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
    """A shard name for the job of ``rule`` with ``wildcards`` (unique per job in a workflow)."""
    parts = [rule] + [f"{k}={v}" for k, v in sorted((wildcards or {}).items())]
    return "+".join(parts).replace("/", "-")


class GenerationStore:
    """One model's store (see the module docstring): ``root`` is the model's directory, ``job`` the
    name of the job writing (its shard is ``root/<job>.open.sqlite``).

    ``stats`` counts, since this instance was opened, the unique calls ``made`` (computed by the
    model) and ``served`` (found in the store) per kind, with the tokens and seconds they took;
    ``sections`` counts the same for the calls made inside ``with store.section(name):`` blocks (a
    judge job's methods). Use it as a context manager: leaving the block seals the shard.
    """

    def __init__(self, root: str | os.PathLike, job: str = "adhoc") -> None:
        if not _JOB_NAME.match(job):
            raise ValueError(f"store job name {job!r} must match {_JOB_NAME.pattern}")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.job = job
        self.path = self.root / f"{job}{_OPEN}"
        self._readers = _open_sealed(self.root)
        self._db = _open_writer(self.path)
        self.stats: dict[str, dict[str, float]] = {}
        self.sections: dict[str, dict[str, dict[str, float]]] = {}
        self._section: str | None = None
        self._closed = False

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

    # -- lookups -------------------------------------------------------------------------------------

    def lookup(self, keys: Sequence[str]) -> dict[str, str]:
        """Stored values of those ``keys`` that are in this job's shard or any sealed shard."""
        found: dict[str, str] = {}
        for db in [self._db, *self._readers.values()]:
            wanted = [k for k in keys if k not in found]
            for i in range(0, len(wanted), _LOOKUP_CHUNK):
                chunk = wanted[i : i + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                found.update(db.execute(f"SELECT key, value FROM calls WHERE key IN ({marks})", chunk).fetchall())
            if len(found) == len(keys):
                break
        return found

    def __len__(self) -> int:
        """Rows in this job's shard and the sealed shards (a key in two shards counts twice)."""
        return sum(db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] for db in [self._db, *self._readers.values()])

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
        batch_size: int,
        desc: str,
    ) -> list[Any]:
        """Serve or compute ``(prompt, target)`` requests of one kind, in input order.

        Unique missing requests are sorted by prompt length (longest first, so batches pad little and
        an out-of-memory error shows up in the first batch) and computed ``batch_size`` at a time;
        each batch is committed on its own. ``compute`` gets prompts for ``generate`` and
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
            lengths = dict(zip(missing, generator.count_tokens([r[0] for r in missing])))
            missing.sort(key=lambda r: -lengths[r])  # stable: ties keep input order
            with tqdm(total=len(missing), desc=desc or kind, unit="call", dynamic_ncols=True) as bar:
                for i in range(0, len(missing), batch_size):
                    batch = missing[i : i + batch_size]
                    t0 = time.perf_counter()
                    made = compute([r[0] for r in batch] if kind == "generate" else batch)
                    if len(made) != len(batch):
                        raise RuntimeError(f"{kind}: the model returned {len(made)} results for {len(batch)} calls")
                    seconds = time.perf_counter() - t0
                    n_out = output_tokens(list(made))
                    self._insert(kind, generator, batch, made, keys, lengths, n_out, seconds, params_json, encode)
                    values.update(zip(batch, made))
                    count("made", len(batch))
                    count("prompt_tokens", sum(lengths[r] for r in batch))
                    count("output_tokens", sum(n_out))
                    bar.update(len(batch))
        count("seconds", time.perf_counter() - started)
        return [values[r] for r in requests]

    def _insert(self, kind, generator, batch, made, keys, lengths, n_out, seconds, params_json, encode) -> None:
        now = time.time()
        each = seconds / max(1, len(batch))
        rows = [
            (keys[r], kind, generator.fingerprint, generator.backend, params_json, r[0], r[1], encode(v),
             int(lengths[r]), int(n), each, now)
            for r, v, n in zip(batch, made, n_out)
        ]
        with _transaction(self._db):
            self._db.executemany(f"INSERT OR IGNORE INTO calls ({_COLUMNS}) VALUES ({','.join('?' * 12)})", rows)

    # -- reporting and closing -----------------------------------------------------------------------

    def summary(self) -> str:
        """One line for logs: calls made and served per kind, time spent, where the shard is."""
        parts = [
            f"{kind}: {int(s['made'])} made, {int(s['served'])} served in {s['seconds']:.1f} s"
            for kind, s in self.stats.items()
        ]
        return f"{'; '.join(parts) or 'no calls'} (shard {self.path.name}, {len(self._readers)} sealed shards read)"

    def close(self) -> None:
        """Close the files and seal this job's shard (an empty one is removed)."""
        if self._closed:
            return
        self._closed = True
        for db in self._readers.values():
            db.close()
        rows = self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        self._db.close()
        if rows == 0:
            self.path.unlink(missing_ok=True)
        else:
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]
            os.replace(self.path, self.root / f"{self.job}.{stamp}.sqlite")

    def __enter__(self) -> GenerationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        # Sealed even after an error: every committed batch is a finished, valid call.
        self.close()


# ---------------------------------------------------------------------------------------------------
# Files


def _recovery(path: Path) -> str:
    return (
        f"delete {path} (the calls it holds are recomputed on the next run), "
        f"or move it aside to inspect it with the sqlite3 shell"
    )


def _check(db: sqlite3.Connection, path: Path) -> None:
    """The shard is a store file of this schema version."""
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        has_table = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'calls'").fetchone()
    except sqlite3.DatabaseError as err:
        raise StoreError(f"generation store file {path} is corrupt ({err}): {_recovery(path)}") from None
    if version != SCHEMA_VERSION or not has_table:
        raise StoreError(
            f"generation store file {path} has schema version {version}, this code reads version "
            f"{SCHEMA_VERSION}: {_recovery(path)}"
        )


def _open_sealed(root: Path) -> dict[Path, sqlite3.Connection]:
    """Read-only connections to the sealed shards, in name order (a compaction may remove some)."""
    readers: dict[Path, sqlite3.Connection] = {}
    for path in sorted(root.glob("*.sqlite")):
        if path.name.endswith(_OPEN):
            continue
        try:
            db = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
        except sqlite3.OperationalError:
            if not path.exists():  # removed by a compaction since the glob
                continue
            raise
        _check(db, path)
        readers[path] = db
    return readers


def _open_writer(path: Path) -> sqlite3.Connection:
    """This job's shard: rollback journal (atomic commits on any file system), no locking
    (``unix-none``: this job is its only writer), created with the schema when new."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?vfs=unix-none", uri=True, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = DELETE")
        # NORMAL survives a killed process; a power cut may lose the last commits, never corrupt.
        db.execute("PRAGMA synchronous = NORMAL")
        if db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0:
            with _transaction(db):
                db.execute(_SCHEMA)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except sqlite3.DatabaseError as err:
        db.close()
        raise StoreError(f"generation store file {path} is corrupt ({err}): {_recovery(path)}") from None
    _check(db, path)
    return db


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def shards(root: str | os.PathLike) -> list[Path]:
    """Every shard file of one model's store, sealed and open."""
    return sorted(Path(root).glob("*.sqlite"))


def count_rows(root: str | os.PathLike, kind: str | None = None) -> int:
    """Distinct keys over all shards of ``root`` (of one ``kind``, if given)."""
    keys: set[str] = set()
    for path in shards(root):
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            where = " WHERE kind = ?" if kind else ""
            keys.update(k for (k,) in db.execute(f"SELECT key FROM calls{where}", (kind,) if kind else ()))
        finally:
            db.close()
    return len(keys)


def compact(root: str | os.PathLike, include_open: bool = False) -> Path | None:
    """Merge the sealed shards of ``root`` into one and delete them; return the merged file.

    Run it when no job of the workflow is running (the Snakefile's ``onsuccess`` does, past a
    number of shards): a job that started before would not find the merged rows in the files it
    opened. ``include_open`` also merges the open shards of jobs that were killed and will not be
    rerun (only safe when no job of this model is running at all).
    """
    root = Path(root)
    inputs = [p for p in shards(root) if include_open or not p.name.endswith(_OPEN)]
    if len(inputs) < 2:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]
    tmp = root / f".compact-{stamp}.tmp"
    out = _open_writer(tmp)
    try:
        for path in inputs:
            src = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                _check(src, path)
                rows = src.execute(f"SELECT {_COLUMNS} FROM calls").fetchall()
            finally:
                src.close()
            with _transaction(out):
                out.executemany(f"INSERT OR IGNORE INTO calls ({_COLUMNS}) VALUES ({','.join('?' * 12)})", rows)
        out.execute("VACUUM")
    finally:
        out.close()
    merged = root / f"compacted.{stamp}.sqlite"
    os.replace(tmp, merged)
    for path in inputs:
        path.unlink(missing_ok=True)
    return merged


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m llm_utility.generation.store compact <store_dir>/<llm> [--include-open]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m llm_utility.generation.store", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("compact", help="merge a model's sealed shards into one file")
    cmd.add_argument("root", nargs="+", help="a model's store directory, e.g. resources/cache/generation/smollm2-135m")
    cmd.add_argument("--include-open", action="store_true", help="also merge shards of killed jobs")
    args = parser.parse_args(argv)
    for root in args.root:
        merged = compact(root, include_open=args.include_open)
        print(f"{root}: {'merged into ' + merged.name if merged else 'nothing to merge'}")


if __name__ == "__main__":
    main()
