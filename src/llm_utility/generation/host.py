"""Model hosts: a process that keeps a CPU model loaded across the model jobs of a run.

On a CPU, a demo model job spends ~8 s before its first call: importing torch and transformers,
reading the tokenizer, loading the weights and converting them to int8. With
``llms.<slug>.keep_loaded: <seconds>``, ``load_generator`` returns a ``HostedGenerator`` instead:
the first job of that LLM starts a host (a process of its own, outside the job's process group),
later jobs connect to it, and it exits once no job has used it for ``<seconds>``.

Outputs do not change: the host runs the generator ``load_generator`` builds in a job (same code,
spec, weights and threads), and the CPU engine computes each prompt as if alone, whatever it ran
before (``hf_engine``). The generation store, its keys and its timings stay in the job.

- **Slots.** A host serves one job at a time (the CPU engine is not thread-safe, and one job's
  calls already fill its threads), so jobs of one LLM that run side by side get a host each: slot
  0, 1, ... A job holds its slot's lock file (``flock``) while it runs. A host exits only while it
  holds that lock itself, so it never leaves a job that has just taken its slot.
- **Identity.** A host's address is a hash of everything that decides its outputs: the manifest,
  the spec, the threads, the Python executable, the versions of torch and transformers, the
  source files of this package and the variables that cap the CPU's kernels (``KERNEL_ENV``). A
  changed file or setting gets a new host; the old one idles out.
- **Where.** ``$LLM_UTILITY_HOST_DIR``, else ``$XDG_RUNTIME_DIR``, else the temporary directory,
  in a folder only its owner may read (``llm-utility-hosts-<uid>``); each host's log is there,
  beside its socket, and the job's log names it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import itertools
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import IO, Any

log = logging.getLogger("llm_utility")

HOST_DIR_ENV = "LLM_UTILITY_HOST_DIR"
# What picks the CPU's kernels and threads (``cpu_arithmetic.cpu_flags``): a job that caps them is
# served only by a host that runs capped the same way.
KERNEL_ENV = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "FBGEMM_ENABLE_INSTRUCTIONS",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
)
# How long a job waits for a new host to listen (importing torch and transformers: seconds).
START_TIMEOUT = 300.0
# What a job calls on its generator (``Generator``).
_METHODS = frozenset(
    {"render_chat", "render", "encode", "count_tokens", "check_fits", "generate", "score", "attention"}
)
# The attributes a job reads from its generator besides its methods (``Generator``).
_ATTRIBUTES = (
    "slug",
    "backend",
    "dtype",
    "fingerprint",
    "load_path",
    "manifest",
    "spec",
    "prompt_format",
    "enable_thinking",
    "batch_size",
)


def host_dir() -> Path:
    """The folder of this user's hosts' sockets, locks and logs (created private)."""
    base = os.environ.get(HOST_DIR_ENV) or Path(
        os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir(), f"llm-utility-hosts-{os.getuid()}"
    )
    path = Path(base)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(
            f"{path}: a model host folder must belong to you and be private (chmod 700); set ${HOST_DIR_ENV} "
            "to use another"
        )
    return path


@functools.cache
def _code_digest() -> str:
    """The sources of this package and the versions of the libraries its numbers come from."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    for dist in ("torch", "transformers", "numpy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            digest.update(f"{dist}=={importlib.metadata.version(dist)}".encode())
    return digest.hexdigest()


