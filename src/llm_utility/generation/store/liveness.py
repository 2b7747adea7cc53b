"""Whether the writer of an open shard still runs: on the same machine its process is checked
(host, boot id, pid namespace, pid and start time, so a reused pid is not mistaken for it);
elsewhere a writer whose shard has not changed for ``STALE_SECONDS`` counts as gone, and a live one
touches its shard every ``HEARTBEAT_SECONDS`` (``Heartbeat``) so that a long batch does not look
like death."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
import time
from pathlib import Path

# A live writer touches its open shard this often; one unchanged for STALE_SECONDS is taken for dead
# (a network file system may show a modification time a minute late). Read at call time, so that a
# test can shorten it.
HEARTBEAT_SECONDS = 10.0
STALE_SECONDS = 120.0

# What a shard's `writer` table holds: (host, boot id, pid namespace, pid, start time).
Writer = tuple[str, str, str, int, str]


def this_process() -> Writer:
    """What tells this process from any other, as a shard's `writer` row."""
    return _identity(os.getpid())


@functools.lru_cache(maxsize=4)
def _identity(pid: int) -> Writer:
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


def on_this_machine(writer: tuple) -> bool:
    host, boot, pidns, _, _ = writer
    return bool(boot) and (host, boot, pidns) == this_process()[:3]


def process_alive(pid: int, started: str) -> bool:
    now = _start_time(int(pid))
    if now is None:
        return False
    return not started or not now or now == started  # a reused pid has another start time


def writer_is_dead(path: Path, writer: tuple | None) -> bool:
    """Whether the writer of the open shard ``path`` (its `writer` row, None if unknown) is gone."""
    if writer is not None and on_this_machine(writer):
        return not process_alive(writer[3], writer[4])
    try:
        return time.time() - path.stat().st_mtime > STALE_SECONDS
    except FileNotFoundError:
        return True


class Heartbeat:
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
