"""``GenerationStore``: the front every model call goes through (the package docstring says how the
store works); ``generate``, ``score`` and ``attention`` serve what is stored and compute the rest."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from . import shard
from .keys import (
    SCORE_RULE,
    AttentionRequest,
    canonical_json,
    generation_params,
    make_key,
    row_checksum,
    scoring_params,
)
from .leases import Leases
from .liveness import Heartbeat
from .peers import OtherShards, select_verified, warn_bad_rows
from .shard import OPEN, StoreError, sqlite_errors, transaction

log = logging.getLogger("llm_utility.store")

# Rough bytes per stored row beyond its prompt, target and value (columns, b-tree and key index).
ROW_OVERHEAD = 400

Request = tuple[str, str]  # (rendered prompt, target): one call of a kind


class SupportsCalls(Protocol):
    """The part of a generator (``models.Generator``) that the store uses."""

    fingerprint: str
    backend: str

    def count_tokens(self, texts: Sequence[str], special: bool = True) -> list[int]: ...

    def store_key_extras(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class _Kind:
    """How the calls of one kind are keyed, computed and stored."""

    name: str
    params: dict[str, Any]
    compute: Callable[[list[Request]], list[Any]]
    encode: Callable[[Any], str]
    decode: Callable[[str], Any]
    output_tokens: Callable[[list[Any]], list[int]]
    value_bytes: Callable[[Request], int]  # an estimate of a stored value's size, for the space check
    batch_size: int

    @property
    def params_json(self) -> str:
        return canonical_json(self.params)


class _Missing:
    """The calls of one request that the store did not hold, in the order they are computed (longest
    prompt first), while they are served from other writers or computed: which are left, where the
    next batch starts, and those held back under another writer's lease (tried again first). Each
    one served or computed goes into ``values`` (the request's results), the counters and the
    progress bar."""

    def __init__(
        self,
        kind: _Kind,
        order: list[Request],
        keys: dict[Request, str],
        lengths: dict[Request, int],
        values: dict[Request, Any],
        tally: _Tally,
        progress: tqdm,
    ) -> None:
        self.kind = kind
        self.order = order
        self.key = keys
        self.lengths = lengths
        self.values = values
        self.tally = tally
        self.progress = progress
        self.left = set(order)
        self.left_keys = {keys[r] for r in order}
        self._request_of = {keys[r]: r for r in order}
        self._next = 0
        self._held: list[Request] = []
        self.seconds = 0.0  # spent computing batches

    def __bool__(self) -> bool:
        return bool(self.left)

    def next_batch(self, size: int, leased: Callable[[str], bool]) -> list[Request]:
        """Up to ``size`` calls to lease next: held-back ones whose lease has gone, then new ones in
        order; a new one under another writer's lease (``leased(key)``) is held back instead."""
        batch, still_held = [], []
        for r in self._held:
            if r in self.left:
                (still_held if leased(self.key[r]) or len(batch) >= size else batch).append(r)
        self._held = still_held
        while len(batch) < size and self._next < len(self.order):
            r = self.order[self._next]
            self._next += 1
            if r in self.left:
                (self._held if leased(self.key[r]) else batch).append(r)
        return batch

    def hold(self, requests: list[Request]) -> None:
        self._held.extend(requests)

    def still_left(self, batch: list[Request]) -> list[Request]:
        return [r for r in batch if r in self.left]

    def serve(self, found: dict[str, str]) -> None:
        """Serve the calls left that ``found`` (key -> stored value, another writer's) answers."""
        done = [self._request_of[k] for k in found if k in self.left_keys]
        self.values.update((r, self.kind.decode(found[self.key[r]])) for r in done)
        self._finish(done)
        self.tally.add("served", dict.fromkeys(done, 1))
        self.progress.update(len(done))

    def computed(self, batch: list[Request], made: list[Any], output_tokens: list[int], seconds: float) -> None:
        self.values.update(zip(batch, made))
        self._finish(batch)
        self.tally.add("made", dict.fromkeys(batch, 1))
        self.tally.add("prompt_tokens", {r: self.lengths[r] for r in batch})
        self.tally.add("output_tokens", dict(zip(batch, output_tokens)))
        self.tally.add("seconds", dict.fromkeys(batch, seconds / len(batch)))
        self.seconds += seconds
        self.progress.update(len(batch))

    def _finish(self, requests: list[Request]) -> None:
        for r in requests:
            self.left.discard(r)
            self.left_keys.discard(self.key[r])


class _Tally:
    """Adds to the counters of a kind: the store's and those of each call's section (``section_of``:
    the counters of the section a call is counted in, or None)."""

    def __init__(self, total: dict[str, float], section_of: Callable[[Request], dict[str, float] | None]) -> None:
        self.total = total
        self.section_of = section_of

    def add(self, field: str, values: dict[Request, float]) -> None:
        """Add each call's value to ``field``."""
        for request, value in values.items():
            self.total[field] += value
            section = self.section_of(request)
            if section is not None:
                section[field] += value


class _Backoff:
    """Sleeps that grow from 50 ms to 2 s while a job waits for calls other writers compute."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seconds = 0.05

    def sleep(self) -> None:
        time.sleep(self.seconds)
        self.seconds = min(2.0, self.seconds * 1.5)


class GenerationStore:
    """One model's store: ``root`` is the model's directory, ``job`` the name of the job writing
    (its shard is ``root/<job>.<token>.open.sqlite``).

    ``stats`` counts, since this instance was opened, the unique calls ``made`` (computed by the
    model) and ``served`` (found in the store, also while this job ran) per kind, with the tokens
    and seconds they took; ``sections`` counts the same for the calls made inside
    ``with store.section(name):`` blocks, or named per prompt (``generate``'s ``sections``): a
    judge job's methods. Use it as a context manager:
    leaving the block seals the shard.
    """

    def __init__(self, root: str | os.PathLike, job: str = "adhoc") -> None:
        if not shard.JOB_NAME.match(job):
            raise ValueError(f"store job name {job!r} must match {shard.JOB_NAME.pattern}")
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            cause = shard.os_cause(err)
            raise StoreError(f"generation store folder {self.root} cannot be created ({cause})") from None
        self.job = job
        self.token = shard.new_token()
        self.path = self.root / f"{job}.{self.token}{OPEN}"
        self.stats: dict[str, dict[str, float]] = {}
        self.sections: dict[str, dict[str, dict[str, float]]] = {}
        self._section: str | None = None
        self._closed = False
        self._others = OtherShards(self.root, self.path)
        try:
            self._others.open_new_sealed()
            self._db = shard.open_writer(self.path)
        except BaseException:
            self._others.close()
            raise
        self._leases = Leases(self._db, self.path, self.token, self._others)
        self._heartbeat = Heartbeat(self.path)
        try:
            self._others.adopt_dead_shards()
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

    def _tally(self, kind: str, sections: dict[Request, str] | None) -> _Tally:
        """The counters of a call of ``kind``: each request is counted in the section ``sections``
        names for it, or, without ``sections``, in the enclosing ``section`` block's, if any."""
        zero = dict.fromkeys(("made", "served", "prompt_tokens", "output_tokens", "seconds"), 0)

        def counters(name: str) -> dict[str, float]:
            return self.sections.setdefault(name, {}).setdefault(kind, dict(zero))

        total = self.stats.setdefault(kind, dict(zero))
        if sections is not None:
            named = {name: counters(name) for name in dict.fromkeys(sections.values())}
            return _Tally(total, lambda request: named[sections[request]])
        enclosing = counters(self._section) if self._section is not None else None
        return _Tally(total, lambda request: enclosing)

    def lookup(self, keys: Sequence[str]) -> dict[str, str]:
        """Stored values of those ``keys`` that this job's shard or any other shard holds, each
        checked against its checksum."""
        with sqlite_errors(self.path, "reading a stored call"):
            found, bad = select_verified(self._db, keys)
        if bad:
            warn_bad_rows(self.path, bad)
        return self._others.lookup(keys, found)

    def __len__(self) -> int:
        """Rows in this job's shard and the sealed shards (a key in two shards counts twice)."""
        total = 0
        for path, db in [(self.path, self._db), *self._others.sealed.items()]:
            with sqlite_errors(path, "counting stored calls"):
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
        sections: Sequence[str] | None = None,
    ) -> list[str]:
        """Outputs for rendered ``prompts``, in input order: served from the store or computed.

        ``sections`` (one name per prompt) counts each prompt's call in ``sections[name]``, so one
        call can carry several methods' prompts, decoded together, and each method keep its counts
        (a prompt given twice is counted in its first section)."""
        kind = _Kind(
            "generate",
            generation_params(generator, max_new_tokens, stop),
            lambda batch: generator.generate([prompt for prompt, _ in batch], max_new_tokens, list(stop)),
            encode=lambda out: out,
            decode=lambda value: value,
            output_tokens=lambda outs: generator.count_tokens(outs, special=False),
            value_bytes=lambda request: 3 * int(max_new_tokens),  # ~3 bytes per output token
            batch_size=batch_size,
        )
        requests = [(p, "") for p in prompts]
        if sections is not None and len(sections) != len(prompts):
            raise ValueError(f"generate: {len(sections)} sections for {len(prompts)} prompts")
        named = dict(reversed(list(zip(requests, sections)))) if sections is not None else None
        return self._calls(kind, generator, requests, desc, named)

    def score(
        self, generator: Any, pairs: Sequence[tuple[str, str]], batch_size: int, desc: str = ""
    ) -> list[list[float]]:
        """Per-token log-probabilities of each ``target`` after its rendered ``prompt``."""
        kind = _Kind(
            "score",
            scoring_params(generator, score_rule=SCORE_RULE),
            lambda batch: generator.score(batch),
            encode=canonical_json,
            decode=json.loads,
            output_tokens=lambda values: [len(v) for v in values],
            value_bytes=lambda request: 6 * len(request[1]),  # ~22 bytes of JSON per ~4-character token
            batch_size=batch_size,
        )
        return self._calls(kind, generator, list(pairs), desc)

    def attention(
        self, generator: Any, requests: Sequence[AttentionRequest], pooling: str, desc: str = ""
    ) -> list[list[float]]:
        """Per-passage attention masses (``Generator.attention``) of each request, one at a time."""
        by_pair = {(r.prompt, canonical_json([r.spans, r.answer])): r for r in requests}
        kind = _Kind(
            "attention",
            scoring_params(generator, pooling=pooling),
            lambda batch: generator.attention([by_pair[p] for p in batch], pooling=pooling),
            encode=canonical_json,
            decode=json.loads,
            output_tokens=lambda values: [0] * len(values),
            value_bytes=lambda request: 24 * len(by_pair[request].spans),
            batch_size=1,
        )
        return self._calls(kind, generator, list(by_pair), desc)

    # -- serving and computing -----------------------------------------------------------------------

    def _calls(
        self,
        kind: _Kind,
        generator: Any,
        requests: list[Request],
        desc: str,
        sections: dict[Request, str] | None = None,
    ) -> list[Any]:
        """Serve or compute ``(prompt, target)`` requests of one kind, in input order.

        Unique missing requests are sorted by prompt length (longest first, so batches pad little and
        an out-of-memory error shows up in the first batch) and computed ``batch_size`` at a time;
        each batch is leased, computed and committed on its own, and before each one what other
        writers stored meanwhile is served instead. A call's seconds are its batch's, shared equally
        by the batch's calls; the rest of the time (lookups, waits) is shared by all the calls.
        """
        tally = self._tally(kind.name, sections)
        started = time.perf_counter()
        unique = list(dict.fromkeys(requests))
        keys = {
            r: make_key(kind.name, generator.fingerprint, generator.backend, r[0], r[1], kind.params) for r in unique
        }
        stored = self.lookup(list(keys.values()))
        values = {r: kind.decode(stored[k]) for r, k in keys.items() if k in stored}
        tally.add("served", dict.fromkeys(values, 1))
        missing = [r for r in unique if r not in values]
        computing = 0.0
        if missing:
            self._check_space(kind, missing)
            lengths = dict(zip(missing, generator.count_tokens([r[0] for r in missing])))
            missing.sort(key=lambda r: -lengths[r])  # stable: ties keep input order
            with tqdm(total=len(missing), desc=desc or kind.name, unit="call", dynamic_ncols=True) as progress:
                left = _Missing(kind, missing, keys, lengths, values, tally, progress)
                self._compute_missing(kind, generator, left)
                computing = left.seconds
        rest = time.perf_counter() - started - computing
        tally.add("seconds", dict.fromkeys(unique, rest / max(1, len(unique))))
        return [values[r] for r in requests]

    def _compute_missing(self, kind: _Kind, generator: Any, missing: _Missing) -> None:
        """Have every missing call, batch by batch: a batch is leased, then what other writers stored
        meanwhile is served and what they lease is left to them (``leases``), and the rest computed
        and stored. A round where every call left is another writer's waits, then serves what they
        stored. Cost per batch: a few reads of the other writers' open shards, however many calls
        are left."""
        wait = _Backoff()
        while missing:
            leases = self._leases.of_others()
            batch = missing.next_batch(kind.batch_size, lambda key: self._leases.holds(leases.get(key)))
            if not batch:  # every call left is being computed by another writer
                wait.sleep()
                missing.serve(self._others.news(missing.left_keys))
                continue
            batch = self._lease(batch, missing, wait)
            if batch:
                wait.reset()
                missing.computed(batch, *self._compute_batch(kind, generator, batch, missing))

    def _lease(self, batch: list[Request], missing: _Missing, wait: _Backoff) -> list[Request]:
        """Lease ``batch`` and return what is left of it to compute: what other writers stored
        meanwhile is served, calls a writer with a smaller token leased too are given up to it (held
        back), and those a writer with a larger token leased too are waited for (it gives them up)."""
        self._leases.take([missing.key[r] for r in batch])
        # The others' leases, then what they stored: a batch another writer stores (its rows and the
        # end of its lease commit together) is seen as one or the other.
        leases = self._leases.of_others()
        missing.serve(self._others.news(missing.left_keys))
        batch = missing.still_left(batch)
        given_up = [r for r in batch if self._leases.yields_to(leases.get(missing.key[r]))]
        if given_up:
            missing.hold(given_up)
            batch = [r for r in batch if r not in set(given_up)]
            self._leases.take([missing.key[r] for r in batch])
        contested = [missing.key[r] for r in batch if self._leases.holds(leases.get(missing.key[r]))]
        if contested:
            self._leases.wait_until_released(contested, wait.sleep)
            missing.serve(self._others.news(missing.left_keys))
            batch = missing.still_left(batch)
        return batch

    def _compute_batch(
        self, kind: _Kind, generator: Any, batch: list[Request], missing: _Missing
    ) -> tuple[list[Any], list[int], float]:
        """Compute a leased batch and store it, dropping the lease in the same transaction; return
        the values, their output tokens and the seconds the model took."""
        started = time.perf_counter()
        try:
            made = kind.compute(batch)
            if len(made) != len(batch):
                raise RuntimeError(f"{kind.name}: the model returned {len(made)} results for {len(batch)} calls")
        except BaseException:
            self._leases.release()
            raise
        seconds = time.perf_counter() - started
        self._leases.note_batch(seconds)
        n_out = kind.output_tokens(list(made))
        now = time.time()
        each = seconds / max(1, len(batch))
        rows = []
        for r, v, n in zip(batch, made, n_out):
            value = kind.encode(v)
            key = missing.key[r]
            rows.append(
                (
                    key,
                    kind.name,
                    generator.fingerprint,
                    generator.backend,
                    kind.params_json,
                    r[0],
                    r[1],
                    value,
                    int(missing.lengths[r]),
                    int(n),
                    each,
                    now,
                    row_checksum(key, value),
                )
            )
        with sqlite_errors(self.path, f"storing {len(rows)} computed calls"), transaction(self._db):
            self._db.executemany(shard.INSERT, rows)
            self._leases.drop_in_transaction()
        return made, n_out, seconds

    def _check_space(self, kind: _Kind, missing: list[Request]) -> None:
        """Stop before computing when the store's file system cannot hold the rows to be written."""
        params = len(kind.params_json)
        need = sum(
            len(p.encode()) + len(t.encode()) + kind.value_bytes((p, t)) + params + ROW_OVERHEAD for p, t in missing
        )
        shard.check_free_space(self.root, kind.name, len(missing), need)

    # -- reporting and closing -----------------------------------------------------------------------

    def summary(self) -> str:
        """One line for logs: calls made and served per kind, time spent, where the shard is."""
        parts = [
            f"{kind}: {int(s['made'])} made, {int(s['served'])} served in {s['seconds']:.1f} s"
            for kind, s in self.stats.items()
        ]
        calls = "; ".join(parts) or "no calls"
        return f"{calls} (shard {self.path.name}, {len(self._others.sealed)} sealed shards read)"

    def close(self) -> None:
        """Close the files and seal this job's shard (an empty one is removed)."""
        if self._closed:
            return
        self._closed = True
        self._heartbeat.stop()
        self._others.close()
        self._leases.release()
        try:
            with sqlite_errors(self.path, "closing the shard"):
                rows = self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        finally:
            self._db.close()
        try:
            if rows == 0:
                self.path.unlink()
            else:
                os.replace(self.path, shard.sealed_path(self.path))
        except FileNotFoundError:
            # Only `compact(include_open=True)` run while this job ran (it took the job for dead)
            # removes an open shard: the rows committed until then are in its merged file.
            log.warning("generation store file %s was removed while this job wrote it (a compaction?)", self.path)

    def __enter__(self) -> GenerationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        # Sealed even after an error: every committed batch is a finished, valid call.
        self.close()