def host_key(manifest: Mapping[str, Any], spec: Mapping[str, Any], threads: int | None) -> str:
    """The name shared by every host that computes what a job with these settings would."""
    identity = {
        "manifest": dict(manifest),
        "spec": dict(spec),
        "threads": threads,
        "python": sys.executable,
        "code": _code_digest(),
        "kernels": {name: os.environ.get(name) for name in KERNEL_ENV},
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _authkey(key: str) -> bytes:
    # Not a secret (the folder is private); it makes a stray connection fail the handshake.
    return hashlib.sha256(f"llm-utility-host:{key}".encode()).digest()


def _paths(folder: Path, key: str, slot: int) -> tuple[Path, Path, Path]:
    """(socket, lock, log) of slot ``slot`` of the hosts named ``key``."""
    stem = folder / f"{key}-{slot}"
    return stem.with_suffix(".sock"), stem.with_suffix(".lock"), stem.with_suffix(".log")


def _try_lock(path: Path) -> IO[bytes] | None:
    """The open lock file, exclusively locked, or None when another process holds it."""
    handle = open(path, "ab")  # noqa: SIM115  (held open for as long as the lock is held)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


# ---------------------------------------------------------------------------------------------------
# The job's side


class _HostedTokenizer:
    """The host's tokenizer for the two uses a job makes of it outside the generator (passage
    truncation): encoding a text and decoding ids."""

    def __init__(self, owner: HostedGenerator) -> None:
        self._owner = owner

    def __call__(self, text: Any, **kwargs: Any) -> dict[str, Any]:
        return self._owner._call("tokenizer.__call__", text, **kwargs)

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return self._owner._call("tokenizer.decode", ids, **kwargs)


class HostedGenerator:
    """A generator whose model lives in a host process (see the module's docstring): the methods
    and attributes of ``Generator`` that jobs use, each method a call to the host."""

    def __init__(self, manifest: Mapping[str, Any], spec: Mapping[str, Any], threads: int | None = None) -> None:
        self.key = host_key(manifest, spec, threads)
        self.host_log: Path | None = None
        self._lock: IO[bytes] | None = None
        self._conn: Connection | None = None
        folder = host_dir()
        request = {"manifest": dict(manifest), "spec": dict(spec), "threads": threads}
        for slot in itertools.count():  # the lowest free slot: jobs side by side get a host each
            socket, lock, self.host_log = _paths(folder, self.key, slot)
            self._lock = _try_lock(lock)
            if self._lock is not None:
                break
        self.slot = slot
        started = time.perf_counter()
        try:
            self._conn, how = _connect_or_start(socket, self.host_log, self.key, request)
            info = self._call("describe")
        except BaseException:
            self.close()
            raise
        self.__dict__.update({name: info[name] for name in _ATTRIBUTES})
        self.host_pid: int = info["pid"]
        self.context_length: int | None = info["context_length"]
        self._key_extras: dict[str, Any] = info["store_key_extras"]
        self.tokenizer = _HostedTokenizer(self)
        log.info(
            "%s: model host, slot %d, %s (pid %d, ready in %.1f s; log %s)",
            self.slug,
            slot,
            how,
            self.host_pid,
            time.perf_counter() - started,
            self.host_log,
        )

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._conn is None:
            raise RuntimeError(f"model host {self.key}: the generator is closed")
        try:
            self._conn.send((method, args, kwargs))
            ok, value = self._conn.recv()
        except (EOFError, OSError) as err:
            raise RuntimeError(
                f"model host {self.key} (slot {self.slot}) stopped during {method}: see its log, {self.host_log}"
            ) from err
        if not ok:
            raise value
        return value

    def store_key_extras(self) -> dict[str, Any]:
        return dict(self._key_extras)

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        return self._call("render_chat", messages)

    def render(self, text: str) -> str:
        return self._call("render", text)

    def encode(self, prompt: str) -> list[int]:
        return self._call("encode", prompt)

    def count_tokens(self, texts: Sequence[str], special: bool = True) -> list[int]:
        return self._call("count_tokens", list(texts), special=special)

    def check_fits(self, prompts: Sequence[str], labels: Sequence[str], reserve: int) -> None:
        self._call("check_fits", list(prompts), list(labels), reserve)

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = ()) -> list[str]:
        return self._call("generate", list(prompts), max_new_tokens, list(stop))

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        return self._call("score", list(pairs))

    def attention(self, requests: Sequence[Any], pooling: str = "mean") -> list[list[float]]:
        return self._call("attention", list(requests), pooling=pooling)

    def close(self) -> None:
        """Leave the host (it keeps the model for the next job) and free the slot. Idempotent."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> HostedGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HostedGenerator({self.__dict__.get('slug')!r}, slot {self.slot}, {self.key})"


def _connect(socket: Path, key: str) -> Connection | None:
    """A connection to the host listening on ``socket``; None when none does (no file, a file left
    by a killed host, or a host that died while answering)."""
    try:
        return Client(str(socket), family="AF_UNIX", authkey=_authkey(key))
    except (EOFError, OSError):
        return None


def _connect_or_start(socket: Path, log_path: Path, key: str, request: dict[str, Any]) -> tuple[Connection, str]:
    """A connection to the host of this slot, started first when none listens (the caller holds
    the slot's lock, so no other job starts one meanwhile)."""
    conn = _connect(socket, key)
    if conn is not None:
        return conn, "reused"
    socket.unlink(missing_ok=True)  # a host killed without cleaning up
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "llm_utility.generation.host", json.dumps(request, default=str), str(socket), key],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not killed with the job that started it
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        conn = _connect(socket, key)
        if conn is not None:
            return conn, "started by this job"
        if process.poll() is not None:
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise RuntimeError(
                f"model host {key} exited with status {process.returncode} before listening; {log_path}:\n{tail}"
            )
        time.sleep(0.05)
    process.kill()
    raise TimeoutError(f"model host {key} did not listen within {START_TIMEOUT:.0f} s; see {log_path}")


