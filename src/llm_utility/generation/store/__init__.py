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

Two writers that need the same calls at the same time split them (``leases``): before computing a
batch a writer commits *leases* on its keys; the others skip keys leased by a live writer (and take
them over if it dies: on the same machine its process is checked; elsewhere a writer whose shard has
not changed for ``STALE_SECONDS`` counts as dead, and a live one touches its shard every
``HEARTBEAT_SECONDS``). Each writer commits its lease before it reads the others', so of two
writers leasing a key at once at least one sees the other's lease; the key goes to the smaller
token (the other gives it up, the smaller waits until the other's lease has gone). Where a network
file system's caching hides a lease, or a writer is taken for dead, a call is computed twice, never
served wrong.

A killed job's rerun is a new writer: it is served what the killed one committed and, when the dead
writer ran on this machine, seals its shard. ``compact`` merges sealed shards (and, with
``include_open``, those of writers that are gone) into one; ``verify`` checks a whole store; both
are also commands: ``python -m llm_utility.generation.store {verify,compact,migrate} <dir>``.

Every SQLite error is raised as ``StoreError`` naming the file, what failed (a full file system is
named as such) and how to recover. Before a job computes, the store checks that the free space of its
file system holds the rows the job will write (an estimate from the prompts and output limits).

The package, by concern: ``keys`` (a call's key, its parameters, the row checksum), ``shard`` (one
writer's SQLite file: schema, naming, opening, sealing, errors), ``liveness`` (is a shard's writer
still running), ``peers`` (reading the other writers' shards), ``leases`` (the writers' protocol),
``front`` (``GenerationStore``, the three kinds of call) and ``maintenance`` (verify, compact,
migrate, and the command).
"""

from .front import GenerationStore, SupportsCalls
from .keys import (
    KINDS,
    SCORE_RULE,
    STOP_RULE,
    AttentionRequest,
    canonical_json,
    generation_params,
    job_name,
    make_key,
    row_checksum,
    scoring_params,
)
from .liveness import HEARTBEAT_SECONDS, STALE_SECONDS
from .shard import SCHEMA_VERSION, StoreError, count_rows, shards

__all__ = [
    "HEARTBEAT_SECONDS",
    "KINDS",
    "SCHEMA_VERSION",
    "SCORE_RULE",
    "STALE_SECONDS",
    "STOP_RULE",
    "AttentionRequest",
    "GenerationStore",
    "StoreError",
    "SupportsCalls",
    "canonical_json",
    "count_rows",
    "generation_params",
    "job_name",
    "make_key",
    "row_checksum",
    "scoring_params",
    "shards",
]