# ---------------------------------------------------------------------------------------------------
# The host's side


def _describe(generator: Any) -> dict[str, Any]:
    info = {name: getattr(generator, name) for name in _ATTRIBUTES}
    info.update(
        context_length=generator.context_length,
        store_key_extras=generator.store_key_extras(),
        pid=os.getpid(),
    )
    return info


def _answer(generator: Any, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    if method == "describe":
        return _describe(generator)
    if method == "tokenizer.__call__":
        return dict(generator.tokenizer(*args, **kwargs))
    if method == "tokenizer.decode":
        return generator.tokenizer.decode(*args, **kwargs)
    if method not in _METHODS:
        raise AttributeError(f"a model host does not serve {method!r}")
    return getattr(generator, method)(*args, **kwargs)


def _serve_one(conn: Connection, generator: Any) -> None:
    """Answer one job's calls until it disconnects."""
    while True:
        try:
            method, args, kwargs = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = (True, _answer(generator, method, args, kwargs))
        except Exception as err:  # the job raises it: the host stays up for the next job
            err.add_note(f"(raised in the model host, pid {os.getpid()}):\n{traceback.format_exc()}")
            reply = (False, err)
        try:
            conn.send(reply)
        except OSError:  # the job left
            return
        except Exception:  # an output or exception that does not pickle: nothing was sent
            conn.send((False, RuntimeError(f"model host: cannot return the result of {method}: {reply[1]!r}")))


def serve(request: Mapping[str, Any], socket: Path, key: str) -> None:
    """Listen on ``socket`` and serve one job at a time until idle for the spec's ``keep_loaded``
    seconds, then exit."""
    from .backends import load_backend

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    idle = float(request["spec"]["keep_loaded"])
    lock_path = socket.with_suffix(".lock")
    listener = Listener(str(socket), family="AF_UNIX", authkey=_authkey(key))
    last_used = [time.monotonic()]
    busy = threading.Event()

    def leave_when_idle() -> None:
        while True:
            time.sleep(min(1.0, idle / 4))
            if busy.is_set() or time.monotonic() - last_used[0] < idle:
                continue
            held = _try_lock(lock_path)  # no job holds the slot, and none can take it now
            if held is None:
                continue
            log.info("idle for %.0f s: exiting", idle)
            socket.unlink(missing_ok=True)
            os._exit(0)

    log.info("model host %s listening on %s", key, socket)
    generator = load_backend(request["manifest"], request["spec"], threads=request["threads"])
    threading.Thread(target=leave_when_idle, daemon=True).start()
    while True:
        conn = listener.accept()
        busy.set()
        try:
            _serve_one(conn, generator)
        finally:
            conn.close()
            last_used[0] = time.monotonic()
            busy.clear()


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
